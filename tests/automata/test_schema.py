"""The JSON Schema compiler (docs/design.md section 3): worked examples, soundness on
hand-made schemas, dumps, refusals with keyword and pointer, json_object_regex and the pitfalls."""

from __future__ import annotations

import json
import math
import re
import sys

import jsonschema
import numpy as np
import pytest
from corral.automata import (
    ConstrainError,
    EmptyLanguageError,
    LimitError,
    NonFiniteNumberError,
    SchemaError,
    SchemaLimits,
    SchemaTextError,
    dumps,
    escape,
    json_object_regex,
    json_schema_to_regex,
    parse,
    regex_to_dfa,
    schema_to_dfa,
    schema_to_tree,
    tree_to_dfa,
)
from corral.automata.schema import json_text, numbers
from corral.automata.schema.keywords import SUPPORTED
from corral.automata.schema.values import MAX_NESTING
from corral.automata.tree import Concat, literal_bytes
from example_schemas import HAND_SCHEMAS
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema.validators import validator_for

INT = json_text.INTEGER
STRING = json_text.STRING


def validator(schema):
    """The jsonschema validator the schema asks for ($schema; default 2020-12), checking
    formats."""
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def assert_sound(schema, n=40, seed=0):
    """n random strings of the schema's DFA each parse and validate; returns them."""
    dfa = schema_to_dfa(schema)
    check = validator(schema)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        text = dfa.sample(rng).decode("utf-8")
        value = json.loads(text)
        errors = list(check.iter_errors(value))
        assert not errors, f"{text!r} is invalid: {errors[0].message}"
        out.append(text)
    return out


def accepts(schema, text: str) -> bool:
    return schema_to_dfa(schema).matches(text.encode("utf-8"))


# ---------------------------------------------------------------------------------------------
# 1. docs/design.md's worked examples

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
XY = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}}


def test_city_schema_regex_text():
    # a schema's plain string: every value, `\u` only for the controls (strings.PLAIN_STRING_FORM)
    plain = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u00[01][0-9a-fA-F])*"'
    assert json_schema_to_regex(CITY) == r'\{"city":' + plain + r"\}"
    # any JSON value's strings: docs/design.md's `\u` and four hex digits, less the lone surrogates
    # (a pair is one escape)
    unicode = (
        r"\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}"
        r"|[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    )
    expected = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|' + unicode + ')*"'
    assert expected == STRING


def test_two_optional_integers_regex_text_is_designs_nested_form():
    expected = r'\{(?:"x":INT(?:,"y":INT)?|(?:"y":INT|))\}'.replace("INT", INT)
    assert json_schema_to_regex(XY) == expected


def test_two_optional_integers_language():
    dfa = schema_to_dfa(XY)
    for text in ["{}", '{"x":1}', '{"y":2}', '{"x":1,"y":2}']:
        assert dfa.matches(text.encode())
    for text in ['{"y":2,"x":1}', '{"x":1"y":2}', '{"x":1,}', '{,"y":2}', '{"x":1,"x":1}']:
        assert not dfa.matches(text.encode())


def test_text_and_tree_back_ends_give_the_same_dfa():
    rendered = 0
    for schema in [CITY, XY, *HAND_SCHEMAS]:
        try:
            text = json_schema_to_regex(schema)
        except SchemaTextError:  # pattern x length products and DFA products have no text
            continue
        rendered += 1
        by_tree = schema_to_dfa(schema)
        by_text = regex_to_dfa(text)
        assert np.array_equal(by_tree.trans, by_text.trans)
        assert np.array_equal(by_tree.accept, by_text.accept)
    # the boolean-algebra schemas and the two with a member beyond the listed ones (its name a
    # DFA difference) are DFA products; the uniqueItems one renders
    assert rendered >= len(HAND_SCHEMAS) - 7


def test_text_back_end_spells_literals_with_the_one_escaper():
    schema = {"enum": ["a.b\n", "(x)"], "title": "t"}
    text = json_schema_to_regex(schema)
    assert text == escape('"a.b\\n"') + "|" + escape('"(x)"')
    assert np.array_equal(regex_to_dfa(text).trans, schema_to_dfa(schema).trans)


