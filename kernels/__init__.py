"""corral.kernels: token masks over a byte trie of the vocabulary, walked by Numba, and the masked
sampler (docs/design.md section 4).

- `Vocabulary`: token id -> raw bytes (None for specials) and the EOS ids.
- `TokenIndex(dfa, vocabulary)`: packed masks per DFA state, `next_state`, `token_distance`
  (the fewest tokens to acceptance) and `mask_within_tokens` (budget-aware ending).
- `LazyTokenIndex(lazy_dfa, vocabulary)`: the same masks on a DFA made on demand
  (`corral.automata.lazy`): a fresh grammar's first mask without its whole DFA; no budget.
- `Constraint(index)`: one answer's matcher: `mask(tokens_left=None)`, `advance(token)`,
  `advance_bytes(data)`, `tokens_to_complete()`, `forced_bytes()` (jump-forward),
  `is_complete()`, `done`, `copy()`.
- `SamplingParams`, `sample_batch` (a batch's `SampleRow`s in one Numba call, a `BatchSample`),
  `sample`, `top_logprobs`, `constrained_sample`, `constrained_sample_batch`, `apply_mask`.
"""

import os

# Numba's parallel kernels (OpenMP threading layer) and BLAS alternate inside every forward pass,
# and other processes may share the cores: an idle thread that keeps polling takes a core from
# the threads that have work. Both libraries read their variable once, when they load.
# - libgomp's default lets Numba's idle worker spin for long, which starves BLAS's threads on
#   a small machine (bench/model.py, 2 cores: float32 decode at batch 1 fell from 28 to 4
#   tokens/s). Unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT, workers sleep (PASSIVE)
#   after a bounded spin of GOMP_SPINCOUNT=3000 polls (libgomp: an explicit count overrides the
#   policy's). A decode step opens some 150 parallel regions with Python between them; on a
#   virtual machine whose idle vCPU halts at once (cpuidle haltpoll, guest_halt_poll_ns=0, as
#   here) waking a sleeping worker took about 70 us, more than a batch-1 product itself (10-30
#   us), so a batch-1 step on 2 threads was slower than on one (18.7 against 15.7 ms). Alone on
#   the 2 cores, `bench/threads.py --environments 1000:4 3000:4 10000:4 30000:4 --rounds 3`
#   gave, as times spin 1000's tokens/s (prefill, batch 1, 8, 32, 64): spin 3000 0.99, 1.55,
#   1.20, 1.03, 1.05; 10000 1.01, 1.60, 1.19, 1.12, 1.05; 30000 0.99, 1.64, 1.15, 1.15, 1.03.
#   With two busy loops on the cores (`--environments 1000:4 3000:4 P:4 --rounds 3`) spin
#   3000 gave 0.88, 0.89, 0.82, 1.01, 1.12 times spin 1000's; earlier, shared (load 4-10), spin
#   1000 gave 0.41-1.01 and spin 10000 0.30-0.89 times PASSIVE's, spin 100000 0.09-0.46: 3000
#   takes nearly all of the gain alone and loses little more than 1000 when shared. On float32
#   weights (the starvation case; `bench/threads.py --weights float32 --rounds 3`, shared) spin
#   1000 against none, both with the timeout below: prefill 49.0 / 28.3, batch 1 10.2 / 12.8,
#   8 17.1 / 23.9, 32 59.2 / 32.7, 64 64.3 / 74.2.
# - OpenBLAS's idle threads poll for about 2^28 cycles after each call; at
#   OPENBLAS_THREAD_TIMEOUT=4 they sleep at once, unless the user set it. With other work on the
#   2 cores, `bench/threads.py --weights float32 --rounds 3` (BLAS does the float32 path's
#   decode) ran 1.9-7.5x faster with it (prefill 1.94, batch 1 7.54, 8 4.18, 32 2.87, 64 1.94
#   times without it); the default blocks path, whose prefill is its one BLAS work, prefilled
#   1.8x faster (`bench/threads.py --environments P:4 1000:4 P:-`) and decoded as fast (0.99-1.02).
#   OpenBLAS reads it when NumPy loads it, so this only takes effect when corral.kernels is
#   imported before NumPy: the `corral` command does so (corral.tools imports it first); a
#   library user sets OPENBLAS_THREAD_TIMEOUT=4 in the environment (or imports corral.kernels
#   first). tests/conftest.py runs OpenBLAS on one thread, which has no idle threads.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["GOMP_SPINCOUNT"] = "3000"
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

# Numba's vectorized loops in zmm registers where the CPU has AVX-512 (an import for its effect:
# it sets NUMBA_CPU_FEATURES before Numba is first imported; see the module)
import corral.kernels.vector_width  # noqa: E402, F401, I001

from corral.kernels.masks.constraint import Constraint  # noqa: E402
from corral.kernels.errors import NoTokenAllowedError, TokenNotAllowedError, VocabularyError
from corral.kernels.masks.index import (
    EAGER_LIMIT_BYTES,
    TokenIndex,
    choose_mode,
    few_allowed_ids,
    unpack_ids,
)
from corral.kernels.masks.lazy_index import LazyTokenIndex
from corral.kernels.masks.sampling import (
    GREEDY,
    BatchSample,
    SampleRow,
    SamplingParams,
    apply_mask,
    constrained_sample,
    constrained_sample_batch,
    sample,
    sample_batch,
    top_logprobs,
)
from corral.kernels.masks.trie import Trie, build_trie
from corral.kernels.masks.vocabulary import Vocabulary

__all__ = [
    "BatchSample",
    "EAGER_LIMIT_BYTES",
    "GREEDY",
    "Constraint",
    "LazyTokenIndex",
    "NoTokenAllowedError",
    "SampleRow",
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
    "few_allowed_ids",
]
