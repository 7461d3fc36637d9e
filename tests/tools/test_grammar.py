"""Grammars per tool_choice and response_format, and the one compile site (docs/design.md
sections 4 and 5: the grammar by tool_choice)."""

import json
import re

import jsonschema
import numpy as np
import pytest
from corral.automata import (
    LimitError,
    SchemaLimits,
    escape,
    json_object_regex,
    json_schema_to_regex,
    regex_to_dfa,
    schema_to_dfa,
)
from corral.kernels import Vocabulary
from corral.tools import (
    GrammarCompiler,
    ToolError,
    compile_dfa,
    parse_tool_request,
    regex_grammar,
    schema_grammar,
)
from corral.tools.grammar import grammar

WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
}
TIME_PARAMETERS = {
    "type": "object",
    "properties": {"zone": {"type": "string"}},
    "required": ["zone"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMETERS}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME_PARAMETERS}},
]
WEATHER = '<tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>'
WEATHER_UNIT = (
    '<tool_call>{"name":"get_weather","arguments":{"city":"Oslo","unit":"celsius"}}</tool_call>'
)
TIME = '<tool_call>{"name":"get_time","arguments":{"zone":"CET"}}</tool_call>'


def grammar_for(**fields):
    body = {"messages": [{"role": "user", "content": "x"}], **fields}
    return grammar(parse_tool_request(body))


def matches(g, text: str) -> bool:
    return compile_dfa(g).matches(text.encode("utf-8"))


def pattern_agrees_with_tree(g, n=30):
    """The displayed pattern and the tree the DFA is built from describe the same language."""
    rng = np.random.default_rng(0)
    for _ in range(n):
        text = compile_dfa(g).sample(rng).decode("utf-8")
        assert re.fullmatch(g.pattern, text, re.ASCII), text


def test_named_choice_is_exactly_one_call_of_that_tool():
    g = grammar_for(
        tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}
    )
    assert g.trigger is None
    args = json_schema_to_regex(WEATHER_PARAMETERS)
    assert g.pattern == (
        escape('<tool_call>{"name":"get_weather","arguments":')
        + f"(?:{args})"
        + escape("}</tool_call>")
    )
    assert matches(g, WEATHER)
    assert matches(g, WEATHER_UNIT)
    assert not matches(g, TIME)  # only that tool
    assert not matches(g, WEATHER + "\n" + WEATHER)  # exactly one call
    assert not matches(g, "Sure." + WEATHER)  # from the first token
    assert not matches(
        g, '<tool_call>{"name":"get_weather","arguments":{"unit":"celsius"}}</tool_call>'
    )
    assert not matches(g, WEATHER.replace('{"city"', '{ "city"'))  # compact JSON only
    pattern_agrees_with_tree(g)


def test_named_choice_ignores_parallel_calls():
    g = grammar_for(
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        parallel_tool_calls=True,
    )
    assert matches(g, TIME)
    assert not matches(g, TIME + "\n" + TIME)


def test_required_is_one_to_four_calls_of_any_tool():
    g = grammar_for(tools=TOOLS, tool_choice="required")
    assert g.trigger is None
    assert matches(g, WEATHER)
    assert matches(g, TIME)
    assert matches(g, WEATHER + "\n" + TIME)
    assert matches(g, "\n".join([WEATHER, TIME, WEATHER_UNIT, TIME]))
    assert not matches(g, "\n".join([WEATHER, TIME, WEATHER_UNIT, TIME, WEATHER]))  # at most 4
    assert not matches(g, WEATHER + TIME)  # separated by a newline
    assert not matches(g, WEATHER + "\n\n" + TIME)
    assert not matches(g, "")
    assert not matches(g, "text")
    pattern_agrees_with_tree(g)


