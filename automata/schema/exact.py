"""Exactness of compiled subschemas, and the canonical universe negation works in (docs/algebra.md;
docs/design.md section 3 says a schema's language may be a sub-language of its valid instances: safe
for a positive constraint, unsound under `not`).

The universe `U` (`UNIVERSE`, a regex of JSON tokens) is compact JSON spelt one way per value:
- strings are printable ASCII without escapes: no `"`, `\\`, control or non-ASCII character in
  the value (on ASCII text, Python's Unicode `\\d`, `\\w`, `\\s`, as validators run patterns, and
  corral's ASCII classes agree);
- integers are `0` or `-?[1-9][0-9]{0,14}` (at most 15 digits, no `-0`);
- other numbers are `-?(0|[1-9][0-9]{0,6})\\.[0-9]{0,5}[1-9]`: at most 13 significant digits
  and no exponent, so every one parses to a distinct double that is not an integer;
- object members are the ones the schema lists, in the order it lists them (the order the
  compiler writes). `UNIVERSE` checks the tokens; the member order is what every text of the
  compiler's object languages already has, outside the any-value language (see `Exactness`).

A compiled subschema is *exact* when its language holds every text of `U` whose value validates
against it: L(S) ⊇ Valid(S) ∩ U. Then, for a positive context P (the keywords beside `not`)
whose texts list members in schema order, (L(P) ∩ U) minus L(P ∧ S) holds only texts invalid
against S: this is how `not`, an overlapping `oneOf` and the `else` of `if` are compiled
(`corral.automata.schema.compiler`). `Exactness.exact` is a conservative predicate mirroring what
the lowering modules write: False whenever it cannot tell.
"""

from __future__ import annotations

import functools
import re

from corral.automata.compile import regex_to_dfa
from corral.automata.dfa import Dfa
from corral.automata.errors import SchemaError
from corral.automata.limits import SchemaLimits
from corral.automata.schema.keywords import is_constraint
from corral.automata.schema.merge import Merger, typed_parts
from corral.automata.schema.values import is_int, json_type

STRING_U = r'"[ !#-\[\]-~]*"'
INTEGER_U = r"0|-?[1-9][0-9]{0,14}"
FRACTION_U = r"-?(?:0|[1-9][0-9]{0,6})\.[0-9]{0,5}[1-9]"
NUMBER_U = f"(?:{INTEGER_U}|{FRACTION_U})"
UNIVERSE = rf"(?:[{{}}\[\]:,]|{STRING_U}|true|false|null|{NUMBER_U}[,\]}}])*(?:{NUMBER_U})?"
"""The tokens of the universe, as a flat lexer: structural characters, escape-free strings,
literals, and canonical numbers (each followed by what ends a number in JSON). Intersected with a
language of JSON texts it keeps the texts whose every token is canonical."""

_FRACTION = re.compile(FRACTION_U)
_EXACT_KEYS = frozenset(
    {
        "type", "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "multipleOf", "items", "minItems", "maxItems", "uniqueItems",
        "properties", "required", "additionalProperties", "minProperties", "maxProperties",
    }
)  # fmt: skip
"""Keywords the predicate reads for a typed schema; any other constraint makes it inexact."""
_NUMERIC = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_MAX_DEPTH = 24
_MAX_CALLS = 20_000


@functools.lru_cache(maxsize=1)
def universe_dfa() -> Dfa:
    """The canonical DFA of `UNIVERSE` (built once per process)."""
    return regex_to_dfa(UNIVERSE)


def canonical_value(value) -> bool:
    """True when `dumps(value)` is the universe's spelling of the value, or the value has none:
    an integral float is written as its integer (`dumps`), as U spells it; no float whose U
    spelling differs from its repr, no object with two members or more (their order in U
    depends on a schema)."""
    if isinstance(value, float):
        if value.is_integer():
            return True
        spelt = f"{value:.6f}".rstrip("0")
        has_u = _FRACTION.fullmatch(spelt) is not None and float(spelt) == value
        return not has_u or repr(value) == spelt
    if isinstance(value, list):
        return all(canonical_value(v) for v in value)
    if isinstance(value, dict):
        return len(value) <= 1 and all(canonical_value(v) for v in value.values())
    return True


