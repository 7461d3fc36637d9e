"""DFA minimization and canonical numbering (docs/design.md section 2: "minimize (Moore or Hopcroft:
split blocks until every state of a block moves to the same block on every class) -> number
breadth-first from the start state, taking bytes 0..255 in order").

Minimization refines by Moore's rounds, one vectorized NumPy pass per round (hashed
signatures, checked once when stable), from {accepting, other}: most schema DFAs settle in a
few rounds. A partition still refining is intersected with the states grouped by (accepting,
fewest bytes to acceptance), a property of each state's language (`initial_blocks`), and
refined further; a partition still refining after `moore_budget` rounds is finished by
Hopcroft's partition refinement in the form Valmari and Lehtinen give for partial DFAs
(A. Valmari, "Fast brief practical DFA minimization", Information Processing Letters 112(6),
2012): two refinable partitions, the
blocks of states and the "cords" of transitions (transitions with the same label, split by the
block of their target), each set used as a splitter once, and a split set's smaller half only
when the set was already used.
O(n_transitions * log n_states), against Moore's one round per state of a chain (a string with
`maxLength: 100` is a chain of about 900 states).

Both steps work over byte classes: `trans` int32 `[n_states, n_classes]` (-1: dead), `accept`
bool `[n_states]`, start state 0, every state reachable and live (it can reach acceptance).
"""

from __future__ import annotations

import math
from itertools import chain

import numpy as np
from corral.automata.dfa import Dfa
from corral.automata.graph import distances_to, live_cells, table_edges
from corral.automata.invariants import invariant_labels


class _Partition:
    """A refinable partition of 0..n-1 (Valmari 2012, section 2): set k holds the elements
    `elements[first[k]:past[k]]`, `where[e]` is e's position and `set_of[e]` its set. `mark`
    marks elements (moves them to the front of their sets) and then cuts every touched set into
    its marked and unmarked parts, the smaller part becoming a new set numbered `len(first)`.
    O(1) per marked element, O(smaller part) per cut."""

    def __init__(self, elements: list[int], set_of: list[int], first: list[int], past: list[int]):
        self.elements = elements
        self.where = [0] * len(elements)
        for i, e in enumerate(elements):
            self.where[e] = i
        self.set_of = set_of
        self.first = first
        self.past = past
        self.marked = [0] * len(first)

    def split(self, items) -> None:
        """Split every set by the elements of `items` (an iterable of distinct elements)."""
        elements, where, set_of, first, past, marked = (
            self.elements, self.where, self.set_of, self.first, self.past, self.marked,
        )  # fmt: skip
        touched = []
        for e in items:
            s = set_of[e]
            i, j = where[e], first[s] + marked[s]
            if i < j:
                continue  # already marked
            f = elements[j]
            elements[i], where[f] = f, i
            elements[j], where[e] = e, j
            if not marked[s]:
                touched.append(s)
            marked[s] += 1
        for s in touched:
            j = first[s] + marked[s]
            marked[s] = 0
            if j == past[s]:
                continue  # every element marked: nothing to split
            z = len(first)
            if j - first[s] <= past[s] - j:  # the marked part is the smaller: it moves out
                first.append(first[s])
                past.append(j)
                first[s] = j
            else:
                first.append(j)
                past.append(past[s])
                past[s] = j
            marked.append(0)
            for i in range(first[z], past[z]):
                set_of[elements[i]] = z


def moore_budget(trans: np.ndarray) -> int:
    """The Moore rounds `equivalence_blocks` tries before Hopcroft's refinement: about as many
    as cost the time Hopcroft's would take (past the budget, a partition pays both), by a cost
    model in microseconds: Hopcroft's 150 plus 0.5 per live edge and halving (m log2 n), a Moore
    round 20 plus 0.015 per state and live edge. Between 8 (a small DFA settles in a few
    cheap rounds, where Hopcroft's fixed cost is the larger) and 1,024 (a large schema's DFA
    may need a hundred rounds, still far cheaper than Hopcroft's refinement in Python)."""
    n = trans.shape[0]
    m = int(np.count_nonzero(trans >= 0))
    hopcroft_us = 150 + 0.5 * m * math.log2(n + 1)
    round_us = 20 + 0.015 * (n + m)
    return int(min(1024, max(8, hopcroft_us / round_us)))


