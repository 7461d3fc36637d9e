"""`corral.automata.graph` against a plain breadth-first search written out in Python."""

from collections import deque

import corral.automata.graph as graph_module
import numpy as np
from corral.automata.graph import distances_to, reachable_from
from hypothesis import given
from hypothesis import strategies as st


def _bfs_to(n, edges, goals):
    dist = [-1] * n
    queue = deque(s for s in range(n) if goals[s])
    for s in queue:
        dist[s] = 0
    while queue:
        t = queue.popleft()
        for s, u in edges:
            if u == t and dist[s] < 0:
                dist[s] = dist[t] + 1
                queue.append(s)
    return dist


graphs = st.integers(1, 12).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=40),
        st.lists(st.booleans(), min_size=n, max_size=n),
    )
)


@given(graphs)
def test_distances_match_breadth_first_search(graph):
    n, edges, goals = graph
    sources = np.array([s for s, _ in edges], dtype=np.int32)
    targets = np.array([t for _, t in edges], dtype=np.int32)
    got = distances_to(n, sources, targets, np.array(goals))
    assert got.tolist() == _bfs_to(n, edges, goals)


@given(graphs)
def test_scipy_search_of_large_graphs_matches_breadth_first_search(graph):
    """Graphs past `SMALL_GRAPH_EDGES` go to SciPy: force that path on the same graphs."""
    n, edges, goals = graph
    sources = np.array([s for s, _ in edges], dtype=np.int32)
    targets = np.array([t for _, t in edges], dtype=np.int32)
    saved = graph_module.SMALL_GRAPH_EDGES
    graph_module.SMALL_GRAPH_EDGES = -1
    try:
        got = distances_to(n, sources, targets, np.array(goals))
    finally:
        graph_module.SMALL_GRAPH_EDGES = saved
    assert got.tolist() == _bfs_to(n, edges, goals)


@given(graphs)
def test_reachable_is_distance_from_the_start(graph):
    n, edges, _ = graph
    sources = np.array([s for s, _ in edges], dtype=np.int32)
    targets = np.array([t for _, t in edges], dtype=np.int32)
    got = reachable_from(n, sources, targets, 0)
    # reachable from 0 == 0 reaches them == in the reversed graph, they reach 0
    goals = [s == 0 for s in range(n)]
    expected = [d >= 0 for d in _bfs_to(n, [(t, s) for s, t in edges], goals)]
    assert got.tolist() == expected
