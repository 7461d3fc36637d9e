"""The Python API's parameters (docs/python.md): whatever a `GenerationRequest` field or a
`generate` argument holds, of the wrong type or out of range, it is refused up front with an
error naming it, never a crash from deep inside (NumPy's seed parser, an attribute missing
mid-step) or a hang; a request of good values runs."""

from __future__ import annotations

import numbers
from collections.abc import Mapping

import pytest
from corral.kernels import SamplingParams
from corral.model.errors import RequestError
from corral.model.generate import GenerationRequest, GenerationStats, Generator, generate
from fake_model import TOKENS, FakeModel
from hypothesis import given, settings
from hypothesis import strategies as st

CONTEXT = 64
V = len(TOKENS)
PROMPT = [1, 2, 3]
MAX_TOKENS = 4  # the base request's: a field drawn replaces it
FIELDS = [
    "prompt_ids", "max_tokens", "params", "seed", "stop", "constraint", "trigger",
    "budget_aware", "logit_bias", "top_logprobs", "jump_forward", "allowed_mass", "thought",
    "thinking_budget", "prelude",
]  # fmt: skip
PARAM = {"prompt_ids": "messages"}  # the OpenAI name an error's `param` gives, if not the field

# values of every kind: wrong types, and integers, floats and strings out of any range
ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 70),
    st.integers(2**64 - 2, 2**66),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.lists(st.integers(-2, V + 1) | st.text(max_size=2) | st.floats(), max_size=3),
    st.tuples(st.text(max_size=2)),
    st.dictionaries(
        st.integers(-2, V + 1) | st.text(max_size=2),
        st.floats(-150, 150) | st.text(max_size=1) | st.booleans(),
        max_size=2,
    ),
    st.just(SamplingParams()),
    st.just(object()),
)


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def valid(field: str, value) -> bool:
    """The oracle: whether `value` is a good value of `field` in a request whose other fields
    are the defaults (no constraint, no thought), a prompt of 3 tokens, context 64."""
    if field == "prompt_ids":
        ids = value if isinstance(value, list | tuple) else None
        return bool(ids) and all(is_int(t) and 0 <= t < V for t in ids)
    if field == "max_tokens":
        return value is None or is_int(value) and 1 <= value <= CONTEXT - len(PROMPT)
    if field == "params":
        return isinstance(value, SamplingParams)
    if field == "seed":
        return value is None or is_int(value) and 0 <= value < 2**64
    if field == "stop":
        return isinstance(value, list | tuple) and all(isinstance(s, str) and s for s in value)
    if field in ("budget_aware", "jump_forward", "allowed_mass"):
        return isinstance(value, bool)
    if field == "logit_bias":
        if value is None:
            return True
        return isinstance(value, Mapping) and all(
            is_int(t)
            and 0 <= t < V
            and isinstance(b, numbers.Real)
            and not isinstance(b, bool)
            and -100 <= b <= 100
            for t, b in value.items()
        )
    if field == "top_logprobs":
        return value is None or is_int(value) and 0 <= value <= 20
    # constraint, trigger, thought, thinking_budget, prelude: only None without a constraint
    # and a thought (a trigger needs a constraint, a budget and a prelude a thought)
    return value is None


@settings(max_examples=400, deadline=None)
@given(field=st.sampled_from(FIELDS), value=ANYTHING)
def test_a_bad_field_is_refused_at_submit_naming_it(field, value):
    """The kind: any field, any value. `submit` refuses a bad one with a `RequestError` (a
    ValueError) whose `param` and message name the field; a good one runs to the end."""
    fields = {"prompt_ids": PROMPT, "max_tokens": MAX_TOKENS} | {field: value}
    engine = Generator(FakeModel(context_length=CONTEXT), batch_size=1)
    try:
        engine.submit(GenerationRequest(**fields))
    except RequestError as error:
        assert not valid(field, value), error
        assert error.param == PARAM.get(field, field), (error.param, str(error))
        assert field in str(error), str(error)
        assert not engine.has_work
        return
    assert valid(field, value), (field, value)
    finished = []
    while engine.has_work:
        finished += engine.step()
    assert len(finished) == 1


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(FIELDS), value=ANYTHING)
def test_a_bad_field_is_refused_by_generate_naming_it(field, value):
    """The same through `generate`, which sizes its engine from the requests first."""
    fields = {"prompt_ids": PROMPT, "max_tokens": MAX_TOKENS} | {field: value}
    try:
        (result,) = generate(FakeModel(context_length=CONTEXT), [GenerationRequest(**fields)])
    except RequestError as error:
        assert not valid(field, value), error
        assert error.param == PARAM.get(field, field), (error.param, str(error))
    else:
        assert valid(field, value), (field, value)


def test_a_seed_not_an_integer_names_seed():
    """The fault seen: NumPy's "SeedSequence expects int" from inside the first step."""
    with pytest.raises(RequestError, match=r"^seed must be None or an integer") as caught:
        generate(FakeModel(), [GenerationRequest(PROMPT, 4, seed="x")])
    assert caught.value.param == "seed"


ARGUMENTS = {
    "batch_size": lambda v: is_int(v) and v >= 1,
    "prefix_cache": lambda v: isinstance(v, bool),
    "masked_head": lambda v: isinstance(v, bool),
    "stats": lambda v: v is None,
    "requests": lambda v: isinstance(v, list | tuple) and not v,  # no request is good here
}


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(ARGUMENTS)), value=ANYTHING)
def test_a_bad_generate_argument_is_refused_naming_it(name, value):
    """`generate`'s own arguments: a bad one is a ValueError or TypeError naming it, raised
    before anything runs (a batch_size of 0 used to hang the fake model's engine)."""
    arguments = {"requests": [GenerationRequest(PROMPT, 2)], "stats": GenerationStats()}
    try:
        generate(FakeModel(context_length=CONTEXT), **(arguments | {name: value}))
    except (ValueError, TypeError) as error:
        assert not ARGUMENTS[name](value), error
        assert name in str(error), str(error)
    else:
        assert ARGUMENTS[name](value), (name, value)
