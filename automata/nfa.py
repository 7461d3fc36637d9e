"""Regex tree to Thompson NFA, built in continuation-passing style (docs/design.md section 2,
"Thompson NFA"; Russ Cox, "Regular Expression Matching Can Be Simple And Fast").

`build(node, next_state) -> start_state` makes the states that match `node` and then continue to
`next_state`. Calls are memoized on `(id(node), next_state)`, so a node shared by several parents
with the same continuation (a DAG with shared tails, as the schema compiler builds for objects with
many optional members, docs/design.md section 3) is instantiated once and the NFA stays linear in
the size of the DAG, not of its unfolded tree.

A state has epsilon edges (a sequence of targets) and at most one byte edge: a set of bytes (a
256-bit int mask) and its target. State 0 is the single accepting state and has no edges.

Copied nodes: a node passed to `register_fragment` (the schema compiler's plain JSON string,
which most schemas hold many times) is built once per process on its own (its states 1..,
`ACCEPT` where it continues), and each instance is a copy of those states, shifted, its
`ACCEPT` edges led to the instance's continuation: two list copies instead of a walk of the
node. An instance has the states `build` would make for it, except that it shares none with
states made before it (a memoized tail), so it may have a few more; the language is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from corral.automata.errors import TooManyNfaStatesError
from corral.automata.limits import DEFAULT_LIMITS, Limits
from corral.automata.tree import Alt, Automaton, ByteSet, Concat, Node, Repeat

ACCEPT = 0

FRAGMENTS: dict[int, tuple[Node, Nfa]] = {}
"""id of a node `register_fragment` registered -> (the node, kept alive here so that its id is
never reused; its own NFA: states 1.., `ACCEPT` 0 where it continues)."""


def register_fragment(node: Node) -> None:
    """Build every later instance of `node` as a copy of one NFA of it, made here, once per
    process (module docstring; default limits: the node's own NFA is small, and each copy is
    checked against its builder's limit). The language does not change."""
    if id(node) not in FRAGMENTS:
        builder = _Builder(DEFAULT_LIMITS, copies=False)
        builder.new_state()
        start = builder.build(node, ACCEPT)
        own = Nfa(start, builder.epsilon, builder.edge_mask, builder.edge_target, builder.trimmed)
        FRAGMENTS[id(node)] = (node, own)


@dataclass(frozen=True, eq=False)
class Nfa:
    """A Thompson NFA over bytes.

    Attributes:
        start: the start state.
        epsilon: per state, the states reached without reading a byte.
        edge_mask: per state, the 256-bit mask of bytes its byte edge reads (0: no byte edge).
        edge_target: per state, the target of its byte edge (-1: none).
        trimmed: True when every state can reach `ACCEPT`: the tree had no empty alternation
            `Alt(())` and no empty byte set, the only nodes that make a state with no way on.
            Then every state of its subset construction is live.
    State `ACCEPT` (0) is the only accepting state.
    """

    start: int
    epsilon: list[Sequence[int]]
    edge_mask: list[int]
    edge_target: list[int]
    trimmed: bool = False

    @property
    def n_states(self) -> int:
        return len(self.epsilon)


def tree_to_nfa(node: Node, limits: Limits | None = None) -> Nfa:
    """The Thompson NFA of a regex tree (shared subtrees in tail position built once).

    Raises:
        TooManyNfaStatesError: more than `limits.max_nfa_states` states would be needed; raised
            while building, before the memory is spent.
    """
    builder = _Builder(limits or DEFAULT_LIMITS)
    accept = builder.new_state()
    assert accept == ACCEPT
    start = builder.build(node, accept)
    return Nfa(start, builder.epsilon, builder.edge_mask, builder.edge_target, builder.trimmed)


class _Builder:
    def __init__(self, limits: Limits, copies: bool = True):
        self.limit = limits.max_nfa_states
        self.epsilon: list[Sequence[int]] = []
        self.edge_mask: list[int] = []
        self.edge_target: list[int] = []
        self.memo: dict[tuple[int, int], int] = {}
        self.trimmed = True  # no state without a way on has been made
        self.copies = copies  # registered nodes are copies of their own NFAs

    def new_state(self) -> int:
        if len(self.epsilon) >= self.limit:
            raise self._too_many()
        self.epsilon.append(())  # replaced, never appended to, when the state gets edges
        self.edge_mask.append(0)
        self.edge_target.append(-1)
        return len(self.epsilon) - 1

    def _too_many(self) -> TooManyNfaStatesError:
        return TooManyNfaStatesError(
            "max_nfa_states", self.limit, "the pattern needs too many NFA states"
        )

    def build(self, node: Node, next_state: int) -> int:
        """The start state of a fragment matching `node` then continuing to `next_state`."""
        key = (id(node), next_state)
        start = self.memo.get(key)
        if start is None:
            fragment = FRAGMENTS.get(id(node)) if self.copies else None
            if fragment is not None:
                start = self._copy(fragment[1], next_state)
            else:
                start = self._build(node, next_state)
            self.memo[key] = start
        return start

    def _copy(self, own: Nfa, next_state: int) -> int:
        """A registered node's own NFA (`FRAGMENTS`) copied in: its states 1.. shifted to the
        end, its `ACCEPT` edges led to `next_state`. O(its states)."""
        size = own.n_states - 1
        first = len(self.epsilon)
        if first + size > self.limit:
            raise self._too_many()
        shift = first - 1  # own state x >= 1 becomes x + shift; ACCEPT becomes next_state
        self.epsilon.extend(
            [tuple([x + shift if x else next_state for x in out]) for out in own.epsilon[1:]]
        )
        self.edge_mask.extend(own.edge_mask[1:])
        self.edge_target.extend(
            [t + shift if t > 0 else (next_state if t == 0 else -1) for t in own.edge_target[1:]]
        )
        self.trimmed &= own.trimmed
        return own.start + shift

    def _build(self, node: Node, next_state: int) -> int:
        kind = type(node)
        if kind is Concat:
            memo, epsilon, limit = self.memo, self.epsilon, self.limit
            for item in reversed(node.items):
                if type(item) is ByteSet:  # inlined `build` of a leaf: most nodes are these
                    key = (id(item), next_state)
                    start = memo.get(key)
                    if start is None:
                        if len(epsilon) >= limit:
                            raise self._too_many()
                        self.trimmed &= item.mask != 0
                        start = memo[key] = len(epsilon)
                        epsilon.append(())
                        self.edge_mask.append(item.mask)
                        self.edge_target.append(next_state)
                    next_state = start
                else:
                    next_state = self.build(item, next_state)
            return next_state
        if kind is Alt:
            self.trimmed &= len(node.items) > 0
            s = self.new_state()
            self.epsilon[s] = [self.build(item, next_state) for item in node.items]
            return s
        if kind is Repeat:
            return self._repeat(node, next_state)
        if kind is ByteSet:
            self.trimmed &= node.mask != 0
            s = self.new_state()
            self.edge_mask[s] = node.mask
            self.edge_target[s] = next_state
            return s
        if kind is Automaton:
            return self._automaton(node.dfa, next_state)
        raise TypeError(f"not a regex tree node: {node!r}")

    def _automaton(self, dfa, next_state: int) -> int:
        """Splice a `Dfa`: one epsilon hub per DFA state, one byte-edge state per (state, target)
        pair (in state then target order); an accepting hub also leads to `next_state`. The
        pairs and their byte masks are found with NumPy, O(n_states * 256)."""
        n = dfa.n_states
        hubs = [self.new_state() for _ in range(n)]
        states, byte_values = np.nonzero(dfa.trans >= 0)
        pairs, pair_of_edge = np.unique(
            states.astype(np.int64) * n + dfa.trans[states, byte_values], return_inverse=True
        )
        bits = np.zeros((len(pairs), 256), dtype=bool)
        bits[pair_of_edge, byte_values] = True
        masks = np.packbits(bits, axis=1, bitorder="little").tobytes()  # 32 bytes a pair
        out: list[list[int]] = [[] for _ in range(n)]
        for k, (s, t) in enumerate(zip((pairs // n).tolist(), (pairs % n).tolist(), strict=True)):
            e = self.new_state()
            self.edge_mask[e] = int.from_bytes(masks[32 * k : 32 * k + 32], "little")
            self.edge_target[e] = hubs[t]
            out[s].append(e)
        for s in np.flatnonzero(dfa.accept).tolist():
            out[s].append(next_state)
        for s in range(n):
            self.epsilon[hubs[s]] = out[s]
        return hubs[0]

    def _repeat(self, node: Repeat, next_state: int) -> int:
        item, lo, hi = node.item, node.min, node.max
        if hi is None:
            # item{lo,}: item^(lo-1) then item+ (a loop back through `loop`), or item* for lo=0.
            loop = self.new_state()
            body = self.build(item, loop)
            self.epsilon[loop] = [body, next_state]
            cur = body if lo > 0 else loop
            for _ in range(max(lo - 1, 0)):
                cur = self.build(item, cur)
            return cur
        # item{lo,hi}: lo copies, then hi-lo optional copies each of which may skip to the end.
        cur = next_state
        for _ in range(hi - lo):
            s = self.new_state()
            self.epsilon[s] = [self.build(item, cur), next_state]
            cur = s
        for _ in range(lo):
            cur = self.build(item, cur)
        return cur


COUNT_MARGIN = 1.1
"""`check_tree_states` refuses a tree counted past `max_nfa_states` by this factor: a count just
above the limit (an upper bound, `tree_states`) is left to the builder to decide."""


def check_tree_states(node: Node, limits: Limits | None = None) -> None:
    """Raise TooManyNfaStatesError, as `tree_to_nfa` would, when the NFA of the parsed tree
    `node` is counted (`tree_states`, O(distinct nodes), nothing built) past
    `limits.max_nfa_states` times `COUNT_MARGIN`: a pattern such as `(a{1000}){1000}` is refused
    before its million states are made; else nothing."""
    limit = (limits or DEFAULT_LIMITS).max_nfa_states
    if tree_states(node) + 1 > limit * COUNT_MARGIN:
        raise TooManyNfaStatesError(
            "max_nfa_states", limit, "the pattern needs too many NFA states"
        )


def tree_states(node) -> int:
    """The NFA states (accepting state not included) of a small regex tree built alone: the
    builder's count when no two leaves of different branches share a state except through a
    common suffix of one alternation's items (exact on the parser's trees)."""
    memo: dict[int, tuple[object, int]] = {}

    def flat(n, out: list) -> list:
        if type(n) is Concat:
            for item in n.items:
                flat(item, out)
        else:
            out.append(n)
        return out

    def size(n) -> int:
        hit = memo.get(id(n))
        if hit is not None:
            return hit[1]
        kind = type(n)
        if kind is ByteSet:
            out = 1
        elif kind is Concat:
            out = sum(size(item) for item in n.items)
        elif kind is Alt:
            out, seen = 1, set()
            for item in n.items:  # items end at one continuation: equal suffixes are shared
                suffix = None
                for element in reversed(flat(item, [])):
                    suffix = (id(element), suffix)
                    if suffix not in seen:
                        seen.add(suffix)
                        out += size(element)
        elif kind is Repeat:
            k = size(n.item)
            low, high = n.min, n.max
            out = 1 + k * max(low, 1) if high is None else (high - low) * (1 + k) + low * k
        elif kind is Automaton:
            rows = np.sort(n.dfa.trans, axis=1)  # per state: one byte-edge state per target
            fresh = np.ones(rows.shape, dtype=bool)
            fresh[:, 1:] = rows[:, 1:] != rows[:, :-1]
            out = rows.shape[0] + int(np.count_nonzero(fresh & (rows >= 0)))
        else:
            raise TypeError(f"not a regex tree node: {n!r}")
        memo[id(n)] = (n, out)
        return out

    return size(node)
