"""A first run's Numba compiles say so: the token masks' kernels, whatever entry point uses them
first (the Python API here), print one notice on stderr at their first compile, and none once
Numba's cache holds them (kernels/jit_cache.py, `announce_compiles`)."""

import importlib
import os
import subprocess
import sys

import pytest
from corral.kernels.jit_cache import announce_compiles

MASKS = "corral: compiling the token masks' Numba kernels"
FIRST_USES = {  # a Python-API program's first call of a mask kernel, from a cold cache
    "few_allowed_ids": "from corral.kernels import few_allowed_ids\n"
    "few_allowed_ids(np.array([5], dtype=np.uint32), 4)",
}


def stderr_of(program: str, cache) -> str:
    child = subprocess.run(
        [sys.executable, "-c", "import numpy as np\n" + program],
        env={**os.environ, "NUMBA_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr
    return child.stderr


@pytest.mark.parametrize("use", sorted(FIRST_USES))
def test_the_first_compile_of_a_mask_kernel_says_so_once(tmp_path, use):
    assert stderr_of(FIRST_USES[use], tmp_path).count(MASKS) == 1  # compiled
    assert MASKS not in stderr_of(FIRST_USES[use], tmp_path)  # loaded from the cache


KERNELS = """
import numba

@numba.njit(cache=True)
def once(x):
    return x + 1

@numba.njit(cache=True)
def twice(x):
    return once(x) * 2
"""


def test_the_notice_comes_once_per_package_and_only_for_it(tmp_path, monkeypatch, capsys):
    for package in ("noticed", "other"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "kernels.py").write_text(KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    announce_compiles("noticed", "the noticed kernels")
    announce_compiles("noticed", "the noticed kernels")  # registered once
    other = importlib.import_module("other.kernels")
    assert other.twice(1) == 4
    assert capsys.readouterr().err == ""  # another package's compiles say nothing
    noticed = importlib.import_module("noticed.kernels")
    assert noticed.twice(1) == 4 and noticed.once(5) == 6
    err = capsys.readouterr().err
    assert err.count("corral: compiling the noticed kernels") == 1, err