_WEIGHTS = np.random.default_rng(20261130).integers(1, 2**62, 257, dtype=np.int64) | 1
"""Fixed odd int64 weights of the signature hash (one per column; wraps modulo 2**64)."""


def initial_blocks(trans: np.ndarray, accept: np.ndarray) -> np.ndarray:
    """int64 `[n_states]`: states grouped by (accepting, fewest bytes to acceptance), labels
    0... Both are properties of a state's language, so equivalent states share a group: the
    refinements may start here instead of from {accepting, other}, and end at the same
    partition in fewer rounds (the states of a key's literal chain are told apart at once).
    A breadth-first search over reversed edges (`corral.automata.graph.distances_to`),
    O(n_states + live edges)."""
    sources, targets = table_edges(trans)
    distance = distances_to(trans.shape[0], sources, targets, accept).astype(np.int64)
    return _groups(2 * distance + accept)[0]


PLAIN_MOORE_ROUNDS = 24
"""Moore's rounds from {accepting, other} before `initial_blocks` is computed. Its search
(a table scan and a breadth-first search in Python) costs about a dozen rounds, and most
schema DFAs settle in fewer rounds without it; a chain leaves at the first check past three rounds
(`moore_refine`'s chain stop). A DFA still refining after them (a few slowly splitting ones)
pays these rounds on top. The result does not depend on this number."""

PLAIN_MOORE_MAX_STATES = 1000
"""DFAs with more states start from `initial_blocks` at once. A chain (a counted string or
array, the largest DFAs) pays the plain rounds before the chain stop on top of the rest; past
this size they cost more than they save."""

FIRST_MOORE_ROUNDS = 32
"""Moore's rounds from `initial_blocks` (intersected with the partition the plain rounds
left) before the language invariants are computed. Most schema DFAs settle in fewer rounds
from it, each far cheaper than the invariants; a chain (a counted string) is
still sent to them after a few rounds by `moore_refine`'s chain stop, which projects the rounds
left from the pace of the splits."""


def equivalence_blocks(
    trans: np.ndarray, accept: np.ndarray, moore_rounds: int | None = None
) -> np.ndarray:
    """int64 `[n_states]`: the block of each state under language equivalence (two states share
    a block exactly when they accept the same strings), blocks numbered arbitrarily.

    First up to `PLAIN_MOORE_ROUNDS` rounds of Moore's refinement from {accepting, other}
    (most schema DFAs are stable by then; a DFA of more than `PLAIN_MOORE_MAX_STATES` states
    skips them); a partition still refining is intersected with `initial_blocks` and given up
    to `FIRST_MOORE_ROUNDS` of the `moore_rounds` (None: `moore_budget`) rounds, each round
    one vectorized pass (`moore_refine`, O(n_states + live edges)). A partition still refining
    (a long chain, such as a counted string, needs one round per link) is refined by language
    invariants (`corral.automata.invariants`, which tell a chain's links
    apart in a few vectorized steps) and given up to `moore_rounds` more rounds without the
    chain stop; one still refining is finished by Valmari-Lehtinen's Hopcroft refinement
    (module docstring, `hopcroft_refine`, O(m log n) for m live edges), which starts from it.
    All compute the coarsest stable refinement of a partition no finer than language
    equivalence that separates accepting states, so the result does not depend on
    `moore_rounds`."""
    if moore_rounds is None:
        moore_rounds = moore_budget(trans)
    if moore_rounds == 0:
        return hopcroft_refine(trans, initial_blocks(trans, accept))
    initial = initial_blocks(trans, accept) if trans.shape[0] > PLAIN_MOORE_MAX_STATES else None
    if initial is None:
        block, stable = moore_refine(trans, accept, min(moore_rounds, PLAIN_MOORE_ROUNDS))
        if stable:
            return block
        initial = _groups(block * trans.shape[0] + initial_blocks(trans, accept))[0]
    block, stable = moore_refine(trans, accept, min(moore_rounds, FIRST_MOORE_ROUNDS), initial)
    if stable:
        return block
    if moore_rounds > FIRST_MOORE_ROUNDS:
        labels = _groups(invariant_labels(trans, block))[0]
        block, stable = moore_refine(trans, accept, moore_rounds, labels, chain_stop=False)
    return block if stable else hopcroft_refine(trans, block)


