"""The schema compiler: a parsed JSON Schema to the schema form, one subschema at a time, and the
public entry points `schema_to_tree`, `schema_to_dfa` and `json_schema_to_regex` (docs/design.md
section 3; the supported subset, keyword by keyword: docs/subsets.md).

`Compiler.compile` dispatches on what a subschema holds: `$ref` (inlined; a cycle is unrolled up
to `SchemaLimits.max_recursion` occurrences of one target on a path, deeper is the empty
language; past a state limit, shallower: `compile_schema`), conditionals (`if`/`then`/`else`,
`dependentSchemas`: rewritten by `corral.automata.schema.merge.desugar`), `allOf` (merged,
`corral.automata.schema.merge`, else intersected), `not`, `propertyNames`, `contains`
(`corral.automata.schema.algebra`), `anyOf`, `oneOf` (as `anyOf` when its branches are provably
disjoint, `corral.automata.schema.disjoint`, else exactly by the algebra), `enum`/`const`, and
otherwise the types, each lowered by its own module (strings, numbers, containers). A schema
without `type` takes the types its keywords imply; with none at all it is any JSON value nested
at most `SchemaLimits.any_value_depth` levels.

Each public function raises Python's recursion limit once (`deep_recursion`): a length-bounded
string is a chain of up to 4 x maxLength tree levels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from corral.automata.compile import build_dfa, deep_recursion
from corral.automata.dfa import Dfa
from corral.automata.errors import (
    ConstrainError,
    EmptyLanguageError,
    EmptySchemaError,
    LimitError,
    NonFiniteNumberError,
    SchemaError,
    TooManyNfaStatesError,
)
from corral.automata.limits import (
    DEFAULT_LIMITS,
    DEFAULT_SCHEMA_LIMITS,
    NARROWER_BOUNDS,
    Limits,
    SchemaLimits,
)
from corral.automata.schema.algebra import Algebra, is_empty_range
from corral.automata.schema.containers import lower_array, lower_object
from corral.automata.schema.disjoint import (
    excludes,
    leave_out_others_required,
    without_shared_types,
)
from corral.automata.schema.form import NOTHING, Lit, TreeBuilder, choice
from corral.automata.schema.formats import INTEGER_FORMATS, NUMBER_FORMATS
from corral.automata.schema.json_text import BOOLEAN_FORM, NULL_FORM, any_value
from corral.automata.schema.keywords import (
    TYPE_OF_KEYWORD,
    TYPES,
    check_keywords,
    child,
    is_constraint,
)
from corral.automata.schema.merge import Merger, desugar, type_names
from corral.automata.schema.nfa_size import blame, check_nfa_states, counted_nfa_states
from corral.automata.schema.numbers import lower_integer, lower_number
from corral.automata.schema.refs import RefResolver, has_own_id, ref_siblings, walk_pointer
from corral.automata.schema.strings import lower_string
from corral.automata.schema.text import TextRenderer
from corral.automata.schema.values import check_document, dumps, json_key, json_type
from corral.automata.shallower import STATE_LIMIT_ERRORS, StateLimit, retry_shallower
from corral.automata.tree import Node


class Compiler:
    """Schema (parsed JSON) -> schema form, for one compile of the document `root`.

    Attributes:
        trees: the compile's `TreeBuilder` (regex texts parsed once; builds the result).
        refs, merger: `$ref` resolution and `allOf` merging over `root`.
        stack: the `$ref` targets being inlined, outermost first; `cache`: target pointer ->
            form, for targets whose form does not depend on the path (no cycle cut inside).
        recursive: True once a `$ref` target was met again on its own path: the language then
            depends on `SchemaLimits.max_recursion` (`shallower_recursion`).
        longest: the largest `maxLength` and `maxItems` compiled, each lowered to its cap: a
            narrower `max_string_length` or `max_array_length` cuts the language only below them
            (`narrower_limits`).
        empty_at: None, or (pointer, keyword, reason) of the first subschema compiled to the
            empty language (the innermost: it is recorded as the recursion returns), which
            `EmptySchemaError` names when the whole schema admits no value.
        pointers: id of a subschema's form -> the pointer it was first compiled at (the forms
            are alive while the compile is), for `TooManyNfaStatesError.pointer` (`blame`).
    """

    def __init__(self, root, limits: Limits | None, schema_limits: SchemaLimits):
        self.schema_limits = schema_limits
        self.root = root
        self.trees = TreeBuilder(limits)
        self.refs = RefResolver(root)
        self.merger = Merger(self.refs)
        self.stack: list[str] = []
        self.cache: dict[str, object] = {}
        self.min_hit = math.inf  # lowest stack position a cut or reuse inside depended on
        self.recursive = False  # a `$ref` target was met again on its own path (unrolled)
        self.any_cache: dict = {}
        self.enum_cache: dict[int, tuple[dict, object]] = {}  # id -> (schema kept alive, form)
        self.empty_at: tuple[str, str | None, str] | None = None
        self.longest = [0, 0]  # the largest `maxLength`, `maxItems` compiled, capped
        self.pointers: dict[int, str] = {}
        self.algebra = Algebra(self)

    def compile(self, schema, pointer: str, depth: int):
        """The form of `schema` met at `pointer`, `depth` subschemas deep.

        Raises:
            SchemaError, LimitError: see `schema_to_tree`.
        """
        if depth > self.schema_limits.max_depth:
            raise LimitError(
                "max_depth",
                self.schema_limits.max_depth,
                f"{pointer or '/'}: schema nested too deep",
            )
        if schema is True:
            return self.any_value(pointer)
        if schema is False:
            self.empty(schema, pointer, None, "the schema false admits no value")
            return NOTHING
        if not isinstance(schema, dict):
            raise SchemaError(pointer, None, "a schema must be an object or a boolean")
        check_keywords(schema, pointer)
        nested_id = depth > 0 and has_own_id(schema)
        self.refs.nested_ids += nested_id
        try:
            out = self.dispatch(schema, pointer, depth)
        finally:
            self.refs.nested_ids -= nested_id
        if out is NOTHING:
            keyword = next((k for k in _DISPATCH_ORDER if k in schema), "type")
            self.empty(schema, pointer, keyword, f"no value satisfies '{keyword}' here")
        self.pointers.setdefault(id(out), pointer)
        return out

    def empty(self, schema, pointer: str, keyword: str | None, reason: str) -> None:
        """Record where the language first became empty (`empty_at`), unless already recorded,
        when `schema` is the document's own node at `pointer` (not a subschema made by merging,
        whose emptiness is its maker's)."""
        if self.empty_at is None and _node_at(self.root, pointer) is schema:
            self.empty_at = (pointer, keyword, reason)

    def dispatch(self, schema: dict, pointer: str, depth: int):
        """The form of an object schema, by the first of these it holds: `$ref`, a conditional
        (rewritten), `allOf`, `not`, `anyOf`, `oneOf`, `propertyNames`, `contains`,
        `enum`/`const`; else by its types."""
        if "$ref" in schema:
            return self.compile_ref(schema, pointer, depth)
        plain = desugar(schema, pointer)
        if plain is not schema:
            return self.compile_desugared(schema, plain, pointer, depth)
        if "allOf" in schema:
            return self.algebra.all_of(schema, pointer, depth)
        if "not" in schema:
            return self.algebra.not_(schema, pointer, depth)
        if "anyOf" in schema:
            return self.compile_any_of(schema, pointer, depth)
        if "oneOf" in schema:
            return self.compile_one_of(schema, pointer, depth)
        if "propertyNames" in schema:
            return self.algebra.property_names(schema, pointer, depth)
        if "contains" in schema:
            return self.algebra.contains(schema, pointer, depth)
        if "enum" in schema or "const" in schema:
            return self.compile_enum(schema, pointer, depth)
        return self.compile_types(schema, pointer, depth)

    def compile_desugared(self, schema: dict, plain: dict, pointer: str, depth: int):
        """The form of a conditional rewritten by `desugar`; a refusal inside the parts the
        rewrite made (an `anyOf` or `not` the schema does not hold) names the conditional."""
        try:
            return self.compile(plain, pointer, depth + 1)
        except SchemaError as error:
            made = ("not", "anyOf", "allOf", "oneOf")
            if any(k in schema for k in made):
                raise
            if error.pointer != pointer and not error.pointer.startswith(pointer + "/anyOf/"):
                raise
            keyword = "if" if "if" in schema else "dependentSchemas"
            if keyword not in schema:
                keyword = "dependencies"
            if error.keyword not in made:
                keyword = error.keyword
            reason = error.reason.replace(repr(error.keyword), repr(keyword))
            raise SchemaError(pointer, keyword, reason) from None

    def any_value(self, pointer: str):
        """Any JSON value nested at most `any_value_depth` levels; SchemaError when it is 0."""
        depth = self.schema_limits.any_value_depth
        if depth <= 0:
            raise SchemaError(pointer, None, "a schema that admits any JSON value is not supported")
        return any_value(depth, self.any_cache)

    def compile_ref(self, schema: dict, pointer: str, depth: int):
        """Inline the target of `$ref`; siblings are merged with it as by `allOf` (ignored in
        drafts 3 to 7). A target already `max_recursion` times on the stack is cut (NOTHING)."""
        siblings = ref_siblings(schema)
        if siblings and not self.refs.legacy:
            merged = self.merger.merge_all([{"$ref": schema["$ref"]}, siblings], pointer)
            return self.compile(merged, pointer, depth + 1)
        target_pointer, target = self.refs.resolve(schema["$ref"], pointer)
        seen = self.stack.count(target_pointer)
        if seen:
            self.min_hit = min(self.min_hit, self.stack.index(target_pointer))
            self.recursive = True
        if seen >= self.schema_limits.max_recursion:
            self.empty(
                schema,
                pointer,
                "$ref",
                f"the $ref cycle is cut after max_recursion={self.schema_limits.max_recursion} "
                "unrollings, and every value needs a deeper one",
            )
            return NOTHING
        if not seen and target_pointer in self.cache:
            return self.cache[target_pointer]
        position = len(self.stack)
        self.stack.append(target_pointer)
        outer_hit, self.min_hit = self.min_hit, math.inf
        try:
            out = self.compile(target, target_pointer, depth + 1)
        finally:
            self.stack.pop()
            inner_hit = self.min_hit
            self.min_hit = min(outer_hit, inner_hit)
        if not seen and inner_hit >= position:
            self.cache[target_pointer] = out
        return out

    def branches(self, schema: dict, keyword: str, pointer: str) -> list:
        """The branch list of `anyOf`/`oneOf`; SchemaError unless a non-empty array."""
        branches = schema[keyword]
        if not isinstance(branches, list) or not branches:
            raise SchemaError(pointer, keyword, f"{keyword} must be a non-empty array")
        return branches

    def compile_any_of(self, schema: dict, pointer: str, depth: int):
        """The alternation of the branches, each merged with the siblings of `anyOf`, the
        branch first: a merge lists members in the order of its first parts, so the negation
        of docs/algebra.md ("Member order") can rely on P ∧ S extending P's order."""
        branches = self.branches(schema, "anyOf", pointer)
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        out = []
        for i, branch in enumerate(branches):
            where = child(pointer, "anyOf", i)
            if any(is_constraint(k) for k in rest):
                branch = self.merger.merge_or_conjoin([branch, rest], where)
            try:
                out.append(self.compile(branch, where, depth + 1))
            except SchemaError as error:  # a merge made the branch's own bounds contradict
                if not (is_empty_range(error) and error.pointer == where):
                    raise
                self.empty(schema, pointer, "anyOf", f"{where}: {error.reason}")
        return choice(out)

    def compile_one_of(self, schema: dict, pointer: str, depth: int):
        """As `anyOf` when the branches (merged with the siblings) are provably disjoint;
        otherwise by the algebra (`Algebra.one_of`), which subtracts from each branch the
        others not proved disjoint from it."""
        branches = self.branches(schema, "oneOf", pointer)
        rest = {k: v for k, v in schema.items() if k != "oneOf"}
        merged = [
            self.merger.merge_or_conjoin([branch, rest], child(pointer, "oneOf", i))
            for i, branch in enumerate(branches)
        ]
        if len(merged) == 1:
            return self.compile(merged[0], child(pointer, "oneOf", 0), depth + 1)
        merged = without_shared_types(merged, self.merger, pointer)
        restricted = leave_out_others_required(merged)
        for i, mi in enumerate(restricted):
            for j, mj in enumerate(merged):
                if i != j and not excludes(mi, mj, self.merger, pointer):
                    return self.algebra.one_of(
                        merged,
                        pointer,
                        depth,
                        lambda i, j: excludes(merged[i], merged[j], self.merger, pointer),
                    )
        out = []
        for i, branch in enumerate(restricted):
            where = child(pointer, "oneOf", i)
            try:
                out.append(self.compile(branch, where, depth + 1))
            except SchemaError as error:
                if not (is_empty_range(error) and error.pointer == where):
                    raise
                self.empty(schema, pointer, "oneOf", f"{where}: {error.reason}")  # no value
        return choice(out)

    def compile_enum(self, schema: dict, pointer: str, depth: int):
        """The alternation of the dumped `enum`/`const` values that satisfy the other keywords
        (checked on the DFA of the rest of the schema). The form of a schema object with no
        other keyword than `type` depends on nothing else: it is made once per compile (an
        unrolled `$ref` cycle meets the same enums again and again)."""
        hit = self.enum_cache.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        form = self._enum_form(schema, pointer, depth)
        if not any(is_constraint(k) and k not in ("enum", "const", "type") for k in schema):
            self.enum_cache[id(schema)] = (schema, form)
        return form

    def _enum_form(self, schema: dict, pointer: str, depth: int):
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list):
                raise SchemaError(pointer, "enum", "enum must be an array")
            where = "enum"
        else:
            values, where = [schema["const"]], "const"
        if "const" in schema and "enum" in schema:
            key = json_key(schema["const"])
            values = [v for v in values if json_key(v) == key]
        if len(values) > self.schema_limits.max_enum_values:
            raise LimitError(
                "max_enum_values",
                self.schema_limits.max_enum_values,
                f"{pointer or '/'}: enum with {len(values)} values",
            )
        texts = []
        for i, value in enumerate(values):
            try:
                texts.append((value, dumps(value)))
            except NonFiniteNumberError:
                at = child(pointer, "enum", i) if where == "enum" else child(pointer, "const")
                raise SchemaError(at, where, "NaN and infinities are not JSON") from None
            except TypeError:
                raise SchemaError(pointer, where, "not a JSON value") from None
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        if "type" in rest:
            allowed = rest["type"]
            allowed = {allowed} if isinstance(allowed, str) else set(allowed)
            texts = [(v, t) for v, t in texts if _has_type(v, allowed)]
        if any(is_constraint(k) and k != "type" for k in rest):
            if "type" not in rest:  # check each value against its own type, not the implied ones
                rest["type"] = sorted({json_type(v) for v, _ in texts}) or ["null"]
            node = self.compile(rest, pointer, depth + 1)
            if node is NOTHING:
                return NOTHING
            try:
                dfa = build_dfa(self.trees.build(node), self.trees.limits)
            except EmptyLanguageError:
                return NOTHING
            texts = [(v, t) for v, t in texts if dfa.matches(t.encode("utf-8"))]
        unique = dict.fromkeys(text for _, text in texts)
        if not unique:
            self.empty(schema, pointer, where, f"no value of '{where}' satisfies the others")
        return choice(Lit(text) for text in unique)

    def types_of(self, schema: dict, pointer: str) -> list[str]:
        """The types `schema` allows, in `TYPES` order: its `type`, else the types its keywords
        (and `format`) imply. SchemaError on a malformed or unknown `type`."""
        if "type" in schema:
            names = type_names(schema["type"], pointer)
            return [t for t in TYPES if t in names]
        implied = {TYPE_OF_KEYWORD[k] for k in schema if k in TYPE_OF_KEYWORD}
        fmt = schema.get("format")
        if isinstance(fmt, str):
            if fmt in INTEGER_FORMATS:
                implied.add("integer")
            elif fmt in NUMBER_FORMATS:
                implied.add("number")
            else:
                implied.add("string")
        return [t for t in TYPES if t in implied]

    def compile_types(self, schema: dict, pointer: str, depth: int):
        """The alternation of the schema's types, each lowered by its module."""
        types = self.types_of(schema, pointer)
        if not types:
            return self.any_value(pointer)
        if "integer" in types and "number" in types:
            types.remove("integer")
        out = []
        for t in types:
            bound, slot = schema.get("maxLength" if t == "string" else "maxItems"), t == "array"
            if t in ("string", "array") and isinstance(bound, int):  # what a narrower cap cuts
                cap = (
                    self.schema_limits.max_array_length
                    if slot
                    else self.schema_limits.max_string_length
                )
                self.longest[slot] = max(self.longest[slot], min(bound, cap))
            if t == "string":
                out.append(lower_string(schema, pointer, self.trees, self.schema_limits))
            elif t == "integer":
                out.append(lower_integer(schema, pointer))
            elif t == "number":
                out.append(lower_number(schema, pointer))
            elif t == "boolean":
                out.append(BOOLEAN_FORM)
            elif t == "null":
                out.append(NULL_FORM)
            elif t == "array":
                texts = self.algebra.finite_texts
                out.append(
                    lower_array(schema, pointer, depth, self.compile, self.schema_limits, texts)
                )
            else:
                extra = self.algebra.extra_member
                out.append(
                    lower_object(schema, pointer, depth, self.compile, self.schema_limits, extra)
                )
        return choice(out)


