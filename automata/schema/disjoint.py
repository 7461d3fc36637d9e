"""Disjointness proofs for `oneOf` (docs/design.md section 3, beyond the subset).

`oneOf` is compiled as `anyOf` only when no value of one branch's language can validate against
another branch: their possible types differ, or the other branch requires a member this branch
never writes (a member another branch requires is left out of branches that do not require it:
`leave_out_others_required`), or a required member has disjoint `const`/`enum` values (a
discriminator), or the branches' `enum`/`const` sets are disjoint. The proofs are conservative:
`excludes` answers False whenever it cannot tell.
"""

from __future__ import annotations

from corral.automata.errors import SchemaError
from corral.automata.schema.formats import INTEGER_FORMATS, NUMBER_FORMATS
from corral.automata.schema.keywords import TYPE_OF_KEYWORD, TYPES, is_constraint
from corral.automata.schema.merge import Merger
from corral.automata.schema.values import json_key, json_type

_EVERY_TYPE = frozenset({"string", "number", "boolean", "null", "array", "object"})


def leave_out_others_required(branches: list) -> list:
    """The merged `oneOf` branches, each without the listed members that another branch
    requires and it does not (a sub-language that makes the `required` proof apply)."""
    out = []
    for i, branch in enumerate(branches):
        if isinstance(branch, dict) and isinstance(branch.get("properties"), dict):
            required_here = set(branch.get("required", []))
            drop = set()
            for j, other in enumerate(branches):
                if j != i and isinstance(other, dict):
                    drop |= set(other.get("required", [])) - required_here
            if drop & set(branch["properties"]):
                branch = dict(branch)
                branch["properties"] = {
                    k: v for k, v in branch["properties"].items() if k not in drop
                }
        out.append(branch)
    return out


def accepted_types(schema) -> set[str]:
    """The JSON types ("integer" not counted apart: "number" means every number) of which
    `schema` accepts every value: those it allows (its `type`, else all) that none of its
    keywords constrains. A keyword of one type (`TYPE_OF_KEYWORD`; `format`: strings, numbers
    for the numeric formats) constrains that type only; `type` and annotations nothing; any
    other (`enum`, `$ref`, `allOf`, `not`, ...) every type. Conservative: a subset of the
    truth."""
    if schema is True:
        return set(_EVERY_TYPE)
    if not isinstance(schema, dict):
        return set()
    if "type" in schema:
        t = schema["type"]
        names = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else set()
        out = names & _EVERY_TYPE  # "integer" alone does not allow every number
    else:
        out = set(_EVERY_TYPE)
    for key in schema:
        if key == "type" or not is_constraint(key):
            continue
        if key == "format":
            fmt = schema[key]
            numeric = fmt in INTEGER_FORMATS or fmt in NUMBER_FORMATS
            out.discard("number" if numeric else "string")
        elif key in TYPE_OF_KEYWORD:
            out.discard(TYPE_OF_KEYWORD[key])
        else:
            return set()
    return out


def without_shared_types(branches: list, merger: Merger, pointer: str) -> list:
    """The merged `oneOf` branches without the types that two or more of them accept whole
    (`accepted_types`): a value of such a type is valid against two branches, so against no
    `oneOf`. Exact (the valid values are the same), and it leaves the algebra the types where
    the branches differ (docs/algebra.md). A branch left with no type is False."""
    counts: dict[str, int] = {}
    for branch in branches:
        for t in accepted_types(branch):
            counts[t] = counts.get(t, 0) + 1
    shared = {t for t, n in counts.items() if n >= 2}
    if not shared:
        return branches
    keep = [t for t in TYPES if ("number" if t == "integer" else t) not in shared]
    out = []
    for branch in branches:
        if branch is False or not keep:
            out.append(False)
            continue
        out.append(merger.merge_or_conjoin([branch, {"type": keep}], pointer))
    return out


