"""The byte trie of a vocabulary as flat NumPy arrays in depth-first order (docs/design.md section
4).

Node 0 is the root (the empty prefix). Every other node is one byte below its parent, and the
nodes are numbered in depth-first preorder with children sorted by byte, so a node's subtree is
the contiguous range `[i, end[i])`: a walk that meets a dead byte at node i skips the whole subtree
with one jump, `i = end[i]`. A walk keeps a stack of DFA states by depth: node i at depth d reads
`byte[i]` from the state on the stack at depth d - 1. The token ids that end at node i are
`token_ids[token_start[i]:token_start[i + 1]]` (several when ids share bytes).

This is the layout llguidance describes (about 2 x V nodes for V tokens); building it is
O(total bytes) after an O(V log V) sort, once per vocabulary.

Each node also records which byte categories (`BYTE_CATEGORY`: lowercase, uppercase, digits,
space, other printable ASCII, `"`, `\\`, controls, DEL, UTF-8 continuation and lead bytes) occur
anywhere in its subtree, `categories[i]`. A walk in a DFA state that loops to itself on every byte
of those categories (the inside of a JSON string, `.*`) allows the whole subtree at once: its
tokens are `token_ids[token_start[i]:token_start[end[i]]]`, set without visiting the nodes
(`loop_categories`: the categories on which each DFA state loops).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numba
import numpy as np


def _byte_categories() -> np.ndarray:
    """uint16 `[256]`: the category bit of every byte."""
    groups = [
        range(ord("a"), ord("z") + 1),
        range(ord("A"), ord("Z") + 1),
        range(ord("0"), ord("9") + 1),
        [ord(" ")],
        [b for b in range(0x21, 0x7F) if not chr(b).isalnum() and chr(b) not in '"\\'],
        [ord('"')],
        [ord("\\")],
        range(0x00, 0x20),
        [0x7F],
        range(0x80, 0xC0),
        range(0xC0, 0xE0),
        range(0xE0, 0xF0),
        range(0xF0, 0x100),
    ]
    table = np.zeros(256, dtype=np.uint16)
    for c, group in enumerate(groups):
        for b in group:
            assert table[b] == 0
            table[b] = 1 << c
    assert table.all()
    return table


BYTE_CATEGORY = _byte_categories()
"""uint16 `[256]`: each byte's category as one bit (13 categories)."""
N_CATEGORIES = 13

UTF8_CATEGORIES = np.uint16(np.bitwise_or.reduce(BYTE_CATEGORY[0x80:]))
"""The categories of the bytes >= 0x80 (UTF-8 continuation and lead bytes)."""

DECODES_UTF8 = 1 << 15
"""A bit of a run's `own` value past the categories (`corral.kernels.masks.index`'s walks): the
state also reads every UTF-8 character back to itself, so the tokens whose bytes are `own`'s
and whole or partial valid UTF-8 characters (`Trie.utf8_state`) stay in it
(`Vocabulary.loop_row(..., decodes_utf8=True)`)."""


def _utf8_decoder() -> np.ndarray:
    """int8 `[8, 256]`: the UTF-8 decoder (RFC 3629's well-formed sequences), -1 dead. State 0
    is a character boundary (ASCII stays there), 1-3 await 1-3 continuation bytes, 4-7 the
    restricted second byte after E0, ED, F0, F4."""
    table = np.full((8, 256), -1, np.int8)
    table[0, :0x80] = 0
    table[0, 0xC2:0xE0] = 1
    table[0, 0xE0] = 4
    table[0, 0xE1:0xED] = 2
    table[0, 0xED] = 5
    table[0, 0xEE:0xF0] = 2
    table[0, 0xF0] = 6
    table[0, 0xF1:0xF4] = 3
    table[0, 0xF4] = 7
    for state, low, high, to in [(1, 0x80, 0xC0, 0), (2, 0x80, 0xC0, 1), (3, 0x80, 0xC0, 2),
                                  (4, 0xA0, 0xC0, 1), (5, 0x80, 0xA0, 1), (6, 0x90, 0xC0, 2),
                                  (7, 0x80, 0x90, 2)]:  # fmt: skip
        table[state, low:high] = to
    return table


UTF8_DECODER = _utf8_decoder()