def _node_at(root, pointer: str):
    """The node of `root` the JSON `pointer` names, or None."""
    path = [node for _, node in walk_pointer(root, pointer)]
    if len(path) < pointer.count("/"):
        return None
    return path[-1] if path else root


_DISPATCH_ORDER = (
    "$ref", "allOf", "not", "anyOf", "oneOf", "propertyNames", "contains", "enum", "const",
    "if", "dependentSchemas", "dependencies",
)  # fmt: skip
"""The keywords `Compiler.dispatch` goes by, in its order: the one named when a subschema that
holds it compiles to the empty language."""


def _has_type(value, allowed: set) -> bool:
    kind = json_type(value)
    return kind in allowed or (kind == "integer" and "number" in allowed)


# Public API ------------------------------------------------------------------------------------


def resolvable_prefix(root, pointer: str) -> str:
    """The longest prefix of the JSON `pointer` that names a node of `root`. A refusal inside
    merged or rewritten subschemas (an `anyOf` branch with its parent's keywords, a conditional
    rewritten to `anyOf`) carries a path of the merged result; it is reported at the deepest
    node of the document on that path."""
    return "".join(f"/{token}" for token, _ in walk_pointer(root, pointer))


def _compile(schema, compiler: Compiler):
    """The form of a whole schema; EmptyLanguageError when nothing can be written."""
    try:
        form = compiler.compile(schema, "", 0)
    except SchemaError as error:
        where = resolvable_prefix(schema, error.pointer)
        if where == error.pointer:
            raise
        raise SchemaError(where, error.keyword, error.reason) from None
    if form is NOTHING:
        pointer, keyword, reason = compiler.empty_at or ("", None, "")
        raise EmptySchemaError(
            resolvable_prefix(schema, pointer),
            keyword,
            f"the schema admits no value that corral can write: {reason}".rstrip(": "),
        )
    return form