def test_recursion_limit_is_raised_once_per_public_call(monkeypatch):
    calls = []
    real = sys.setrecursionlimit
    monkeypatch.setattr(sys, "setrecursionlimit", lambda n: calls.append(n) or real(n))
    schema = {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5, "enum": ["ab", "abc"]}
    for compile_schema in (schema_to_dfa, schema_to_tree, json_schema_to_regex):
        calls.clear()
        compile_schema(schema)
        assert len(calls) == 2, compile_schema.__name__  # raised, then restored


def test_schema_tree_composes_with_other_trees():
    call = Concat(
        (
            parse(r'<tool_call>\{"name":"f","arguments":'),
            schema_to_tree(CITY),
            literal_bytes(b"}</tool_call>"),
        )
    )
    dfa = tree_to_dfa(call)
    assert dfa.matches(b'<tool_call>{"name":"f","arguments":{"city":"Paris"}}</tool_call>')
    assert not dfa.matches(b'<tool_call>{"name":"f","arguments":{}}</tool_call>')


def test_many_optional_members_stay_linear_in_the_dfa():
    props = {f"p{i}": {"type": "integer"} for i in range(60)}
    dfa = schema_to_dfa({"type": "object", "properties": props})
    assert dfa.n_states < 60 * 20
    text = "{" + ",".join(f'"p{i}":{i}' for i in range(0, 60, 7)) + "}"
    assert dfa.matches(text.encode())


def test_text_rendering_past_the_limit_is_a_limit_error():
    props = {f"p{i}": {"type": "integer"} for i in range(60)}
    with pytest.raises(LimitError) as info:
        json_schema_to_regex(
            {"type": "object", "properties": props},
            schema_limits=SchemaLimits(max_regex_length=10_000),
        )
    assert info.value.limit == "max_regex_length"


# ---------------------------------------------------------------------------------------------
# 2. Soundness on hand-made schemas (every supported keyword)


@pytest.mark.parametrize("index", range(len(HAND_SCHEMAS)))
def test_hand_made_schema_is_sound(index):
    assert_sound(HAND_SCHEMAS[index], n=30, seed=index)


def test_hand_made_schemas_cover_every_supported_keyword():
    seen = set()

    def walk(node):
        if isinstance(node, dict):
            seen.update(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(HAND_SCHEMAS)
    assert SUPPORTED - seen <= {"multipleOf", "dependencies", "uniqueItems"}


def test_recursive_schema_is_unrolled_to_the_documented_depth():
    schema = next(s for s in HAND_SCHEMAS if isinstance(s, dict) and "$defs" in s)
    dfa = schema_to_dfa(schema)
    assert dfa.matches(b'{"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]}')
    assert not dfa.matches(b'{"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[{"v":4}]}]}]}')
    deeper = schema_to_dfa(schema, schema_limits=SchemaLimits(max_recursion=4))
    assert deeper.matches(b'{"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[{"v":4}]}]}]}')


def test_pattern_is_a_search_and_stays_inside_a_json_string():
    dfa = schema_to_dfa({"type": "string", "pattern": "ab"})
    assert dfa.matches(b'"xxabyy"')
    assert not dfa.matches(b'"xaxb"')
    assert not dfa.matches(b'"ab\\""')  # no escapes: the text is the value
    anchored = schema_to_dfa({"type": "string", "pattern": "^ab$"})
    assert anchored.matches(b'"ab"') and not anchored.matches(b'"abc"')
    quote = schema_to_dfa({"type": "string", "pattern": '^[a"]+$'})
    assert quote.matches(b'"aa"') and not quote.matches(b'"a""')


def test_string_lengths_count_characters_and_escapes_as_one():
    dfa = schema_to_dfa({"type": "string", "minLength": 2, "maxLength": 2})
    for text in ['"ab"', '"é€"', '"\\n\\t"', '"😀x"', '"\\u0041b"', '"\\ud83d\\ude00x"']:
        assert dfa.matches(text.encode()), text
        assert len(json.loads(text)) == 2
    for text in ['"a"', '"abc"', '"\\ud83d\\ude00"', '"\\ud800b"']:
        assert not dfa.matches(text.encode()), text


PLAIN_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)