class Exactness:
    """The exactness predicate over one document (`merger` dereferences and merges as the
    compiler does; `schema_limits` gives the caps the lowering applies)."""

    def __init__(self, merger: Merger, schema_limits: SchemaLimits):
        self.merger = merger
        self.limits = schema_limits
        self.memo: dict[tuple[int, bool], tuple[object, bool]] = {}  # (id, free) -> (schema, ok)
        self.calls = 0

    def exact(self, schema, pointer: str, free: bool = False, depth: int = 0) -> bool:
        """True when the compiled language of `schema` holds every text of U valid against it.

        With `free`, the texts it is checked against may list object members in any order
        (they come from the any-value language): then no object may be valid, except through an
        `enum`/`const` of objects with at most one member.

        Memoized per schema object; a schema met again while it is being decided (a `$ref`
        cycle, which the compiler unrolls only so deep) is not exact. At most `_MAX_CALLS`
        decisions per compile, then False."""
        self.calls += 1
        if depth > _MAX_DEPTH or self.calls > _MAX_CALLS:
            return False
        key = (id(schema), free)
        hit = self.memo.get(key)
        if hit is not None and hit[0] is schema:
            return hit[1]
        self.memo[key] = (schema, False)
        out = self._decide(schema, pointer, free, depth)
        self.memo[key] = (schema, out)
        return out

    def _decide(self, schema, pointer: str, free: bool, depth: int) -> bool:
        try:
            schema = self.merger.deref(schema, pointer)
        except SchemaError:
            return False
        if schema is False:
            return True
        if not isinstance(schema, dict):
            return False  # True: any value, depth-bounded
        recurse = functools.partial(self._sub, pointer=pointer, free=free, depth=depth + 1)
        rest = {k: v for k, v in schema.items() if is_constraint(k)}
        try:
            if "allOf" in rest:
                return self._all_of(rest, recurse, pointer, depth)
            for key in ("not", "if", "anyOf", "oneOf"):
                if key in rest:
                    return self._combinator(key, rest, recurse, pointer)
        except SchemaError:
            return False
        if "enum" in rest or "const" in rest:
            return self._enum(rest, recurse)
        return self._typed(rest, recurse, free)

    def _all_of(self, schema: dict, recurse, pointer: str, depth: int) -> bool:
        """Merged parts as merged; parts that do not merge are intersected (the compiler's
        fallback), which is exact when every part is and none writes an object (two parts
        may list members in different orders)."""
        try:
            return recurse(self.merger.merge_all([schema], pointer))
        except SchemaError as error:
            if error.keyword != "allOf" or not isinstance(schema.get("allOf"), list):
                return False
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        parts = []
        for part in schema["allOf"]:
            try:
                parts.append(self.merger.merge_all([rest, part], pointer))
            except SchemaError:
                parts += [part, rest]
        return all(self.exact(p, pointer, True, depth + 1) for p in typed_parts(parts))

    def _sub(self, schema, pointer: str, free: bool, depth: int) -> bool:
        return self.exact(schema, pointer, free, depth)

    def _combinator(self, key: str, schema: dict, recurse, pointer: str) -> bool:
        merge = self.merger.merge_or_conjoin
        rest = {k: v for k, v in schema.items() if k != key}
        if key == "not":
            return recurse(rest) and recurse(merge([rest, schema["not"]], pointer))
        if key == "if":
            rest = {k: v for k, v in rest.items() if k not in ("then", "else")}
            then, otherwise = schema.get("then", True), schema.get("else", True)
            if "then" not in schema and "else" not in schema:
                return recurse(rest)
            with_else = merge([rest, otherwise], pointer)
            return (
                recurse(merge([rest, schema["if"], then], pointer))
                and recurse(with_else)
                and recurse(merge([with_else, schema["if"]], pointer))
            )
        branches = schema[key]
        if not isinstance(branches, list) or not branches:
            return False
        merged = [merge([b, rest], pointer) for b in branches]
        if not all(recurse(m) for m in merged):
            return False
        if key == "anyOf":
            return True
        from corral.automata.schema.disjoint import leave_out_others_required

        restricted = leave_out_others_required(merged)
        if any(r is not m for r, m in zip(restricted, merged, strict=True)):
            return False
        return all(
            recurse(merge([mi, mj], pointer))
            for i, mi in enumerate(merged)
            for j, mj in enumerate(merged)
            if i != j
        )

    def _enum(self, schema: dict, recurse) -> bool:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        if not isinstance(values, list) or not all(canonical_value(v) for v in values):
            return False
        if "const" in schema and not canonical_value(schema["const"]):
            return False
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const", "type")}
        if not rest:
            return True
        # The compiler keeps a value when its text is in the language of the other keywords,
        # typed by the values when untyped; an object member that language does not list
        # would be dropped, so values holding objects are exact only without other keywords.
        if any(_holds_object(v) for v in values):
            return False
        types = schema.get("type", sorted({json_type(v) for v in values}) or ["null"])
        return recurse({**rest, "type": types})

    def _typed(self, schema: dict, recurse, free: bool) -> bool:
        if "type" not in schema or any(k not in _EXACT_KEYS for k in schema):
            return False  # untyped: the compiler writes only the implied types
        names = schema["type"]
        names = [names] if isinstance(names, str) else names
        if not isinstance(names, list):
            return False
        checks = {
            "string": self._string,
            "integer": _integer,
            "number": _number,
            "boolean": lambda s: True,
            "null": lambda s: True,
            "array": lambda s: self._array(s, recurse),
            "object": lambda s: not free and self._object(s, recurse),
        }
        if "integer" in names and "number" in names:
            names = [n for n in names if n != "integer"]
        return all(n in checks and checks[n](schema) for n in names)

    def _string(self, schema: dict) -> bool:
        """Strings are exact unless `maxLength` is lowered to the cap (patterns are exact on
        the universe's ASCII strings)."""
        high = schema.get("maxLength")
        return high is None or (is_int(high) and high <= self.limits.max_string_length)

    def _array(self, schema: dict, recurse) -> bool:
        items = schema.get("items")
        if not isinstance(items, dict | bool) or items is True:
            return False
        high = schema.get("maxItems")
        if high is not None and (not is_int(high) or high > self.limits.max_array_length):
            return False
        if schema.get("uniqueItems") is True and (high is None or high > 1):
            return False
        return recurse(items)

    def _object(self, schema: dict, recurse) -> bool:
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(properties, dict) or not isinstance(required, list):
            return False
        if any(name not in properties for name in required):
            return False
        low, high = schema.get("minProperties"), schema.get("maxProperties")
        if low is not None and not (is_int(low) and low <= len(set(required))):
            return False
        if high is not None and not (is_int(high) and high >= len(properties)):
            return False
        return all(recurse(sub) for sub in properties.values())


def _integer(schema: dict) -> bool:
    """Integer bounds are exact when they are integers, as ints or integral floats
    (`corral.automata.schema.numbers`)."""
    for key in _NUMERIC:
        value = schema.get(key)
        integral = is_int(value) or (isinstance(value, float) and value.is_integer())
        if key in schema and not (integral or key == "multipleOf"):
            return False
    return schema.get("multipleOf", 1) == 1 and not isinstance(schema.get("multipleOf"), bool)


def _number(schema: dict) -> bool:
    """Numbers are exact without bounds (the lowering narrows bounded fractions)."""
    return not any(key in schema for key in _NUMERIC)


def _holds_object(value) -> bool:
    if isinstance(value, dict):
        return True
    return isinstance(value, list) and any(_holds_object(v) for v in value)
