"""Boolean algebra on DFAs (`corral.automata.product`) and the schema keywords it compiles
(`corral.automata.schema.algebra`, docs/algebra.md).

- The product operations and the complement match brute force on random small DFAs: every
  string over a small alphabet up to a length is in the result exactly when the set operation
  says so, and equal languages give identical tables.
- Random schemas of the new keywords: every sampled string validates with `jsonschema`.
- The exactness predicate against `jsonschema`: for a schema it calls exact, every canonical
  text of a wider language is accepted exactly when it validates.
- The JSON-Schema-Test-Suite files of the new keywords: no invalid instance is accepted.
"""

from __future__ import annotations

import itertools
import json

import jsonschema
import numpy as np
import pytest
from corral.automata import (
    ConstrainError,
    EmptyLanguageError,
    LimitError,
    SchemaError,
    TooManyDfaStatesError,
    dumps,
    regex_to_dfa,
    schema_to_dfa,
    tree_to_dfa,
)
from corral.automata.limits import Limits, SchemaLimits
from corral.automata.product import complement, difference, intersection, union
from corral.automata.schema.exact import UNIVERSE, Exactness, canonical_value, universe_dfa
from corral.automata.schema.merge import Merger
from corral.automata.schema.refs import RefResolver
from corral.automata.tree import Automaton, Concat, Repeat, literal_bytes
from example_schemas import ALGEBRA_SCHEMAS
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema.validators import validator_for

ALPHABET = [b"a", b"b", b"c"]
STRINGS = [b"".join(p) for n in range(6) for p in itertools.product(ALPHABET, repeat=n)]

small_patterns = st.recursive(
    st.sampled_from(["a", "b", "c", "[ab]", "[bc]", "a?", ""]),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda t: t[0] + t[1]),
        st.tuples(inner, inner).map(lambda t: f"(?:{t[0]}|{t[1]})"),
        inner.map(lambda t: f"(?:{t})*"),
        inner.map(lambda t: f"(?:{t}){{1,2}}"),
    ),
    max_leaves=6,
)


def validator(schema):
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def assert_samples_valid(dfa, schema, seed: int, n: int) -> None:
    """`n` texts sampled from `dfa` (generator seeded `seed`) all validate against `schema`
    (`jsonschema`, the independent oracle)."""
    check = validator(schema)
    rng = np.random.default_rng(seed)
    for _ in range(n):
        text = dfa.sample(rng).decode("utf-8")
        assert check.is_valid(json.loads(text)), text


def members(dfa) -> set[bytes]:
    return {s for s in STRINGS if dfa is not None and dfa.matches(s)}


def or_none(operation, *args):
    try:
        return operation(*args)
    except EmptyLanguageError:
        return None


# ---------------------------------------------------------------------------------------------
# The product construction


@settings(max_examples=150, deadline=None)
@given(small_patterns, small_patterns)
def test_products_match_brute_force(p, q):
    a, b = regex_to_dfa(p), regex_to_dfa(q)
    la, lb = members(a), members(b)
    assert members(or_none(intersection, a, b)) == la & lb
    assert members(or_none(union, a, b)) == la | lb
    assert members(or_none(difference, a, b)) == la - lb
    universe = regex_to_dfa("[abc]*")
    assert members(or_none(complement, a, universe)) == set(STRINGS) - la


@settings(max_examples=100, deadline=None)
@given(small_patterns, small_patterns)
def test_equal_languages_give_identical_tables(p, q):
    a, b = regex_to_dfa(p), regex_to_dfa(q)
    pairs = [(union(a, b), union(b, a)), (union(a, a), a), (union(a, union(a, b)), union(a, b))]
    both, flipped = or_none(intersection, a, b), or_none(intersection, b, a)
    assert (both is None) == (flipped is None)
    if both is not None:
        pairs.append((both, flipped))
    for x, y in pairs:
        assert np.array_equal(x.trans, y.trans) and np.array_equal(x.accept, y.accept)


def test_worked_example_and_canonical_numbering():
    words = regex_to_dfa("(cat|car|dog)s?")
    cats = regex_to_dfa("ca[rt]s?")
    assert np.array_equal(difference(words, cats).trans, regex_to_dfa("dogs?").trans)
    assert np.array_equal(intersection(words, cats).trans, regex_to_dfa("(cat|car)s?").trans)
    with pytest.raises(EmptyLanguageError):
        intersection(regex_to_dfa("a+"), regex_to_dfa("b+"))