@dataclass(frozen=True, eq=False)
class Trie:
    """A vocabulary's byte trie in depth-first order.

    Attributes:
        byte: uint8 `[n_nodes]`, the byte that leads into each node (0 for the root).
        depth: int32 `[n_nodes]`, the node's depth (0 for the root).
        end: int32 `[n_nodes]`, one past the last node of the node's subtree.
        token_start: int32 `[n_nodes + 1]`, CSR offsets into `token_ids`.
        token_ids: int32 `[n_tokens]`, ids of the tokens ending at each node, grouped by node.
        max_depth: the length in bytes of the longest token.
        categories: uint16 `[n_nodes]`, bit c set when a byte of category c
            (`BYTE_CATEGORY`) occurs in the node's subtree (the node's own byte included).
    """

    byte: np.ndarray
    depth: np.ndarray
    end: np.ndarray
    token_start: np.ndarray
    token_ids: np.ndarray
    max_depth: int
    categories: np.ndarray

    @property
    def n_nodes(self) -> int:
        return int(self.byte.shape[0])

    @cached_property
    def path_categories(self) -> np.ndarray:
        """uint16 `[n_nodes]`: the categories of the bytes on the path from the root to each
        node (the node's own byte included; 0 at the root). O(n_nodes), once."""
        return _path_categories(self.byte, self.depth, BYTE_CATEGORY)

    @cached_property
    def children(self) -> np.ndarray:
        """int32 `[256]`: the node of the root's child with each byte, -1 where none, so that a
        walk skips a dead first byte without reading the node arrays. O(n_nodes), once."""
        out = np.full(256, -1, np.int32)
        first = np.flatnonzero(self.depth == 1)
        out[self.byte[first]] = first
        return out

    @cached_property
    def deepest(self) -> np.ndarray:
        """int32 `[n_nodes]`: the depth of the deepest node in each node's subtree (the node's
        own depth when it is a leaf). O(n_nodes), once."""
        return _subtree_deepest(self.depth, self.depth)

    @cached_property
    def chars(self) -> np.ndarray:
        """int32 `[n_nodes]`: the UTF-8 characters on the path from the root to each node, a
        character cut at the end counted as one (its bytes that are no continuation byte,
        0x80-0xBF; meaningful where `utf8_state` >= 0). O(n_nodes), once."""
        return _path_chars(self.byte, self.depth)

    @cached_property
    def deepest_chars(self) -> np.ndarray:
        """int32 `[n_nodes]`: the most `chars` of a node in each node's subtree. O(n_nodes),
        once."""
        return _subtree_deepest(self.depth, self.chars)

    @cached_property
    def utf8_state(self) -> np.ndarray:
        """int8 `[n_nodes]`: the state of `UTF8_DECODER` after the bytes from the root to each
        node (0 at a character boundary, -1 when they are not a prefix of valid UTF-8).
        O(n_nodes), once."""
        return _utf8_states(self.byte, self.depth, UTF8_DECODER)

    @cached_property
    def utf8_whole(self) -> np.ndarray:
        """bool `[n_nodes]`: every node of the subtree has `utf8_state` >= 0. O(n_nodes), once."""
        return _subtree_all_valid(self.depth, self.utf8_state)

    def token_groups(self, n_words: int) -> TokenGroups:
        """The text tokens grouped by the categories of their bytes and whether they are valid
        UTF-8 (whole or cut inside a character), each group as a packed row and as ids sorted
        by length, from which `start_row` makes any run's row. A new object; O(n_nodes + tokens
        + n_groups * n_words) (a vocabulary has a few dozen groups: 65 for Gemma 4's 262k
        tokens)."""
        return TokenGroups(
            *_token_groups(
                self.path_categories, self.utf8_state, self.depth, self.chars, self.token_start,
                self.token_ids, self.max_depth, n_words,
            )
        )  # fmt: skip


