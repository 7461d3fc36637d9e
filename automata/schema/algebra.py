"""The keywords compiled by boolean algebra on DFAs (docs/algebra.md; `corral.automata.product`):
`allOf` that does not merge, `not`, `oneOf` whose branches may overlap, `propertyNames` and
`contains`. (`if`/`then`/`else` and `dependentSchemas` are rewritten into `anyOf` and `not` by
`corral.automata.schema.merge.desugar` before they get here.)

- `allOf` whose parts do not merge: the intersection of the parts' languages, each part merged
  with the keywords beside `allOf` where it merges. Sound without exactness.
- `not S` beside the keywords P: (L(P) ∩ U) minus L(P ∧ S), where U is the canonical universe
  (`corral.automata.schema.exact`) and P ∧ S must compile exactly; otherwise refused, naming
  `not` and the pointer. When P itself is not exact, its texts may come from the any-value
  language (members in any order), and P ∧ S must be exact even then (`free`).
- `oneOf` whose branches may overlap: the union over i of (L(B_i) ∩ U) minus the union over
  j != i of L(B_i ∧ B_j), each B_i merged with the keywords beside `oneOf`; refused unless
  every B_i ∧ B_j compiles exactly (an inexact `format` is refused, never dropped: dropping it
  would subtract a superset and lose a whole branch's texts without a word).
- `propertyNames`: listed members whose name the names' language does not accept are left out
  (made `false`: a required one empties the object). A sub-language, always sound.
- `contains` with `minContains` (default 1) and `maxContains`: arrays with that many items of
  the language of items ∧ contains, intersected with the array the other keywords give; with
  `maxContains` the other items are (L(items) ∩ U) minus L(items ∧ contains), which must
  compile exactly.

A product result sits in the schema form as `Subtree(Automaton(dfa))`: the NFA builder splices
its states (`corral.automata.nfa`).
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
from corral.automata.compile import build_dfa
from corral.automata.dfa import Dfa
from corral.automata.errors import EmptyLanguageError, LimitError, SchemaError
from corral.automata.product import difference, intersection, union
from corral.automata.schema.exact import Exactness, universe_dfa
from corral.automata.schema.form import EMPTY, NOTHING, Choice, Lit, Subtree, choice, repeat, seq
from corral.automata.schema.keywords import child, count, is_constraint, unsupported
from corral.automata.schema.merge import typed_parts
from corral.automata.schema.strings import pattern_tree
from corral.automata.schema.values import dumps
from corral.automata.tree import Alt, Automaton, Concat, literal_bytes

_ENUMERATION_STEPS = 100_000
"""Most prefixes `finite_texts` visits before it gives up."""

_ASCII_NAME = r'"[ !#-\[\]-~]*"'
"""The member names `extra_member` writes: printable ASCII without `"` or `\\` (U's strings)."""

EMPTY_RANGE_REASONS = frozenset(
    {
        "no integer lies between the bounds",
        "no number lies between the bounds",
        "minLength is greater than maxLength",
        "minItems is greater than maxItems",
    }
)
"""Reasons of the `SchemaError`s the lowering raises for contradictory bounds: where a merge
made them (a branch of a conditional, a negated part), the language is simply empty."""


def _is_automaton(form) -> bool:
    """True when the form is a finished DFA (`Algebra.form_of`)."""
    return isinstance(form, Subtree) and isinstance(form.node, Automaton)


def _union_of_automata(form) -> list[Dfa] | None:
    """The DFAs of a `Choice` (nested or not) of finished DFAs; None for any other form."""
    if not isinstance(form, Choice):
        return None
    out = []
    for item in form.items:
        if _is_automaton(item):
            out.append(item.node.dfa)
        else:
            inner = _union_of_automata(item)
            if inner is None:
                return None
            out += inner
    return out


def is_empty_range(error: SchemaError) -> bool:
    """True when `error` says that bounds leave no value (see `EMPTY_RANGE_REASONS`)."""
    return error.reason in EMPTY_RANGE_REASONS


class Algebra:
    """The algebraic keywords for one compile (`compiler`: the `Compiler` whose `compile`,
    `merger` and `trees` it uses)."""

    def __init__(self, compiler):
        self.compiler = compiler
        self.merger = compiler.merger
        self.exactness = Exactness(compiler.merger, compiler.schema_limits)
        self.memo: dict[tuple, tuple[Dfa | None, float, bool]] = {}  # see `schema_dfa`
        self.interned: dict[bytes, Dfa] = {}  # table digest -> the first DFA with that table
        self.products: dict[tuple, Dfa | None] = {}  # (operation, id(a), id(b)) -> result
        self.collided: list[Dfa] = []
        self.kept: dict[int, Dfa] = {}  # id -> a DFA `intern` returned (alive: ids stay unique)
        self.built_states = 0  # DFA states built by this compile's algebra (max_algebra_states)

    # helpers ------------------------------------------------------------------------------

    def dfa(self, form) -> Dfa | None:
        """The DFA of a form node (`intern`ed), None for the empty language. Raises
        LimitError."""
        if form is NOTHING:
            return None
        if _is_automaton(form):
            return self.intern(form.node.dfa)  # a product's result: canonical already
        dfas = _union_of_automata(form)
        if dfas:  # a union of products: by products, not by splicing them into one NFA again
            out = self.intern(dfas[0])
            for dfa in dfas[1:]:
                out = self._product(union, out, dfa)
            return out
        try:
            tree = self.compiler.trees.build(form)
            return self.intern(self._count(build_dfa(tree, self.compiler.trees.limits)))
        except EmptyLanguageError:
            return None

    def _count(self, dfa: Dfa) -> Dfa:
        """`dfa`, a DFA the algebra just built, counted against `max_algebra_states`. Raises
        LimitError past it."""
        self.built_states += dfa.n_states
        limit = self.compiler.schema_limits.max_algebra_states
        if self.built_states > limit:
            raise LimitError(
                "max_algebra_states",
                limit,
                f"the schema's not/oneOf/allOf/if algebra builds more than {limit} DFA states",
            )
        return dfa

    def intern(self, dfa: Dfa) -> Dfa:
        """The one `Dfa` object of this compile with `dfa`'s tables: canonical tables are equal
        exactly when the languages are (docs/design.md section 2), so `_product` can memoize on the
        operands' identity. A digest hit is confirmed by comparing the tables. A DFA this
        method returned before is returned at once (its table is not hashed again: `_product`
        interns both operands of every product, most of them interned already)."""
        if self.kept.get(id(dfa)) is dfa:
            return dfa
        digest = hashlib.blake2b(dfa.trans.tobytes(), digest_size=16)
        digest.update(dfa.accept.tobytes())
        kept = self.interned.setdefault(digest.digest(), dfa)
        if kept is not dfa and not (
            np.array_equal(kept.trans, dfa.trans) and np.array_equal(kept.accept, dfa.accept)
        ):
            self.collided.append(dfa)  # a digest collision (never met): kept apart, and alive
            kept = dfa
        self.kept[id(kept)] = kept
        return kept

    def compile(self, schema, pointer: str, depth: int):
        """The compiler's form of a merged part; NOTHING when its own bounds contradict. A
        contradiction deeper inside it (a property's, an item's, a branch's) does not make the
        whole part empty, so it is raised as it is (a refusal, never a wrong language)."""
        try:
            return self.compiler.compile(schema, pointer, depth + 1)
        except SchemaError as error:
            if is_empty_range(error) and error.pointer == pointer:
                return NOTHING
            raise

    def schema_dfa(self, schema, pointer: str, depth: int) -> Dfa | None:
        """`self.dfa(self.compile(schema, pointer, depth))`, memoized for this compile by the
        schema's JSON text and the `$ref` targets being inlined (the language depends on
        nothing else: the pointer only names errors, which are not memoized). A hit replays
        what the compile told the compiler about `$ref` cycles (`Compiler.min_hit`,
        `Compiler.recursive`). The `oneOf` and `not` of one document often merge the same
        parts again."""
        compiler = self.compiler
        try:
            key = (json.dumps(schema), tuple(compiler.stack))
        except (TypeError, ValueError):  # not JSON text (a cycle of Python objects)
            return self.dfa(self.compile(schema, pointer, depth))
        hit = self.memo.get(key)
        if hit is None:
            outer_hit, compiler.min_hit = compiler.min_hit, math.inf
            outer_recursive, compiler.recursive = compiler.recursive, False
            try:
                dfa = self.dfa(self.compile(schema, pointer, depth))
                hit = self.memo[key] = (dfa, compiler.min_hit, compiler.recursive)
            finally:
                compiler.min_hit = min(outer_hit, compiler.min_hit)
                compiler.recursive = outer_recursive or compiler.recursive
            return hit[0]
        compiler.min_hit = min(compiler.min_hit, hit[1])
        compiler.recursive = compiler.recursive or hit[2]
        return hit[0]

    def _product(self, operation, a: Dfa | None, b: Dfa | None) -> Dfa | None:
        """`operation(a, b)` (an `intern`ed DFA, None for the empty language), memoized for
        this compile: the branches of a `oneOf` and nested `not`s repeat the same products."""
        if a is None or b is None:
            if operation is union:
                return b if a is None else a
            return a if operation is difference else None
        a, b = self.intern(a), self.intern(b)
        key = (operation.__name__, id(a), id(b))  # interned operands stay alive: ids stay unique
        if key not in self.products:
            try:
                made = operation(a, b, self.compiler.trees.limits)
                self.products[key] = self.intern(self._count(made))
            except EmptyLanguageError:
                self.products[key] = None
        return self.products[key]

    @staticmethod
    def form_of(dfa: Dfa | None):
        """The form of a finished DFA (NOTHING for None)."""
        return NOTHING if dfa is None else Subtree(Automaton(dfa))

    def without(self, positive, negatives: list, pointer: str, depth: int, keyword: str):
        """The form of the texts of `positive` valid against none of `negatives`:
        (L(P) ∩ U) minus the union of L(P ∧ N). SchemaError naming `keyword` unless every
        P ∧ N compiles exactly (`Exactness`)."""
        pos = self.schema_dfa(positive, pointer, depth)
        if pos is None:
            return NOTHING
        free = not self.exactness.exact(positive, pointer)
        negative_dfas = []
        for i, neg in enumerate(negatives):
            if neg is True or (isinstance(neg, dict) and not any(map(is_constraint, neg))):
                return NOTHING  # every value is valid against it
            merged = self.merger.merge_or_conjoin([positive, neg], pointer)
            if merged is False:
                continue
            if not self.exactness.exact(merged, pointer, free):
                detail = "" if len(negatives) == 1 else f" (branch {i})"
                raise unsupported(
                    pointer,
                    keyword,
                    f"its subschema{detail} is not compiled exactly, so it cannot be negated "
                    "(see docs/algebra.md)",
                )
            negative_dfas.append(self.schema_dfa(merged, pointer, depth))
        out = self._product(intersection, pos, universe_dfa())
        distinct = {id(neg): neg for neg in negative_dfas if neg is not None}  # interned
        for neg in distinct.values():  # A - B - B = A - B: one product less
            out = self._product(difference, out, neg)
        return self.form_of(out)

    # keywords ------------------------------------------------------------------------------

    def all_of(self, schema: dict, pointer: str, depth: int):
        """Merged when the parts merge; otherwise the intersection of the parts."""
        try:
            merged = self.merger.merge_all([schema], pointer)
        except SchemaError as error:
            if error.keyword != "allOf" or not isinstance(schema.get("allOf"), list):
                raise
        else:
            return self.compiler.compile(merged, pointer, depth + 1)
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        parts = []
        for i, part in enumerate(schema["allOf"]):
            where = child(pointer, "allOf", i)
            try:
                parts.append((self.merger.merge_all([rest, part], where), where))
            except SchemaError as error:
                if error.keyword != "allOf":
                    raise
                parts += [(part, where), (rest, pointer)]
        typed = typed_parts([part for part, _ in parts])
        parts = [(part, where) for part, (_, where) in zip(typed, parts, strict=True)]
        out = None
        for i, (part, where) in enumerate(parts):
            dfa = self.schema_dfa(part, where, depth)
            out = dfa if i == 0 else self._product(intersection, out, dfa)
            if out is None:
                return NOTHING
        return self.form_of(out)

    def not_(self, schema: dict, pointer: str, depth: int):
        """`not S` beside the other keywords P: (L(P) ∩ U) minus L(P ∧ S)."""
        rest = {k: v for k, v in schema.items() if k != "not"}
        return self.without(rest, [schema["not"]], pointer, depth, "not")

    def one_of(self, branches: list, pointer: str, depth: int, excluded=None):
        """Exactly one branch (each already merged with the keywords beside `oneOf`). Branch j
        is not subtracted from branch i when `excluded(i, j)` proves that no text of branch
        i's language is valid against branch j (nothing to remove, so no exactness needed)."""
        out = []
        for i, branch in enumerate(branches):
            others = [
                b
                for j, b in enumerate(branches)
                if j != i and not (excluded is not None and excluded(i, j))
            ]
            out.append(self.without(branch, others, child(pointer, "oneOf", i), depth, "oneOf"))
        return choice(out)

    def property_names(self, schema: dict, pointer: str, depth: int):
        """Listed members whose dumped name the names' language rejects become `false`."""
        names = schema["propertyNames"]
        rest = {k: v for k, v in schema.items() if k != "propertyNames"}
        if "type" not in rest:  # keep the types the keywords imply (propertyNames: object)
            rest["type"] = self.compiler.types_of(schema, pointer)
        dfa = self.dfa(self.compiler.compile(names, child(pointer, "propertyNames"), depth + 1))
        properties = rest.get("properties", {})
        if not isinstance(properties, dict):
            raise SchemaError(pointer, "properties", "properties must be an object")
        required = rest.get("required", [])
        listed = list(properties) + [n for n in required if isinstance(n, str)]
        low = count(rest, "minProperties", pointer)
        if low is not None and low > len(set(listed)):
            reason = "propertyNames with minProperties above the listed members"
            raise unsupported(pointer, "propertyNames", reason)
        kept = dict(properties)
        for name in listed:
            if dfa is None or not dfa.matches(dumps(name).encode("utf-8")):
                kept[name] = False
        if kept != properties or "properties" in rest:
            rest["properties"] = kept
        return self.compiler.compile(rest, pointer, depth + 1)

    def extra_member(self, schema: dict, taken: set, pointer: str, depth: int):
        """The form `"name":VALUE` of one member `schema` does not list (for a `minProperties`
        above the listed members), or NOTHING when none can be written. The name is printable
        ASCII without escapes (the strings of the universe U, where a `pattern`'s language is
        exact), not in `taken` (the listed, written and dependency names); its value is
        `additionalProperties` for a name no `patternProperties` pattern matches, else (when
        `additionalProperties` is false) the schema of the one pattern it matches.

        Raises:
            SchemaError: a pattern outside the regex subset (naming `patternProperties`).
            LimitError: a product past the DFA state limit.
        """
        trees = self.compiler.trees
        quote = literal_bytes(b'"')
        ascii_names = build_dfa(trees.parse(_ASCII_NAME), trees.limits)
        patterns = []
        for pattern, sub in (schema.get("patternProperties") or {}).items():
            where = child(pointer, "patternProperties", pattern)
            try:
                content = pattern_tree(pattern, where, trees)
            except SchemaError as error:
                raise unsupported(pointer, "patternProperties", error.reason) from None
            names = self.dfa(Subtree(Concat((quote, content, quote))))
            patterns.append((self._product(intersection, names, ascii_names), sub, where))
        options = [(i, *pattern) for i, pattern in enumerate(patterns)]
        additional = schema.get("additionalProperties", True)
        if additional is not False:
            where = child(pointer, "additionalProperties")
            options.insert(0, (-1, ascii_names, additional, where))
        taken_dfa = None
        if taken:
            texts = sorted(dumps(name).encode("utf-8") for name in taken)
            taken_dfa = build_dfa(Alt(tuple(literal_bytes(t) for t in texts)), trees.limits)
        for own, names, sub, where in options:  # by position: equal DFAs are one object
            for i, (other, _, _) in enumerate(patterns):
                if i != own:
                    names = self._product(difference, names, other)
            names = self._product(difference, names, taken_dfa)
            if names is None:
                continue
            value = self.compile(sub, where, depth)
            if value is not NOTHING:
                return seq(self.form_of(names), Lit(":"), value)
        return NOTHING

    def finite_texts(self, form, most: int) -> list[str] | None:
        """The texts of a form's language in byte order, when it is finite with at most `most`
        texts; None otherwise (also past `_ENUMERATION_STEPS` steps of the search)."""
        dfa = self.dfa(form)
        if dfa is None:
            return []
        out: list[str] = []
        steps = 0
        stack = [(0, b"")]
        while stack:
            state, prefix = stack.pop()
            steps += 1
            if steps > _ENUMERATION_STEPS or len(prefix) > dfa.n_states:
                return None  # a text longer than the states: the language has a cycle
            if dfa.accept[state]:
                out.append(prefix.decode("utf-8"))
                if len(out) > most:
                    return None
            row = dfa.trans[state]
            for byte in np.flatnonzero(row >= 0)[::-1].tolist():
                stack.append((int(row[byte]), prefix + bytes([byte])))
        return out

    def contains(self, schema: dict, pointer: str, depth: int):
        """Between `minContains` (default 1) and `maxContains` items of items ∧ contains, within
        the array the other keywords give. With `maxContains` the other items are
        (L(items) ∩ U) minus L(items ∧ contains), which must compile exactly."""
        low = count(schema, "minContains", pointer)
        low = 1 if low is None else low
        high = count(schema, "maxContains", pointer)
        rest = {
            k: v for k, v in schema.items() if k not in ("contains", "minContains", "maxContains")
        }
        types = self.compiler.types_of(rest, pointer) if "type" in rest else ["array"]
        if (low == 0 and high is None) or "array" not in types:
            return self.compiler.compile(rest, pointer, depth + 1)
        if high is not None and high < low:
            return NOTHING
        items = rest.get("items", True)
        if "prefixItems" in rest or not isinstance(items, dict | bool):
            raise unsupported(pointer, "contains", "contains together with tuple items")
        where = child(pointer, "contains")
        matching = self.compile(
            self.merger.merge_or_conjoin([items, schema["contains"]], where), where, depth
        )
        if matching is NOTHING and low > 0:
            return NOTHING
        item_pointer = child(pointer, "items")
        if high is None:
            other = self.compiler.compile(items, item_pointer, depth + 1)
        else:
            other = self.without(items, [schema["contains"]], item_pointer, depth, "maxContains")
        comma = Lit(",")
        others = repeat(seq(comma, other), 0, None)

        def tail(lo: int, hi: int | None):  # (",other")* ("," match (",other")*){lo,hi}
            return seq(others, repeat(seq(comma, matching, others), max(lo, 0), hi))

        options = [seq(other, tail(low, high))]
        if high is None or high >= 1:
            options.append(seq(matching, tail(low - 1, None if high is None else high - 1)))
        if low == 0:
            options.append(EMPTY)
        array_rest = dict(rest)
        if "type" not in rest:
            array_rest["type"] = "array"
        base = self.dfa(self.compiler.compile(array_rest, pointer, depth + 1))
        counted = self.dfa(seq(Lit("["), choice(options), Lit("]")))
        return self.form_of(self._product(intersection, base, counted))