def possible_types(schema, merger: Merger, pointer: str, depth: int = 0) -> set[str]:
    """A superset of the JSON types of the values valid against `schema` ("integer" folded
    into "number"); every type past 20 nested combinators or on an unresolved `$ref`."""
    if depth > 20:
        return set(_EVERY_TYPE)
    try:
        schema = merger.deref(schema, pointer)
    except SchemaError:
        return set(_EVERY_TYPE)
    if schema is False:
        return set()
    if not isinstance(schema, dict):
        return set(_EVERY_TYPE)
    out = set(_EVERY_TYPE)
    if "type" in schema:
        t = schema["type"]
        names = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else _EVERY_TYPE
        out &= {"number" if n == "integer" else n for n in names}
    for key in ("enum", "const"):
        if key in schema:
            vals = schema[key] if key == "enum" else [schema[key]]
            if isinstance(vals, list):
                out &= {"number" if json_type(v) == "integer" else json_type(v) for v in vals}
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            union = set()
            for branch in schema[key]:
                union |= possible_types(branch, merger, pointer, depth + 1)
            out &= union
    if isinstance(schema.get("allOf"), list):
        for branch in schema["allOf"]:
            out &= possible_types(branch, merger, pointer, depth + 1)
    return out


_DISPATCHED = frozenset(
    {"$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas",
     "dependencies", "propertyNames", "contains", "enum", "const", "type"}
)  # fmt: skip
"""Keywords after which the compiler does not lower a schema by the types its keywords imply."""


def written_types(schema, merger: Merger, pointer: str) -> set[str]:
    """A superset of the JSON types of the texts the compiler writes for `schema` ("integer"
    folded into "number"): for an untyped schema lowered by its keywords alone (none of
    `_DISPATCHED`), the types those keywords imply, as `Compiler.types_of` takes them
    (`properties` alone writes objects only, though any non-object is valid against it);
    otherwise `possible_types`."""
    if not isinstance(schema, dict) or any(k in schema for k in _DISPATCHED):
        return possible_types(schema, merger, pointer)
    implied = {TYPE_OF_KEYWORD[k] for k in schema if k in TYPE_OF_KEYWORD}
    fmt = schema.get("format")
    if isinstance(fmt, str):
        integral = fmt in INTEGER_FORMATS or fmt in NUMBER_FORMATS
        implied.add("number" if integral else "string")
    implied = {"number" if t == "integer" else t for t in implied}
    return implied or possible_types(schema, merger, pointer)


def enum_keys(schema) -> set | None:
    """The `json_key`s of the values `schema`'s `enum`/`const` allow, None when unbounded."""
    if not isinstance(schema, dict):
        return None
    out = None
    for key in ("enum", "const"):
        if key in schema:
            vals = schema[key] if key == "enum" else [schema[key]]
            if not isinstance(vals, list):
                return None
            keys = {json_key(v) for v in vals}
            out = keys if out is None else out & keys
    return out


def written_names(schema: dict) -> set | None:
    """The member names the object language of `schema` can write (`containers.lower_object`):
    its `properties`, its `required` names (an unlisted one is written after the listed ones)
    and the names its `dependentRequired` / array `dependencies` add; None when it can write
    others (a `minProperties` above the listed members adds a member of another name) or the
    keywords are malformed."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list):
        return None
    names = set(properties) | {n for n in required if isinstance(n, str)}
    for key in ("dependentRequired", "dependencies"):
        table = schema.get(key, {})
        if not isinstance(table, dict):
            return None
        for needed in table.values():
            if isinstance(needed, list):
                names |= {n for n in needed if isinstance(n, str)}
    low = schema.get("minProperties")
    if low is not None and (not isinstance(low, int) or low > len(properties)):
        return None
    return names


def excludes(mi, mj, merger: Merger, pointer: str) -> bool:
    """True when no value of branch i's language (compiled from the merged branch `mi`, after
    `leave_out_others_required`) is valid against branch j (`mj`)."""
    ti, tj = written_types(mi, merger, pointer), possible_types(mj, merger, pointer)
    if not ti & tj:
        return True
    if not isinstance(mi, dict) or not isinstance(mj, dict):
        return False
    vi, vj = enum_keys(mi), enum_keys(mj)
    if vi is not None and vj is not None and not vi & vj:
        return True
    if ti & tj != {"object"} or any(k in mi for k in ("anyOf", "oneOf", "allOf", "$ref")):
        return False
    # i writes objects only (for the shared type): its members are the names it can write
    props_i = mi.get("properties", {})
    names_i = written_names(mi)
    required_j = mj.get("required", [])
    if (
        names_i is not None
        and isinstance(required_j, list)
        and any(n not in names_i for n in required_j)
    ):
        return True
    props_j = mj.get("properties", {})
    for name in mi.get("required", []):
        if name in props_i and isinstance(props_j, dict) and name in props_j:
            a = enum_keys(merger.deref(props_i[name], pointer))
            b = enum_keys(merger.deref(props_j[name], pointer))
            if a is not None and b is not None and not a & b:
                return True
    return False
