"""Special tokens as symbols of the byte language (docs/special-tokens.md).

A special (control) token such as `<|python_tag|>` or `[TOOL_CALLS]` stands for no text, so a
DFA over text bytes cannot ask for it. Its *symbol* is a byte sequence that UTF-8 text never
contains: the byte 0xFF (`SYMBOL_MARKER`, never in UTF-8) followed by the token id as
`SYMBOL_DIGITS` ASCII decimal digits, `special_symbol(128010) == b"\\xff0128010"`. A grammar
requires the token by putting its symbol where the format writes it (`special_token(id)`, a regex
tree); a vocabulary made with `Vocabulary.with_special_symbols` spells the token with those bytes,
so masks allow the token exactly where the DFA reads its symbol.

Text can never forge a symbol: every regex and JSON Schema construct compiles to UTF-8 encodings
of Unicode scalar values (`corral.automata.utf8`), so no compiled pattern reads byte 0xFF (`\\xff`
in a pattern is U+00FF, bytes C3 BF), and a vocabulary with symbols drops every text token that
holds byte 0xFF (no UTF-8 text has one). The only way to write a symbol is this module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from corral.automata.errors import PatternError
from corral.automata.tree import Node, literal_bytes

SYMBOL_MARKER = 0xFF
"""The first byte of every symbol: never a byte of UTF-8 text."""
SYMBOL_DIGITS = 7
"""How many ASCII decimal digits of the token id follow the marker (leading zeros kept)."""
SYMBOL_LENGTH = 1 + SYMBOL_DIGITS
"""The length in bytes of every symbol."""
MAX_SYMBOL_ID = 10**SYMBOL_DIGITS - 1
"""The largest token id a symbol can name."""


def special_symbol(token_id: int) -> bytes:
    """The symbol of special token `token_id`: `SYMBOL_LENGTH` bytes, 0xFF then the id in
    `SYMBOL_DIGITS` decimal digits.

    Raises:
        ValueError: `token_id` is not an int in 0..`MAX_SYMBOL_ID`.
    """
    if isinstance(token_id, bool) or not isinstance(token_id, int):
        raise ValueError(f"a special token id is an int, not {type(token_id).__name__}")
    if not 0 <= token_id <= MAX_SYMBOL_ID:
        raise ValueError(f"special token id {token_id} is outside 0..{MAX_SYMBOL_ID}")
    return bytes([SYMBOL_MARKER]) + b"%0*d" % (SYMBOL_DIGITS, token_id)


def special_token(token_id: int) -> Node:
    """The regex tree (`corral.automata.tree`) matching exactly special token `token_id`'s
    symbol: put it in a larger tree where the format writes the token. Raises as
    `special_symbol`."""
    return literal_bytes(special_symbol(token_id))


def split_symbols(data: bytes) -> list[bytes | int]:
    """`data` cut into its runs of text (non-empty bytes) and its symbols (their token ids), in
    order: `split_symbols(b"a" + special_symbol(7) + b"b") == [b"a", 7, b"b"]`. O(len(data)).

    Raises:
        ValueError: a 0xFF byte that does not start a whole symbol (a cut or forged one), with
            its offset.
    """
    out: list[bytes | int] = []
    start = 0
    while True:
        at = data.find(SYMBOL_MARKER, start)
        if at < 0:
            break
        digits = data[at + 1 : at + SYMBOL_LENGTH]
        if len(digits) != SYMBOL_DIGITS or not digits.isdigit():
            raise ValueError(f"byte 0xFF at offset {at} does not start a special-token symbol")
        if at > start:
            out.append(bytes(data[start:at]))
        out.append(int(digits))
        start = at + SYMBOL_LENGTH
    if start < len(data):
        out.append(bytes(data[start:]))
    return out


def complete_symbols_length(data: bytes) -> int:
    """The length of the longest prefix of `data` that does not end inside a symbol: `len(data)`
    unless a 0xFF in its last `SYMBOL_LENGTH - 1` bytes starts a symbol not yet whole. A
    streaming parser splits that prefix (`split_symbols`) and keeps the rest for the next
    chunk. O(SYMBOL_LENGTH)."""
    at = data.find(SYMBOL_MARKER, max(0, len(data) - SYMBOL_LENGTH + 1))
    return len(data) if at < 0 else at


def read_token_reference(
    text: str, pos: int, token_id_of: Mapping[str, int] | Callable[[str], int | None]
) -> tuple[int, int]:
    """Read a token reference at `text[pos]` (a `<`), in llama.cpp's GBNF notation, for a
    grammar front end: `<[128010]>` names a token by id; `<|python_tag|>` or `<think>` names
    the token whose text is the whole bracketed run, `<` to the first `>` inclusive, looked up
    with `token_id_of` (a mapping or a function, None for no such token). Returns (the token
    id, the index just past the reference); `special_token(id)` is its tree.

    Raises:
        PatternError: no reference starts at `pos`, the `>` is missing, the id has no digits
            or is too large, or `token_id_of` knows no token of that text; `.position` is `pos`.
    """

    def error(reason: str) -> PatternError:
        return PatternError(text, pos, reason)

    if not text.startswith("<", pos):
        raise error("a token reference starts with '<'")
    if text.startswith("<[", pos):
        close = text.find("]>", pos + 2)
        digits = text[pos + 2 : close] if close >= 0 else ""
        if close < 0:
            raise error("missing ']>' after '<[': a token id is written <[123]>")
        if not (digits.isascii() and digits.isdigit()):
            raise error(f"the token id {digits!r} is not a decimal number")
        if int(digits) > MAX_SYMBOL_ID:
            raise error(f"token id {int(digits)} is larger than {MAX_SYMBOL_ID}")
        return int(digits), close + 2
    close = text.find(">", pos + 1)
    if close < 0:
        raise error("missing '>' closing the token reference")
    name = text[pos : close + 1]
    lookup = token_id_of.get if isinstance(token_id_of, Mapping) else token_id_of
    token_id = lookup(name)
    if token_id is None:
        raise error(f"no token has the text {name!r}")
    return int(token_id), close + 1