def _check(schema) -> None:
    """SchemaError unless `schema` is a parsed schema document (`check_document`)."""
    if not isinstance(schema, (dict, bool)):  # a JSON value that is no schema, or its text
        hint = " (pass the parsed schema, not its text)" if isinstance(schema, str) else ""
        reason = f"a schema must be an object or a boolean, not {type(schema).__name__}{hint}"
        raise SchemaError("", None, reason)
    check_document(schema)


"""The errors after which a recursive schema is compiled again with a shallower unrolling (the
state limits and the subset construction's work limit)."""


def shallower_recursion(schema_limits: SchemaLimits) -> list[SchemaLimits]:
    """`schema_limits`, then the same limits with `max_recursion` lowered by one at a time down
    to 1: the unrolling depths tried, in order, when a compile that unrolled a `$ref` cycle
    passes an NFA or DFA state limit (`STATE_LIMIT_ERRORS`). Each depth's language is a subset
    of the previous one's (a deeper occurrence is cut to the empty language), so every retry
    stays sound (docs/design.md section 3: a sub-language, never a larger one)."""
    depths = range(schema_limits.max_recursion, 0, -1) if schema_limits.max_recursion > 1 else ()
    return [replace(schema_limits, max_recursion=d) for d in depths] or [schema_limits]


