"""corral.kernels: token masks over a byte trie of the vocabulary, walked by Numba, and the masked
sampler (DESIGN.md section 4).

- `Vocabulary`: token id -> raw bytes (None for specials) and the EOS ids.
- `TokenIndex(dfa, vocabulary)`: packed masks per DFA state, `next_state`, `token_distance`
  (the fewest tokens to acceptance) and `mask_within_tokens` (budget-aware ending).
- `Constraint(index)`: one answer's matcher: `mask(tokens_left=None)`, `advance(token)`,
  `advance_bytes(data)`, `tokens_to_complete()`, `forced_bytes()` (jump-forward),
  `is_complete()`, `done`, `copy()`.
- `SamplingParams`, `sample_batch` (every row of a batch in one Numba call, a `BatchSample`),
  `sample`, `top_logprobs`, `constrained_sample`, `constrained_sample_batch`, `apply_mask`.
"""

import os

# Numba's parallel kernels (OpenMP threading layer) and BLAS alternate inside every forward pass.
# libgomp's default lets idle workers spin, which starves BLAS's threads on a small machine
# (bench/model.py, 2 cores: float32 decode at batch 1 fell from 28 to 4 tokens/s). Workers
# sleep instead unless the user chose otherwise; libgomp reads this when Numba first loads it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Numba's vectorized loops in zmm registers where the CPU has AVX-512 (an import for its effect:
# it sets NUMBA_CPU_FEATURES before Numba is first imported; see the module)
import corral.kernels.vector_width  # noqa: E402, F401, I001

from corral.kernels.constraint import Constraint  # noqa: E402
from corral.kernels.errors import NoTokenAllowedError, TokenNotAllowedError, VocabularyError
from corral.kernels.index import EAGER_LIMIT_BYTES, TokenIndex, choose_mode, unpack_ids
from corral.kernels.sampling import (
    GREEDY,
    BatchSample,
    SamplingParams,
    apply_mask,
    constrained_sample,
    constrained_sample_batch,
    sample,
    sample_batch,
    top_logprobs,
)
from corral.kernels.trie import Trie, build_trie
from corral.kernels.vocabulary import Vocabulary

__all__ = [
    "BatchSample",
    "EAGER_LIMIT_BYTES",
    "GREEDY",
    "Constraint",
    "NoTokenAllowedError",
    "SamplingParams",
    "TokenIndex",
    "TokenNotAllowedError",
    "Trie",
    "Vocabulary",
    "VocabularyError",
    "apply_mask",
    "build_trie",
    "choose_mode",
    "constrained_sample",
    "constrained_sample_batch",
    "sample",
    "sample_batch",
    "top_logprobs",
    "unpack_ids",
]
