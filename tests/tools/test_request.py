"""Reading chat-completion requests (docs/design.md section 5)."""

import json

import pytest
from corral.tools import ToolError, parse_tool_request
from corral.tools.request import FIELDS, MAX_NESTING, check_model
from example_schemas import WEATHER
from hypothesis import given, settings
from hypothesis import strategies as st

TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
    },
}
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


def body(**fields):
    return {"model": "smollm2", "messages": MESSAGES, **fields}


def refused(request) -> ToolError:
    with pytest.raises(ToolError) as info:
        parse_tool_request(request)
    return info.value


# --- defaults and a named choice ---------------------------------------------------------


def test_defaults_without_tools():
    request = parse_tool_request(json.dumps(body()))
    assert request.tools == ()
    assert request.tool_choice == "none"
    assert request.function_name is None
    assert request.response_format.type == "text"
    assert request.parallel_tool_calls is True
    assert not request.calls_allowed
    assert (request.temperature, request.top_p, request.n) == (1.0, 1.0, 1)
    assert (request.max_tokens, request.seed, request.stop) == (None, None, ())
    assert (request.logprobs, request.top_logprobs, request.logit_bias) == (False, None, ())
    assert request.messages == tuple(MESSAGES)


def test_defaults_with_tools_are_auto_and_parallel():
    request = parse_tool_request(body(tools=[WEATHER, TIME]))
    assert [t.name for t in request.tools] == ["get_weather", "get_time"]
    assert request.tools[0].description == "Current weather in a city."
    assert request.tool_choice == "auto"
    assert request.parallel_tool_calls is True
    assert request.calls_allowed


def test_a_named_choice():
    request = parse_tool_request(
        body(
            tools=[WEATHER, TIME],
            tool_choice={"type": "function", "function": {"name": "get_time"}},
            parallel_tool_calls=False,
        )
    )
    assert request.tool_choice == "function"
    assert request.function_name == "get_time"
    assert request.parallel_tool_calls is False
    assert request.tool("get_time").parameters == TIME["function"]["parameters"]


def test_string_choices():
    for choice in ("none", "auto", "required"):
        assert parse_tool_request(body(tools=[WEATHER], tool_choice=choice)).tool_choice == choice
    assert not parse_tool_request(body(tools=[WEATHER], tool_choice="none")).calls_allowed


def test_schema_property_order_is_kept_from_json_text():
    text = (
        '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":'
        '{"name":"f","parameters":{"type":"object","properties":{"zeta":{"type":"integer"},'
        '"alpha":{"type":"integer"},"mid":{"type":"integer"}}}}}]}'
    )
    request = parse_tool_request(text)
    assert list(request.tools[0].parameters["properties"]) == ["zeta", "alpha", "mid"]


def test_a_tool_without_parameters_takes_an_empty_object():
    request = parse_tool_request(body(tools=[{"type": "function", "function": {"name": "ping"}}]))
    assert request.tools[0].parameters == {"type": "object", "properties": {}}


def test_sampling_fields():
    request = parse_tool_request(
        body(
            max_completion_tokens=20,
            temperature=0,
            top_p=0.5,
            seed=7,
            stop="END",
            n=2,
            presence_penalty=-1,
            frequency_penalty=1.5,
            stream=False,
            logprobs=True,
            top_logprobs=3,
            logit_bias={"5": -100, "17": 2.5},
        )
    )
    assert request.max_tokens == 20
    assert (request.temperature, request.top_p, request.seed, request.stop) == (
        0.0,
        0.5,
        7,
        ("END",),
    )
    assert (request.n, request.presence_penalty, request.frequency_penalty) == (2, -1.0, 1.5)
    assert request.logprobs and request.top_logprobs == 3
    assert request.logit_bias == ((5, -100.0), (17, 2.5))
    assert parse_tool_request(body(max_tokens=5)).max_tokens == 5


def test_response_formats():
    assert parse_tool_request(body(response_format={"type": "text"})).response_format.type == "text"
    fmt = parse_tool_request(body(response_format={"type": "json_object"})).response_format
    assert fmt.type == "json_object"
    schema = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}
    fmt = parse_tool_request(
        body(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "thing", "schema": schema, "strict": True},
            }
        )
    ).response_format
    assert (fmt.type, fmt.name, fmt.schema, fmt.strict) == ("json_schema", "thing", schema, True)


