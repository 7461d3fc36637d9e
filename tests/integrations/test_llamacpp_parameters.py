"""The llama-cpp-python integration's parameters: whatever `logits_processor` is given, of the
wrong type or out of range, it is refused up front (TypeError or ValueError) with a message
naming the parameter, never a crash mid-generation (`max_new_tokens="5"` was a comparison's
TypeError at the first step); what it accepts runs a step of generation. The oracle of what is
good is written here, apart from corral's checks."""

from __future__ import annotations

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
from corral.automata import ConstrainError  # noqa: E402
from corral.integrations.llamacpp import llama_vocabulary, logits_processor  # noqa: E402
from corral.kernels import Vocabulary  # noqa: E402
from corral.model.loading import default_gguf  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from parameter_oracle import is_int, is_json  # noqa: E402

FIELDS = ["llm", "regex", "schema", "max_new_tokens", "vocabulary"]
BYTES = Vocabulary(tuple(bytes([b]) for b in range(256)) + (None,), (256,))  # another model's

ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.integers(2**63, 2**65),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["5", "[0-9]+", "", '{"type": "integer"}', "(", "{"]),
    st.binary(max_size=3),
    st.lists(st.integers(0, 3) | st.text(max_size=2), max_size=2),
    st.dictionaries(
        st.sampled_from(["type", "minimum"]), st.sampled_from(["integer", 3]), max_size=2
    ),
    st.sampled_from([np.int64(5), np.int32(0), np.float32(5.0)]),
    st.just(BYTES),
    st.just(object()),
)


@pytest.fixture(scope="module")
def llm():
    return llama_cpp.Llama(
        model_path=str(default_gguf()), n_ctx=64, n_threads=1, seed=0, verbose=False
    )


@pytest.fixture(scope="module")
def vocabulary(llm):
    return llama_vocabulary(llm)


def valid(field: str, value, llm, vocabulary) -> bool:
    """Whether `value` is good for `field`, the others being the base call's (a regex, no
    budget, the model's vocabulary). A pattern or schema outside the subset is a
    ConstrainError, checked apart: here a str is a good type for either."""
    if field == "llm":
        return value is llm
    if field == "regex":
        return value is None or isinstance(value, str)  # None: then schema is needed
    if field == "schema":  # JSON text is read (json.loads) before it is compiled
        return isinstance(value, dict | bool) or isinstance(value, str) and is_json(value)
    if field == "max_new_tokens":
        return value is None or is_int(value) and value >= 1
    if field == "vocabulary":
        return value is None or value is vocabulary
    raise AssertionError(field)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(FIELDS), value=ANYTHING | st.just("llm") | st.just("vocabulary"))
def test_every_parameter_is_checked_up_front(llm, vocabulary, field, value):
    value = (
        {"llm": llm, "vocabulary": vocabulary}.get(value, value)
        if isinstance(value, str)
        else value
    )
    call = {"llm": llm, "regex": "[0-9]{1,3}", "max_new_tokens": None, "vocabulary": vocabulary}
    call[field] = value
    if field == "schema":
        call["regex"] = None
    if field == "regex" and value is None:
        call["schema"] = {"type": "integer"}
    good = valid(field, value, llm, vocabulary)
    try:
        processors = logits_processor(**call)
    except ConstrainError as error:  # a grammar outside the subset names its own fault
        assert good, (field, value, error)
        return
    except (TypeError, ValueError) as error:
        assert not good, (field, value, error)
        assert field in str(error) or (field == "regex" and "schema" in str(error)), error
        return
    assert good, (field, value)
    # accepted means it runs: two steps, as llama.cpp calls the processor
    prompt = np.array(llm.tokenize(b"hi"), dtype=np.intc)
    scores = np.zeros(llm.n_vocab(), dtype=np.float32)
    first = processors[0](prompt, scores)
    token = int(np.argmax(first))
    processors[0](np.append(prompt, token).astype(np.intc), scores)
