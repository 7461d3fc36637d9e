"""The fields accepted because they cannot change the answer (`user`, `safety_identifier`,
`prompt_cache_key`, `metadata`) are accepted only with values OpenAI takes, else refused with a
400 naming the field (and a metadata value's key): any JSON value, checked against OpenAI's
rules written here independently. A batch's `metadata` is checked alike."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from corral.tools import ToolError, parse_tool_request
from corral.tools.batch_service import BatchService
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ASK = [{"role": "user", "content": "hi"}]
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
)
texts = st.text(max_size=80) | st.text(min_size=500, max_size=530)
json_values = st.recursive(
    scalars | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
)
metadata_like = st.dictionaries(
    st.text(max_size=70), st.text(max_size=20) | texts | json_values, max_size=18
)


def openai_takes(name: str, value) -> tuple[bool, set[str]]:
    """Whether OpenAI takes `value` for field `name` (null: absent), and the params a refusal
    may name."""
    if value is None:
        return True, set()
    if name == "metadata":
        if not isinstance(value, dict) or len(value) > 16:
            return False, {"metadata"}
        for key, item in value.items():
            if len(key) > 64:
                return False, {"metadata"}
            if not isinstance(item, str) or len(item) > 512:
                return False, {f"metadata.{key}"}
        return True, set()
    ok = isinstance(value, str) and (name != "safety_identifier" or len(value) <= 64)
    return ok, {name}


def outcome(call) -> tuple[bool, str | None, ToolError | None]:
    try:
        call()
    except ToolError as error:
        return False, error.param, error
    return True, None, None


@SETTINGS
@given(
    name=st.sampled_from(["user", "safety_identifier", "prompt_cache_key", "metadata"]),
    value=json_values | metadata_like,
)
def test_a_no_effect_field_takes_what_openai_takes(name, value):
    takes, params = openai_takes(name, value)
    accepted, param, error = outcome(lambda: parse_tool_request({"messages": ASK, name: value}))
    assert accepted == takes, (name, value, error)
    if not accepted:
        assert error.status == 400 and param in params, (param, params, error.message)
        assert param.split(".")[0] in error.message


@pytest.fixture(scope="module")
def service_and_file(tmp_path_factory):
    """A batch service (its engine never runs: a batch is only created) and a batch file's id."""
    engine = SimpleNamespace(model_name="m")  # what creating a batch reads of the engine
    thread = SimpleNamespace(background=None)
    service = BatchService(engine, thread, tmp_path_factory.mktemp("batches"), max_len=64)
    line = b'{"custom_id": "a", "body": {"messages": [{"role": "user", "content": "hi"}]}}\n'
    return service, service.create_file(line, "in.jsonl", "batch")["id"]


@SETTINGS
@given(value=json_values | metadata_like)
def test_a_batchs_metadata_takes_what_openai_takes(service_and_file, value):
    service, file_id = service_and_file
    takes, params = openai_takes("metadata", value)
    body = {
        "input_file_id": file_id,
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
        "metadata": value,
    }
    accepted, param, error = outcome(lambda: service.create_batch(body))
    assert accepted == takes, (value, error)
    if not accepted:
        assert param in params, (param, params, error.message)
