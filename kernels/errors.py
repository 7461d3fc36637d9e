"""Errors raised by the kernels (docs/design.md section 4), rooted at `ConstrainError` like the
compilers' errors, so the API layer maps them in one place."""

from __future__ import annotations

from corral.automata.errors import ConstrainError


class VocabularyError(ConstrainError):
    """A vocabulary that cannot be built or used: a bad token id, an unknown EOS token, a
    tokenizer or GGUF file whose tokens cannot be read."""


class NoTokenAllowedError(ConstrainError):
    """A mask row allows no token at all, so nothing can be sampled (docs/design.md section 4: an
    all-false mask is an error)."""


class TokenNotAllowedError(ConstrainError):
    """`Constraint.advance` got a token the grammar does not allow in the current state, or any
    token after the constraint is done (EOS was taken or nothing is left to allow)."""