def moore_refine(
    trans: np.ndarray,
    accept: np.ndarray,
    max_rounds: int,
    initial: np.ndarray | None = None,
    chain_stop: bool = True,
) -> tuple[np.ndarray, bool]:
    """(block int64 `[n_states]`, stable) after at most `max_rounds` rounds of Moore's
    refinement from `initial` (int64 labels 0, 1, ... `[n_states]`, every label used, of a
    partition that every two equivalent states share a block of and that separates accepting
    from other states, such as `initial_blocks`; None: {accepting, other}): a state's
    signature is its block and, per class, its successor's block (or dead). `stable` is True
    when the returned partition is language equivalence; else it is a partition coarser than
    or equal to it that still separates accepting states, which Hopcroft's refinement can
    finish.

    A round labels each state with a hash of its signature (its label times a fixed weight
    plus, over its live edges, fixed per-class weights times the successor's label, wrapping
    modulo 2**64, the labels themselves being such hashes after the first round); their
    distinct values are counted (one sort) only every `MOORE_CHECK_EVERY` rounds, the
    partition being stable when the count repeats, and grouped then. A collision can only
    merge groups, so every partition stays coarser than or equal to language equivalence, and
    the rounds are not checked one by one: the final partition is checked to be a congruence (every
    state has the signature of its group's first state, `_same_signatures`) that separates
    accepting states. Passing, it is no finer than equivalence and a congruence separating
    acceptance: equivalence itself. On a failed check the rounds go on grouping the full rows
    exactly (`np.unique` over rows). The refinement also stops, unstable, at the first check
    past three rounds when the blocks grew so slowly that the rounds left at that pace (at
    most one per state not yet separated) would pass `max_rounds`: a chain, which Hopcroft's
    refinement finishes faster (unless `chain_stop` is False). O(n_states + runs) per round
    (a run: a row's consecutive classes to one target, summed once), plus a sort of n_states
    labels per check."""
    n = trans.shape[0]
    if initial is None:  # {accepting, other}, labels 0.. every one used
        block = accept.astype(np.int64)
        if block.min() == block.max():  # all accepting or none: one block
            block[:] = 0
    else:
        block = initial
    n_blocks = first_count = int(block.max()) + 1
    # (NumPy's methods rather than its functions here and below: the same operations
    # without the functions' Python wrappers, which cost more than the work on small arrays)
    flat = (trans >= 0).ravel().nonzero()[0]  # row-major: grouped by tail, classes ascending
    tails, classes = np.divmod(flat, trans.shape[1])
    heads = trans.ravel()[flat]
    states = np.arange(n + 1)
    start = tails.searchsorted(states)  # each state's first edge
    # A run of a row's classes to one target (most of a string state's edges) adds
    # (sum of the run's weights) x (the target's label + 2): the same sum, one term a run.
    run = np.empty(len(heads), bool)
    run[:1] = True
    run[1:] = (heads[1:] != heads[:-1]) | (tails[1:] != tails[:-1])
    run_first = run.nonzero()[0]
    weight = _WEIGHTS[1:][classes]
    run_weight = np.add.reduceat(weight, run_first) if len(run_first) else weight
    # Each state's terms, led by one for its own label (weight W0): term k of state s is
    # terms_weight[k] x label[terms_head[k]], and s's terms begin at terms_start[s]; the +2
    # of every run is the constant `offset`. A round is then one gather, one product, one
    # sum per state (`np.add.reduceat`, every state having a term) and one addition.
    runs_start = tails[run_first].searchsorted(states)  # each state's first run
    terms_start = states[:-1] + runs_start[:-1]
    own = np.zeros(n + len(run_first), bool)
    own[terms_start] = True
    others = ~own
    terms_head = np.empty(len(own), np.int64)
    terms_head[own], terms_head[others] = states[:-1], heads[run_first]
    terms_weight = np.empty(len(own), np.int64)
    terms_weight[own], terms_weight[others] = _WEIGHTS[0], run_weight
    twice = np.zeros(len(run_first) + 1, np.int64)  # running sums (wrapping) of 2 x weight
    (2 * run_weight).cumsum(out=twice[1:])
    offset = twice[runs_start[1:]] - twice[runs_start[:-1]]
    label = block
    rounds = 0
    while rounds < max_rounds:
        label = np.add.reduceat(terms_weight * label[terms_head], terms_start)
        label += offset
        rounds += 1
        if rounds % MOORE_CHECK_EVERY and rounds < max_rounds:
            continue
        count = _count_distinct(label)
        if count == n_blocks:  # split nothing since the last check, if no hash collided
            new, first = _groups(label)
            rep = first[new]
            if _same_signatures(new, classes, new[heads], start, tails, rep) and bool(
                (accept == accept[rep]).all()
            ):
                return new, True
            return _exact_refine(trans, _with_accept(new, accept), max_rounds - rounds)
        slow = rounds * (1 + (n - count) / max(count - first_count, 1)) > max_rounds
        if chain_stop and rounds >= 3 and slow:
            return _with_accept(_groups(label)[0], accept), False  # growing like a chain
        n_blocks = count
    return _with_accept(_groups(label)[0], accept), False