# --- the 400s ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": {"type": "function"}}, "tools"),
        ({"tools": ["get_weather"]}, "tools[0]"),
        (
            {"tools": [{"type": "function", "function": {"description": "no name"}}]},
            "tools[0].function.name",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "has space"}}]},
            "tools[0].function.name",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
            "tools[0].function.parameters",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
            "tools[0].function.parameters",
        ),
        ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
        ({"tools": [WEATHER, TIME, WEATHER]}, "tools[2].function.name"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice.function.name",
        ),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function"}}, "tool_choice.function.name"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
        ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"response_format": {"type": "yaml"}}, "response_format.type"),
        ({"response_format": "json"}, "response_format"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
            "response_format.json_schema.name",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format.json_schema.schema",
        ),
        ({"temperature": 3}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": 1.5}, "max_completion_tokens"),
        ({"seed": True}, "seed"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": [""]}, "stop"),
        ({"n": 0}, "n"),
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"stream": "true"}, "stream"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"logit_bias": [1]}, "logit_bias"),
        ({"logit_bias": {"-1": 1}}, "logit_bias.-1"),
        ({"logit_bias": {"01": 1}}, "logit_bias.01"),
        ({"logit_bias": {"a": 1}}, "logit_bias.a"),
        ({"logit_bias": {"5": 101}}, "logit_bias.5"),
        ({"logit_bias": {"5": "up"}}, "logit_bias.5"),
        ({"seed": 2**63}, "seed"),
        ({"messages": []}, "messages"),
        ({"messages": None}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"reasoning_effort": 5}, "reasoning_effort"),
        ({"reasoning_effort": "bogus"}, "reasoning_effort"),
    ],
)
def test_malformed_requests_are_400s_naming_the_param(fields, param):
    error = refused(body(**fields))
    assert error.status == 400
    assert error.param == param
    assert error.to_json()["error"]["type"] == "invalid_request_error"


def test_a_body_that_is_not_a_json_object_is_a_400():
    assert refused("{not json").status == 400
    assert refused("[1, 2]").code == "invalid_type"


def test_field_errors_say_what_a_client_can_act_on():
    """The kind of the messages a trial found wrong: a nested field's name written once, an
    unknown reasoning_effort told the values, an integer too long said in the request's terms
    (never Python's advice)."""
    streamed = '"stream": true, "stream_options": {"include_usage": "yes"}'
    text = '{"messages": [{"role": "user", "content": "hi"}], ' + streamed + "}"
    from corral.tools.request import streaming_fields

    with pytest.raises(ToolError) as caught:
        streaming_fields(json.loads(text))
    assert caught.value.param == "stream_options.include_usage"
    assert "none, minimal, low, medium, high" in refused(body(reasoning_effort="bogus")).message
    huge = '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1' + "0" * 5000 + "}"
    error = refused(huge)
    assert error.code == "invalid_json" and "5001 digits" in error.message
    assert "sys.set_int_max_str_digits" not in error.message


def test_arguments_that_are_not_json_name_the_message_index():
    messages = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{city: Paris"},
                }
            ],
        },
    ]
    error = refused(body(messages=messages, tools=[WEATHER]))
    assert error.status == 400
    assert error.param == "messages[1].tool_calls[0].function.arguments"
    assert "message 1" in error.message


# --- the 422 ---------------------------------------------------------------------------------


def test_schemas_are_not_compiled_here():
    """A schema the subset refuses passes here: `corral.tools.grammar` refuses it with a 422
    (test_grammar.py) when a grammar uses it."""
    parameters = {"type": "object", "properties": {"s": {"type": "array", "uniqueItems": True}}}
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    request = parse_tool_request(body(tools=[WEATHER, tool]))
    assert request.tool("f").parameters == parameters


def test_image_content_parts_are_a_422():
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    error = refused(body(messages=messages))
    assert (error.status, error.param) == (422, "messages[0].content[0].type")


