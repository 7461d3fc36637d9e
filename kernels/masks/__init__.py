"""corral.kernels.masks: token masks over a byte trie of the vocabulary and the masked sampler
(docs/design.md section 4): the vocabulary's trie, each DFA state's packed mask, budget masks,
a lazy trigger's budget rule, one answer's matcher (`Constraint`) and the sampler's kernel."""

from corral.kernels.jit_cache import announce_compiles

announce_compiles(__name__, "the token masks' Numba kernels")