def test_product_refuses_past_the_state_limit():
    a = regex_to_dfa("[ab]*a[ab]{6}")
    b = regex_to_dfa("[ab]*b[ab]{6}")
    with pytest.raises(TooManyDfaStatesError) as caught:
        intersection(a, b, Limits(max_dfa_states=50))
    assert caught.value.limit == "max_dfa_states"


def test_a_dfa_sits_inside_a_tree():
    inner = regex_to_dfa("(ab)*c?")
    node = Concat((literal_bytes(b"x"), Repeat(Automaton(inner), 0, None), literal_bytes(b"y")))
    assert np.array_equal(tree_to_dfa(node).trans, regex_to_dfa("x((ab)*c?)*y").trans)


# ---------------------------------------------------------------------------------------------
# The universe and exactness


@pytest.mark.parametrize(
    ("text", "inside"),
    [
        ('{"a":[1,-2,0.5,"x",true,null]}', True),
        ("-0", False),
        ("1.50", False),
        ("1.0", False),
        ("1e5", False),
        ('"a\\nb"', False),
        ('"a\\"b"', False),
        ("1234567890123456", False),
        ("123456789012345", True),
        ("-0.000001", True),
        ("0.0000001", False),
    ],
)
def test_universe_spells_each_value_once(text, inside):
    assert universe_dfa().matches(text.encode()) == inside, UNIVERSE


@pytest.mark.parametrize(
    ("value", "canonical"),
    [(1, True), (1.0, True), (0.5, True), (1e-05, False), ({"a": 1, "b": 2}, False), ("x", True)],
)
def test_canonical_values(value, canonical):
    assert canonical_value(value) == canonical


EXACT_CASES = [
    ({"type": "integer", "minimum": -3, "maximum": 40}, True),
    ({"type": "string", "maxLength": 2}, True),
    ({"type": "string", "pattern": "^[a-c]+$"}, True),
    ({"type": "string", "pattern": "^\\d+$"}, True),  # strings of U are ASCII, where \d agrees
    ({"type": "string", "format": "email"}, False),
    ({"type": "number", "minimum": 0}, False),
    ({"minimum": 0}, False),  # untyped: only the implied type is written
    ({"type": "array", "items": {"type": "boolean"}, "maxItems": 3}, True),
    ({"type": "array"}, False),  # items: any value, depth-bounded
    ({"type": "object", "properties": {"a": {"type": "null"}}, "required": ["a"]}, True),
    ({"type": "object", "minProperties": 1, "properties": {"a": {"type": "null"}}}, False),
    ({"enum": [1, "a", None]}, True),
    ({"enum": [1.0]}, True),  # written `1`, as U spells it
    ({"type": "integer", "not": {"enum": [3]}}, True),
]


@pytest.mark.parametrize(("schema", "exact"), EXACT_CASES)
def test_exactness_predicate(schema, exact):
    merger = Merger(RefResolver(schema))
    assert Exactness(merger, SchemaLimits()).exact(schema, "") == exact


WIDE = {
    "anyOf": [
        {"type": "integer", "minimum": -20, "maximum": 20},
        {"type": "string", "maxLength": 3},
        {"type": "boolean"},
        {"type": "null"},
        {
            "type": "object",
            "properties": {"a": {"type": ["integer", "null"]}, "b": {"type": "string"}},
        },
        {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 3},
    ]
}
"""A wide positive context whose canonical texts the exact cases are checked against."""


@pytest.mark.parametrize(("schema", "exact"), [c for c in EXACT_CASES if c[1]])
def test_exact_schemas_accept_every_valid_canonical_text(schema, exact):
    wide = intersection(schema_to_dfa(WIDE), universe_dfa())
    dfa = schema_to_dfa(schema)
    check = validator(schema)
    rng = np.random.default_rng(7)
    for _ in range(300):
        text = wide.sample(rng).decode("utf-8")
        assert dfa.matches(text.encode()) == check.is_valid(json.loads(text)), text


# ---------------------------------------------------------------------------------------------
# The new keywords: soundness on random schemas