MOORE_CHECK_EVERY = 2
"""Moore rounds between two counts of the labels (`moore_refine`): a stable partition is then
seen at most one round late, and the rounds in between cost no sort."""


def _count_distinct(label: np.ndarray) -> int:
    """The number of distinct values of int64 `label` `[n]` (n >= 1); one sort."""
    ordered = label.copy()
    ordered.sort()
    return int(np.count_nonzero(ordered[1:] != ordered[:-1])) + 1


def _groups(label: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group int64 `[n]` numbered 0.. in order of label value, first int64 `[n_groups]`: a
    member of each group) of equal labels; one sort of int64 `[n]`."""
    order = label.argsort()
    ordered = label[order]
    starts = np.empty(len(label), bool)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    group = np.empty(len(label), np.int64)
    group[order] = starts.cumsum() - 1
    return group, order[starts]


def _exact_refine(trans: np.ndarray, block: np.ndarray, max_rounds: int) -> tuple[np.ndarray, bool]:
    """`moore_refine` without hashing, from `block` (a partition separating accepting states,
    coarser than or equal to equivalence): rounds of `_exact_groups`, (block, stable)."""
    n_blocks = int(block.max()) + 1
    for _ in range(max(max_rounds, 1)):
        new = _exact_groups(trans, block)
        count = int(new.max()) + 1
        if count == n_blocks:
            return block, True
        block, n_blocks = new, count
    return block, False


def _with_accept(block: np.ndarray, accept: np.ndarray) -> np.ndarray:
    """int64 labels of the partition `block` with accepting states split from the others."""
    _, labels = np.unique(2 * block + accept, return_inverse=True)
    return labels.reshape(-1).astype(np.int64)


def _same_signatures(block, classes, successor, start, tails, rep) -> bool:
    """True when every state has the signature of `rep[state]` (its hash group's first state):
    the same block, the same number of live edges, and edge by edge the same class and the
    same successor block (`classes`, `successor`: per live edge in row-major order, `tails`
    its state, `start` int `[n_states + 1]` each state's first edge). O(n_states + live
    edges)."""
    degree = start[1:] - start[:-1]
    if not ((block == block[rep]).all() and (degree == degree[rep]).all()):
        return False
    partner = start[rep[tails]] + np.arange(len(tails)) - start[tails]  # the same-rank edge
    return bool((classes == classes[partner]).all() and (successor == successor[partner]).all())


def _exact_groups(trans: np.ndarray, block: np.ndarray) -> np.ndarray:
    """The next Moore partition without hashing: `np.unique` over the full signature rows
    (block, successors' blocks, -1 dead). O(n_states x n_classes log n_states)."""
    labels = np.append(block, -1)
    signature = np.concatenate([block[:, None], labels[np.where(trans >= 0, trans, -1)]], axis=1)
    _, new = np.unique(signature, axis=0, return_inverse=True)
    return new.reshape(-1).astype(np.int64)


def hopcroft_refine(trans: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """int64 `[n_states]`: the coarsest refinement of the partition `initial` (int64 labels
    `[n_states]`, any numbering; at least {accepting, other}) that every state of a block moves
    to the same block on every class: Valmari-Lehtinen's Hopcroft refinement (module
    docstring). O(m log n) for m live edges."""
    n = trans.shape[0]
    tails, labels = live_cells(trans)  # sorted by tail
    heads = trans[tails, labels].astype(np.int64)
    m = len(tails)
    # Initial blocks: the largest first (block 0, which is never used as a splitter: it is
    # implied by the others), then the rest; a block's states keep their order.
    _, label, size = np.unique(initial, return_inverse=True, return_counts=True)
    rank = np.empty(len(size), np.int64)
    rank[np.argsort(-size, kind="stable")] = np.arange(len(size))
    set_of = rank[label.reshape(-1)]
    elements = np.argsort(set_of, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(set_of, minlength=len(size)))])
    blocks = _Partition(
        elements.tolist(), set_of.tolist(), bounds[:-1].tolist(), bounds[1:].tolist()
    )
    # Cords: transitions grouped by label.
    by_label = np.argsort(labels, kind="stable")
    sorted_labels = labels[by_label]
    cuts = (np.flatnonzero(np.diff(sorted_labels)) + 1).tolist()
    cord_first, cord_past = [0, *cuts], [*cuts, m]
    cord_of = np.empty(m, np.int64)
    cord_of[by_label] = np.repeat(np.arange(len(cord_first)), np.diff([*cord_first, m]))
    cords = _Partition(by_label.tolist(), cord_of.tolist(), cord_first, cord_past)
    # Incoming transitions of each state.
    incoming_order = np.argsort(heads, kind="stable")
    incoming_start = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(heads, minlength=n), out=incoming_start[1:])
    ordered, bounds = incoming_order.tolist(), incoming_start.tolist()
    incoming = [ordered[bounds[q] : bounds[q + 1]] for q in range(n)]
    tail = tails.tolist()
    b, c = 1, 0  # next block and next cord to use as a splitter (block 0 is implied)
    while c < len(cords.first):
        blocks.split([tail[t] for t in cords.elements[cords.first[c] : cords.past[c]]])
        c += 1
        while b < len(blocks.first):
            members = blocks.elements[blocks.first[b] : blocks.past[b]]
            cords.split(chain.from_iterable([incoming[q] for q in members]))
            b += 1
    return np.array(blocks.set_of, dtype=np.int64)