@settings(max_examples=200, deadline=None)
@given(PLAIN_TEXT)
def test_plain_string_writes_every_value_in_one_spelling(value):
    # every string value is written (raw, controls escaped as json.dumps escapes them) ...
    dfa = schema_to_dfa({"type": "string"})
    assert dfa.matches(json.dumps(value, ensure_ascii=False).encode())
    # ... and a `\\u` escape of a character that is written raw is no second spelling of it
    escaped = json.dumps(value, ensure_ascii=True)
    if escaped != json.dumps(value, ensure_ascii=False):
        assert not dfa.matches(escaped.encode()), escaped


def test_plain_string_members_cost_fifteen_states_each():
    # 15 DFA states per plain string (22 with `\\u` escapes of every character), beside the key
    for n in (1, 5, 20):
        props = {f"k{i}": {"type": "string"} for i in range(n)}
        schema = {"type": "object", "properties": props, "required": list(props)}
        keys = sum(len(f'"k{i}":') + 1 for i in range(n))  # the key text and a `,` or `}`
        assert schema_to_dfa(schema).trans.shape[0] <= keys + 15 * n + 2


def test_integer_ranges_are_exact():
    for lo, hi in [(None, 0), (-17, 3), (5, None), (-1000, -999), (0, 0), (98, 1002)]:
        text = numbers.integer_range(lo, hi)
        for v in range(-1100, 1100):
            inside = (lo is None or v >= lo) and (hi is None or v <= hi)
            assert (re.fullmatch(text, str(v)) is not None) == inside, (lo, hi, v)
        assert not re.fullmatch(text, "-0") and not re.fullmatch(text, "007")
    dfa = schema_to_dfa({"type": "integer", "exclusiveMinimum": 1.5, "maximum": 4.9})
    assert [v for v in range(-5, 10) if dfa.matches(str(v).encode())] == [2, 3, 4]


def test_number_ranges_are_sound_at_the_bounds():
    cases = [
        (0, True, None, False),
        (-3, False, 7, True),
        (None, False, 0, True),
        (1, True, 2, True),
    ]
    candidates = [f"{i}{f}" for i in range(-9, 10) for f in ["", ".0", ".5", ".000001", ".9999999"]]
    candidates += ["-0.5", "0.0000001", "1.0000000000000000000000001"]
    for lo, lo_open, hi, hi_open in cases:
        text = numbers.number_range(lo, lo_open, hi, hi_open)
        for c in candidates:
            if re.fullmatch(text, c):
                x = float(c)
                assert lo is None or (x > lo if lo_open else x >= lo), (c, text)
                assert hi is None or (x < hi if hi_open else x <= hi), (c, text)


# ---------------------------------------------------------------------------------------------
# 4. dumps

DUMPS_VALUES = [
    None, True, False, 0, -7, 2**70, 1.5, -0.0, 1.5e-05, 1e16, 1e-7, 0.1, 123456789.125,
    "", "plain", 'quote " and backslash \\', "tab\tnewline\ncr\r", "\x00\x01\x1f\x7f",
    "é 漢字 😀", "\u2028\u2029", "/slash", {"b": 1, "a": 2}, {"z": [1, {"y": None}], "": {}},
    [1, "two", [3.0, [False]]], [],
]  # fmt: skip


@pytest.mark.parametrize("value", DUMPS_VALUES, ids=range(len(DUMPS_VALUES)))
def test_dumps_equals_compact_json_dumps(value):
    """As `json.dumps`, with a float that holds an integer written as that integer."""
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    by_value = json.loads(
        expected, parse_float=lambda t: int(float(t)) if float(t).is_integer() else float(t)
    )
    assert dumps(value) == json.dumps(by_value, separators=(",", ":"), ensure_ascii=False)


def test_dumps_keeps_key_order_and_raw_non_ascii():
    assert dumps({"b": 1, "a": "é"}) == '{"b":1,"a":"é"}'
    assert dumps(1.5e-05) == "1.5e-05" and dumps(0.1) == "0.1"


def test_dumps_writes_an_integral_float_as_its_integer():
    """JSON Schema compares numbers by value: 2.0 is the integer 2 (issue 33, item 4)."""
    assert dumps(-0.0) == "0" and dumps(1e16) == "10000000000000000" and dumps(2.0) == "2"
    assert dumps({"a": [3.0, 1.5, {"b": -1.0}]}) == '{"a":[3,1.5,{"b":-1}]}'


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, [1, math.nan]])
def test_dumps_refuses_non_finite_numbers(value):
    with pytest.raises(NonFiniteNumberError):
        dumps(value)