leaf = st.sampled_from(
    [
        {"type": "integer", "minimum": 0, "maximum": 9},
        {"type": "integer", "minimum": 5},
        {"type": "string", "maxLength": 2},
        {"type": "string", "pattern": "^a"},
        {"type": "null"},
        {"type": "boolean"},
        {"enum": [1, 2, "a"]},
        {"const": 3},
        {"minimum": 3},
        {"maxLength": 1},
        {"type": "array", "items": {"type": "integer", "maximum": 3}, "maxItems": 2},
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "null"}}},
        {"required": ["a"]},
        {"properties": {"a": {"maximum": 0}}},
        {"type": "object", "required": ["a"]},
        {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["a"]},
        {"type": "object", "minProperties": 1},
        True,
    ]
)


def _combine(inner):
    return st.one_of(
        inner.map(lambda s: {"not": s}),
        st.lists(inner, min_size=2, max_size=3).map(lambda b: {"oneOf": b}),
        st.lists(inner, min_size=2, max_size=3).map(lambda b: {"allOf": b}),
        st.lists(inner, min_size=2, max_size=3).map(lambda b: {"anyOf": b}),
        st.tuples(inner, inner, inner).map(lambda t: {"if": t[0], "then": t[1], "else": t[2]}),
        st.tuples(leaf, inner).map(
            lambda t: {**t[0], "not": t[1]} if isinstance(t[0], dict) else t[1]
        ),
    )


schemas = st.recursive(leaf, _combine, max_leaves=5)


@settings(max_examples=120, deadline=None)
@given(schemas)
def test_random_algebra_schemas_are_sound(schema):
    try:
        dfa = schema_to_dfa(schema, Limits(max_dfa_states=3000, max_nfa_states=60_000))
    except (ConstrainError, RecursionError):
        return
    check = validator(schema)
    rng = np.random.default_rng(0)
    for _ in range(20):
        text = dfa.sample(rng).decode("utf-8")
        assert check.is_valid(json.loads(text)), (schema, text)


@pytest.mark.parametrize("schema", ALGEBRA_SCHEMAS)
def test_new_keywords_compile_and_are_sound(schema):
    dfa = schema_to_dfa(schema)
    check = validator(schema)
    rng = np.random.default_rng(1)
    seen = set()
    for _ in range(60):
        text = dfa.sample(rng).decode("utf-8")
        assert check.is_valid(json.loads(text)), text
        seen.add(text)
    assert len(seen) > 1


UNLISTED_MEMBER_ONE_OFS = [
    # branch 0 writes the member `a` it does not list (required, or beyond minProperties)
    [{"type": "object", "required": ["a"]}, {"type": "object", "required": ["a"]}],
    [
        {"type": "object", "required": ["a"]},
        {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["a"]},
    ],
    [{"type": "object", "minProperties": 1}, {"type": "object", "required": ["a"]}],
    [
        {"type": "object", "properties": {"b": {}}, "dependentRequired": {"b": ["a"]}},
        {"type": "object", "required": ["a"]},
    ],
]


@pytest.mark.parametrize("branches", UNLISTED_MEMBER_ONE_OFS)
def test_one_of_with_unlisted_members_is_sound(branches):
    schema = {"oneOf": branches}
    try:
        dfa = schema_to_dfa(schema)
    except ConstrainError:
        return  # refused (the branches overlap and are not exact): sound
    assert_samples_valid(dfa, schema, seed=3, n=60)


def test_overlapping_one_of_is_exactly_one():
    dfa = schema_to_dfa({"type": "integer", "oneOf": [{"minimum": 0}, {"maximum": 10}]})
    assert dfa.matches(b"-5") and dfa.matches(b"11")
    assert not any(dfa.matches(str(n).encode()) for n in range(0, 11))


def test_not_of_an_inexact_subschema_is_refused_naming_it():
    with pytest.raises(SchemaError) as caught:
        schema_to_dfa({"type": "string", "not": {"format": "email"}})
    assert caught.value.keyword == "not" and caught.value.pointer == ""
    with pytest.raises(SchemaError) as caught:
        schema_to_dfa(
            {"type": "object", "properties": {"a": {"type": "string", "not": {"format": "date"}}}}
        )
    assert caught.value.keyword == "not" and caught.value.pointer == "/properties/a"


