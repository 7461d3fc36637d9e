"""Shared test set-up: keep Numba's and BLAS's threads from oversubscribing the 2 cores
(the environment is set before NumPy or Numba is imported by any test module)."""

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "2")
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
DATA = SHARED / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of third-party test data (../shared/data beside the checkout)."""
    if not DATA.is_dir():
        pytest.fail(f"test data not found at {DATA}: the checkout must sit beside shared/")
    return DATA
