"""Language invariants of DFA states, a fine starting partition for minimization (docs/design.md
section 2, "minimize").

Moore's refinement needs one round per symbol of the shortest string that tells two states
apart, and a long chain (a counted string, an array with `maxItems`, a member list) needs one
round per link; Hopcroft's refinement has no such cost but runs in plain Python. Both compute the
coarsest stable refinement of their starting partition, and that is language equivalence for
any starting partition that (a) splits accepting from other states and (b) never splits two
states that accept the same language. `invariant_labels` gives such a partition, much finer than
{accepting, other}, in a few vectorized steps, after which Moore's rounds settle a chain in a
handful of rounds.

A label is a function of the state's language alone: whether it accepts, the set of byte classes
on which it can move (with the partition it is given), and then the labels met along canonical
paths. A canonical path follows, from each state, one class chosen from the state's language:
the smallest or the largest class it can move on, optionally among the classes whose successor
has another label (a choice that leaves a loop of equal labels). Two equivalent states choose
the same class and reach equivalent states, so their paths meet equal labels in the same order.
The labels along a path are summarized by pointer doubling (the label of the first 2^k states
from the labels of the first 2^(k-1) and of the state 2^(k-1) steps on), log2(n_states) rounds
of NumPy work each.
"""

from __future__ import annotations

import numpy as np

_WEIGHTS = np.random.default_rng(20261201).integers(1, 2**62, 256, dtype=np.int64) | 1
"""Fixed odd int64 weights of the hash of a state's set of live classes (wrapping modulo 2**64;
a collision only merges labels, which keeps the partition coarser than equivalence)."""

_RULES = ((False, True), (True, False), (False, False), (True, True))
"""The canonical paths, as (largest class, only classes whose successor has another label)."""

_MOST_WALKS = 12
"""Most canonical paths walked (three turns of `_RULES`): each walk costs O(n log^2 n), and
Moore's and Hopcroft's refinement finish whatever the walks leave."""


def invariant_labels(trans: np.ndarray, block: np.ndarray) -> np.ndarray:
    """int64 `[n_states]`: labels that refine the partition `block` and never separate two
    states with the same language (module docstring), numbered 0.. arbitrarily.

    Args:
        trans: int32 `[n_states, n_classes]`, -1 dead; every state live (can reach acceptance).
        block: int64 `[n_states]`, a partition no finer than language equivalence that splits
            accepting from other states (for instance a few rounds of Moore's refinement).

    The canonical paths of `_RULES` are walked in turn until a whole turn adds no label, at
    most `_MOST_WALKS` of them. O(n_classes x n_states + n_states log^2 n_states) NumPy work
    per path.
    """
    live = trans >= 0
    classes = _relabel(np.where(live, _WEIGHTS[: trans.shape[1]], 0).sum(axis=1))
    labels = _relabel(block * (_count(classes) + 1) + classes)
    count, idle, turn = _count(labels), 0, 0
    while idle < len(_RULES) and turn < _MOST_WALKS:
        largest, leaving = _RULES[turn % len(_RULES)]
        labels = _along_path(labels, _canonical_successor(trans, labels, largest, leaving))
        idle = idle + 1 if _count(labels) == count else 0
        count, turn = _count(labels), turn + 1
    return labels


def _count(labels: np.ndarray) -> int:
    return int(labels.max()) + 1 if len(labels) else 0


def _relabel(codes: np.ndarray) -> np.ndarray:
    """Dense labels 0.. of int64 codes (equal codes, equal labels)."""
    return np.unique(codes, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _canonical_successor(
    trans: np.ndarray, labels: np.ndarray, largest: bool, leaving: bool
) -> np.ndarray:
    """int64 `[n_states]`: each state's successor on its smallest (or `largest`) live class,
    among the classes whose successor has another label when `leaving`; the state itself when
    it has no such class. O(n_states x n_classes)."""
    n, width = trans.shape
    allowed = trans >= 0
    if leaving:
        allowed &= labels[np.maximum(trans, 0)] != labels[:, None]
    column = width - 1 - np.argmax(allowed[:, ::-1], axis=1) if largest else allowed.argmax(1)
    rows = np.arange(n)
    return np.where(allowed.any(axis=1), trans[rows, column], rows).astype(np.int64)


def _along_path(labels: np.ndarray, successor: np.ndarray) -> np.ndarray:
    """Labels of the sequences label(p), label(successor(p)), ... by pointer doubling: after
    round k a label stands for the first 2^k labels of the sequence. Stops when a round adds no
    label (the sequences are then told apart as far as they ever will be) or after
    log2(n_states) + 1 rounds. O(n_states log n_states) per round."""
    jump = successor
    count = _count(labels)
    for _ in range(int(np.log2(len(labels) + 1)) + 2):
        labels = _relabel(labels * (count + 1) + labels[jump])
        if _count(labels) == count:
            break
        count = _count(labels)
        jump = jump[jump]
    return labels