def compile_schema(
    schema,
    limits: Limits | None = None,
    schema_limits: SchemaLimits | None = None,
    build=None,
):
    """`build(tree)` of the schema's regex tree (the tree itself when `build` is None), with the
    unrolling of `$ref` cycles made shallower on a state limit: when the compile or `build`
    raises `TooManyNfaStatesError` or `TooManyDfaStatesError` and the compile unrolled a `$ref`
    cycle, the schema is compiled again at each depth of `shallower_recursion` in turn; then,
    at the last depth, with each narrower string and array bound of `narrower_limits` that cuts
    a `maxLength` or `maxItems` the schema uses (docs/subsets.md, "Narrowed compiles"). When
    every attempt passes a state limit (or a retry raises another error, such as an empty
    language), the first error is raised: a blow-up is refused past the documented limits and
    the documented narrowings, never answered with a narrower language than they document. The
    extra cost falls only on schemas that passed a limit: at most `max_recursion` - 1 + 2 more
    compiles, each smaller than the one before. `compile_schema_facts` also tells which bounds
    gave the result.

    Returns (result, recursive): `recursive` is True when the compile that gave `result`
    unrolled a `$ref` cycle (so a smaller `max_recursion` gives a smaller language).

    Raises: the errors of `schema_to_tree`, and those of `build`.
    """
    got = compile_schema_facts(schema, limits, schema_limits, build)
    return got.result, got.recursive


