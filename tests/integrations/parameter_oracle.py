"""What both processors' parameter tests take as a good value, written apart from corral's own
checks (`corral.integrations.rows`): the oracle's pieces the two tests share."""

from __future__ import annotations

import json
import numbers


def is_json(text: str) -> bool:
    """Whether `text` is JSON text (`json.loads` reads it)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def is_int(value) -> bool:
    """Whether `value` is an integer, Python's or NumPy's, and not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