@dataclass(frozen=True, eq=False)
class TokenGroups:
    """A vocabulary's text tokens in groups of equal (categories of their bytes, valid UTF-8):
    the start rows of the mask walks are unions of whole groups, less their tokens past a
    length (`start_row`).

    Attributes:
        categories: uint16 `[n_groups]`, the OR of `BYTE_CATEGORY` over a group's bytes.
        valid: bool `[n_groups]`, its tokens are valid UTF-8, whole or cut inside a character.
        rows: uint32 `[n_groups, n_words]`, each group's tokens as a packed row.
        by_bytes: int32 `[n_tokens]`, the token ids grouped, each group's sorted by length.
        bytes_start: int32 `[n_groups, max_depth + 2]`: group g's tokens of at most L bytes
            are `by_bytes[bytes_start[g, 0]:bytes_start[g, L + 1]]`.
        by_chars, chars_start: the same by characters (`Trie.chars`).
    """

    categories: np.ndarray
    valid: np.ndarray
    rows: np.ndarray
    by_bytes: np.ndarray
    bytes_start: np.ndarray
    by_chars: np.ndarray
    chars_start: np.ndarray

    def start_row(self, own: int, length: int) -> np.ndarray:
        """uint32 `[n_words]`: the packed row of the tokens of at most `length` bytes every
        byte of which falls in the categories `own`: what a state allows whose next `length`
        steps on those categories each go, whatever the byte, to one live state (a run,
        `index.run_categories`; a loop is a run of any length, `length` >= the longest token).
        With `DECODES_UTF8` in `own` (a run that reads whole UTF-8 characters as steps too),
        the tokens of at most `length` characters (`Trie.chars`) whose bytes are in `own` or
        valid UTF-8, whole or cut inside a character. A new array. O(groups taken * n_words +
        tokens set or cleared): a group is ORed whole and its longer tokens cleared, or its
        shorter tokens set, whichever touches fewer tokens."""
        decodes = bool(own & DECODES_UTF8)
        ids, starts = (
            (self.by_chars, self.chars_start) if decodes else (self.by_bytes, self.bytes_start)
        )
        return _start_row(
            self.categories, self.valid, self.rows, ids, starts, own & 0x1FFF, decodes,
            UTF8_CATEGORIES, max(length, 0),
        )  # fmt: skip