@pytest.mark.parametrize("tool_choice", [None, "auto", "none", "required"])
def test_an_empty_list_of_tools_or_of_tool_calls_is_refused_as_openai_refuses_it(tool_choice):
    """OpenAI answers `tools: []` and an assistant turn's `tool_calls: []` with a 400
    `empty_array` (leave the field out instead)."""
    fields = {} if tool_choice is None else {"tool_choice": tool_choice}
    error = refused(body(tools=[], **fields))
    assert (error.status, error.param, error.code) == (400, "tools", "empty_array")
    turn = {"role": "assistant", "content": "Hi.", "tool_calls": []}
    messages = [{"role": "user", "content": "Hi"}, turn, {"role": "user", "content": "And?"}]
    error = refused(body(messages=messages, tools=[WEATHER], **fields))
    assert (error.status, error.param) == (400, "messages[1].tool_calls")
    assert error.code == "empty_array" and "minimum length 1" in error.message


# --- nothing accepted and then ignored ------------------------------------------------------


def test_every_field_of_the_table_is_honoured_accepted_or_refused():
    uses = {field.use for field in FIELDS.values()}
    assert uses == {"honoured", "no_effect", "refused"}
    honoured = {name for name, field in FIELDS.items() if field.use == "honoured"}
    assert honoured == {
        "messages", "model", "tools", "tool_choice", "parallel_tool_calls", "response_format",
        "max_completion_tokens", "max_tokens", "temperature", "top_p", "seed", "stop", "n",
        "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "logit_bias",
        "jump_forward", "structured_outputs", "json_object_depth", "allowed_mass",
        "reasoning_effort", "thinking_token_budget",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stream", True),
        ("functions", [{"name": "f", "parameters": {}}]),
        ("function_call", "auto"),
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("modalities", ["text", "audio"]),
        ("prediction", {"type": "content", "content": "x"}),
        ("web_search_options", {}),
        ("verbosity", "low"),
        ("service_tier", "flex"),
        ("service_tier", "priority"),
        ("stream_options", {"include_usage": False}),
        ("stream", 1),
    ],
)
def test_fields_corral_does_not_honour_are_400s_naming_them(field, value):
    error = refused(body(**{field: value}))
    assert (error.status, error.param, error.code) == (400, field, "unsupported_parameter")
    assert f"'{field}'" in error.message


def test_fields_that_cannot_change_the_output_are_accepted():
    accepted = {
        "user": "u-1",
        "safety_identifier": "s",
        "metadata": {"k": "v"},
        "store": False,
        "prompt_cache_key": "k",
        "service_tier": "auto",
        "modalities": ["text"],
        "stream": False,
        "stream_options": None,
        "audio": None,
    }
    for name, value in accepted.items():
        parse_tool_request(body(**{name: value}))
    assert parse_tool_request(body(service_tier="default")).n == 1


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(
    store=JSON,
    metadata=st.none() | st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=16),
)
def test_store_asks_for_nothing_only_as_false(store, metadata):
    """`store: true` asks OpenAI to keep the completion, which corral never does: refused as a
    400 `unsupported_parameter` naming `store`, and so is any value but false or null (oracle:
    OpenAI's definition). `metadata`, the tags of a stored completion, is taken beside a store
    that asks for nothing."""
    fields = {"store": store} if metadata is None else {"store": store, "metadata": metadata}
    if store is None or store is False:
        parse_tool_request(body(**fields))
        return
    error = refused(body(**fields))
    assert (error.status, error.param, error.code) == (400, "store", "unsupported_parameter")
    assert "'store'" in error.message


def test_fields_the_api_does_not_define_are_400s_naming_them():
    for name in ("foo", "top_k", "Messages", "logit-bias"):
        error = refused(body(**{name: 1}))
        assert (error.status, error.param, error.code) == (400, name, "unknown_parameter")


def test_logit_bias_keys_are_token_ids_within_the_vocabulary():
    assert parse_tool_request(body(logit_bias={"49151": 3}), 49152).logit_bias == ((49151, 3.0),)
    error = refused_with(body(logit_bias={"49152": 3}), 49152)
    assert (error.status, error.param) == (400, "logit_bias.49152")
    assert "below 49152" in error.message


def test_a_seed_is_kept_as_its_unsigned_64_bit_value():
    assert parse_tool_request(body(seed=-1)).seed == 2**64 - 1
    assert parse_tool_request(body(seed=2**63 - 1)).seed == 2**63 - 1
    assert parse_tool_request(body(seed=0)).seed == 0


