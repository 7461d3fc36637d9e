"""ARCHITECTURE.md maps every module: each of corral's source files (but a package's `__init__`)
has its row, named by its path inside its package (`schema/compiler.py`, `masks/index.py`)."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("automata", "kernels", "model", "tools", "integrations")


def test_every_module_has_its_row():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    tracked = subprocess.run(
        ["git", "ls-files", *PACKAGES], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = [
        path
        for path in tracked
        if path.endswith(".py")
        and not path.endswith("__init__.py")
        and f"`{path.split('/', 1)[1]}`" not in text
    ]
    assert missing == [], f"ARCHITECTURE.md has no row for {missing}"
