"""Thompson NFA to a trimmed DFA over byte classes (docs/design.md section 2: "byte classes (bytes
every edge treats alike) -> subset construction over classes -> remove states that cannot reach
acceptance").

Three steps, one function each:
- `byte_classes`: the coarsest partition of the bytes 0..255 that every NFA edge treats alike;
  classes are numbered in order of their smallest byte (`classes_of` also gives each edge's
  classes as an int bitset, for the next step).
- `subset_construction`: the classic construction over epsilon closures, with one column per class
  instead of one per byte; the DFA-state limit is checked as each state is made; states are
  numbered breadth first, the canonical order. `Subsets` does it one state at a time, which
  `corral.automata.lazy` uses to make a DFA's states on demand.
- `remove_dead_states`: drop the states from which no accepting state can be reached.

The DFA here is a pair `trans` int32 `[n_states, n_classes]` (-1: dead) and `accept` bool
`[n_states]`, with start state 0.
"""

from __future__ import annotations

from itertools import islice

import numpy as np
from corral.automata.errors import EmptyLanguageError, SubsetWorkError, TooManyDfaStatesError
from corral.automata.graph import distances_to, table_edges, true_cells
from corral.automata.limits import DEFAULT_LIMITS, Limits
from corral.automata.nfa import ACCEPT, Nfa

EXACT_MASKS = 64
"""Up to this many distinct masks, each byte's column of mask bits is read exactly, as one
uint64 (`classes_of`)."""

PYTHON_STEP_UNITS = 20
"""The work units (`Limits.max_subset_work`) of one step of a Python loop of the construction:
an NFA state read by a kernel's loops, an (edge, class) pair of an atom plan (`_atom_plan`);
about 20 times the cost of one element of a set union, the unit. An NFA state visited by an
epsilon-closure search costs twice that."""

_KEY_WEIGHTS = np.random.default_rng(20261202).integers(0, 2**40, 4096).astype(np.float64)
"""Fixed integer weights (below 2**40, exact in float64) of the hash of a byte's column of more
than `EXACT_MASKS` mask bits: a sum of at most 4,096 of them is below 2**52, so it is computed
exactly."""


def byte_classes(masks: list[int]) -> np.ndarray:
    """int32 `[256]`: the class of each byte, for the coarsest partition of 0..255 in which every
    mask in `masks` is a union of classes. Classes are numbered 0, 1, ... in order of their
    smallest byte. `classes_of(masks)[0]`, without the masks' class bitsets."""
    return _partition(masks)[0]


def classes_of(masks: list[int]) -> tuple[np.ndarray, list[int]]:
    """(byte_to_class int32 `[256]` as `byte_classes` gives it, the classes each mask of
    `masks` holds as an int bitset, bit c for class c).

    Two bytes share a class when every mask holds both or neither: each byte's column of the
    distinct masks' bit matrix is read as one number (up to `EXACT_MASKS` masks its bits as a
    uint64, grouped by a dict in byte order; past that a float64 hash, one matrix-vector
    product, grouped by one `np.unique`, the classes then checked to be the distinct columns,
    with a fallback to grouping the columns themselves on a collision). A mask holds a
    class when it holds the class's smallest byte. O(distinct masks x 256) vectorized, plus one
    pass over the masks."""
    byte_to_class, distinct, read = _partition(masks)
    return byte_to_class, _bitsets(distinct, read, masks)


def _partition(masks: list[int]) -> tuple[np.ndarray, list[int], np.ndarray]:
    """(byte_to_class, the distinct masks, bool `[n_distinct, n_classes]`: which classes each
    holds), as `classes_of` describes."""
    distinct = list(dict.fromkeys(masks))
    packed = b"".join(m.to_bytes(32, "little") for m in distinct)
    member = np.unpackbits(np.frombuffer(packed, np.uint8), bitorder="little").reshape(-1, 256)
    if len(distinct) <= EXACT_MASKS:  # each column's bits as one uint64, grouped by a dict
        # in byte order: classes numbered by their smallest byte as they are met, no sort
        columns = np.zeros((256, 8), np.uint8)
        bits = np.packbits(member, axis=0, bitorder="little")  # [ceil(n_distinct / 8), 256]
        columns[:, : len(bits)] = bits.T
        keys = columns.view(np.uint64).ravel().tolist()
        ids = {key: c for c, key in enumerate(dict.fromkeys(keys))}
        byte_to_class = np.array(list(map(ids.__getitem__, keys)), np.int32)
        return byte_to_class, distinct, member[:, _first_bytes(byte_to_class)]
    if len(distinct) <= len(_KEY_WEIGHTS):
        weights = _KEY_WEIGHTS[: len(distinct)]
        _, first, inverse = np.unique(weights @ member, return_index=True, return_inverse=True)
        rank = np.empty(len(first), dtype=np.int32)
        rank[np.argsort(first)] = np.arange(len(first), dtype=np.int32)  # by smallest byte
        byte_to_class = rank[inverse.reshape(-1)]
        read = member[:, np.sort(first)]  # [n_distinct, n_classes]: which classes a mask holds
    if len(distinct) > len(_KEY_WEIGHTS) or not np.array_equal(read[:, byte_to_class], member):
        byte_to_class = _first_occurrence([bytes(c) for c in np.ascontiguousarray(member.T)])
        read = member[:, _first_bytes(byte_to_class)]
    return byte_to_class, distinct, read