def test_jump_forward_is_on_unless_the_request_turns_it_off():
    assert parse_tool_request(body()).jump_forward is True
    assert parse_tool_request(body(jump_forward=None)).jump_forward is True
    assert parse_tool_request(body(jump_forward=True)).jump_forward is True
    assert parse_tool_request(body(jump_forward=False)).jump_forward is False
    for value in (0, 1, "false", [], {}):
        error = refused(body(jump_forward=value))
        assert (error.status, error.param, error.code) == (400, "jump_forward", "invalid_type")


def test_the_engine_requests_carry_the_jump_forward_switch():
    from corral.tools.completions import Completions
    from stand_in_model import StandInModel

    engine = Completions(StandInModel())
    for value in (True, False):
        request = parse_tool_request(body(jump_forward=value, n=2))
        assert [r.jump_forward for r in engine.requests(request, 16)] == [value, value]


# --- values Python cannot convert, encode or recurse through ----------------------------------


SCHEMA = "response_format.json_schema.schema"
TEXT_PART = {"type": "text", "text": "\udc00"}


def schema_body(schema) -> dict:
    return body(
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    )


def nested(depth: int, leaf="x"):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("request_body", "param"),
    [
        (schema_body({"type": "number", "maximum": 10**400}), f"{SCHEMA}.maximum"),
        (schema_body({"type": "integer", "maximum": -(10**400)}), f"{SCHEMA}.maximum"),
        (schema_body({"enum": ["ok", "\ud800"]}), f"{SCHEMA}.enum[1]"),
        (schema_body({"properties": {"\udfff": {}}}), f"{SCHEMA}.properties.\\udfff"),
        (body(messages=[{"role": "user", "content": "a\ud800b"}]), "messages[0].content"),
        (body(messages=[{"role": "user", "content": [TEXT_PART]}]), "messages[0].content[0].text"),
        (body(user="\ud83d"), "user"),
        (body(temperature=float("nan")), "temperature"),
        (body(top_p=float("inf")), "top_p"),
        (body(seed=10**400), "seed"),
        (body(metadata={"k": float("-inf")}), "metadata.k"),
    ],
)  # fmt: skip
def test_values_python_cannot_handle_are_400s_naming_the_param(request_body, param):
    error = refused(request_body)
    assert (error.status, error.param, error.code) == (400, param, "invalid_value")
    json.dumps(error.to_json(), ensure_ascii=False).encode("utf-8")  # the error line is writable


@pytest.mark.parametrize(
    ("request_body", "where"),
    [
        (schema_body({"const": nested(300)}), f"{SCHEMA}.const[0]"),
        (body(messages=[{"role": "user", "content": nested(5000)}]), "messages[0].content[0]"),
        (body(tools=[{"type": "function", "function": {"name": "f", "parameters": nested(999)}}]),
         "tools[0].function.parameters[0]"),
    ],
)  # fmt: skip
def test_nesting_deeper_than_the_limit_is_a_400_naming_where(request_body, where):
    error = refused(request_body)
    assert (error.status, error.code) == (400, "invalid_value")
    assert error.param.startswith(where) and f"deeper than {MAX_NESTING}" in error.message
    assert error.param.count("[") + error.param.count(".") + 1 == MAX_NESTING  # path components


@given(
    name=st.text(st.characters(codec="utf-8"), min_size=1, max_size=40),
    extra=st.integers(1, 300),
)
def test_a_nesting_error_quotes_the_start_of_its_path(name, extra):
    """The message names where the nesting starts and the limit, in a few lines however long
    the names along the path (the param keeps the whole path)."""
    value = "x"
    for _ in range(MAX_NESTING + extra):
        value = {name: value}
    error = refused(body(metadata=value))
    assert f"deeper than {MAX_NESTING} levels" in error.message
    assert error.message.startswith("'metadata") and len(error.message) < 200


