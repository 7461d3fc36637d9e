"""Arrays and objects of a JSON Schema: the lowering of `array` and `object` subschemas to the
schema form (docs/design.md section 3: "array with `items`: minItems / maxItems exact"; "object:
`properties` in the given order; `required` members always, the others possibly, with a comma
exactly between members").

Beyond the subset, as sub-languages: `prefixItems` and array-form `items` (tuples, with
`additionalItems` / `items` for the rest); `uniqueItems` when `maxItems` <= 1 or false, or
when the items' language has at most `MAX_UNIQUE_VALUES` values (each written at most once, in
the order of their texts); `maxItems` above `SchemaLimits.max_array_length` lowered to it;
`minProperties` (the first optional members become required; one above the members that can
be written adds one unlisted member, last, see `lower_object`) and `maxProperties` (the last
optional members are left out);
`patternProperties` (a written member whose name the pattern matches must also satisfy its
schema); `dependentRequired` and array-form `dependencies` (the dependencies of a written member
become required). A required name `properties` does not list is written after the listed
members, its value allowed by the `patternProperties` its name matches or else by
`additionalProperties` (none when that is false).

Each function takes `compile(subschema, pointer, depth) -> form`, the compiler's recursion.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from corral.automata.errors import LimitError, SchemaError, excerpt
from corral.automata.limits import SchemaLimits
from corral.automata.schema.form import EMPTY, NOTHING, Lit, Object, choice, repeat, seq
from corral.automata.schema.keywords import child, count, unsupported, written
from corral.automata.schema.values import dumps, json_key

Compile = Callable[[object, str, int], object]


def lower_array(
    schema: dict,
    pointer: str,
    depth: int,
    compile: Compile,
    schema_limits: SchemaLimits,
    finite_texts: Callable | None = None,
):
    """The form of the JSON arrays `schema` allows (see the module docstring);
    `finite_texts(form, most)` lists a finite item language's texts for `uniqueItems`
    (`corral.automata.schema.algebra.Algebra.finite_texts`; without it `uniqueItems` over more
    than one item is refused).

    Raises:
        SchemaError: malformed counts or items, `uniqueItems` with more than one item of an
            infinite or large item language (or of a tuple), or an
            array without items when the any-value language is off.
        LimitError: `minItems` above `max_array_length`.
    """
    min_items = count(schema, "minItems", pointer) or 0
    max_items = count(schema, "maxItems", pointer)
    if max_items is not None and min_items > max_items:
        raise SchemaError(pointer, "maxItems", "minItems is greater than maxItems")
    cap = schema_limits.max_array_length
    if min_items > cap:
        raise LimitError(
            "max_array_length",
            cap,
            f"{pointer or '/'}: minItems {written(schema['minItems'])} is too large",
        )
    if max_items is not None:
        max_items = min(max_items, cap)
    unique = schema.get("uniqueItems", False)
    if not isinstance(unique, bool):
        raise SchemaError(pointer, "uniqueItems", "uniqueItems must be a boolean")
    unique = unique and (max_items is None or max_items > 1)
    items = schema.get("items")
    if unique and (finite_texts is None or "prefixItems" in schema or isinstance(items, list)):
        raise unsupported(pointer, "uniqueItems", "uniqueItems with more than one item")
    prefix = schema.get("prefixItems")
    if isinstance(items, list):
        prefix, rest_schema, rest_key = (
            items,
            schema.get("additionalItems", True),
            "additionalItems",
        )
    else:
        rest_schema, rest_key = (True if items is None else items), "items"
    if items is None and prefix is None and schema_limits.any_value_depth <= 0:
        raise SchemaError(pointer, "items", "an array without items is not supported")
    if prefix is not None and not isinstance(prefix, list):
        raise SchemaError(pointer, "prefixItems", "prefixItems must be an array")
    prefix = prefix or []
    key = "items" if isinstance(items, list) else "prefixItems"
    prefix_forms = [compile(s, child(pointer, key, i), depth + 1) for i, s in enumerate(prefix)]
    rest = compile(rest_schema, child(pointer, rest_key), depth + 1)
    if unique:
        return _unique_array(rest, min_items, max_items, finite_texts, pointer)
    comma = Lit(",")
    alternatives = []
    k = len(prefix_forms)
    top = k if max_items is None else min(k, max_items)
    for n in range(min_items, top + 1):  # n items, all from the prefix
        if n == 0:
            alternatives.append(EMPTY)
            continue
        parts = [prefix_forms[0]]
        for item in prefix_forms[1:n]:
            parts += [comma, item]
        alternatives.append(seq(*parts))
    if max_items is None or max_items > k:  # the whole prefix, then more items
        lo = max(min_items - k, 1)
        extra_hi = None if max_items is None else max_items - k
        if k == 0:
            more = None if extra_hi is None else extra_hi - 1
            body = seq(rest, repeat(seq(comma, rest), lo - 1, more))
            alternatives.append(repeat(body, 0, 1) if min_items == 0 else body)
        else:
            parts = [prefix_forms[0]]
            for item in prefix_forms[1:]:
                parts += [comma, item]
            parts.append(repeat(seq(comma, rest), lo, extra_hi))
            alternatives.append(seq(*parts))
    body = choice(alternatives)
    if body is NOTHING:
        return NOTHING
    return seq(Lit("["), body, Lit("]"))


MAX_UNIQUE_VALUES = 32
"""`uniqueItems` with more than one item is compiled when the items' language has at most this
many texts (an `enum`, booleans, a short bounded integer range); otherwise it is refused."""


def _unique_array(item, min_items: int, max_items: int | None, finite_texts, pointer: str):
    """Arrays of distinct items from a finite item language: its values (one text per value as
    JSON Schema compares them) in the order of their texts, each at most once, between
    `min_items` and `max_items` of them. A sub-language: the same items in another order are
    valid too. SchemaError naming `uniqueItems` when the language is infinite or too large."""
    texts = finite_texts(item, MAX_UNIQUE_VALUES)
    if texts is None:
        reason = f"uniqueItems over more than {MAX_UNIQUE_VALUES} possible items"
        raise unsupported(pointer, "uniqueItems", reason)
    values = list({json_key(json.loads(t)): t for t in reversed(texts)}.values())[::-1]
    k = len(values)
    hi = k if max_items is None else min(max_items, k)
    if min_items > hi:
        return NOTHING
    memo: dict = {}

    def after(j: int, n: int):  # `n` items written, the last one values[j]
        key = (j, min(n, min_items) if hi == k else n)
        if key not in memo:
            more = [seq(Lit("," + values[i]), after(i, n + 1)) for i in range(j + 1, k)]
            memo[key] = choice([*(more if n < hi else []), *([EMPTY] if n >= min_items else [])])
        return memo[key]

    firsts = [seq(Lit(values[i]), after(i, 1)) for i in range(k)] if hi > 0 else []
    body = choice([*firsts, *([EMPTY] if min_items == 0 else [])])
    return NOTHING if body is NOTHING else seq(Lit("["), body, Lit("]"))


def lower_object(
    schema: dict,
    pointer: str,
    depth: int,
    compile: Compile,
    schema_limits: SchemaLimits,
    extra_member: Callable | None = None,
):
    """The form of the JSON objects `schema` allows: the listed members in schema order (see
    the module docstring). A member whose value can never be written is left out, or makes the
    object NOTHING when it is required.

    A `minProperties` one above the members that can be written makes them all required and
    adds one member the schema does not list, last: `extra_member(schema, taken, pointer,
    depth)` gives its form (`corral.automata.schema.algebra.Algebra.extra_member`; `taken`
    are the names it must avoid), NOTHING when none can be written.

    Raises:
        SchemaError: malformed keywords, `propertyNames`, or a refused counting or
            dependency (`minProperties` two or more above the members, or one above them
            without `extra_member`).
        LimitError: more members than `max_properties`.
    """
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise SchemaError(pointer, "properties", "properties must be an object")
    if len(properties) > schema_limits.max_properties:
        raise LimitError(
            "max_properties", schema_limits.max_properties, f"{pointer or '/'}: too many members"
        )
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(n, str) for n in required):
        raise SchemaError(pointer, "required", "required must be an array of names")
    additional = schema.get("additionalProperties", True)
    if not isinstance(additional, (bool, dict)):
        raise SchemaError(pointer, "additionalProperties", "must be a schema")
    required, unlisted = _required_members(schema, properties, required, pointer)
    extra = _pattern_properties(schema, [*properties, *unlisted], pointer)
    members = []
    for name, sub in [*properties.items(), *((n, None) for n in unlisted)]:
        if sub is None:  # a required name `properties` does not list
            where = child(pointer, "additionalProperties")
            sub = {"allOf": extra.pop(name)} if name in extra else additional
        else:
            where = child(pointer, "properties", name)
            if name in extra:
                sub = {"allOf": [sub, *extra[name]]}
        value = compile(sub, where, depth + 1)
        if value is NOTHING:
            if name in required:
                return NOTHING
            continue
        members.append((seq(Lit(dumps(name) + ":"), value), name in required))
    if "propertyNames" in schema:
        raise unsupported(pointer, "propertyNames")
    low = count(schema, "minProperties", pointer)
    if low is not None and low == len(members) + 1 and extra_member is not None:
        taken = {*properties, *unlisted, *_dependency_keys(schema)}
        extra = extra_member(schema, taken, pointer, depth)
        if extra is NOTHING:
            return NOTHING
        members.append((extra, True))
    members = _count_members(schema, members, pointer)
    return Object(tuple(members))


def _dependency_keys(schema: dict) -> set:
    """The names whose presence `dependentRequired` / `dependencies` constrain."""
    out = set()
    for key in ("dependentRequired", "dependencies"):
        table = schema.get(key)
        if isinstance(table, dict):
            out |= set(table)
    return out


def _count_members(schema: dict, members: list, pointer: str) -> list:
    """Apply minProperties / maxProperties as a sub-language: the first optional members
    become required until there are minProperties, and the last optional members are left
    out until there are at most maxProperties."""
    low = count(schema, "minProperties", pointer)
    high = count(schema, "maxProperties", pointer)
    n_required = sum(1 for _, r in members if r)
    if low is not None and low > n_required:
        if low > len(members):
            reason = "more than one member beyond the listed members"
            raise unsupported(pointer, "minProperties", reason)
        promote = low - n_required
        out = []
        for member, required in members:
            if not required and promote:
                required, promote = True, promote - 1
            out.append((member, required))
        members, n_required = out, low
    if high is not None and high < len(members):
        if high < n_required:
            raise unsupported(pointer, "maxProperties", "fewer than the required members")
        drop = len(members) - high
        out = []
        for member, required in reversed(members):
            if not required and drop:
                drop -= 1
                continue
            out.append((member, required))
        members = out[::-1]
    return members


def _required_members(schema: dict, properties: dict, required: list, pointer: str) -> tuple:
    """(the names every written object has, the required names `properties` does not list, in
    the order `required` names them, then dependencies in sorted order). The dependencies
    (`dependentRequired`, array-form `dependencies`) of every written member become required:
    a sub-language when the member was optional."""
    tables = []
    for key in ("dependentRequired", "dependencies"):
        deps = schema.get(key)
        if deps is None:
            continue
        if not isinstance(deps, dict):
            raise SchemaError(pointer, key, f"{key} must be an object")
        tables.append((key, deps))
    out = set(required)
    unlisted = [name for name in dict.fromkeys(required) if name not in properties]
    written = [*properties, *unlisted]
    i = 0
    while i < len(written):  # a written name's dependencies are written too, once each
        name = written[i]
        for key, table in tables:
            needed = table.get(name, [])
            if not isinstance(needed, list):
                raise unsupported(pointer, key, "schema dependencies")
            if not all(isinstance(dep, str) for dep in needed):
                raise SchemaError(pointer, key, f"{key} must list member names")
            for dep in sorted(needed):
                out.add(dep)
                if dep not in properties and dep not in unlisted:
                    unlisted.append(dep)
                    written.append(dep)
        i += 1
    return out, unlisted


def _pattern_properties(schema: dict, names: list, pointer: str) -> dict:
    """Member name (of `names`) -> the patternProperties schemas it matches (Python's `re`,
    as validators run it)."""
    table = schema.get("patternProperties")
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise SchemaError(pointer, "patternProperties", "patternProperties must be an object")
    out: dict = {}
    for pattern, sub in table.items():
        try:
            regex = re.compile(pattern)
        except re.error:
            raise unsupported(
                pointer, "patternProperties", f"pattern {excerpt(pattern)} is not a Python regex"
            ) from None
        for name in names:
            if regex.search(name):
                out.setdefault(name, []).append(sub)
    return out
