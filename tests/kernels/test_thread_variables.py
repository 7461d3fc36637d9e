"""The process settings (`corral.kernels.threads.configure`; docs/numerics.md gives the
measurements): importing corral sets no environment variable; the `corral` command's entry point
sets the OpenMP wait policy, OpenBLAS's thread timeout and Numba's CPU features before NumPy and
Numba load, and never over the user's values.

Each check runs a fresh interpreter: the variables only matter before the libraries load.
"""

import json
import os
import subprocess
import sys

import pytest

VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT", "NUMBA_CPU_FEATURES")
SET = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "3000", "OPENBLAS_THREAD_TIMEOUT": "4"}

# Runs argv[1] (Python code) and prints, as JSON, the variables argv[2:] as they were when NumPy
# and when Numba were first imported (null when that library never loaded), and at the end
WATCH = """
import importlib, json, os, sys
seen = {}
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name in ("numpy", "numba") and name not in seen:
            seen[name] = {v: os.environ.get(v) for v in sys.argv[2:]}
        return None
sys.meta_path.insert(0, Watch())
exec(sys.argv[1])
seen["end"] = {v: os.environ.get(v) for v in sys.argv[2:]}
print(json.dumps(seen))
"""


def watch(code: str, **user: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(user)
    child = subprocess.run(
        [sys.executable, "-c", WATCH, code, *VARIABLES],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(child.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "module",
    ["corral.kernels", "corral.model", "corral.tools", "corral.tools.cli", "corral.tools.command",
     "corral.kernels.compute.quant_rows", "corral.integrations"],
)  # fmt: skip
def test_importing_corral_sets_no_variable(module):
    seen = watch(f"import {module}")
    assert seen["end"] == dict.fromkeys(VARIABLES)


def test_the_command_sets_them_before_numpy_and_numba_load():
    code = "from corral.tools.command import main\ntry: main(['--version'])\nexcept SystemExit: 0"
    seen = watch(code)
    for library in ("numpy", "numba"):
        assert {name: seen[library][name] for name in SET} == SET
        assert (seen[library]["NUMBA_CPU_FEATURES"] is not None) == _has_avx512()


def test_configure_before_the_libraries_is_what_a_library_user_calls():
    code = "from corral.kernels.threads import configure; configure(); import corral.model"
    seen = watch(code)
    assert {name: seen["numpy"][name] for name in SET} == SET


def test_the_users_values_are_kept():
    user = {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "500", "OPENBLAS_THREAD_TIMEOUT": "9",
            "NUMBA_CPU_FEATURES": "+avx2"}  # fmt: skip
    seen = watch("from corral.kernels.threads import configure; configure()", **user)
    assert seen["end"] == user


@pytest.mark.parametrize("name", ["OMP_WAIT_POLICY", "GOMP_SPINCOUNT"])
def test_either_openmp_variable_of_the_users_leaves_the_other_unset(name):
    seen = watch("from corral.kernels.threads import configure; configure()", **{name: "7"})
    other = "GOMP_SPINCOUNT" if name == "OMP_WAIT_POLICY" else "OMP_WAIT_POLICY"
    assert (seen["end"][name], seen["end"][other]) == ("7", None)


def _has_avx512() -> bool:
    from corral.kernels.vector_width import has_avx512

    return has_avx512()