def minimize(trans: np.ndarray, accept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The quotient of a DFA by language equivalence (`equivalence_blocks`).

    Args:
        trans: int32 `[n_states, n_classes]`, -1 dead; accept: bool `[n_states]`; start state
            0; every state reachable and live.
    Returns:
        `(trans, accept)` of the minimal DFA, same dtypes, new arrays; the start state's block
        is numbered 0, the others by their first member (a DFA with no two equivalent states
        comes back as it is; `number_breadth_first` makes the form canonical).
    """
    block = equivalence_blocks(trans, accept)
    n_blocks = int(block.max()) + 1
    if n_blocks == trans.shape[0]:  # no two states equivalent (often so for a schema's DFA)
        return trans.copy(), accept.copy()
    # Renumber blocks so the start's is 0, then build the quotient from one member per block.
    _, first = np.unique(block, return_index=True)
    order = np.argsort(first, kind="stable")  # blocks by their first member; state 0 is first
    rank = np.empty(n_blocks, dtype=np.int64)
    rank[order] = np.arange(n_blocks)
    members = first[order]
    block = np.append(rank[block], -1).astype(np.int32)  # at index -1: dead stays dead
    quotient = np.take(block, trans[members])  # np.take: faster than block[...]
    return quotient, accept[members].copy()


def number_breadth_first(trans: np.ndarray, accept: np.ndarray, byte_to_class: np.ndarray) -> Dfa:
    """The canonical `Dfa`: states renumbered in breadth-first order from state 0, visiting each
    state's successors by increasing byte (classes are numbered in order of their smallest byte,
    so visiting classes in order is the same), then expanded from classes to bytes.

    Args:
        trans: int32 `[n_states, n_classes]`; accept: bool `[n_states]`;
        byte_to_class: int32 `[256]`.
    Returns:
        `Dfa` with trans int32 `[n_states, 256]` and accept bool `[n_states]`.
    """
    n = trans.shape[0]
    # Each state's successors in class order: the live edges (row-major, so by state then
    # class), without an edge to the same target as the edge before it (a repeat changes
    # nothing in the search; consecutive ones, a run of classes to one state, are most).
    flat = trans.ravel()
    live = (flat >= 0).nonzero()[0]  # the live cells, row-major
    sources, targets = live // trans.shape[1], flat[live]
    if _is_breadth_first(n, sources, targets):  # as subset construction and `minimize` leave it
        return Dfa(trans.take(byte_to_class, axis=1), accept.astype(bool))  # C order
    keep = np.ones(len(targets), bool)
    keep[1:] = (targets[1:] != targets[:-1]) | (sources[1:] != sources[:-1])
    successors = targets[keep].tolist()
    bounds = np.searchsorted(sources[keep], np.arange(n + 1)).tolist()
    new_id = [-1] * n
    new_id[0] = 0
    order = [0]
    for s in order:  # the list grows while it is read: a breadth-first queue
        for t in successors[bounds[s] : bounds[s + 1]]:
            if new_id[t] < 0:
                new_id[t] = len(order)
                order.append(t)
    new_id.append(-1)  # at index -1: dead stays dead
    new_id = np.array(new_id, dtype=np.int32)
    order_arr = np.array(order, dtype=np.int64)
    renumbered = new_id[trans[order_arr]]  # int32 [n_states, n_classes]
    full = np.take(renumbered, byte_to_class, axis=1)  # int32 [n_states, 256], C order
    return Dfa(full, accept[order_arr].astype(bool))


def _is_breadth_first(n_states: int, sources: np.ndarray, targets: np.ndarray) -> bool:
    """True when the breadth-first numbering of `number_breadth_first` is the identity: read
    row by row (`sources`, `targets`: the live edges in row-major order), the states 1, 2, ...
    first appear in that order, each in the row of a state numbered before it. Subset
    construction numbers its states so, and minimization's quotient (blocks by their first
    member) keeps it: a block's first edge in is its first member's. O(live edges)."""
    if n_states == 1:
        return True
    if len(targets) == 0:
        return False
    seen = np.maximum.accumulate(targets)  # the largest state met so far
    before = np.empty_like(seen)
    before[0] = 0  # state 0 is numbered before any edge is read
    before[1:] = seen[:-1]
    new = targets > before
    return bool(
        seen[-1] == n_states - 1
        and (targets[new] == before[new] + 1).all()
        and (sources[new] < targets[new]).all()
    )
