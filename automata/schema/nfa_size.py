"""The NFA size of a schema form, counted without building it: how many states the Thompson
construction (`corral.automata.nfa`) would make for `TreeBuilder.build(form)` (docs/design.md
section 2, "Limits"; section 3, "shared tails").

`nfa_states(form, trees, most)` replays the NFA builder's memo, keyed on (form node,
continuation), over the form rather than the regex tree: a `Regex` or `Subtree` leaf counts
the states of its tree built alone, in one step, and sequences, choices, repeats and
objects (`{` members with shared tails `}`, as `TreeBuilder._object` writes them) make their
states and continuations as the builder does; a literal is counted byte by byte, as the
builder's shared one-byte nodes are. The count is an upper bound of the builder's: the builder
also shares states between the trees of two different leaves that end alike with the same
continuation, which the count does not see. On JSONSchemaBench's slowest recursive schemas it
equals the builder's count.

`compile_schema` uses it to go straight past the `$ref` unrollings whose NFA cannot fit:
counting costs a small fraction of building (a leaf is one step, not one per state), and it
stops at `most`.

Fresh continuations: a node built to continue at a state that no memo key holds yet (the
`Repeat`s' copies after the first, each continuing at the state made for the copy before) makes
states that none made before it can share, so it makes as many as its first such build did:
that count is kept per node and added at once, with one new state standing for the copy's
start. Nested counted repeats (`{"maxItems": 64, "items": {"maxItems": 64, ...}}`, a
`{m,n}` of groups of `{m,n}`) are then counted in O(form nodes x nesting), not O(states):
the count of an NFA of millions of states stops at `most` after a few hundred steps. (The count
can only grow by this: the copy's start stands for a state a real copy might share.)
"""

from __future__ import annotations

import weakref

from corral.automata.errors import TooManyNfaStatesError
from corral.automata.limits import DEFAULT_LIMITS
from corral.automata.nfa import tree_states
from corral.automata.schema.form import (
    Choice,
    Lit,
    Object,
    Regex,
    Repeat,
    Seq,
    Subtree,
    TreeBuilder,
)

MARGIN = 1.1
"""`check_nfa_states` refuses a form whose count passes `max_nfa_states` by this factor: a count
just above the limit (the count may be a few percent high) is left to the builder to decide."""


def check_nfa_states(form, trees: TreeBuilder) -> int:
    """Raise TooManyNfaStatesError, as the NFA builder would, when `form`'s NFA is counted
    (`nfa_states`) past `max_nfa_states` (of `trees.limits`) times `MARGIN`; else the count."""
    limit = (trees.limits or DEFAULT_LIMITS).max_nfa_states
    try:
        return nfa_states(form, trees, int(limit * MARGIN))
    except TooLarge:
        raise TooManyNfaStatesError(
            "max_nfa_states", limit, "the pattern needs too many NFA states"
        ) from None


def counted_nfa_states(form, trees: TreeBuilder) -> int | None:
    """`form`'s NFA states as `nfa_states` counts them, or None past `max_nfa_states` (of
    `trees.limits`). Within the limit, the builder, whose count is never above it, cannot pass
    the limit."""
    try:
        return nfa_states(form, trees, (trees.limits or DEFAULT_LIMITS).max_nfa_states)
    except TooLarge:
        return None


def blame(form, trees: TreeBuilder, pointers: dict[int, str], error):
    """`error`, a `TooManyNfaStatesError` of `form`'s compile, naming the schema part at fault:
    the deepest subschema whose NFA built alone passes the limit without any one of its parts
    doing so, by `pointers` (form id -> JSON pointer, `Compiler.pointers`). `error` itself when
    the pointer is not known (the whole form's NFA alone does not pass the limit: a refusal of
    the count). A part passes when it is counted (`nfa_states`) past the limit: the count
    equals the builder's but where the builder shares states between two leaves that end
    alike, so nested counted repeats, each level past the limit, are named after a count per
    level, not a build of up to `max_nfa_states` states per level (nor one per wrapper of a
    level, when the count is within `MARGIN` of the limit)."""
    limit = (trees.limits or DEFAULT_LIMITS).max_nfa_states

    def passes(node) -> bool:
        try:
            nfa_states(node, trees, limit)
        except TooLarge:
            return True
        return False

    if error.pointer is not None or not passes(form):
        return error
    node, pointer = form, pointers.get(id(form))
    while True:
        inner = next((part for part in _parts(node) if passes(part)), None)
        if inner is None:
            break
        node, pointer = inner, pointers.get(id(inner), pointer)
    if pointer is None:
        return error
    blamed = TooManyNfaStatesError(
        error.limit, error.value, f"{pointer or '/'}: the schema needs too many NFA states here"
    )
    blamed.pointer = pointer
    return blamed


def _parts(node) -> tuple:
    """The form nodes `node` is made of (none for a leaf)."""
    kind = type(node)
    if kind is Seq or kind is Choice:
        return node.items
    if kind is Repeat:
        return (node.item,)
    if kind is Object:
        return tuple(member for member, _ in node.members)
    return ()