@dataclass(frozen=True)
class Unrolling:
    """The tree `unrolled_tree` compiled.

    Attributes:
        tree: the schema's regex tree.
        recursive: True when its compile unrolled a `$ref` cycle.
        max_recursion: the `SchemaLimits.max_recursion` it was compiled with.
        skipped: None, or the error of the first deeper unrolling that passed a state limit
            before its tree was made (its NFA counted past the limit, or the algebra's
            products): the error `schema_to_dfa` raises when no depth fits.
        schema_limits: the `SchemaLimits` it was compiled with (`max_recursion` included).
        narrowed: True when those are narrower than the ones asked for (`narrower_limits`).
        longest: the largest `maxLength` and `maxItems` compiled, capped (`narrower_limits`).
    """

    tree: Node
    recursive: bool
    max_recursion: int
    skipped: ConstrainError | None
    schema_limits: SchemaLimits = DEFAULT_SCHEMA_LIMITS
    narrowed: bool = False
    longest: tuple[int, int] = (0, 0)


def unrolled_tree(
    schema, limits: Limits | None = None, schema_limits: SchemaLimits | None = None
) -> Unrolling:
    """The regex tree of `schema` at the deepest `$ref` unrolling of `shallower_recursion` whose
    NFA is not counted past `limits.max_nfa_states` (the unrollings `schema_to_dfa` skips
    without building them, `corral.automata.schema.nfa_size`), for a caller that builds the
    DFA of a larger tree around it and retries with a smaller `max_recursion` when that passes
    a state limit (`corral.tools.grammar.compile_dfa`): the schema then goes through the depths
    `schema_to_dfa` tries, in its order, and skips the same ones. When no depth fits, the
    narrower bounds of `narrower_limits` are tried in the same way (`narrowed` in the answer).

    Raises: the errors of `schema_to_tree`.
    """
    _check(schema)
    schema_limits = schema_limits or DEFAULT_SCHEMA_LIMITS
    got = _compile_schema(schema, limits, schema_limits, _same)
    return Unrolling(
        got.result,
        got.recursive,
        got.schema_limits.max_recursion,
        got.first,
        got.schema_limits,
        got.schema_limits != schema_limits,
        got.longest,
    )


