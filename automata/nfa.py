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
        deferred: None, or the parts not built yet of a `tree_to_nfa(..., deferred=True)`
            (`Deferred`): a stub state each, with no edge until it is built.
    State `ACCEPT` (0) is the only accepting state.
    """

    start: int
    epsilon: list[Sequence[int]]
    edge_mask: list[int]
    edge_target: list[int]
    trimmed: bool = False
    deferred: Deferred | None = None

    @property
    def n_states(self) -> int:
        return len(self.epsilon)


def tree_to_nfa(node: Node, limits: Limits | None = None, deferred: bool = False) -> Nfa:
    """The Thompson NFA of a regex tree (shared subtrees in tail position built once).

    With `deferred` (for `corral.automata.lazy`), the items of alternations and the copies of
    a counted repeat `{m,n}` are not built: each is a stub state, built when a closure reaches
    it (`Deferred`). A stub's one epsilon edge leads to the part's start, so the language is the
    same, and the parts built are the states the whole build makes (the same memo keys); stubs
    are not counted in `max_nfa_states`. `trimmed` is then the tree's (no `Alt(())`, no empty
    byte set, found by a walk of its distinct nodes), as the whole build would find it.

    Raises:
        TooManyNfaStatesError: more than `limits.max_nfa_states` states would be needed; raised
            while building, before the memory is spent (deferred: as the parts are built).
    """
    builder = _Builder(limits or DEFAULT_LIMITS, deferred=deferred)
    accept = builder.new_state()
    assert accept == ACCEPT
    start = builder.build(node, accept)
    pending = builder.pending
    if pending is not None:
        if not pending.stubs:
            pending = None
        else:
            builder.trimmed &= _trimmed(node)
            pending.root = node  # the memo's keys are ids of its nodes: kept alive with it
    return Nfa(
        start, builder.epsilon, builder.edge_mask, builder.edge_target, builder.trimmed, pending
    )


class Deferred:
    """The parts of a deferred NFA (`tree_to_nfa(..., deferred=True)`) not built yet: stub
    states, each (a node, its continuation). The NFA's lists grow in place as parts are built,
    so a reader holding them (the subset construction) sees them.

    `ensure_closure(state)` builds every stub the epsilon closure of `state` meets: call it for
    every state before its closure is searched (the start, and the targets of a DFA state's
    byte edges before the state's row is made). O(closure) the first time for a state, O(1)
    after; each part is built once, as the whole build would build it.

    Raises (both methods): TooManyNfaStatesError, as the whole build would.
    """

    def __init__(self, builder: _Builder):
        self.builder = builder
        self.stubs: dict[int, tuple[Node, int]] = {}  # stub state -> (node, continuation)
        self.closed: set[int] = set()  # states whose closure is built
        self.root: Node | None = None  # the tree, kept alive while parts are built

    def ensure_closure(self, state: int) -> None:
        """Build every stub of the epsilon closure of `state`."""
        if not self.stubs or state in self.closed:
            return
        seen, stack = {state}, [state]
        stubs, epsilon, closed = self.stubs, self.builder.epsilon, self.closed
        while stack:
            s = stack.pop()
            if s in stubs:
                self._build(s)
            for t in epsilon[s]:
                if t not in seen and t not in closed:
                    seen.add(t)
                    stack.append(t)
        closed |= seen

    def build_all(self) -> None:
        """Build every stub left (and those their parts make): the NFA is then whole."""
        while self.stubs:
            self._build(next(iter(self.stubs)))

    def _build(self, stub: int) -> None:
        node, next_state = self.stubs.pop(stub)
        self.builder.epsilon[stub] = (self.builder.build(node, next_state),)


class _Builder:
    def __init__(self, limits: Limits, copies: bool = True, deferred: bool = False):
        self.limit = limits.max_nfa_states
        self.pending = Deferred(self) if deferred else None
        self.stub_of: dict[tuple[int, int], int] = {}  # (id(node), continuation) -> stub
        self.rests: dict[tuple, Repeat] = {}  # deferred: (id(item), lo, hi) -> a repeat's rest
        self.epsilon: list[Sequence[int]] = []
        self.edge_mask: list[int] = []
        self.edge_target: list[int] = []
        self.memo: dict[tuple[int, int], int] = {}
        self.trimmed = True  # no state without a way on has been made
        self.copies = copies  # registered nodes are copies of their own NFAs

    def new_state(self) -> int:
        if len(self.epsilon) - len(self.stub_of) >= self.limit:
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
        if first - len(self.stub_of) + size > self.limit:
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
            memo, epsilon, limit = self.memo, self.epsilon, self.limit + len(self.stub_of)
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
            part = self.build if self.pending is None else self._stub
            self.epsilon[s] = [part(item, next_state) for item in node.items]
            return s
        if kind is Repeat:
            if self.pending is not None:
                return self._deferred_repeat(node, next_state)
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

    def _deferred_repeat(self, node: Repeat, next_state: int) -> int:
        """Deferred: `item{lo,hi}` as one copy of the item, then the rest, `item{lo-1,hi-1}`
        (`lo` > 0), or a state that skips to `next_state` or reads a copy then the rest,
        `item{0,hi-1}` (`lo` = 0): the item and the rest are stubs, so each copy is made as it
        is reached. The states the eager `_repeat` makes, in the same shape (its copies built
        from the end, these from the start), plus two stubs a copy. An unbounded repeat of at
        most one copy before its loop is built as `_repeat` builds it."""
        item, lo, hi = node.item, node.min, node.max
        if (hi is None and lo <= 1) or hi == 0:
            return self._repeat(node, next_state)
        rest = self._rest(item, max(lo - 1, 0), None if hi is None else hi - 1, next_state)
        if lo:
            return self._stub(item, rest)
        s = self.new_state()
        self.epsilon[s] = [self._stub(item, rest), next_state]
        return s

    def _rest(self, item: Node, lo: int, hi: int | None, next_state: int) -> int:
        """A stub of `item{lo,hi}` continuing to `next_state` (`next_state` itself for
        `{0,0}`); the repeat nodes made here are kept, one per (item, lo, hi), so their ids
        stay unique memo keys."""
        if hi == 0:
            return next_state
        key = (id(item), lo, hi)
        rest = self.rests.get(key)
        if rest is None:
            rest = self.rests[key] = Repeat(item, lo, hi)
        return self._stub(rest, next_state)

    def _stub(self, node: Node, next_state: int) -> int:
        """Deferred: the start of `node` continuing to `next_state` when it is built (or a byte
        set, built at once), else a stub state to be built when reached (`Deferred`)."""
        key = (id(node), next_state)
        start = self.memo.get(key)
        if start is None:
            start = self.stub_of.get(key)
        if start is None:
            if type(node) is ByteSet:
                return self.build(node, next_state)
            start = self.stub_of[key] = len(self.epsilon)  # not counted in the limit
            self.epsilon.append(())
            self.edge_mask.append(0)
            self.edge_target.append(-1)
            self.pending.stubs[start] = (node, next_state)
        return start


def _trimmed(node: Node) -> bool:
    """Whether the tree has no empty alternation and no empty byte set (the nodes that make an
    NFA state with no way on): a walk of its distinct nodes."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        kind = type(n)
        if kind is ByteSet:
            if not n.mask:
                return False
        elif kind is Alt:
            if not n.items:
                return False
            stack.extend(n.items)
        elif kind is Concat:
            stack.extend(n.items)
        elif kind is Repeat:
            stack.append(n.item)
    return True


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
