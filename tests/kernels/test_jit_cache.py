"""`is_cached`: Numba's on-disk cache index of a kernel, absent before its first compile and
present after (kernels/jit_cache.py)."""

import importlib.util
import sys

import numba
from corral.kernels.jit_cache import is_cached

KERNEL_SOURCE = """
import numba

@numba.njit(cache=True)
def twice(x):
    return 2 * x
"""


def test_a_kernel_is_cached_only_after_its_first_compile(tmp_path, monkeypatch):
    (tmp_path / "fresh_kernels.py").write_text(KERNEL_SOURCE)
    spec = importlib.util.spec_from_file_location("fresh_kernels", tmp_path / "fresh_kernels.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fresh_kernels", module)
    spec.loader.exec_module(module)
    assert not is_cached(module.twice)
    assert module.twice(21) == 42
    assert is_cached(module.twice)


def test_a_kernel_without_an_on_disk_cache_is_never_cached():
    @numba.njit
    def plain(x):
        return x

    plain(1)
    assert not is_cached(plain)