def build_trie(tokens: Sequence[bytes | None], exclude: Iterable[int] = ()) -> Trie:
    """The trie of every non-empty token that is not None and not in `exclude` (the EOS ids).

    O(V log V) for the sort (in C, comparing bytes) plus O(total bytes) in a Numba kernel.
    """
    skip = set(exclude)
    ids = [t for t, b in enumerate(tokens) if b and t not in skip]
    ids.sort(key=tokens.__getitem__)
    ordered = [tokens[t] for t in ids]
    lengths = np.fromiter(map(len, ordered), dtype=np.int64, count=len(ordered))
    offsets = np.zeros(len(ordered) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(b"".join(ordered), dtype=np.uint8)
    byte, depth, end, token_node = _build(data, offsets)
    categories = _subtree_categories(byte, depth, BYTE_CATEGORY)
    token_start = np.searchsorted(token_node, np.arange(byte.shape[0] + 1)).astype(np.int32)
    max_depth = int(lengths.max()) if len(lengths) else 0
    token_ids = np.asarray(ids, dtype=np.int32)
    return Trie(byte, depth, end, token_start, token_ids, max_depth, categories)


@numba.njit(cache=True)
def _build(data, offsets):
    """Preorder trie of the sorted strings `data[offsets[k]:offsets[k+1]]`.

    Returns (byte, depth, end, token_node): per node its byte, depth and subtree end, and per
    string the node where it ends (non-decreasing, since sorted strings end in preorder).
    O(total bytes): each string adds the nodes below its longest common prefix with the previous
    one, and each node is closed once.
    """
    n = offsets.shape[0] - 1
    cap = int(offsets[n]) + 1
    byte = np.zeros(cap, np.uint8)
    depth = np.zeros(cap, np.int32)
    end = np.zeros(cap, np.int32)
    token_node = np.zeros(n, np.int32)
    max_len = 0
    for k in range(n):
        max_len = max(max_len, offsets[k + 1] - offsets[k])
    path = np.zeros(max_len + 1, np.int32)  # path[d]: the open node at depth d
    path_len = 0  # depth of the deepest open node
    count = 1  # node 0 is the root
    for k in range(n):
        start, stop = offsets[k], offsets[k + 1]
        length = stop - start
        common = 0
        if k > 0:
            prev = offsets[k - 1]
            shorter = min(length, offsets[k] - prev)
            while common < shorter and data[prev + common] == data[start + common]:
                common += 1
        # Close the open nodes deeper than the common prefix.
        for d in range(path_len, common, -1):
            end[path[d]] = count
        path_len = common
        for d in range(common + 1, length + 1):
            byte[count] = data[start + d - 1]
            depth[count] = d
            path[d] = count
            count += 1
        path_len = length
        token_node[k] = path[length]
    for d in range(path_len, 0, -1):
        end[path[d]] = count
    end[0] = count
    return byte[:count].copy(), depth[:count].copy(), end[:count].copy(), token_node


@numba.njit(cache=True)
def _subtree_categories(byte, depth, byte_category):
    """uint16 per node: the OR of the categories of every byte in its subtree. One backward pass
    over the preorder (a node's children follow it), keeping per depth the OR of the subtrees
    closed below: O(n_nodes)."""
    n = byte.shape[0]
    out = np.zeros(n, np.uint16)
    max_depth = 0
    for i in range(n):
        max_depth = max(max_depth, depth[i])
    below = np.zeros(max_depth + 2, np.uint16)  # below[d]: OR of pending subtrees at depth d
    for i in range(n - 1, -1, -1):
        d = depth[i]
        acc = below[d + 1]
        below[d + 1] = 0
        if i > 0:
            acc |= byte_category[byte[i]]
        out[i] = acc
        below[d] |= acc
    return out


def loop_categories(trans: np.ndarray) -> np.ndarray:
    """uint16 `[n_states]`: bit c set when state s moves to itself on every byte of category c
    (`BYTE_CATEGORY`)."""
    return _loop_categories(np.ascontiguousarray(trans, dtype=np.int32), BYTE_CATEGORY)


@numba.njit(cache=True)
def _loop_categories(trans, byte_category):
    """O(n_states * 256): start from all categories, drop those with a byte that leaves."""
    n = trans.shape[0]
    loops = np.empty(n, np.uint16)
    for s in range(n):
        keep = np.uint16(0xFFFF)
        for b in range(256):
            if trans[s, b] != s:
                keep &= ~byte_category[b]
        loops[s] = keep
    return loops


@numba.njit(cache=True)
def _utf8_states(byte, depth, decoder):
    """int8 per node: the decoder state after its path (-1 dead, absorbing). O(n_nodes)."""
    n = byte.shape[0]
    out = np.zeros(n, np.int8)
    at = np.zeros(n + 1, np.int8)  # at[d]: the state of the open node at depth d
    for i in range(1, n):
        d = depth[i]
        u = at[d - 1]
        at[d] = decoder[u, byte[i]] if u >= 0 else -1
        out[i] = at[d]
    return out


@numba.njit(cache=True)
def _subtree_all_valid(depth, utf8_state):
    """bool per node: every node of its subtree has a state >= 0. One backward pass keeping
    per depth whether the subtrees closed below are all valid: O(n_nodes)."""
    n = depth.shape[0]
    out = np.zeros(n, np.bool_)
    max_depth = 0
    for i in range(n):
        max_depth = max(max_depth, depth[i])
    below = np.ones(max_depth + 2, np.bool_)  # below[d]: the pending subtrees at d all valid
    for i in range(n - 1, -1, -1):
        d = depth[i]
        ok = below[d + 1] and utf8_state[i] >= 0
        below[d + 1] = True
        out[i] = ok
        below[d] = below[d] and ok
    return out


@numba.njit(cache=True)
def _subtree_deepest(depth, value):
    """int32 per node: the largest `value` in its subtree (`value` = `depth`: the deepest
    depth). One backward pass over the preorder keeping per depth the largest of the subtrees
    closed below: O(n_nodes)."""
    n = depth.shape[0]
    out = np.zeros(n, np.int32)
    max_depth = 0
    for i in range(n):
        max_depth = max(max_depth, depth[i])
    below = np.zeros(max_depth + 2, np.int32)  # below[d]: largest of pending subtrees at d
    for i in range(n - 1, -1, -1):
        d = depth[i]
        deepest = max(value[i], below[d + 1])
        below[d + 1] = 0
        out[i] = deepest
        below[d] = max(below[d], deepest)
    return out


@numba.njit(cache=True)
def _path_chars(byte, depth):
    """int32 per node: the bytes on its path that are no UTF-8 continuation byte. One preorder
    pass keeping the count per depth: O(n_nodes)."""
    n = byte.shape[0]
    out = np.zeros(n, np.int32)
    max_depth = 0
    for i in range(n):
        max_depth = max(max_depth, depth[i])
    at = np.zeros(max_depth + 1, np.int32)  # at[d]: the count of the open node at depth d
    for i in range(1, n):
        d = depth[i]
        at[d] = at[d - 1] + (0 if 0x80 <= byte[i] < 0xC0 else 1)
        out[i] = at[d]
    return out


@numba.njit(cache=True)
def _path_categories(byte, depth, byte_category):
    """uint16 per node: the OR of the categories of the bytes from the root to the node. One
    preorder pass keeping the value per depth: O(n_nodes)."""
    n = byte.shape[0]
    out = np.zeros(n, np.uint16)
    max_depth = 0
    for i in range(n):
        max_depth = max(max_depth, depth[i])
    at = np.zeros(max_depth + 1, np.uint16)  # at[d]: the path value of the open node at depth d
    for i in range(1, n):
        d = depth[i]
        at[d] = at[d - 1] | byte_category[byte[i]]
        out[i] = at[d]
    return out


@numba.njit(cache=True)
def _token_groups(
    path_categories, utf8_state, depth, chars, token_start, token_ids, max_depth, n_words
):
    """`Trie.token_groups`' arrays: one pass over the nodes numbers the groups (key: the
    path's categories, and valid UTF-8 as bit 13) and counts their tokens per length, a
    second places the ids (a counting sort by group then length). O(n_nodes + tokens +
    n_groups * n_words)."""
    n = path_categories.shape[0]
    group_of = np.full(1 << 14, -1, np.int32)
    n_groups = 0
    for i in range(1, n):
        if token_start[i + 1] > token_start[i]:
            key = np.int32(path_categories[i]) | (np.int32(utf8_state[i] >= 0) << 13)
            if group_of[key] < 0:
                group_of[key] = n_groups
                n_groups += 1
    categories = np.zeros(n_groups, np.uint16)
    valid = np.zeros(n_groups, np.bool_)
    for key in range(1 << 14):
        if group_of[key] >= 0:
            categories[group_of[key]] = key & 0x1FFF
            valid[group_of[key]] = key >> 13 != 0
    rows = np.zeros((n_groups, n_words), np.uint32)
    n_ids = token_ids.shape[0]
    by_bytes = np.empty(n_ids, np.int32)
    by_chars = np.empty(n_ids, np.int32)
    bytes_start = np.zeros((n_groups, max_depth + 2), np.int32)
    chars_start = np.zeros((n_groups, max_depth + 2), np.int32)
    for lengths, ids, starts in ((depth, by_bytes, bytes_start), (chars, by_chars, chars_start)):
        count = np.zeros(n_groups * (max_depth + 1), np.int64)  # by (group, length)
        for i in range(1, n):
            k = token_start[i + 1] - token_start[i]
            if k:
                key = np.int32(path_categories[i]) | (np.int32(utf8_state[i] >= 0) << 13)
                count[group_of[key] * (max_depth + 1) + lengths[i]] += k
        at = np.zeros(n_groups * (max_depth + 1), np.int64)  # where each (group, length) starts
        total = 0
        for j in range(count.shape[0]):
            at[j] = total
            total += count[j]
        for g in range(n_groups):
            for length in range(max_depth + 1):
                starts[g, length] = at[g * (max_depth + 1) + length]
            starts[g, max_depth + 1] = (
                at[g * (max_depth + 1) + max_depth] + count[g * (max_depth + 1) + max_depth]
            )
        for i in range(1, n):
            if token_start[i + 1] > token_start[i]:
                key = np.int32(path_categories[i]) | (np.int32(utf8_state[i] >= 0) << 13)
                j = group_of[key] * (max_depth + 1) + lengths[i]
                for k in range(token_start[i], token_start[i + 1]):
                    ids[at[j]] = token_ids[k]
                    at[j] += 1
    for i in range(1, n):
        if token_start[i + 1] > token_start[i]:
            key = np.int32(path_categories[i]) | (np.int32(utf8_state[i] >= 0) << 13)
            row = rows[group_of[key]]
            for k in range(token_start[i], token_start[i + 1]):
                t = token_ids[k]
                row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
    return categories, valid, rows, by_bytes, bytes_start, by_chars, chars_start


@numba.njit(cache=True)
def _start_row(categories, valid, rows, ids, starts, own, decodes, utf8, length):
    """`TokenGroups.start_row`. O(groups taken * n_words + tokens set or cleared)."""
    row = np.zeros(rows.shape[1], np.uint32)
    outside = ~np.uint16((own | utf8) if decodes else own)
    last = starts.shape[1] - 1  # starts[g, last]: the end of group g
    cut = min(length, last - 1) + 1
    for g in range(categories.shape[0]):
        if categories[g] & outside != 0 or (decodes and not valid[g]):
            continue
        low, middle, high = starts[g, 0], starts[g, cut], starts[g, last]
        if middle - low <= high - middle:
            for k in range(low, middle):
                t = ids[k]
                row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        else:
            whole = rows[g]
            for w in range(row.shape[0]):
                row[w] |= whole[w]
            for k in range(middle, high):
                t = ids[k]
                row[t >> 5] &= ~(np.uint32(1) << np.uint32(t & 31))
    return row
