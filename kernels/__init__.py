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
- `SamplingParams`, `sample_batch` (every row of a batch in one Numba call, a `BatchSample`),
  `sample`, `top_logprobs`, `constrained_sample`, `constrained_sample_batch`, `apply_mask`.

Names load on first use (PEP 562), so `import corral.kernels.threads` (whose `configure` must
run before NumPy and Numba load) loads neither.
"""

import importlib

_MODULES = {
    "corral.kernels.masks.constraint": ("Constraint",),
    "corral.kernels.errors": ("NoTokenAllowedError", "TokenNotAllowedError", "VocabularyError"),
    "corral.kernels.masks.index": (
        "EAGER_LIMIT_BYTES",
        "TokenIndex",
        "choose_mode",
        "few_allowed_ids",
        "unpack_ids",
    ),
    "corral.kernels.masks.lazy_index": ("LazyTokenIndex",),
    "corral.kernels.masks.sampling": (
        "GREEDY",
        "BatchSample",
        "SamplingParams",
        "apply_mask",
        "constrained_sample",
        "constrained_sample_batch",
        "sample",
        "sample_batch",
        "top_logprobs",
    ),
    "corral.kernels.masks.trie": ("Trie", "build_trie"),
    "corral.kernels.masks.vocabulary": ("Vocabulary",),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str):
    """The public name `name`, imported from its module on first use."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'corral.kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "BatchSample",
    "EAGER_LIMIT_BYTES",
    "GREEDY",
    "Constraint",
    "LazyTokenIndex",
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
    "few_allowed_ids",
]