def _same(tree: Node) -> Node:
    return tree


@dataclass(frozen=True)
class SchemaCompile:
    """What `compile_schema_facts` built.

    Attributes:
        result: `build(tree)` (the canonical `Dfa` for `schema_to_dfa`).
        recursive: True when its compile unrolled a `$ref` cycle.
        schema_limits: the `SchemaLimits` it was compiled with: the ones asked for, or with
            `max_recursion` lowered (`shallower_recursion`), or with `max_string_length` and
            `max_array_length` lowered too (`narrower_limits`).
        narrowed: True when `schema_limits` is not the one asked for: the language is a subset
            of the one the asked bounds give (strings, arrays or `$ref` cycles cut shorter).
        first: None, or the error of the first attempt that passed a state limit.
        longest: the largest `maxLength` and `maxItems` compiled, capped (`narrower_limits`).
    """

    result: object
    recursive: bool
    schema_limits: SchemaLimits
    narrowed: bool
    first: ConstrainError | None
    longest: tuple[int, int] = (0, 0)

    @property
    def exact(self) -> bool:
        """True when compiled at the bounds asked for (docs/subsets.md, "Limits")."""
        return not self.narrowed


def compile_schema_facts(
    schema,
    limits: Limits | None = None,
    schema_limits: SchemaLimits | None = None,
    build=None,
) -> SchemaCompile:
    """`compile_schema` with the facts of the compile: the bounds it ended at and whether they
    were narrowed (`SchemaCompile`). `corral compile --schema` prints them.

    Raises: the errors of `compile_schema`.
    """
    _check(schema)
    schema_limits = schema_limits or DEFAULT_SCHEMA_LIMITS
    got = _compile_schema(schema, limits, schema_limits, build)
    return replace(got, narrowed=got.schema_limits != schema_limits)