# ---------------------------------------------------------------------------------------------
# JSON-Schema-Test-Suite: no invalid instance accepted

EXTRA_FILES = [
    "not", "if-then-else", "dependentSchemas", "propertyNames", "contains", "boolean_schema",
]  # fmt: skip
CORE_FILES = ["allOf", "oneOf", "anyOf"]


def _suite_cases(data_set):
    root = data_set.root / "json-schema-test-suite"
    for folder, names in (("draft2020-12-extra", EXTRA_FILES), ("draft2020-12", CORE_FILES)):
        for name in names:
            path = root / folder / f"{name}.json"
            if path.exists():
                for group in json.loads(path.read_text(encoding="utf-8")):
                    yield name, group


def test_suite_accepts_no_invalid_instance(data_set):
    compiled = 0
    for name, group in _suite_cases(data_set):
        try:
            dfa = schema_to_dfa(group["schema"], Limits(max_nfa_states=60_000, max_dfa_states=4000))
        except ConstrainError:
            continue
        compiled += 1
        for test in group["tests"]:
            if not test["valid"]:
                text = dumps(test["data"])
                assert not dfa.matches(text.encode()), (name, group["description"], text)
    assert compiled >= {"sample": 1, "full": 25}[data_set.name]


def test_negation_keeps_the_member_order_of_the_positive_branches():
    # The branch lists y before x; the negated part lists x. Had the negated part's members
    # been merged before the branch's, P ∧ S would write x first and {"y":1,"x":5} (valid
    # against the negated part) would survive the difference.
    schema = {
        "type": "object",
        "anyOf": [
            {"properties": {"y": {"type": "integer"}, "x": {"type": "integer"}},
             "required": ["y", "x"]},
        ],
        "not": {"properties": {"x": {"minimum": 0}}},
    }  # fmt: skip
    dfa = schema_to_dfa(schema)
    assert dfa.matches(b'{"y":1,"x":-5}')
    assert not dfa.matches(b'{"y":1,"x":5}')


def _without_memo(monkeypatch):
    """Algebra.schema_dfa compiling every time (the memo's oracle)."""
    from corral.automata.schema.algebra import Algebra

    monkeypatch.setattr(
        Algebra, "schema_dfa", lambda self, s, p, d: self.dfa(self.compile(s, p, d))
    )


def _outcome(schema, limits=None):
    """(trans bytes, accept bytes) of the schema's DFA, or the refusal's type and text."""
    try:
        dfa = schema_to_dfa(schema, limits)
    except (ConstrainError, RecursionError) as error:
        return type(error).__name__, str(error)
    return dfa.trans.tobytes(), dfa.accept.tobytes()


@settings(max_examples=60, deadline=None)
@given(schemas)
def test_memoized_parts_give_the_tables_of_compiling_each_part(schema):
    limits = Limits(max_dfa_states=3000, max_nfa_states=60_000)
    memoized = _outcome(schema, limits)
    with pytest.MonkeyPatch.context() as patch:
        _without_memo(patch)
        assert _outcome(schema, limits) == memoized


def test_memoized_parts_on_the_sample_schemas(sample_data, monkeypatch):
    """The adversarial subsets (`not`, `allOf`, `oneOf` in combination) of the sample data."""
    schemas = []
    for name in ("Handwritten", "Synthesized"):
        path = sample_data / "jsonschemabench" / f"{name}.jsonl"
        schemas += [json.loads(line)["schema"] for line in path.open(encoding="utf-8")]
    memoized = [_outcome(s) for s in schemas]
    _without_memo(monkeypatch)
    assert [_outcome(s) for s in schemas] == memoized
    assert sum(isinstance(m[0], bytes) for m in memoized) >= 3


def test_one_of_of_untyped_branches_with_a_discriminator_compiles_as_any_of():
    """Branches with object keywords and no `type` write only objects (the types their keywords
    imply), so a required member with disjoint `enum`s proves them disjoint (Snowplow's
    bad-row schemas), though non-objects are valid against both."""
    schema = {
        "type": "array",
        "items": {
            "oneOf": [
                {
                    "properties": {"type": {"enum": ["a"]}, "key": {"type": "string"}},
                    "required": ["type", "key"],
                    "additionalProperties": False,
                },
                {"properties": {"type": {"enum": ["b"]}}, "required": ["type"]},
            ]
        },
    }
    dfa = schema_to_dfa(schema)
    assert dfa.matches(b'[{"type":"a","key":"k"},{"type":"b"}]')
    assert not dfa.matches(b'[{"type":"a"}]') and not dfa.matches(b"[1]")
    assert_samples_valid(dfa, schema, seed=5, n=100)


