"""Merging of `allOf` parts into one schema (docs/design.md section 3, beyond the subset).

`allOf` compiles when its parts merge: `type` lists intersect (an integer is a number),
`required` unite, `properties` merge member by member (a member one part does not list must
satisfy that part's `additionalProperties`, and is dropped when that is false), numeric and
length bounds take the tighter value, `enum`/`const` intersect, nested `anyOf`s multiply out
(at most 64 branches), anything else must be equal in both parts. `$ref`s are dereferenced first
(with their siblings merged in, outside drafts 3 to 7). Otherwise the merge is refused with a
`SchemaError` naming `allOf`.
"""

from __future__ import annotations

from corral.automata.errors import SchemaError
from corral.automata.schema.keywords import TYPES, check_keywords, is_constraint, unsupported
from corral.automata.schema.refs import RefResolver, ref_siblings
from corral.automata.schema.values import is_number, json_key

_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_ARRAY_KEYS = ("items", "prefixItems", "additionalItems")


class Merger:
    """`allOf` merging and `$ref` dereferencing over one document (`resolver`)."""

    def __init__(self, resolver: RefResolver):
        self.resolver = resolver

    def deref(self, schema, pointer: str):
        """The schema with top-level `$ref`s replaced by their targets (siblings merged as the
        compiler does). Raises SchemaError on a cycle of bare `$ref`s."""
        return self._deref_seen(schema, pointer, ())[0]

    def _deref_seen(self, schema, pointer: str, seen: tuple) -> tuple:
        """`deref`, also returning the ref targets passed through (with `seen`)."""
        while isinstance(schema, dict) and "$ref" in schema:
            siblings = ref_siblings(schema)
            target_pointer, target = self.resolver.resolve(schema["$ref"], pointer)
            if target_pointer in seen:
                raise unsupported(pointer, "$ref", f"a $ref cycle through {target_pointer!r}")
            seen = (*seen, target_pointer)
            if siblings and not self.resolver.legacy:
                return self.merge_all([target, siblings], pointer, seen), seen
            schema = target
        return schema, seen

    def merge_all(self, parts: list, pointer: str, seen: tuple = ()) -> dict | bool:
        """One schema equivalent to the conjunction of `parts` (each may hold `allOf` and
        `$ref`; `seen` are the ref targets already passed through), or False when a part is.

        Raises:
            SchemaError: a malformed part, a refused keyword, or parts that do not merge
                (keyword `allOf`).
        """
        flat: list = []
        queue = [(part, seen) for part in parts]
        while queue:
            part, part_seen = queue.pop(0)
            part, part_seen = self._deref_seen(part, pointer, part_seen)
            if part is True:
                continue
            if part is False:
                return False
            if not isinstance(part, dict):
                raise SchemaError(pointer, "allOf", "allOf must list schemas")
            check_keywords(part, pointer)
            part = desugar(part, pointer)
            if "allOf" in part:
                branches = part["allOf"]
                if not isinstance(branches, list) or not branches:
                    raise SchemaError(pointer, "allOf", "allOf must be a non-empty array")
                rest = {k: v for k, v in part.items() if k != "allOf"}
                queue = [(rest, part_seen), *((b, part_seen) for b in branches), *queue]
                continue
            flat.append(part)
        merged: dict | bool = {}
        for part in flat:
            merged = self._merge_two(merged, part, pointer)
            if merged is False:
                return False
        return merged

    def merge_or_conjoin(self, parts: list, pointer: str):
        """`merge_all(parts)`, or `{"allOf": parts}` when the parts do not merge (the compiler
        then intersects their languages, `corral.automata.schema.algebra`). Raises the
        `SchemaError`s of `merge_all` other than a failed merge."""
        try:
            return self.merge_all(parts, pointer)
        except SchemaError as error:
            if error.keyword != "allOf":
                raise
            return {"allOf": list(parts)}

    def _merge_two(self, a: dict, b: dict, pointer: str) -> dict | bool:
        """One schema for `a` and `b` both, or False when their `type`s share no type (no value
        is valid against both)."""
        for x, y in ((a, b), (b, a)):
            tuple_form = "prefixItems" in x or isinstance(x.get("items"), list)
            if (
                tuple_form
                and any(k in y for k in _ARRAY_KEYS)
                and any(x.get(k) != y.get(k) for k in _ARRAY_KEYS)
            ):
                raise unsupported(pointer, "allOf", "tuple items in several parts")
        out = dict(a)
        for key, value in b.items():
            if not is_constraint(key):
                continue
            if key not in out:
                out[key] = value
                continue
            old = out[key]
            if key == "type":
                out[key] = _intersect_types(type_names(old, pointer), type_names(value, pointer))
                if not out[key]:
                    return False
            elif key == "required":
                out[key] = list(old) + [n for n in value if n not in old]
            elif key in ("enum", "const", "properties", "additionalProperties"):
                continue  # merged below
            elif key in _LOWER_BOUNDS or key in _UPPER_BOUNDS:
                if is_number(old) and is_number(value):
                    out[key] = max(old, value) if key in _LOWER_BOUNDS else min(old, value)
                elif old != value:
                    raise unsupported(pointer, "allOf", f"parts disagree on {key!r}")
            elif (
                key == "items" and isinstance(old, (dict, bool)) and isinstance(value, (dict, bool))
            ):
                out[key] = old if old == value else {"allOf": [old, value]}
            elif key == "not" and old != value:
                out[key] = {"anyOf": [old, value]}  # (not a) and (not b) = not (a or b)
            elif key == "propertyNames" and old != value:
                out[key] = {"allOf": [old, value]}
            elif key == "anyOf" and old != value:
                if not isinstance(old, list) or not isinstance(value, list):
                    raise SchemaError(pointer, "anyOf", "anyOf must be a non-empty array")
                if len(old) * len(value) > 64:
                    raise unsupported(pointer, "allOf", "too many anyOf combinations")
                out[key] = [{"allOf": [x, y]} for x in old for y in value]
            elif old != value:
                raise unsupported(pointer, "allOf", f"parts disagree on {key!r}")
        values = _intersect_values(a, b, pointer)
        if values is not None:
            out.pop("const", None)
            out["enum"] = values
        if "properties" in a or "properties" in b:
            out["properties"], out["additionalProperties"] = _merge_properties(a, b, pointer)
        if "allOf" in out:
            nested = out.pop("allOf")
            return self.merge_all([out, *nested], pointer)
        return out


