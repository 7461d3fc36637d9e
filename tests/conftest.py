"""Shared test set-up.

Threads: keep Numba's and BLAS's threads from oversubscribing the 2 cores, and take corral's
process settings (`corral.kernels.threads.configure`, as the `corral` command does): the
environment is set before NumPy or Numba is imported by any test module.

Third-party test data (JSONSchemaBench, the JSON-Schema-Test-Suite, BFCL), laid out as
shared/data/README.md describes, comes in two sizes:
- the sample, shipped in tests/data (tests/data/README.md says what it holds and where from);
- the full data, in the folder named by the environment variable CORRAL_TEST_DATA, else in
  ../shared/data beside the checkout (where CI keeps it).
A check over the data takes the `data_set` fixture and runs twice, over the sample (always) and
over the full data; the full-data run is skipped with one line of reason when the folder is absent.
"""

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "2")
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

from corral.kernels.threads import configure  # noqa: E402

configure()

from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DATA = ROOT / "tests" / "data"


def full_data_folder() -> Path:
    """Where the full test data should be: $CORRAL_TEST_DATA, else ../shared/data beside the
    checkout. The folder may not exist."""
    named = os.environ.get("CORRAL_TEST_DATA")
    return Path(named).resolve() if named else ROOT.parent / "shared" / "data"


@dataclass(frozen=True)
class DataSet:
    """One folder of third-party test data with shared/data's layout.

    name: "sample" (tests/data, shipped with the repository) or "full" (the whole data).
    root: the folder.
    """

    name: str
    root: Path


@pytest.fixture(scope="session")
def sample_data() -> Path:
    """The sample of the test data shipped in tests/data; always present."""
    if not SAMPLE_DATA.is_dir():
        pytest.fail(f"sample test data missing at {SAMPLE_DATA} (see tests/data/make_sample.py)")
    return SAMPLE_DATA


@pytest.fixture(scope="session")
def full_data() -> Path:
    """The full test data; the test is skipped, with one line of reason, when it is absent."""
    folder = full_data_folder()
    if not folder.is_dir():
        pytest.skip(
            f"full test data not found at {folder}: "
            "set CORRAL_TEST_DATA or place shared/data beside the checkout"
        )
    return folder


@pytest.fixture(scope="session", params=["sample", "full"])
def data_set(request) -> DataSet:
    """The sample, then the full data (skipped when absent): a data check runs over both."""
    return DataSet(request.param, request.getfixturevalue(f"{request.param}_data"))