# ---------------------------------------------------------------------------------------------
# 5. Refusals name the keyword and the JSON pointer

REFUSED = [
    ({"type": "object", "properties": {"when": {"type": "string", "format": "uri-template"}}},
     "/properties/when", "format"),
    ({"type": "string", "not": {"format": "email"}}, "", "not"),
    ({"type": "object", "properties": {"a": {"type": "string", "if": {"format": "email"},
                                             "else": {"maxLength": 3}}}}, "/properties/a", "if"),
    ({"$ref": "other.json#/x"}, "", "$ref"),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "", "uniqueItems"),
    ({"enum": [1, math.nan]}, "/enum/1", "enum"),
    ({"const": math.inf}, "/const", "const"),
    ({"type": "strnig"}, "", "type"),
    ({"type": "array", "items": {}, "minItems": 3, "maxItems": 2}, "", "maxItems"),
    ({"anyOf": []}, "", "anyOf"),
    ({"type": "object", "properties": {"a/b~c": {"multipleOf": 0.3, "type": "integer"}}},
     "/properties/a~1b~0c", "multipleOf"),
    ({"type": "string", "pattern": "(?=a)b"}, "", "pattern"),
    ({"properties": {"x": {"patternProperties": {"(": {}}, "properties": {"a": {}}}}},
     "/properties/x", "patternProperties"),
    ({"oneOf": [{"type": "string"}, {"type": "string", "format": "email"}]}, "/oneOf/0", "oneOf"),
    ({"type": "object", "properties": {"a": {"items": {"format": "email"}, "maxContains": 1,
                                             "contains": {"maxLength": 3}}}},
     "/properties/a/items", "maxContains"),
    ({"$ref": "#/definitions/missing"}, "", "$ref"),
    ({"definitions": {"a": {"$ref": "#/definitions/b"},
                      "b": {"allOf": [{"$ref": "#/definitions/a"}]}},
      "$ref": "#/definitions/a"}, "/definitions/b", "$ref"),
    ({"type": "object", "properties": {"a": {"type": "string", "format": "date"}},
      "dependentSchemas": {"a": {"required": ["a"]}}}, "", "dependentSchemas"),
    ({"type": "integer", "multipleOf": 1001}, "", "multipleOf"),
    ({"type": "string", "format": "regex"}, "", "format"),
]  # fmt: skip


@pytest.mark.parametrize("schema,pointer,keyword", REFUSED, ids=[r[2] for r in REFUSED])
def test_refused_schema_names_keyword_and_pointer(schema, pointer, keyword):
    with pytest.raises(SchemaError) as info:
        schema_to_dfa(schema)
    assert info.value.pointer == pointer
    assert info.value.keyword == keyword
    assert str(info.value).startswith(f"{pointer or '/'}: ")


def test_refusal_message_has_designs_shape():
    schema = {"type": "object", "properties": {"when": {"type": "string", "format": "regex"}}}
    with pytest.raises(SchemaError, match=r"^/properties/when: keyword 'format' is not supported"):
        schema_to_dfa(schema)
    with pytest.raises(SchemaError, match="pattern-less format 'regex'"):
        json_schema_to_regex(schema)


def test_array_without_items_is_refused_when_any_value_is_off():
    with pytest.raises(SchemaError) as info:
        schema_to_dfa({"type": "array"}, schema_limits=SchemaLimits(any_value_depth=0))
    assert info.value.keyword == "items"


def test_limits_refuse_huge_enums_and_deep_nesting():
    with pytest.raises(LimitError):
        schema_to_dfa({"enum": list(range(50))}, schema_limits=SchemaLimits(max_enum_values=10))
    deep: dict = {"type": "integer"}
    for _ in range(80):
        deep = {"type": "array", "items": deep}
    with pytest.raises(LimitError):
        schema_to_dfa(deep)


def test_empty_language_is_an_error():
    with pytest.raises(EmptyLanguageError):
        schema_to_dfa({"type": "string", "enum": [1, 2]})
    with pytest.raises(ConstrainError):
        schema_to_dfa(False)


