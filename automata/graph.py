"""Graph searches over automaton states, on `scipy.sparse.csgraph` (one helper for every
distance and reachability question: DFA states to acceptance, token-graph distances, dead-state
removal).

States are numbered 0..n_states-1 and edges are given as two parallel int arrays (`sources[k]`
-> `targets[k]`); duplicate edges are allowed and count once.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import breadth_first_order, dijkstra

SMALL_GRAPH_EDGES = 1024
"""Graphs with at most this many edges are searched in plain Python (`distances_to`)."""


def _breadth_first_to(
    n_states: int, sources: np.ndarray, targets: np.ndarray, starts: np.ndarray
) -> np.ndarray:
    """`distances_to` by a level-by-level search over the reversed edges, in plain Python."""
    order = np.argsort(targets, kind="stable")
    into = np.searchsorted(targets[order], np.arange(n_states + 1)).tolist()
    tails = sources[order].tolist()
    dist = [-1] * n_states
    frontier = starts.tolist()
    for s in frontier:
        dist[s] = 0
    level = 0
    while frontier:
        level += 1
        reached = []
        for s in frontier:
            for t in tails[into[s] : into[s + 1]]:
                if dist[t] < 0:
                    dist[t] = level
                    reached.append(t)
        frontier = reached
    return np.array(dist, dtype=np.int32)


def _graph(n_states: int, sources: np.ndarray, targets: np.ndarray) -> csr_matrix:
    ones = np.ones(len(sources), dtype=np.float32)
    return csr_matrix((ones, (sources, targets)), shape=(n_states, n_states))


def distances_to(
    n_states: int, sources: np.ndarray, targets: np.ndarray, goals: np.ndarray
) -> np.ndarray:
    """int32 `[n_states]`: the fewest edges from each state to any state where `goals` (bool
    `[n_states]`) is True; 0 on a goal, -1 where no goal can be reached.

    A multi-source breadth-first search over the reversed edges (`scipy.sparse.csgraph.dijkstra`
    with `unweighted=True, min_only=True`; in plain Python up to `SMALL_GRAPH_EDGES` edges,
    where building SciPy's matrix costs more than the search), O(n_states + n_edges).
    """
    dist = np.full(n_states, -1, dtype=np.int32)
    starts = np.flatnonzero(goals)
    if len(starts) == 0 or n_states == 0:
        return dist
    if len(sources) <= SMALL_GRAPH_EDGES:
        return _breadth_first_to(n_states, sources, targets, starts)
    reverse = _graph(n_states, targets, sources)
    found = dijkstra(reverse, directed=True, indices=starts, unweighted=True, min_only=True)
    finite = np.isfinite(found)
    dist[finite] = found[finite].astype(np.int32)
    return dist


def reachable_from(
    n_states: int, sources: np.ndarray, targets: np.ndarray, start: int = 0
) -> np.ndarray:
    """bool `[n_states]`: the states reachable from `start` (itself included).
    `scipy.sparse.csgraph.breadth_first_order`, O(n_states + n_edges)."""
    seen = np.zeros(n_states, dtype=bool)
    order = breadth_first_order(
        _graph(n_states, sources, targets), start, directed=True, return_predecessors=False
    )
    seen[order] = True
    return seen


def true_cells(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) int64 of the True cells of a 2-D bool array, in row-major order:
    `np.nonzero(mask)`, through one flat index (quicker than `np.nonzero` of a 2-D array).
    O(cells) vectorized."""
    return np.divmod(mask.ravel().nonzero()[0], mask.shape[1])  # methods: no Python wrapper


def live_cells(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) int64 of the live cells (>= 0) of a 2-D transition table, in row-major
    order: each live edge's state and symbol (`true_cells`)."""
    return true_cells(table >= 0)


def table_edges(trans: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The live edges of a transition table int `[n_states, n_symbols]` (-1 dead) as
    `(sources, targets)`, int32 arrays, sorted by source, without an edge that repeats the one
    before it (a run of symbols of a row to one target, most of a byte table's edges, is one
    edge: the searches here count an edge once). O(n_states x n_symbols) vectorized."""
    sources, symbols = live_cells(trans)
    targets = trans[sources, symbols]
    keep = np.ones(len(targets), bool)
    keep[1:] = (targets[1:] != targets[:-1]) | (sources[1:] != sources[:-1])
    return sources[keep].astype(np.int32), targets[keep].astype(np.int32)
