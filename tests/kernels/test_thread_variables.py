"""The thread variables corral.kernels sets (its comment gives the measurements): the OpenMP wait
policy and OpenBLAS's thread timeout, set before NumPy loads OpenBLAS when corral comes first (as
in the `corral` command, whose first import is corral.tools), and never over the user's values.

Each check runs a fresh interpreter: the variables only matter before the libraries load.
"""

import json
import os
import subprocess
import sys

import pytest

VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT")

# Imports argv[1] and prints, as JSON, the variables argv[2:] as they were when NumPy was first
# imported
WATCH_NUMPY = """
import importlib, json, os, sys
seen = {}
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" and not seen:
            seen.update({v: os.environ.get(v) for v in sys.argv[2:]})
        return None
sys.meta_path.insert(0, Watch())
importlib.import_module(sys.argv[1])
print(json.dumps(seen))
"""


def variables_when_numpy_loads(module: str, **user: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env.update(user)
    child = subprocess.run(
        [sys.executable, "-c", WATCH_NUMPY, module, *VARIABLES],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(child.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["corral.tools.cli", "corral.tools", "corral.kernels"])
def test_set_before_numpy_loads(module):
    seen = variables_when_numpy_loads(module)
    assert seen == {
        "OMP_WAIT_POLICY": "PASSIVE",
        "GOMP_SPINCOUNT": "3000",
        "OPENBLAS_THREAD_TIMEOUT": "4",
    }


def test_the_users_values_are_kept():
    user = {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "500", "OPENBLAS_THREAD_TIMEOUT": "9"}
    assert variables_when_numpy_loads("corral.tools.cli", **user) == user


@pytest.mark.parametrize("name", ["OMP_WAIT_POLICY", "GOMP_SPINCOUNT"])
def test_either_openmp_variable_of_the_users_leaves_the_other_unset(name):
    seen = variables_when_numpy_loads("corral.tools.cli", **{name: "7"})
    other = "GOMP_SPINCOUNT" if name == "OMP_WAIT_POLICY" else "OMP_WAIT_POLICY"
    assert (seen[name], seen[other]) == ("7", None)