TREE_SIZES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""`tree_states` of the leaves' trees, while they live: the pinned trees of the common
fragments (a string, an integer, a date) are counted once per process, not once per compile."""


class TooLarge(Exception):
    """The count passed `most` (`nfa_states`)."""


def nfa_states(form, trees: TreeBuilder, most: int) -> int:
    """An upper bound of the number of NFA states (accepting state included) of
    `trees.build(form)` (see the module docstring).

    Raises:
        TooLarge: the count passed `most` (counting stops there).
        TypeError: `form` holds a node that is no schema form node.
    """
    return _Counter(trees, most).count(form)


class _Counter:
    def __init__(self, trees: TreeBuilder, most: int):
        self.trees = trees
        self.most = most
        self.states = 1  # the accepting state, continuation 0
        self.memo: dict[tuple, int] = {}  # (node key, continuation) -> start state
        self.used: set[int] = {0}  # continuations some memo key holds (0: the form's own)
        self.fresh: dict[int, int] = {}  # id(node) -> states it makes at a fresh continuation
        self.leaf_sizes: dict[int, tuple[object, int]] = {}  # id -> (leaf kept alive, states)

    def count(self, form) -> int:
        self.build(form, 0)
        return self.states

    def new(self, n: int = 1) -> int:
        """Count `n` new states; the last one stands for the fragment's start."""
        self.states += n
        if self.states > self.most:
            raise TooLarge()
        return self.states - 1

    def build(self, node, cont: int) -> int:
        """The start of `node` built to continue at `cont` (memoized as the builder is: a
        literal's bytes are the builder's shared one-byte nodes, a regex leaf its parsed tree,
        one per text)."""
        kind = type(node)
        if kind is Lit:
            for byte in reversed(node.text.encode("utf-8")):
                key = (-1 - byte, cont)  # never an id()
                start = self.memo.get(key)
                self.used.add(cont)
                cont = self.memo[key] = self.new() if start is None else start
            return cont
        memo_key = (id(self.trees.build(node)) if kind is Regex else id(node), cont)
        start = self.memo.get(memo_key)
        if start is None:
            fresh = cont not in self.used
            self.used.add(cont)
            made = self.fresh.get(id(node)) if fresh else None
            if made is not None:  # as many states as its first fresh build (module docstring)
                start = cont if made == 0 else self.new(made)
            else:
                before = self.states
                start = self._build(node, cont)
                if fresh:
                    self.fresh[id(node)] = self.states - before
            self.memo[memo_key] = start
        return start

    def _build(self, node, cont: int) -> int:
        kind = type(node)
        if kind is Seq:
            for item in reversed(node.items):
                cont = self.build(item, cont)
            return cont
        if kind is Choice:
            start = self.new()
            for item in node.items:
                self.build(item, cont)
            return start
        if kind is Repeat:
            return self._repeat(node.item, node.min, node.max, cont)
        if kind is Object:
            return self._object(node, cont)
        if kind is Regex or kind is Subtree:
            size = self._leaf_size(node)
            return cont if size == 0 else self.new(size)
        raise TypeError(f"not a schema form node: {node!r}")

    def _repeat(self, item, lo: int, hi: int | None, cont: int) -> int:
        """As `corral.automata.nfa._Builder._repeat`."""
        if hi is None:
            loop = self.new()
            body = self.build(item, loop)
            cur = body if lo > 0 else loop
            for _ in range(max(lo - 1, 0)):
                cur = self.build(item, cur)
            return cur
        cur, copies = cont, hi - lo
        for k in range(copies):
            made = self.fresh.get(id(item))
            if made is not None and k:  # the copies left continue at fresh states: at once
                self.states += (copies - k) * (1 + made) - 1
                cur = self.new()
                break
            start = self.new()
            self.build(item, cur)
            cur = start
        for k in range(lo):
            made = self.fresh.get(id(item)) if cur not in self.used else None
            if made is not None:  # each copy continues at the fresh start of the one before
                if made:
                    self.states += (lo - k) * made - 1
                    cur = self.new()
                break
            cur = self.build(item, cur)
        return cur

    def _object(self, node: Object, cont: int) -> int:
        """As `TreeBuilder._object` then the builder: `{` Alt_j(m_j o_{j+1} ... o_{n-1}) `}`,
        o_i = `,m_i` or `(,m_i)?`, every o_i a shared node."""
        close = self.new()  # `}`
        members = node.members
        firsts = []
        for j, (_, required) in enumerate(members):
            firsts.append(j)
            if required:
                break
        else:
            firsts.append(None)  # the empty body
        body_start = self.new() if len(firsts) > 1 else None
        for j in firsts:
            cur = close
            if j is not None:
                for i in range(len(members) - 1, j, -1):
                    cur = self._tail(node, i, cur)
                cur = self.build(members[j][0], cur)
            if body_start is None:
                body_start = cur
        self.new()  # `{`
        return self.states - 1

    def _tail(self, node: Object, i: int, cont: int) -> int:
        """o_i of `node` built to continue at `cont`."""
        member, required = node.members[i]
        key = ("tail", id(node), i)
        start = self.memo.get((key, cont))
        if start is None:
            self.used.add(cont)
            piece = self.build(member, cont)
            comma = (("comma", id(node), i), piece)
            self.used.add(piece)
            if comma not in self.memo:
                self.memo[comma] = self.new()
            start = self.memo[comma] if required else self.new()
            self.memo[(key, cont)] = start
        return start

    def _leaf_size(self, leaf) -> int:
        """States of a leaf's regex tree built alone."""
        hit = self.leaf_sizes.get(id(leaf))
        if hit is None:
            tree = self.trees.build(leaf)
            size = TREE_SIZES.get(tree)
            if size is None:
                size = TREE_SIZES[tree] = tree_states(tree)
            hit = self.leaf_sizes[id(leaf)] = (leaf, size)
        return hit[1]