def test_non_keywords_are_annotations_but_keywords_are_not_ignored():
    base = {"type": "integer"}
    same = {"type": "integer", "_uniqueItems": True, "x-kubernetes-patch-merge-key": "n",
            "self": {"vendor": "v"}, "id": "http://x/y", "nullable": True}  # fmt: skip
    assert np.array_equal(schema_to_dfa(base).trans, schema_to_dfa(same).trans)
    with pytest.raises(SchemaError):
        schema_to_dfa({"type": "integer", "divisibleBy": 2})


# ---------------------------------------------------------------------------------------------
# 6. json_object_regex


def test_json_object_regex_depth_3():
    dfa = regex_to_dfa(json_object_regex(3))
    good = [
        "{}",
        '{"a":1}',
        '{"a":"x","b":-1.5e3,"c":true,"d":false,"e":null}',
        '{"a":{"b":{"c":1}}}',
        '{"a":[1,[2,"x"]],"b":{}}',
        '{"k":[{"x":1}],"k":1}',
        '{"\\u00e9\\n":"é"}',
    ]
    for text in good:
        json.loads(text)
        assert dfa.matches(text.encode()), text
    bad = [
        '{"a":{"b":{"c":{"d":1}}}}',
        '{"a":[[[1]]]}',
        "[1]",
        "1",
        '"x"',
        "null",
        '{"a":1,}',
        '{"a" 1}',
        "{a:1}",
        '{"a":1 }',
        '{"a":01}',
        "{",
    ]
    for text in bad:
        assert not dfa.matches(text.encode()), text


def test_json_object_regex_samples_parse_as_objects():
    dfa = regex_to_dfa(json_object_regex(3))
    rng = np.random.default_rng(3)
    for _ in range(50):
        value = json.loads(dfa.sample(rng))
        assert isinstance(value, dict)


# ---------------------------------------------------------------------------------------------
# 7. Pitfalls


def test_pitfall_properties_keep_schema_order_never_sorted():
    schema = {"type": "object", "properties": {"zeta": {"type": "null"}, "alpha": {"type": "null"}},
              "required": ["zeta", "alpha"]}  # fmt: skip
    assert accepts(schema, '{"zeta":null,"alpha":null}')
    assert not accepts(schema, '{"alpha":null,"zeta":null}')
    assert json_schema_to_regex(schema).index("zeta") < json_schema_to_regex(schema).index("alpha")


def test_pitfall_comma_before_a_later_optional_member():
    schema = {"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "null"},
              "c": {"type": "null"}}, "required": ["a"]}  # fmt: skip
    assert accepts(schema, '{"a":null,"c":null}')
    assert accepts(schema, '{"a":null,"b":null,"c":null}')
    assert not accepts(schema, '{"a":null"c":null}')
    assert not accepts(schema, '{"a":null,,"c":null}')
    optional_first = {"type": "object", "properties": {"a": {"type": "null"},
                      "b": {"type": "null"}}, "required": ["b"]}  # fmt: skip
    assert accepts(optional_first, '{"b":null}') and accepts(optional_first, '{"a":null,"b":null}')
    assert not accepts(optional_first, '{,"b":null}')


def test_pitfall_enum_values_are_escaped():
    schema = {"enum": [2.5, "a.b", "(x)", "[y]*"]}
    for text in ["2.5", '"a.b"', '"(x)"', '"[y]*"']:
        assert accepts(schema, text)
    for text in ["2x5", '"axb"', '"x"', '"y"', '"yyy"']:
        assert not accepts(schema, text)


def test_pitfall_max_items_is_exact():
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3}
    assert not accepts(schema, "[]")
    assert accepts(schema, "[1]") and accepts(schema, "[1,2,3]")
    assert not accepts(schema, "[1,2,3,4]")
    assert accepts({"type": "array", "items": {}, "maxItems": 0}, "[]")
    assert not accepts({"type": "array", "items": {}, "maxItems": 0}, "[1]")


def test_length_bounded_pattern_tree_builds_outside_the_compiler():
    """A pattern x maxLength product is a deep tree; `tree_to_dfa` on it works for callers."""
    tree = schema_to_tree({"type": "string", "pattern": "^[a-zé]+$", "maxLength": 256})
    dfa = tree_to_dfa(tree)
    assert dfa.matches(('"' + "é" * 256 + '"').encode())
    assert not dfa.matches(('"' + "a" * 257 + '"').encode())
    assert not dfa.matches(b'""')


