"""The transformers integration's parameters: whatever `logits_processor` is given, of the
wrong type or out of range, it is refused up front (TypeError, ValueError, or VocabularyError
for an EOS id past the vocabulary) with a message naming the parameter, never a crash
mid-generation (`max_new_tokens="5"` was a comparison's TypeError at the first step) nor a
silently ignored value (`eos_token_id` beside a `vocabulary`); what it accepts runs a step of
generation. The oracle of what is good is written here, apart from corral's checks."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pytest

pytest.importorskip("transformers", reason="transformers is not installed (corral[transformers])")
import torch  # noqa: E402
from corral.automata import ConstrainError  # noqa: E402
from corral.integrations.huggingface import hf_vocabulary, logits_processor  # noqa: E402
from corral.kernels import Vocabulary, VocabularyError  # noqa: E402
from corral.model.loading import default_model_folder  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from parameter_oracle import is_int, is_json  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

FIELDS = ["tokenizer", "regex", "schema", "max_new_tokens", "eos_token_id", "vocabulary"]
BYTES = Vocabulary(tuple(bytes([b]) for b in range(256)) + (None,), (256,))  # another model's

ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.integers(2**31, 2**65),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["5", "[0-9]+", "", '{"type": "integer"}', "(", "{"]),
    st.binary(max_size=3),
    st.lists(st.integers(-1, 3) | st.sampled_from(["a", "[0-9]", 2.5]), max_size=2),
    st.tuples(st.sampled_from([{"type": "integer"}, "[a-c]", 7])),
    st.dictionaries(
        st.sampled_from(["type", "minimum"]), st.sampled_from(["integer", 3]), max_size=2
    ),
    st.sampled_from([np.int64(5), np.int32(0), np.float32(5.0)]),
    st.just(BYTES),
    st.just(object()),
)


@pytest.fixture(scope="module")
def tokenizer():
    return PreTrainedTokenizerFast.from_pretrained(str(default_model_folder(progress=False)))


@pytest.fixture(scope="module")
def vocabulary(tokenizer):
    return hf_vocabulary(tokenizer)


def valid(field: str, value, tokenizer, vocabulary) -> bool:
    """Whether `value` is good for `field`, the others being the base call's (a regex, no
    budget, no EOS id, the tokenizer's vocabulary; with `eos_token_id` drawn, no vocabulary,
    so that the id is read). A pattern or schema outside the subset is a ConstrainError,
    checked apart: here a str is a good type for either."""
    if field == "tokenizer":
        return value is tokenizer  # its backend names no EOS id: eos_token_id is needed
    if field == "regex":  # None: the base call's schema is then the grammar
        items = value if isinstance(value, list | tuple) else [value]
        return value is None or bool(items) and all(isinstance(r, str) for r in items)
    if field == "schema":
        items = value if isinstance(value, list | tuple) else [value]
        return bool(items) and all(
            isinstance(s, dict | bool) or isinstance(s, str) and is_json(s) for s in items
        )
    if field == "max_new_tokens":
        return value is None or is_int(value) and value >= 1
    if field == "eos_token_id":
        if value is None:
            return True
        many = isinstance(value, Iterable) and not isinstance(value, str | bytes | dict)
        ids = list(value) if many else [value]
        return bool(ids) and all(is_int(e) and 0 <= e < vocabulary.size for e in ids)
    if field == "vocabulary":
        return value is None or value is vocabulary
    raise AssertionError(field)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    field=st.sampled_from(FIELDS),
    value=ANYTHING | st.sampled_from(["<tokenizer>", "<backend>", "<vocabulary>"]),
)
def test_every_parameter_is_checked_up_front(tokenizer, vocabulary, field, value):
    named = {"<tokenizer>": tokenizer, "<backend>": tokenizer.backend_tokenizer}
    value = (
        (named | {"<vocabulary>": vocabulary}).get(value, value)
        if isinstance(value, str)
        else value
    )
    call = {"tokenizer": tokenizer, "regex": "[0-9]{1,3}", "max_new_tokens": None}
    call["vocabulary"] = None if field in ("tokenizer", "eos_token_id") else vocabulary
    call[field] = value
    if field == "schema":
        call["regex"] = None
    if field == "regex" and value is None:
        call["schema"] = {"type": "integer"}
    good = valid(field, value, tokenizer, vocabulary)
    try:
        try:
            processors = logits_processor(**call)
        except VocabularyError:
            raise
        except ConstrainError as error:  # a grammar outside the subset names its own fault
            assert good, (field, value, error)
            return
    except (TypeError, ValueError, VocabularyError) as error:
        assert not good, (field, value, error)
        names = {field, "schema"} if field == "regex" else {field, "EOS id"}
        assert any(name in str(error) for name in names), error
        return
    assert good, (field, value)
    # accepted means it runs: two steps, as `generate` calls the processor
    processor = processors[0]
    rows = len(processor.rows.indexes)
    prompt = torch.tensor([tokenizer.encode("hi")] * rows)
    scores = torch.zeros(rows, len(tokenizer))
    first = processor(prompt, scores)
    token = first.argmax(-1, keepdim=True)
    processor(torch.cat([prompt, token], 1), scores)
