"""The canonical byte DFA (docs/design.md section 2): a dense transition table over bytes.

`trans[s, b]` is the state reached from state `s` on byte `b`, or -1 (dead). Every state can reach
an accepting state; state 0 is the start; states are numbered breadth-first taking bytes 0..255 in
order, so equal languages give identical arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from corral.automata.graph import distances_to, table_edges

DEAD = -1


@dataclass(frozen=True, eq=False)
class Dfa:
    """A minimal, canonically numbered byte DFA, as the compilers build it. A stitched one
    (`corral.automata.stitch`) is neither minimal nor canonical: code reading a `Dfa` relies
    only on its transitions, its accepting states and every state being live.

    Attributes:
        trans: int32 `[n_states, 256]`; `trans[s, b]` is the next state, -1 when dead.
        accept: bool `[n_states]`; True where the bytes read so far are in the language.
    """

    trans: np.ndarray
    accept: np.ndarray

    @property
    def n_states(self) -> int:
        """Number of (live) states."""
        return int(self.trans.shape[0])

    @property
    def n_live_edges(self) -> int:
        """Number of (state, byte) pairs whose transition is not dead."""
        return int(np.count_nonzero(self.trans >= 0))

    def step(self, state: int, data: bytes) -> int:
        """The state reached from `state` after reading `data`; -1 (dead) stays dead."""
        for b in data:
            if state < 0:
                return DEAD
            state = int(self.trans[state, b])
        return state

    def matches(self, data: bytes) -> bool:
        """True when the whole of `data` is in the language (a fullmatch)."""
        state = self.step(0, data)
        return state >= 0 and bool(self.accept[state])

    def distance_to_accept(self) -> np.ndarray:
        """int32 `[n_states]`: the fewest bytes that lead from each state to an accepting state
        (0 in accepting states). A breadth-first search over reversed edges
        (`corral.automata.graph.distances_to`), O(n_states * 256)."""
        sources, targets = table_edges(self.trans)
        return distances_to(self.n_states, sources, targets, self.accept)

    def sample(self, rng: np.random.Generator, stop_probability: float = 0.3) -> bytes:
        """A random string of the language: a walk over live edges that, in an accepting state,
        stops with `stop_probability` (always when nothing leads on). Used by tests and
        `corral compile` to show members of the language. Walks longer than 64 bytes steer
        towards acceptance by always taking an edge that shortens the distance to it."""
        dist = self.distance_to_accept()
        state, out = 0, bytearray()
        while True:
            row = self.trans[state]
            live = np.flatnonzero(row >= 0)
            if self.accept[state] and (len(live) == 0 or rng.random() < stop_probability):
                return bytes(out)
            if len(out) > 64:
                closer = live[dist[row[live]] < dist[state]]
                live = closer if len(closer) else live
            b = int(rng.choice(live))
            out.append(b)
            state = int(row[b])