def test_required_without_parallel_calls_is_exactly_one_call():
    g = grammar_for(tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    assert matches(g, WEATHER)
    assert matches(g, TIME)
    assert not matches(g, WEATHER + "\n" + TIME)


def test_auto_is_free_text_then_the_rest_of_one_call_after_the_trigger():
    for g in (grammar_for(tools=TOOLS), grammar_for(tools=TOOLS, tool_choice="auto")):
        assert g.trigger == "<tool_call>"
        rest = WEATHER[len("<tool_call>") :]
        assert matches(g, rest)
        assert matches(g, TIME[len("<tool_call>") :])
        assert not matches(g, WEATHER)  # the pattern is what follows the trigger
        assert not matches(g, rest + "\n" + TIME)  # one call, which ends the answer
        assert not matches(g, rest + " more text")
        # After the call nothing can follow: the DFA's end state has no live edge.
        dfa = compile_dfa(g)
        end = dfa.step(0, rest.encode())
        assert dfa.accept[end] and (dfa.trans[end] < 0).all()
        pattern_agrees_with_tree(g)


def test_none_is_free_text():
    assert grammar_for(tools=TOOLS, tool_choice="none") is None
    assert grammar_for() is None
    assert grammar_for(response_format={"type": "text"}) is None


def test_json_object_format_is_an_object_nested_at_most_three_levels():
    for g in (
        grammar_for(response_format={"type": "json_object"}),
        grammar_for(tools=TOOLS, tool_choice="none", response_format={"type": "json_object"}),
    ):
        assert g.trigger is None
        assert g.param == "response_format"
        assert matches(g, "{}")
        assert matches(g, '{"a":{"b":{"c":null}},"d":[1,"x"]}')
        assert not matches(g, '{"a":{"b":{"c":{"d":1}}}}')
        assert not matches(g, "[1]")
        assert not matches(g, '"text"')
        assert not matches(g, '{"a":1')
        # built from the tree (`json_object_tree`), the same language as the regex text
        assert (compile_dfa(g).trans == regex_to_dfa(json_object_regex(3)).trans).all()
        assert g.pattern == f"(?:{json_object_regex(3)})"


def test_json_schema_format_is_the_schema_language():
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "person", "schema": schema, "strict": True},
    }
    g = grammar_for(response_format=fmt)
    assert g.trigger is None
    assert g.param == "response_format.json_schema.schema"
    assert g.pattern == f"(?:{json_schema_to_regex(schema)})"
    assert matches(g, '{"name":"Ada","age":36}')
    assert not matches(g, '{"age":36,"name":"Ada"}')
    assert not matches(g, '{"name":"Ada"}')
    pattern_agrees_with_tree(g)


def test_auto_with_a_json_schema_format_is_that_json_or_one_call():
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    g = grammar_for(tools=TOOLS, response_format=fmt)
    assert g.trigger is None
    assert matches(g, '{"answer":"42"}')
    assert matches(g, WEATHER)
    assert not matches(g, "free text")
    assert not matches(g, "Sure." + WEATHER)


def test_forced_calls_ignore_the_response_format():
    fmt = {"type": "json_object"}
    g = grammar_for(tools=TOOLS, tool_choice="required", response_format=fmt)
    assert matches(g, TIME)
    assert not matches(g, "{}")


def test_names_are_written_as_json_strings():
    tools = [{"type": "function", "function": {"name": "math.factorial"}}]
    g = grammar_for(tools=tools, tool_choice="required")
    assert matches(g, '<tool_call>{"name":"math.factorial","arguments":{}}</tool_call>')
    assert not matches(g, '<tool_call>{"name":"mathXfactorial","arguments":{}}</tool_call>')


def test_equal_requests_give_equal_keys_and_other_languages_other_keys():
    first = grammar_for(tools=TOOLS, tool_choice="required")
    assert first.key == grammar_for(tools=TOOLS, tool_choice="required").key
    keys = {
        first.key,
        grammar_for(tools=TOOLS, tool_choice="required", parallel_tool_calls=False).key,
        grammar_for(tools=TOOLS[::-1], tool_choice="required").key,
        grammar_for(tools=TOOLS).key,
        grammar_for(response_format={"type": "json_object"}).key,
        schema_grammar(WEATHER_PARAMETERS).key,
        schema_grammar(dict(reversed(WEATHER_PARAMETERS.items()))).key,
        regex_grammar("a|b").key,
    }
    assert len(keys) == 8


TINY = Vocabulary((b"a", b"b", b"ab", b"{", b"}", None), eos_ids=(5,))


def test_the_compiler_builds_a_token_index_once_per_key():
    compiler = GrammarCompiler(TINY)
    first = compiler.index(regex_grammar("(ab)+"))
    assert compiler.index(regex_grammar("(ab)+")) is first
    assert compiler.index(regex_grammar("(?:ab)+")) is not first  # another key
    assert len(compiler) == 2
    assert first.vocabulary is TINY
    assert first.dfa.matches(b"abab") and not first.dfa.matches(b"aba")


