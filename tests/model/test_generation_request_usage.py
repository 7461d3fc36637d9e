"""`GenerationResult.cached_tokens` (OpenAI's `usage.prompt_tokens_details.cached_tokens`):
the prompt tokens the prefix cache gave a request, re-derived from the prompts it shares a
prefix with."""

from __future__ import annotations

from corral.kernels import SamplingParams
from corral.model.generate import MIN_SHARED, GenerationRequest, generate
from fake_model import FakeModel
from hypothesis import given, settings
from hypothesis import strategies as st

IDS = st.integers(0, 255)  # single bytes: no EOS, no special token


def shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=60, deadline=None)
@given(
    shared=st.lists(IDS, max_size=40),
    first=st.lists(IDS, min_size=1, max_size=8),
    second=st.lists(IDS, min_size=1, max_size=8),
    batch_size=st.sampled_from([1, 2]),
    prefix_cache=st.booleans(),
)
def test_cached_tokens_are_the_prefix_shared_with_an_earlier_prompt(
    shared, first, second, batch_size, prefix_cache
):
    """Two requests whose prompts share a prefix, one after the other (batch_size 1: the second
    finds the first's prompt in a freed slot) or together (the second copies it once the first's
    pass has run): the first reuses nothing; the second the shared prefix when it is at least
    `MIN_SHARED` tokens, never its last token (whose logits are needed); 0 without the prefix
    cache."""
    a, b = shared + first, shared + second
    requests = [GenerationRequest(p, 3, SamplingParams(temperature=0)) for p in (a, b)]
    model = FakeModel(context_length=128)
    one, two = generate(model, requests, batch_size, prefix_cache=prefix_cache)
    reused = min(shared_prefix(a, b), len(b) - 1)
    expected = reused if prefix_cache and reused >= MIN_SHARED else 0
    assert (one.cached_tokens, two.cached_tokens) == (0, expected)