def _first_occurrence(keys: list) -> np.ndarray:
    """int32 `[len(keys)]`: each key numbered by the first occurrence of its value."""
    ids: dict = {}
    return np.array([ids.setdefault(k, len(ids)) for k in keys], np.int32)


def _first_bytes(byte_to_class: np.ndarray) -> np.ndarray:
    """int64 `[n_classes]`: the smallest byte of each class (classes numbered by their first
    byte, so a class begins where the running maximum of the classes grows)."""
    grows = np.empty(256, bool)
    grows[0] = True
    np.greater(byte_to_class[1:], np.maximum.accumulate(byte_to_class)[:-1], out=grows[1:])
    return grows.nonzero()[0]


def subset_construction(
    nfa: Nfa,
    byte_to_class: np.ndarray,
    limits: Limits | None = None,
    class_sets: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The DFA of `nfa` over byte classes: `(trans, accept)`, trans int32 `[n_states, n_classes]`
    (-1 where the set of NFA states reached is empty), accept bool `[n_states]`, start state 0.
    `class_sets`: per NFA state, the classes its byte edge reads as an int bitset
    (`classes_of(nfa.edge_mask)[1]`); None: computed here.

    `Subsets.expand` over the whole queue (see `Subsets` for the method and its cost); the table
    is written at the end, every (state, atom, target) edge at once in NumPy, so there is no
    Python work per class.

    States are numbered as they are discovered, the states in turn and each state's atoms by
    increasing class: breadth first from the start taking bytes in order, the canonical order
    (`corral.automata.minimize.number_breadth_first`, which then keeps the numbering).

    Raises:
        EmptyLanguageError: the start closure has no byte edge and does not accept.
        TooManyDfaStatesError: more than `limits.max_dfa_states` states would be made; raised as
            the state past the limit is discovered.
    """
    n_classes = int(byte_to_class.max()) + 1
    subsets = Subsets(nfa, byte_to_class, limits, class_sets)
    subsets.expand(0)
    trans = np.full((subsets.n_states, n_classes), -1, dtype=np.int32)
    if subsets.edge_state:
        # Each edge writes its target in the columns of its atom's classes.
        atom_bits = _bits_matrix(subsets.atoms, n_classes)  # bool [n_atoms, n_classes]
        edge, column = true_cells(atom_bits[np.array(subsets.edge_atom)])
        trans[np.array(subsets.edge_state)[edge], column] = np.array(
            subsets.edge_to, dtype=np.int32
        )[edge]
    return trans, np.array(subsets.accept, bool)


class Subsets:
    """The subset construction of an NFA over byte classes (docs/design.md section 2), one DFA
    state at a time: `expand(i)` finds state i's edges, making the states they reach.

    A DFA state is identified by the NFA states with a byte edge in its epsilon closure and by
    whether the closure holds the accepting state. Each NFA byte edge reads a set of classes (an
    int bitset); per DFA state, the classes are cut into the atoms that every edge of the state
    reads whole or not at all (`_atom_plan`, memoized on the kernel's bitsets: the positions of
    a length-bounded string share it), and each atom costs one closure (memoized). A kernel of
    one NFA state, most of a schema's DFA, skips the plan (its one edge is its one atom), and
    the closure of a target without epsilon edges is read off without a search. O(edges of
    the kernel x atoms) per DFA state.

    Args:
        nfa: the Thompson NFA (`corral.automata.nfa.Nfa`).
        byte_to_class: int32 `[256]`, `classes_of(nfa.edge_mask)[0]`.
        limits: `max_dfa_states` is checked as each state is made (None: the defaults).
        class_sets: per NFA state, the classes its byte edge reads as an int bitset
            (`classes_of(nfa.edge_mask)[1]`); None: computed here.
        live: None, or per NFA state whether it can reach `ACCEPT` (`live_nfa_states`): then
            closures keep only live NFA states and no edge leads to a state with none, so
            every DFA state made is live (can reach acceptance) without a later pass.

    Attributes:
        kernels: per DFA state made, its sorted NFA states with a byte edge; state 0 is the
            start. accept: per DFA state, whether it accepts.
        atoms: the class bitsets of the edges, by atom id.
        edge_state, edge_atom, edge_to: the edges found so far, as parallel lists (a state's
            edges are appended together, by increasing class).

    Raises:
        EmptyLanguageError: the start closure has no byte edge and does not accept.
    """

    def __init__(
        self,
        nfa: Nfa,
        byte_to_class: np.ndarray,
        limits: Limits | None = None,
        class_sets: list[int] | None = None,
        live: list[bool] | None = None,
    ):
        masks = nfa.edge_mask
        if class_sets is None:  # per NFA state: the classes its byte edge reads, an int bitset
            class_sets = _class_sets(masks, byte_to_class)
        if live is not None:  # a dead NFA state reads nothing and is not the accepting one
            masks = [m if ok else 0 for m, ok in zip(masks, live, strict=True)]
        self.kernels: list[tuple[int, ...]] = []
        self.accept: list[bool] = []
        self.atoms: list[int] = []
        self.edge_state: list[int] = []
        self.edge_atom: list[int] = []
        self.edge_to: list[int] = []
        self._spent = [0]
        self.expand = self._expander(nfa, masks, class_sets, limits or DEFAULT_LIMITS)

    @property
    def n_states(self) -> int:
        """The DFA states made so far."""
        return len(self.kernels)

    @property
    def work(self) -> int:
        """The work done so far, in the units `Limits.max_subset_work` counts."""
        return self._spent[0]

    def _expander(self, nfa: Nfa, masks: list[int], class_sets: list[int], limits: Limits):
        """`expand(first, stop=None)`: append the edges of DFA states `first`, `first + 1`, ...
        up to `stop` (None: until the queue of states made is exhausted, the eager
        construction), making the states they reach. The construction's memos live in this
        function's closure, so the loop reads them as fast locals.

        Raises:
            TooManyDfaStatesError: a state past `limits.max_dfa_states` would be made.
        """
        edge_target = nfa.edge_target
        epsilon = nfa.epsilon
        kernels, accept, atoms = self.kernels, self.accept, self.atoms
        edge_state, edge_atom, edge_to = self.edge_state, self.edge_atom, self.edge_to
        state_closures: dict[int, frozenset[int]] = {}
        work_limit = limits.max_subset_work
        spent = self._spent

        def charge(units: int) -> None:
            spent[0] += units
            if spent[0] > work_limit:
                raise SubsetWorkError(
                    "max_subset_work",
                    work_limit,
                    f"the DFA's subset construction needs too much work (after "
                    f"{len(kernels)} states)",
                )

        def state_closure(state: int) -> frozenset[int]:
            """The NFA states with a byte edge, or ACCEPT, reachable from `state` by epsilon
            edges."""
            cached = state_closures.get(state)
            if cached is None:
                seen = {state}
                stack = [state]
                while stack:
                    for t in epsilon[stack.pop()]:
                        if t not in seen:
                            seen.add(t)
                            stack.append(t)
                cached = frozenset(s for s in seen if masks[s] or s == ACCEPT)
                state_closures[state] = cached
                charge(2 * PYTHON_STEP_UNITS * len(seen))  # a search: two loops a state
            return cached

        closures: dict[tuple[int, ...], tuple[tuple[int, ...], bool]] = {}

        def closure(states: tuple[int, ...]) -> tuple[tuple[int, ...], bool]:
            """(sorted NFA states with a byte edge, accepts) of the epsilon closure of
            `states`."""
            cached = closures.get(states)
            if cached is None:
                if len(states) == 1:
                    reached = state_closure(states[0])
                else:
                    reached = set()
                    units = 0
                    for state in states:
                        if epsilon[state]:
                            one = state_closure(state)
                            units += len(one)
                            if spent[0] + units > work_limit:  # before the union is made
                                charge(units)
                            reached |= one
                        elif masks[state] or state == ACCEPT:
                            reached.add(state)
                    charge(units + PYTHON_STEP_UNITS * len(states) + len(reached))
                cached = (tuple(sorted(reached - {ACCEPT})), ACCEPT in reached)
                closures[states] = cached
            return cached

        def reached(t: int) -> tuple[tuple[int, ...], bool]:
            """The key of the closure of one target: read off without a search when it has no
            epsilon edge (most targets of a schema's NFA)."""
            if epsilon[t]:
                return closure((t,))
            if masks[t]:
                return ((t,), False)
            return ((), t == ACCEPT)

        plans: dict[tuple[int, ...], tuple[list, int]] = {}  # kernel shape -> (steps, cost)
        atom_id: dict[int, int] = {}  # class bitset -> its index in `atoms` (plans hold ids)
        start = closure((nfa.start,))
        if not start[0] and not start[1]:
            raise EmptyLanguageError("the pattern matches no string")
        index = {start: 0}
        kernels.append(start[0])
        accept.append(start[1])
        limit = limits.max_dfa_states
        nothing = ((), False)  # a closure with no live NFA state: no edge is made to it

        def atom_of(bits: int) -> int:
            atom = atom_id.get(bits)
            if atom is None:
                atom = atom_id[bits] = len(atoms)
                atoms.append(bits)
            return atom

        def expand(first: int, stop: int | None = None) -> None:
            # The loop's names as locals (faster to read than the closure's cells).
            kernels_, index_, plans_, atom_id_ = kernels, index, plans, atom_id
            reached_, closure_, class_sets_, edge_target_ = (
                reached,
                closure,
                class_sets,
                edge_target,
            )
            add_state, add_atom, add_to = edge_state.append, edge_atom.append, edge_to.append
            # (islice over the list sees the states appended while it is read: a queue)
            for i, kernel in enumerate(islice(kernels_, first, stop), first):
                if len(kernel) == 1:  # most of a schema's DFA (literal keys, scalars): one
                    # atom, its edge's classes, and one target, so no plan to cut
                    atom = atom_id_.get(class_sets_[kernel[0]])
                    steps = ((atom_of(class_sets_[kernel[0]]) if atom is None else atom, None),)
                else:
                    shape = tuple([class_sets_[s] for s in kernel])
                    plan = plans_.get(shape)
                    if plan is None:  # `_atom_plan`: O(edges x atoms), a Python loop
                        steps = [
                            (atom_of(atom), edges)
                            for atom, edges in sorted(_atom_plan(shape), key=_smallest_class)
                        ]
                        charge(PYTHON_STEP_UNITS * len(shape) * len(steps))
                        incidences = sum(len(edges) for _, edges in steps)
                        plan = plans_[shape] = (
                            steps,
                            PYTHON_STEP_UNITS * (len(shape) + incidences),
                        )
                    steps, cost = plan
                    charge(cost)  # the shape above, the targets' tuples below
                for atom, edges in steps:
                    if edges is None:
                        key = reached_(edge_target_[kernel[0]])
                    elif len(edges) > 1:
                        key = closure_(tuple([edge_target_[kernel[e]] for e in edges]))
                    else:
                        key = reached_(edge_target_[kernel[edges[0]]])
                    j = index_.get(key)
                    if j is None:
                        if key == nothing:
                            continue
                        j = len(kernels_)
                        if j >= limit:
                            raise TooManyDfaStatesError(
                                "max_dfa_states", limit, "the DFA has too many states"
                            )
                        index_[key] = j
                        kernels_.append(key[0])
                        accept.append(key[1])
                    add_state(i)
                    add_atom(atom)
                    add_to(j)

        return expand


def live_nfa_states(nfa: Nfa) -> list[bool]:
    """Per NFA state, whether `ACCEPT` can be reached from it (by epsilon and byte edges): one
    search over the reversed edges, O(states + edges)."""
    n = nfa.n_states
    back: list[list[int]] = [[] for _ in range(n)]
    for s in range(n):
        for t in nfa.epsilon[s]:
            back[t].append(s)
        if nfa.edge_mask[s]:
            back[nfa.edge_target[s]].append(s)
    live = [False] * n
    live[ACCEPT] = True
    stack = [ACCEPT]
    while stack:
        for s in back[stack.pop()]:
            if not live[s]:
                live[s] = True
                stack.append(s)
    return live


def _smallest_class(plan_item: tuple[int, tuple[int, ...]]) -> int:
    """The lowest bit of an atom's class bitset: atoms are disjoint, so taking a state's atoms
    in this order is taking its classes in increasing order (and its bytes, classes being
    numbered by their smallest byte)."""
    atom = plan_item[0]
    return atom & -atom


def _bits_matrix(bitsets: list[int], width: int) -> np.ndarray:
    """bool `[len(bitsets), width]`: entry (i, c) is bit c of `bitsets[i]` (ints below
    2**width)."""
    n_bytes = (width + 7) // 8
    packed = b"".join(b.to_bytes(n_bytes, "little") for b in bitsets)
    bits = np.unpackbits(np.frombuffer(packed, np.uint8), bitorder="little")
    return bits.reshape(len(bitsets), n_bytes * 8)[:, :width].astype(bool)


def _class_sets(masks: list[int], byte_to_class: np.ndarray) -> list[int]:
    """Per mask of `masks` (each a union of the classes of `byte_to_class`), the classes it
    holds as an int bitset: the bits of its classes' smallest bytes, one vectorized unpack of
    the distinct masks, O(distinct masks x 256)."""
    distinct = list(dict.fromkeys(masks))
    packed = b"".join(m.to_bytes(32, "little") for m in distinct)
    member = np.unpackbits(np.frombuffer(packed, np.uint8), bitorder="little").reshape(-1, 256)
    return _bitsets(distinct, member[:, _first_bytes(byte_to_class)], masks)


def _bitsets(distinct: list[int], read: np.ndarray, masks: list[int]) -> list[int]:
    """Per mask of `masks`, row `distinct.index(mask)` of the bool matrix `read` as an int
    bitset (bit c: column c)."""
    rows = np.packbits(read, axis=1, bitorder="little").tobytes()
    width = (read.shape[1] + 7) // 8
    sets = {
        m: int.from_bytes(rows[i * width : (i + 1) * width], "little")
        for i, m in enumerate(distinct)
    }
    return [sets[m] for m in masks]


def _atom_plan(shape: tuple[int, ...]) -> list[tuple[int, tuple[int, ...]]]:
    """(atom, edges) pairs for a kernel whose byte edges read the class bitsets `shape`: the
    atoms are the non-empty class bitsets that every edge reads whole or not at all, and
    `edges` the positions in `shape` of the edges reading an atom. When the distinct bitsets
    are disjoint (a string's inside: plain characters, backslash, quote), they are the atoms."""
    positions: dict[int, list[int]] = {}
    union = 0
    disjoint = True
    for i, bits in enumerate(shape):
        same = positions.get(bits)
        if same is None:
            disjoint = disjoint and not union & bits
            union |= bits
            positions[bits] = [i]
        else:
            same.append(i)
    if disjoint:
        return [(bits, tuple(same)) for bits, same in positions.items()]
    distinct = list(positions)
    atoms = [union] if union else []  # an empty kernel (only ACCEPT) has no way on
    for bits in distinct:
        cut = []
        for a in atoms:
            inside = a & bits
            if inside and inside != a:
                cut.append(inside)
                cut.append(a & ~bits)
            else:
                cut.append(a)
        atoms = cut
    plan = []
    for a in atoms:
        low = a & -a  # any class of the atom decides which edges read it
        plan.append((a, tuple(i for i, bits in enumerate(shape) if bits & low)))
    return plan


def remove_dead_states(trans: np.ndarray, accept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop the states that cannot reach an accepting state (their edges become -1) and renumber
    the rest keeping their order; state 0 stays the start. The live states are found by a
    backward search from the accepting ones (`corral.automata.graph.distances_to`).

    Args:
        trans: int32 `[n_states, n_classes]`, -1 dead. accept: bool `[n_states]`.
    Returns:
        `(trans, accept)` of the live states.
    Raises:
        EmptyLanguageError: the start state cannot reach acceptance.
    """
    n = trans.shape[0]
    sources, targets = table_edges(trans)
    live = distances_to(n, sources, targets, accept) >= 0
    if not live[0]:
        raise EmptyLanguageError("the pattern matches no string")
    new_id = np.full(n + 1, -1, dtype=np.int32)  # index -1 (dead) maps to -1
    new_id[:n][live] = np.arange(int(live.sum()), dtype=np.int32)
    return new_id[trans[live]], accept[live]
