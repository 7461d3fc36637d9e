"""The integration tests import outside engines. Under `python -m pytest` from the repository's
root, the root is on `sys.path`, and its `kernels/` folder (the package `corral.kernels`) would
shadow the Hugging Face `kernels` package that transformers imports: the root leaves `sys.path`
(corral itself is imported through its installed package mapping, not from the root)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != ROOT]