def type_names(value, pointer: str) -> list[str]:
    """The type names of a `type` value (a name or a non-empty list of names).

    Raises:
        SchemaError: a malformed `type` or an unknown name (keyword `type`, at `pointer`).
    """
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        raise SchemaError(pointer, "type", "type must be a name or a non-empty list")
    for name in names:
        if name not in TYPES:
            raise SchemaError(pointer, "type", f"unknown type {name!r}")
    return names


def _intersect_types(t1: list[str], t2: list[str]) -> list[str]:
    """The type names both lists allow (an integer is a number), in `TYPES` order."""
    t1, t2 = set(t1), set(t2)
    both = t1 & t2
    if ("integer" in t1 and "number" in t2) or ("number" in t1 and "integer" in t2):
        both |= {"integer"}
    return [t for t in TYPES if t in both]


def _intersect_values(a: dict, b: dict, pointer: str) -> list | None:
    """The values both parts' `enum`/`const` allow (in the order first given), or None when
    neither part has one."""
    values = None
    for part in (a, b):
        for key in ("enum", "const"):
            if key in part:
                vals = part[key] if key == "enum" else [part[key]]
                if not isinstance(vals, list):
                    raise SchemaError(pointer, "enum", "enum must be an array")
                if values is None:
                    values = list(vals)
                else:
                    keys = {json_key(v) for v in vals}
                    values = [v for v in values if json_key(v) in keys]
    return values


def _merge_properties(a: dict, b: dict, pointer: str) -> tuple[dict, object]:
    """(merged `properties`, merged `additionalProperties`) of two parts."""
    pa, pb = a.get("properties", {}), b.get("properties", {})
    if not isinstance(pa, dict) or not isinstance(pb, dict):
        raise SchemaError(pointer, "properties", "properties must be an object")
    aa, ab = a.get("additionalProperties", True), b.get("additionalProperties", True)
    out = {}
    for name in list(pa) + [n for n in pb if n not in pa]:
        schemas = []
        for props, additional in ((pa, aa), (pb, ab)):
            if name in props:
                schemas.append(props[name])
            elif additional is False:
                schemas = None
                break
            elif isinstance(additional, dict):
                schemas.append(additional)
        if schemas is None:
            continue  # one part forbids the member: never write it
        out[name] = schemas[0] if len(schemas) == 1 else {"allOf": schemas}
    additional = False if (aa is False or ab is False) else aa if ab is True else ab
    return out, additional


def desugar(schema: dict, pointer: str) -> dict:
    """`schema` with its conditionals written as `allOf` parts of `anyOf`/`not` (exact
    rewrites, docs/algebra.md): `if`/`then`/`else` becomes
    `anyOf: [allOf: [if, then], allOf: [not: if, else]]`; each `dependentSchemas` entry (and
    each schema-valued `dependencies` entry) `name: S` becomes `if: {required: [name]}, then: S`.
    `then`/`else` without `if` are dropped (validators ignore them). Returns `schema` itself
    when it holds none of these.

    Raises:
        SchemaError: `dependentSchemas` (or `dependencies`) is not an object.
    """
    keys = ("if", "then", "else", "dependentSchemas")
    deps = schema.get("dependencies")
    schema_deps = isinstance(deps, dict) and any(not isinstance(v, list) for v in deps.values())
    if not any(k in schema for k in keys) and not schema_deps:
        return schema
    out = {k: v for k, v in schema.items() if k not in keys}
    parts = list(out.pop("allOf", []) if isinstance(out.get("allOf"), list) else [])
    if "allOf" in out:
        raise SchemaError(pointer, "allOf", "allOf must be a non-empty array")
    if "if" in schema and ("then" in schema or "else" in schema):
        test, then, otherwise = schema["if"], schema.get("then", True), schema.get("else", True)
        parts.append({"anyOf": [{"allOf": [test, then]}, {"allOf": [{"not": test}, otherwise]}]})
    named = []
    for key in ("dependentSchemas", "dependencies"):
        table = schema.get(key)
        if table is None or (key == "dependencies" and not schema_deps):
            continue
        if not isinstance(table, dict):
            raise SchemaError(pointer, key, f"{key} must be an object")
        named += [(n, s) for n, s in table.items() if not isinstance(s, list)]
    if schema_deps:
        out["dependencies"] = {n: v for n, v in deps.items() if isinstance(v, list)}
    for name, sub in named:
        parts.append(desugar({"if": {"required": [name]}, "then": sub}, pointer))
    if parts:
        out["allOf"] = parts
    return out


def typed_parts(parts: list) -> list:
    """The parts of a conjunction, each untyped object part given the `type` of the first typed
    one (a conjunct adds nothing the conjunction does not already say, and the part's language
    then covers that type rather than only the types its keywords imply)."""
    typed = next((p["type"] for p in parts if isinstance(p, dict) and "type" in p), None)
    if typed is None:
        return list(parts)
    return [
        {**p, "type": typed} if isinstance(p, dict) and "type" not in p and "$ref" not in p else p
        for p in parts
    ]