@pytest.mark.parametrize(
    ("text", "param"),
    [
        ('{"messages":[{"role":"user","content":"x"}],"temperature":NaN}', "temperature"),
        ('{"messages":[{"role":"user","content":"x"}],"top_p":Infinity}', "top_p"),
        ('{"messages":[{"role":"user","content":"x"}],"seed":1e400}', "seed"),
        ('{"messages":[{"role":"user","content":"\\ud800"}]}', "messages[0].content"),
        ('{"messages":[{"role":"user","content":"x"}],"n":1' + "0" * 400 + "}", "n"),
        ('{"messages":' + "[" * 100_000 + "]" * 100_000 + "}", None),
        ('{"messages":[{"role":"user","content":"x"}],"n":1' + "0" * 5000 + "}", None),
    ],
)
def test_json_text_python_cannot_handle_is_a_400(text, param):
    error = refused(text)
    assert (error.status, error.param) == (400, param)


def test_deeply_nested_call_arguments_are_a_400():
    arguments = "[" * 100_000 + "]" * 100_000
    messages = [
        *MESSAGES,
        {
            "role": "assistant",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": arguments}}],
        },
    ]
    error = refused(body(messages=messages, tools=[WEATHER]))
    assert (error.status, error.param) == (400, "messages[1].tool_calls[0].function.arguments")


def refused_with(request, vocabulary_size) -> ToolError:
    with pytest.raises(ToolError) as info:
        parse_tool_request(request, vocabulary_size)
    return info.value


# --- fields that cannot be honoured together --------------------------------------------------


@given(st.integers(1, 10**6), st.integers(1, 10**6))
def test_max_tokens_and_max_completion_tokens_together_are_a_400_naming_max_tokens(a, b):
    """As the OpenAI API answers, whether or not they agree: one of them wins silently
    nowhere."""
    error = refused(body(max_tokens=a, max_completion_tokens=b))
    assert (error.status, error.param, error.code) == (
        400,
        "max_tokens",
        "invalid_parameter_combination",
    )
    assert parse_tool_request(body(max_tokens=a, max_completion_tokens=None)).max_tokens == a
    assert parse_tool_request(body(max_tokens=None, max_completion_tokens=b)).max_tokens == b


CONSTRAINED = [
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}}}},
    {"tools": [TIME], "tool_choice": "required"},
    {"tools": [TIME], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
    {"tools": [TIME], "tool_choice": "auto", "response_format": {"type": "json_object"}},
    {"tools": [TIME], "tool_choice": "none", "response_format": {"type": "json_object"}},
]
FREE = [{}, {"tools": [TIME]}, {"tools": [TIME], "tool_choice": "none"}, {"response_format": None}]
STOPS = st.one_of(
    st.text(min_size=1, max_size=5),
    st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=4),
)


@given(STOPS, st.sampled_from(CONSTRAINED))
def test_stop_is_refused_where_the_whole_answer_is_grammar_constrained(stop, fields):
    error = refused(body(stop=stop, **fields))
    assert (error.status, error.param, error.code) == (400, "stop", "unsupported_parameter")
    assert parse_tool_request(body(stop=None, **fields)).stop == ()
    assert parse_tool_request(body(stop=[], **fields)).stop == ()


@given(STOPS, st.sampled_from(FREE))
def test_stop_is_honoured_where_the_answer_starts_as_free_text(stop, fields):
    """Free text, or tool_choice auto: a stop string ends the text before a call."""
    expected = (stop,) if isinstance(stop, str) else tuple(stop)
    assert parse_tool_request(body(stop=stop, **fields)).stop == expected


def test_prompt_cache_retention_is_accepted_only_in_memory():
    assert parse_tool_request(body(prompt_cache_retention="in_memory")).n == 1
    error = refused(body(prompt_cache_retention="24h"))
    assert (error.param, error.code) == ("prompt_cache_retention", "unsupported_parameter")


@given(st.text(max_size=30))
def test_a_model_other_than_the_served_one_is_a_404_naming_both(name):
    if name == "SmolLM2-135M-Instruct":
        check_model(name, "SmolLM2-135M-Instruct")
        return
    with pytest.raises(ToolError) as info:
        check_model(name, "SmolLM2-135M-Instruct")
    error = info.value
    assert (error.status, error.param, error.code) == (404, "model", "model_not_found")
    assert f"'{name}'" in error.message and "SmolLM2-135M-Instruct" in error.message
    check_model(None, "SmolLM2-135M-Instruct")  # a request that names none