def test_the_compiler_cache_is_bounded_least_recently_used_first():
    compiler = GrammarCompiler(TINY, max_entries=2)
    a, b, c = (regex_grammar(p) for p in ("a", "b", "ab"))
    index_a = compiler.index(a)
    index_b = compiler.index(b)
    assert compiler.index(a) is index_a  # a is now the most recently used
    compiler.index(c)  # drops b
    assert len(compiler) == 2
    assert compiler.index(a) is index_a
    assert compiler.index(b) is not index_b
    with pytest.raises(ValueError):
        GrammarCompiler(TINY, max_entries=0)


@pytest.mark.parametrize("n_optional", [30, 60])
def test_many_optional_parameters_stay_small(n_optional):
    properties = {f"p{i}": {"type": "integer"} for i in range(n_optional)}
    tools = [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"type": "object", "properties": properties}},
        }
    ]
    g = grammar_for(tools=tools, tool_choice="required", parallel_tool_calls=False)
    assert matches(g, '<tool_call>{"name":"f","arguments":{"p3":1,"p7":2}}</tool_call>')
    assert not matches(g, '<tool_call>{"name":"f","arguments":{"p7":1,"p3":2}}</tool_call>')
    assert compile_dfa(g).n_states < 40 * n_optional


def test_a_schema_too_large_for_its_text_form_still_gets_a_dfa():
    properties = {f"p{i}": {"type": "integer"} for i in range(700)}
    parameters = {"type": "object", "properties": properties}
    tools = [{"type": "function", "function": {"name": "f", "parameters": parameters}}]
    g = grammar_for(tools=tools, tool_choice={"type": "function", "function": {"name": "f"}})
    assert matches(g, '<tool_call>{"name":"f","arguments":{"p1":1,"p699":2}}</tool_call>')
    assert not matches(g, '<tool_call>{"name":"f","arguments":{"p699":1,"p1":2}}</tool_call>')
    with pytest.raises(LimitError):
        g.pattern  # noqa: B018 - the quadratic text form passes its limit
    assert g.key.startswith('["<tool_call>{\\"name\\":\\"f\\",\\"arguments\\":",[{"arguments":')


def test_the_param_named_in_errors():
    named = grammar_for(
        tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}
    )
    assert named.param == "tools[1].function.parameters"
    assert grammar_for(tools=TOOLS, tool_choice="required").param == "tools"
    assert grammar_for(tools=TOOLS[:1]).param == "tools[0].function.parameters"


# --- the 422: schemas are compiled here, not when the request is read ------------------------