# ---------------------------------------------------------------------------------------------
# Values Python cannot convert, encode or recurse through: a SchemaError naming where, never a
# crash (numbers never go through float; strings must be UTF-8 text; nesting is bounded)


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"enum": ["ok", "\ud800"]}, "/enum/1"),
        ({"const": {"a\udfff": 1}}, "/const/a\\udfff"),
        ({"type": "object", "properties": {"\ud800": {"type": "integer"}}}, "/properties/\\ud800"),
        ({"type": "string", "pattern": "a\udc00"}, "/pattern"),
        ({"$defs": {"x": {"description": "\ud83d"}}, "type": "integer"}, "/$defs/x/description"),
        ({"$defs": {"a/b~": {"enum": [1, "\ud800"]}}, "type": "integer"}, "/$defs/a~1b~0/enum/1"),
    ],
)
def test_a_lone_surrogate_is_refused_naming_its_pointer(schema, pointer):
    for compile_schema in (schema_to_dfa, json_schema_to_regex):
        with pytest.raises(SchemaError) as info:
            compile_schema(schema)
        assert info.value.pointer == pointer
        str(info.value).encode("utf-8")  # the message is text


def test_nesting_past_the_document_limit_is_refused():
    deep = 1
    for _ in range(MAX_NESTING + 5):
        deep = [deep]
    with pytest.raises(SchemaError, match="nested deeper than 512"):
        schema_to_dfa({"const": deep})
    fits = 1
    for _ in range(MAX_NESTING - 2):
        fits = [fits]
    assert accepts({"const": fits}, dumps(fits))


@pytest.mark.parametrize(
    "bound",
    [10**400, 1e308, 2**70, float(2**70), 10**20],
)
def test_an_integer_upper_bound_past_20_digits_is_lowered_to_them(bound):
    largest = "9" * 20
    for sign in ("", "-"):
        schema = {"type": "integer", "maximum": bound} if sign == "" else {"minimum": -bound}
        schema["type"] = "integer"
        assert accepts(schema, sign + largest) and accepts(schema, "0")
        assert not accepts(schema, sign + "1" + "0" * 20)
        assert_sound(schema, n=10)
    schema = {"type": "integer", "minimum": -bound, "exclusiveMaximum": bound}
    assert accepts(schema, largest) and accepts(schema, "-" + largest)
    assert not accepts(schema, "1" + "0" * 20) and not accepts(schema, "-1" + "0" * 20)


@pytest.mark.parametrize(
    ("schema", "keyword"),
    [
        ({"type": "integer", "minimum": 10**20}, "minimum"),
        ({"type": "integer", "exclusiveMinimum": 1e308}, "exclusiveMinimum"),
        ({"type": "integer", "maximum": -(10**400)}, "maximum"),
        ({"type": "number", "minimum": 2**53 + 1}, "minimum"),
        ({"type": "number", "exclusiveMaximum": -(10**400)}, "exclusiveMaximum"),
    ],
)
def test_a_bound_past_the_largest_value_is_refused_naming_the_keyword(schema, keyword):
    with pytest.raises(SchemaError) as info:
        schema_to_dfa({"type": "object", "properties": {"n": schema}, "required": ["n"]})
    assert (info.value.keyword, info.value.pointer) == (keyword, "/properties/n")


@pytest.mark.parametrize("bound", [10**400, 1e308, 2**53 + 1, float(2**60)])
def test_a_number_bound_past_2_to_the_53_is_lowered_to_it(bound):
    schema = {"type": "number", "maximum": bound, "minimum": -bound}
    assert accepts(schema, "9007199254740992") and accepts(schema, "-9007199254740992.0")
    assert not accepts(schema, "9007199254740993")
    assert_sound(schema, n=10)


@pytest.mark.parametrize("schema", ["abc", '{"type": "integer"}', b"{}", 5, None, [{}]])
def test_a_value_that_is_no_schema_is_a_schema_error(schema):
    with pytest.raises(SchemaError, match="must be an object or a boolean") as info:
        schema_to_dfa(schema)
    assert info.value.pointer == ""
    assert type(schema).__name__ in str(info.value)  # names what it was given
    assert ("not its text" in str(info.value)) == isinstance(schema, str)  # the hint fits