def _compile_schema(schema, limits, schema_limits: SchemaLimits, build) -> SchemaCompile:
    """`compile_schema` after the document check, `narrowed` left False. The attempts form one
    chain, each language a subset of the one before: the bounds asked for at each depth of
    `shallower_recursion`, then each bound of `narrower_limits` that cuts a `maxLength` or
    `maxItems` the schema uses, at the last depth tried (1 for a schema that unrolled a `$ref`
    cycle). Raises the first failed attempt's error when nothing fits (a narrower attempt's own
    refusal, say a `minLength` above the lowered `max_string_length`, is not reported)."""
    first, failed = None, None
    chain = [schema_limits]
    while chain:
        bounds = chain.pop(0)
        if failed is not None:  # a narrower bound, after the chain so far failed
            depth = 1 if failed.recursive else bounds.max_recursion
            bounds = replace(bounds, max_recursion=min(depth, bounds.max_recursion))

        def attempt(depth: int, bounds=bounds, more=bool(chain) or failed is None):
            nonlocal failed
            depth_limits = (
                bounds
                if depth == bounds.max_recursion  # the first depth: no copy made
                else replace(bounds, max_recursion=depth)
            )
            try:
                got = _attempt(schema, limits, depth_limits, build, depth > 1, more)
            except StateLimit as error:
                failed = error
                raise
            return got, depth_limits

        try:
            ((result, recursive, longest), used), skipped = retry_shallower(
                attempt, bounds.max_recursion, first
            )
        except STATE_LIMIT_ERRORS as error:
            if first is None:
                first = error.with_traceback(None)
                chain = narrower_limits(schema_limits, failed.longest)
            continue  # (a narrower attempt's own refusal raises `first` too)
        return SchemaCompile(result, recursive, used, False, skipped, tuple(longest))
    raise first


def narrower_limits(schema_limits: SchemaLimits, longest=None) -> list[SchemaLimits]:
    """The narrower bounds tried, in order, when a schema passes a state limit at every depth of
    `shallower_recursion`: `max_string_length` and `max_array_length` lowered together along
    `NARROWER_BOUNDS`, each step only where it is below the bound asked for. With `longest`
    (the largest `maxLength` and `maxItems` the compile used, capped), a step that cuts neither
    is left out. Each step's language is a subset of the one before (a `maxLength` or `maxItems`
    above the bound is lowered to it, as at the bounds asked for; docs/subsets.md, "Narrowed
    compiles"), so a narrowed compile stays sound."""
    out = []
    strings, items = schema_limits.max_string_length, schema_limits.max_array_length
    most_strings, most_items = longest or (strings, items)
    for step_strings, step_items in NARROWER_BOUNDS:
        strings, items = min(strings, step_strings), min(items, step_items)
        if strings < most_strings or items < most_items:
            out.append(replace(schema_limits, max_string_length=strings, max_array_length=items))
            most_strings, most_items = min(most_strings, strings), min(most_items, items)
    return out


@dataclass(frozen=True)
class CountedBuild:
    """A `build` of `compile_schema` told the tree's NFA states as counted
    (`corral.automata.schema.nfa_size.counted_nfa_states`), or None past
    `Limits.max_nfa_states` (within it, no build of the NFA can pass the limit):
    `make(tree, states)`. `corral.automata.lazy` defers the NFA's parts only within the limit,
    so the limit is still met at once, where a narrower retry can follow."""

    make: object


