"""The example scripts as a new user meets them in a fresh clone: the data set is found as the
tests find it, falling back to the sample in tests/data, and a missing file is one line on stderr
and exit status 2, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def data_folder(*args, **kwargs) -> Path:
    sys.path.insert(0, str(EXAMPLES))
    try:
        from batch_files import data_folder as found
    finally:
        sys.path.remove(str(EXAMPLES))
    return found(*args, **kwargs)


def test_the_data_is_looked_for_where_the_tests_look_for_it(tmp_path, capsys):
    root = tmp_path / "corral"
    (root / "tests" / "data" / "bfcl").mkdir(parents=True)
    named = tmp_path / "elsewhere"
    assert data_folder("bfcl", root, {"CORRAL_TEST_DATA": str(named)}) == named / "bfcl"
    assert data_folder("bfcl", root, {}) == root / "tests" / "data" / "bfcl"  # a fresh clone
    assert "using the sample in tests/data/bfcl" in capsys.readouterr().err
    (tmp_path / "shared" / "data" / "bfcl").mkdir(parents=True)
    assert data_folder("bfcl", root, {}) == tmp_path / "shared" / "data" / "bfcl"


def test_a_missing_file_is_one_line_and_status_2(tmp_path):
    for script in ("bfcl.py", "jsonschemabench.py"):
        missing = tmp_path / "missing.jsonl"
        argv = [sys.executable, str(EXAMPLES / script), "score", str(missing), str(missing)]
        result = subprocess.run(argv, capture_output=True, text=True)
        assert result.returncode == 2, (script, result.stderr)
        assert result.stderr.splitlines() == [f"{script}: {missing}: No such file or directory"]
