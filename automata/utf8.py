"""Unicode scalar-value ranges to UTF-8 byte-set sequences (docs/design.md section 2: "non-ASCII
characters and ranges become UTF-8 byte sequences").

A range of code points [lo, hi] is split into sub-ranges that share their UTF-8 length and all but
their last free bytes, so each sub-range is exactly a sequence of byte ranges (the method of RE2's
and Rust regex-syntax's `Utf8Sequences`). Surrogates (U+D800..U+DFFF) are never encoded: they are
not scalar values and well-formed UTF-8 has no encoding for them.
"""

from __future__ import annotations

from corral.automata.tree import Alt, ByteSet, Concat, Node

MAX_SCALAR = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)


def _range_mask(lo: int, hi: int) -> int:
    """The 256-bit mask of bytes lo..hi."""
    return ((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1)


def remove_surrogates(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges with the surrogate block cut out."""
    out = []
    for lo, hi in ranges:
        if hi < SURROGATES[0] or lo > SURROGATES[1]:
            out.append((lo, hi))
            continue
        if lo < SURROGATES[0]:
            out.append((lo, SURROGATES[0] - 1))
        if hi > SURROGATES[1]:
            out.append((SURROGATES[1] + 1, hi))
    return out


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """The code points lo..hi (no surrogates inside) as a list of byte-range sequences: each
    sequence is a list of (low byte, high byte) pairs, one per UTF-8 byte; their union encodes
    exactly lo..hi."""
    out = []
    stack = [(lo, hi)]
    while stack:
        start, end = stack.pop()
        while True:
            split = False
            for boundary in (0x7F, 0x7FF, 0xFFFF):  # last code point of each UTF-8 length
                if start <= boundary < end:
                    stack.append((boundary + 1, end))
                    end = boundary
                    split = True
                    break
            if split:
                continue
            if end <= 0x7F:
                out.append([(start, end)])
                break
            for i in range(1, 4):  # make the low 6*i bits span a full range or be fixed
                m = (1 << (6 * i)) - 1
                if start & ~m != end & ~m:
                    if start & m != 0:
                        stack.append(((start | m) + 1, end))
                        end = start | m
                        split = True
                        break
                    if end & m != m:
                        stack.append((end & ~m, end))
                        end = (end & ~m) - 1
                        split = True
                        break
            if split:
                continue
            a, b = chr(start).encode("utf-8"), chr(end).encode("utf-8")
            out.append(list(zip(a, b, strict=True)))
            break
    out.sort()
    return out


# CONTINUATIONS[k]: k bytes of 0x80..0xBF, the free tail of many sequences. The same node objects
# are used for every sequence, so the NFA builder (which memoizes on node identity and
# continuation) makes each tail once per continuation: `.` costs 9 branch heads, not 9 chains.
_CONTINUATION = ByteSet(_range_mask(0x80, 0xBF))
CONTINUATIONS = [Concat(()), _CONTINUATION, Concat((_CONTINUATION,) * 2)]
CONTINUATIONS.append(Concat((_CONTINUATION, CONTINUATIONS[2])))


def _sequence_tree(seq: list[tuple[int, int]]) -> Node:
    """The byte-set sequence, its trailing run of full continuation bytes as a shared tail."""
    free = 0
    while free < len(seq) - 1 and seq[len(seq) - 1 - free] == (0x80, 0xBF):
        free += 1
    head = tuple(ByteSet(_range_mask(a, b)) for a, b in seq[: len(seq) - free])
    return Concat(head + (CONTINUATIONS[free],)) if free else Concat(head)


def ranges_to_tree(ranges: list[tuple[int, int]]) -> Node:
    """The tree matching one scalar value in the union of `ranges` (inclusive code point pairs,
    surrogates ignored): a `ByteSet` when all are ASCII, else an `Alt` of byte-set sequences
    (one `ByteSet` holds the whole ASCII part). No ranges: `Alt(())`, the empty language."""
    ranges = remove_surrogates(ranges)
    ascii_mask = 0
    branches: list[Node] = []
    for lo, hi in ranges:
        if lo <= 0x7F:
            ascii_mask |= _range_mask(lo, min(hi, 0x7F))
            lo = 0x80
        if lo > hi:
            continue
        branches.extend(_sequence_tree(seq) for seq in utf8_sequences(lo, hi))
    if not branches:
        return ByteSet(ascii_mask) if ascii_mask else Alt(())
    if ascii_mask:
        branches.insert(0, ByteSet(ascii_mask))
    return Alt(tuple(branches))


def complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The scalar values 0..U+10FFFF outside `ranges` (surrogates are cut later)."""
    out = []
    nxt = 0
    for lo, hi in sorted(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= MAX_SCALAR:
        out.append((nxt, MAX_SCALAR))
    return out