def _attempt(
    schema,
    limits: Limits | None,
    schema_limits: SchemaLimits,
    build,
    shallower: bool,
    narrower: bool = False,
):
    """One compile of `compile_schema`: (result, recursive, longest: `Compiler.longest`);
    `StateLimit` on a state limit.
    With `build` and a retry left (a `shallower` depth for a compile that unrolled a `$ref`
    cycle, or, when `narrower`, a bound of `narrower_limits` that cuts it), a compile whose NFA
    is counted past the limit (`corral.automata.schema.nfa_size.check_nfa_states`) fails at
    once with the builder's `TooManyNfaStatesError`, before the tree and the NFA are made."""
    compiler, form = Compiler(schema, limits, schema_limits), None
    try:
        with deep_recursion():
            form = _compile(schema, compiler)
            narrower = narrower and narrower_limits(schema_limits, compiler.longest)
            counted = None
            if build is not None and (narrower or shallower and compiler.recursive):
                counted = check_nfa_states(form, compiler.trees)
            tree = compiler.trees.build(form)
            if isinstance(build, CountedBuild):
                limit = (limits or DEFAULT_LIMITS).max_nfa_states
                if counted is None:
                    counted = counted_nfa_states(form, compiler.trees)
                made = build.make(
                    tree, counted if counted is not None and counted <= limit else None
                )
            else:
                made = tree if build is None else build(tree)
            return made, compiler.recursive, compiler.longest
    except STATE_LIMIT_ERRORS as error:
        if isinstance(error, TooManyNfaStatesError) and form is not None:
            with deep_recursion():  # the builds of the parts recurse as deep as the compile's
                error = blame(form, compiler.trees, compiler.pointers, error)
        longest = tuple(compiler.longest)
        raise StateLimit(error, compiler.recursive, schema_limits.max_recursion, longest) from None
    except EmptyLanguageError as error:
        if isinstance(error, SchemaError):
            raise
        raise EmptySchemaError(  # the automaton `build` made is empty: no keyword to name
            "", None, "the schema admits no value that corral can write"
        ) from None
    finally:
        compiler.algebra = None  # the one reference cycle: freed now, not by the collector


def schema_to_tree(
    schema, limits: Limits | None = None, schema_limits: SchemaLimits | None = None
) -> Node:
    """The regex tree (`corral.automata.tree`, a DAG with shared tails) of the compact JSON
    texts valid against `schema` (docs/design.md section 3; the parsed schema, key order kept).
    Compose it with other trees and pass it to `tree_to_dfa`. A compile that unrolls a `$ref`
    cycle and passes a state limit is retried with a shallower unrolling (`compile_schema`).

    Raises:
        SchemaError: `schema` is neither an object nor a boolean (text rather than parsed
            JSON, or another JSON value), a keyword outside the subset (`.pointer`, `.keyword`),
            a malformed schema, a string that is not UTF-8 text (a lone surrogate) or nesting
            deeper than `corral.automata.schema.values.MAX_NESTING`.
        EmptyLanguageError: no value can be written.
        LimitError: a `SchemaLimits` or regex `Limits` bound was passed.
    """
    return compile_schema(schema, limits, schema_limits)[0]


def schema_to_dfa(
    schema, limits: Limits | None = None, schema_limits: SchemaLimits | None = None
) -> Dfa:
    """The canonical DFA (`Dfa`: trans int32 `[n_states, 256]`, accept bool `[n_states]`) of
    `schema_to_tree(schema)`: same errors, plus the NFA/DFA size limits of `limits`. A schema
    that unrolls a `$ref` cycle and passes a state limit is compiled again with a shallower
    unrolling (`compile_schema`, `shallower_recursion`), then with narrower string and array
    bounds (`narrower_limits`), before it is refused; `compile_schema_dfa` tells which."""
    return compile_schema_dfa(schema, limits, schema_limits).result


def compile_schema_dfa(
    schema, limits: Limits | None = None, schema_limits: SchemaLimits | None = None
) -> SchemaCompile:
    """`schema_to_dfa` with the facts of its compile (`SchemaCompile`: `.result` the canonical
    `Dfa`; `.exact`, or `.narrowed` to `.schema_limits`). Raises what `schema_to_dfa` raises."""
    return compile_schema_facts(schema, limits, schema_limits, lambda tree: build_dfa(tree, limits))


def json_schema_to_regex(
    schema, limits: Limits | None = None, schema_limits: SchemaLimits | None = None
) -> str:
    """The regex text of the schema's language, in docs/design.md section 3's form (members nested
    as `\\{(?:"x":INT(?:,"y":INT)?|(?:"y":INT|))\\}`), readable by `corral.automata.parse`.

    Raises the errors of `schema_to_tree`, and:
        LimitError (`max_regex_length`): the text would be longer than the limit (it grows
            quadratically with optional members; the tree does not).
        SchemaTextError: a pattern with a length bound (compiled by a product automaton).
    """
    schema_limits = schema_limits or DEFAULT_SCHEMA_LIMITS
    _check(schema)
    with deep_recursion():
        form = _compile(schema, Compiler(schema, limits, schema_limits))
        return TextRenderer(schema_limits.max_regex_length).render(form)