UNIQUE_ITEMS = {
    "type": "object",
    "properties": {"s": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
}


def refused(**fields) -> ToolError:
    request = parse_tool_request({"messages": [{"role": "user", "content": "x"}], **fields})
    with pytest.raises(ToolError) as info:
        grammar(request)
    return info.value


def test_a_keyword_outside_the_subset_is_a_422_naming_the_tool_and_keyword():
    tools = [*TOOLS, {"type": "function", "function": {"name": "f", "parameters": UNIQUE_ITEMS}}]
    for choice in ("auto", "required", {"type": "function", "function": {"name": "f"}}):
        error = refused(tools=tools, tool_choice=choice)
        assert (error.status, error.code) == (422, "unsupported_parameter")
        assert error.param == "tools[2].function.parameters"
        assert "uniqueItems" in error.message
        assert error.to_json() == {
            "error": {
                "message": error.message,
                "type": "invalid_request_error",
                "param": "tools[2].function.parameters",
                "code": "unsupported_parameter",
            }
        }


def test_only_the_schemas_a_grammar_uses_are_compiled():
    tools = [*TOOLS, {"type": "function", "function": {"name": "f", "parameters": UNIQUE_ITEMS}}]
    assert grammar_for(tools=tools, tool_choice="none") is None
    named = {"type": "function", "function": {"name": "get_time"}}
    assert matches(grammar_for(tools=tools, tool_choice=named), TIME)


def test_a_response_format_schema_outside_the_subset_is_a_422():
    schema = {"type": "object", "not": {"required": ["a"]}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    for fields in ({}, {"tools": TOOLS}):
        error = refused(response_format=fmt, **fields)
        assert (error.status, error.code) == (422, "unsupported_parameter")
        assert error.param == "response_format.json_schema.schema"
        assert "'not'" in error.message


def test_a_grammar_past_a_size_limit_is_a_422_naming_its_param():
    g = regex_grammar("[ab]*a[ab]{16}", "--regex")  # 2^17 DFA states, past the default limit
    with pytest.raises(ToolError) as info:
        compile_dfa(g)
    assert (info.value.status, info.value.param) == (422, "--regex")
    with pytest.raises(ToolError) as info:
        regex_grammar("a**")
    assert info.value.param == "regex" and "position 2" in info.value.message


def test_a_recursive_schema_past_the_dfa_limit_compiles_unrolled_less_deep():
    # 16 recursive members: unrolled 3 deep, subset construction passes 40,000 states;
    # 2 deep it fits (compile_dfa retries as schema_to_dfa does).
    members = {f"p{i}": {"$ref": "#/$defs/n"} for i in range(16)}
    members["s"] = {"type": "string", "maxLength": 8}
    schema = {"$defs": {"n": {"type": "object", "properties": members}}, "$ref": "#/$defs/n"}
    shallower = schema_to_dfa(schema, schema_limits=SchemaLimits(max_recursion=2))
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    for g in (schema_grammar(schema), grammar_for(tools=tools, tool_choice="required")):
        assert g.recursive
        dfa = compile_dfa(g)
        rng = np.random.default_rng(0)
        for _ in range(50):
            text = dfa.sample(rng).decode()
            if g.param == "schema":
                assert shallower.matches(text.encode())
                value = json.loads(text)
            else:
                value = json.loads(text.split("\n")[0][len("<tool_call>") : -len("</tool_call>")])
                value = value["arguments"]
            jsonschema.validate(value, schema)


def _recursive_schema(n_refs: int, n_strings: int, max_length: int) -> dict:
    """An object of `n_refs` members holding the object again and `n_strings` strings."""
    members = {f"p{i}": {"$ref": "#/$defs/n"} for i in range(n_refs)}
    for j in range(n_strings):
        members[f"s{j}"] = {"type": "string", "maxLength": max_length}
    return {"$defs": {"n": {"type": "object", "properties": members}}, "$ref": "#/$defs/n"}


def _nfa_builds(monkeypatch) -> list:
    """The outcome of every Thompson construction from now on: its states, or its error."""
    import corral.automata.compile as pipeline

    builds, real = [], pipeline.tree_to_nfa

    def recorded(tree, limits=None):
        try:
            nfa = real(tree, limits)
        except Exception as error:
            builds.append(type(error).__name__)
            raise
        builds.append(nfa.n_states)
        return nfa

    monkeypatch.setattr(pipeline, "tree_to_nfa", recorded)
    return builds


@pytest.mark.parametrize(
    "schema",
    [
        _recursive_schema(16, 1, 8),  # 3 deep: the DFA passes the limit; 2 deep fits
        _recursive_schema(8, 1, 220),  # 3 deep: the NFA is counted past the limit; 2 fits
        _recursive_schema(16, 2, 150),  # counted past at 3, the DFA passes at 2, 1 fits
    ],
)
def test_a_recursive_schema_compiles_as_schema_to_dfa_compiles_it(schema, monkeypatch):
    # The server and batch path (compile_dfa) builds the NFAs schema_to_dfa builds, in the
    # same order, skips the unrollings it skips without building them, and ends with the
    # same table; one forced call around the schema tries the same depths.
    builds = _nfa_builds(monkeypatch)
    alone = schema_to_dfa(schema)
    expected, builds[:] = list(builds), []
    dfa = compile_dfa(schema_grammar(schema))
    assert builds == expected
    assert np.array_equal(dfa.trans, alone.trans) and np.array_equal(dfa.accept, alone.accept)
    builds.clear()
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    named = {"type": "function", "function": {"name": "f"}}
    compile_dfa(grammar_for(tools=tools, tool_choice=named))
    # the arguments alone (a piece) as schema_to_dfa, then the envelope around them
    assert [type(b) for b in builds] == [type(b) for b in expected] + [int]


@pytest.mark.parametrize(
    ("schema", "keyword", "pointer"),
    [
        ({"type": "integer", "enum": [1.5, 2.5]}, "enum", "/"),
        (
            {"properties": {"a": {"type": "integer", "const": 2.5}}, "required": ["a"]},
            "const",
            "/properties/a",
        ),
        ({"oneOf": [{"const": 1.0}, {"const": 1}]}, "oneOf", "/"),
        ({"type": "array", "items": {"not": {}}, "minItems": 1}, "not", "/items"),
    ],
)
def test_a_schema_that_admits_no_value_is_a_422_naming_keyword_and_pointer(
    schema, keyword, pointer
):
    """Issue 33, item 4: "admits no value" names where, as every other 422 does."""
    with pytest.raises(ToolError) as caught:
        compile_dfa(schema_grammar(schema, "response_format.json_schema.schema"))
    assert caught.value.status == 422
    assert f"'{keyword}'" in caught.value.message and f"at '{pointer}'" in caught.value.message