def test_extra_members_of_a_pattern_matching_every_name_take_its_schema():
    """An unlisted member (for `minProperties`) whose name a pattern matches takes that
    pattern's schema, also when the pattern matches every name (its names' DFA is then the
    DFA of every name, one object in the algebra's memo)."""
    schema = {
        "type": "object",
        "minProperties": 1,
        "patternProperties": {"[a-z]*": {"type": "object", "maxProperties": 0}},
    }
    dfa = schema_to_dfa(schema)
    assert_samples_valid(dfa, schema, seed=2, n=100)


def test_one_of_subtracts_only_the_branches_not_proved_disjoint():
    """Branch 0 (an inexact `format`) is disjoint from the others by its `kind`: it is not
    subtracted from them, nor they from it; branches 1 and 2 overlap and are subtracted."""
    schema = {
        "type": "object",
        "oneOf": [
            {
                "properties": {"kind": {"enum": ["a"]}, "mail": {"format": "email"}},
                "required": ["kind"],
            },
            {
                "properties": {"kind": {"enum": ["b"]}, "n": {"type": "integer", "minimum": 0}},
                "required": ["kind"],
            },
            {
                "properties": {"kind": {"enum": ["b"]}, "n": {"type": "integer", "maximum": 5}},
                "required": ["kind"],
            },
        ],
    }
    dfa = schema_to_dfa(schema)
    assert dfa.matches(b'{"kind":"b","n":9}') and dfa.matches(b'{"kind":"b","n":-1}')
    assert not dfa.matches(b'{"kind":"b","n":3}') and not dfa.matches(b'{"kind":"b"}')
    assert dfa.matches(b'{"kind":"a"}')
    assert_samples_valid(dfa, schema, seed=4, n=100)


@given(limit=st.integers(1, 400))
@settings(max_examples=25, deadline=None)
def test_the_algebra_is_refused_past_max_algebra_states(limit):
    """The states the algebra builds are counted (`SchemaLimits.max_algebra_states`): a schema
    whose exact oneOf needs more is refused with LimitError naming the limit; within it, the
    schema compiles to the same DFA as with no such limit."""
    schema = {"oneOf": [{"type": "string", "maxLength": 6}, {"type": "string", "pattern": "^a"}]}
    whole = schema_to_dfa(schema, schema_limits=SchemaLimits(max_algebra_states=10**9))
    with pytest.raises(LimitError):  # the branches' own automata have more than one state
        schema_to_dfa(schema, schema_limits=SchemaLimits(max_algebra_states=1))
    try:
        dfa = schema_to_dfa(schema, schema_limits=SchemaLimits(max_algebra_states=limit))
    except LimitError as error:
        assert error.limit == "max_algebra_states" and error.value == limit
    else:
        assert np.array_equal(dfa.trans, whole.trans) and np.array_equal(dfa.accept, whole.accept)


def test_intern_keeps_one_dfa_per_table_and_hashes_each_object_once(monkeypatch):
    from corral.automata.limits import DEFAULT_SCHEMA_LIMITS
    from corral.automata.schema import algebra
    from corral.automata.schema.compiler import Compiler

    hashed = []
    real = algebra.hashlib.blake2b
    monkeypatch.setattr(
        algebra.hashlib, "blake2b", lambda data, **kw: hashed.append(1) or real(data, **kw)
    )
    interned = Compiler({}, None, DEFAULT_SCHEMA_LIMITS).algebra
    a, same, other = regex_to_dfa("ab|c"), regex_to_dfa("c|ab"), regex_to_dfa("abc")
    assert interned.intern(a) is a and interned.intern(same) is a  # equal tables: one object
    assert interned.intern(other) is other and len(hashed) == 3
    for dfa in (a, other, a):
        assert interned.intern(dfa) is dfa
    assert len(hashed) == 3  # a DFA intern returned is not hashed again
    assert interned.intern(same) is a and len(hashed) == 4  # not returned before: hashed
