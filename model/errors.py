"""Errors of `corral.model` (DESIGN.md section 6), in corral's one hierarchy under `ConstrainError`.

A checkpoint that cannot be used is a `ModelLoadError` naming the file and what is wrong with it;
a chat template that refuses a conversation (its own `raise_exception`) is a `ChatTemplateError`.
"""

from __future__ import annotations

from pathlib import Path

from corral.automata.errors import ConstrainError


class ModelError(ConstrainError):
    """Base of the errors raised by `corral.model`."""


class ModelLoadError(ModelError):
    """A model file is missing, malformed, of an unsupported architecture or of the wrong shape.

    Attributes:
        path: the file (or folder) at fault.
        reason: what is wrong with it, in a few words.
    """

    def __init__(self, path: str | Path, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class ChatTemplateError(ModelError):
    """The chat template failed to render the conversation (e.g. its `raise_exception` fired)."""


class CacheError(ModelError):
    """A prefill or decode would overflow a KV cache slot, or names a slot that does not exist."""
