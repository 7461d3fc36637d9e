"""corral.automata.schema: JSON Schema to a regex tree, regex text and canonical DFA (docs/design.md
section 3).

The language is compact JSON (no whitespace) with object members in the order the schema lists
them. Every string the DFA accepts parses with `json.loads` and validates against the schema
(soundness); the language may be smaller than the set of valid instances (a sub-language), never
larger. A schema is lowered to an intermediate form (`form`) with two back ends:

- the tree back end (`schema_to_tree`, the primary path): regex-tree nodes (`corral.automata.tree`)
  in which an object's members form a DAG with shared tails, so an object with n optional members
  costs O(n) NFA states (the NFA construction instantiates a shared tail once);
- the text back end (`json_schema_to_regex`): docs/design.md's nested form, e.g. two optional
  integers x, y give `\\{(?:"x":INT(?:,"y":INT)?|(?:"y":INT|))\\}`. It grows quadratically with
  optional members; past `SchemaLimits.max_regex_length` characters it raises `LimitError`.

Supported keywords (anything else that is a JSON Schema keyword of any draft is refused with a
`SchemaError` naming the keyword and the JSON pointer of the subschema):
- docs/design.md's subset: `type` (a name or a list), `enum`, `const`, `items`, `minItems`,
  `maxItems`, `properties`, `required`, `additionalProperties` (the language has no members the
  schema does not name; a `required` name `properties` does not list is written after the listed
  members, with a value its matching `patternProperties` or else `additionalProperties` allows),
  `anyOf`.
- Beyond it, where it is sound:
  - `$ref` to a local JSON pointer (`#`, `#/definitions/..`, `#/$defs/..`, any `#/...`) or to a
    root-relative URI equal to the root's `$id`, and `#name` anchors (`$anchor`, or `$id`/`id`
    `#name`). Refs are inlined. A `$ref` cycle is unrolled: one definition may appear at most
    `SchemaLimits.max_recursion` times on a path; a deeper occurrence is the empty language, so
    optional members, array items and anyOf branches that would recurse further are left out
    (and a schema whose every value needs deeper recursion is refused as empty). When such a
    compile, or the DFA built from its tree, passes the NFA or DFA state limit, the schema is
    compiled again with `max_recursion` lowered one step at a time down to 1
    (`compiler.compile_schema`; `corral.tools` does the same for a tool-call grammar): the
    language only shrinks. A retry costs one more compile per depth, and happens only after a
    limit error; a schema without a `$ref` cycle is refused at once. In drafts 3 to 7
    the siblings of `$ref` are ignored (as validators do); otherwise they are merged with the
    target as by `allOf`.
  - `allOf`, when the parts merge: `type` lists intersect, `required` unite, `properties` merge
    member by member (a member one part does not list must satisfy that part's
    `additionalProperties`, and is dropped when that is false), numeric and length bounds take
    the tighter value, `enum`/`const` intersect, anything else must be equal in both parts.
  - Boolean algebra on the DFAs (docs/algebra.md): `not` (negated within a canonical universe,
    only where the negated language is exact; refused naming `not` otherwise), `oneOf` whose
    branches overlap (a value in exactly one branch), `allOf` whose parts do not merge
    (intersection), `if`/`then`/`else`, `dependentSchemas` and schema `dependencies` (rewritten
    to `anyOf` and `not`), `propertyNames` (listed members with a rejected name left out),
    `contains` with `minContains`/`maxContains`.
  - `anyOf`/`oneOf` next to other keywords: each branch is merged with the siblings. `oneOf` is
    compiled as `anyOf` when no value of one branch's language can validate against another
    branch: their possible types differ, or the other branch requires a member this branch never
    writes (a member another branch requires is left out of branches that do not require it),
    or a required member has disjoint `const`/`enum` values (a discriminator), or the branches'
    `enum`/`const` sets are disjoint; otherwise by the algebra above.
  - Strings: a plain `string` (no length, pattern or format) takes every value, spelt raw
    but for the controls, `"` and `\\`, which take short escapes or `\\u00XX` (as `json.dumps`
    spells them; a `\\u` escape of another character is a second spelling of a value already
    written, left out: it costs 7 DFA states per string; `strings.PLAIN_STRING_FORM`). Any JSON
    value's strings (`{}`, `json_object_regex`) keep docs/design.md's `\\u` escapes.
    `minLength`/`maxLength` (characters as Python counts them; an escape counts as
    one, a `\\u` surrogate pair too; `\\u` escapes are written only in strings with a
    `maxLength` up to 16, which keeps longer counted strings' DFAs small; a lone surrogate
    escape is never written, in any string; `maxLength` above `SchemaLimits.max_string_length`
    is lowered to it, a larger `minLength` is refused);
    `pattern` (a search, as JSON Schema says: unanchored ends get any characters; the pattern is
    read by `corral.automata.parse` and made sound inside a JSON string by removing `"`, `\\` and
    U+0000..U+001F from every byte set, so the JSON text of the string is its value; a pattern
    using `\\D`, `\\W`, `\\S` or a negated class with `\\d`, `\\w`, `\\s` is restricted to ASCII,
    where Python's Unicode classes and ours agree); `format` with a strict regex
    (`corral.automata.schema.formats.FORMATS`: date-time, date and time with exact leap years,
    duration, uuid, email, idn-email, hostname, idn-hostname, ipv4, ipv6, uri, uri-reference,
    iri, iri-reference, json-pointer, draft 3's host-name and ip-address, and the non-standard
    url); the other formats some draft defines (regex, uri-template, relative-json-pointer,
    ...) are refused ("pattern-less format"); a format name no draft defines constrains nothing
    (validators ignore it), and the OpenAPI integer formats int32/int64 are integer ranges.
    Length bounds next to `pattern`/`format` are kept when the pattern implies them, or applied
    by a product with a character counter when `maxLength` is given; `minLength` alone next to a
    pattern that does not imply it is refused.
  - Integers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (both draft-4 boolean
    and numeric forms) as an exact decimal range over integers of at most 20 digits (a larger
    upper bound is lowered, a smaller lower bound raised; a `minimum` past 20 digits is refused
    naming it); `multipleOf` (`corral.automata.schema.multiples`: an integer step up to 1,000
    as a remainder product over the digits, magnitudes below 10**12 unless bounded; a float
    step near 1/m such as 0.01 as the integers whose float quotient is exact; 0.1 and other
    steps refused).
  - Numbers: the same bounds, written without exponent, values within +-2**53 the same way;
    integer bounds as exact integer ranges (see `corral.automata.schema.numbers` for the
    float-rounding margin at exclusive bounds), other bounds as exact decimal ranges on the
    right side of the bound's float (an exclusive bound becomes the next float past it);
    with `multipleOf`, the integers above.
- Before anything is compiled, every string and member name must be UTF-8 text (a lone
  surrogate is refused with its JSON pointer) and the document nested at most
  `corral.automata.schema.values.MAX_NESTING` levels (`check_document`).
  - `prefixItems` and array-form `items` (tuples, with `additionalItems` / `items` for the rest),
    `uniqueItems` when `maxItems` <= 1 or false, or over an item language of at most
    `containers.MAX_UNIQUE_VALUES` values (each value at most once, in the order of its text;
    refused otherwise), `minProperties` (the first optional members become required; one
    above the listed members adds one unlisted member, last, with a printable-ASCII name that
    no listed name, dependency key or other pattern takes, its value `additionalProperties`,
    or when that is false the schema of the one `patternProperties` pattern the name matches;
    two or more above are refused) and `maxProperties` (the last optional members are left out),
    `patternProperties` (a listed member whose name the pattern matches must also satisfy its
    schema), `dependentRequired` and array-form
    `dependencies` (the dependencies of a written member become required, listed or not).
  - `maxItems` above `SchemaLimits.max_array_length` is lowered to it; a larger `minItems` is
    refused.
- A schema without `type` takes the types its keywords imply (`properties` -> object, `items` ->
  array, `minLength` -> string, ...): a sub-language, since validators accept other types too.
  With no type-specific keyword at all (`{}`, `true`, an untyped schema, an array without
  `items`) the language is any JSON value with containers nested at most
  `SchemaLimits.any_value_depth` levels (the `json_object_regex` machinery); depth 0 refuses it.
  An object schema without `properties` is `{}` only (docs/design.md).
- Annotations change nothing: title, description, default, examples, $schema, $id, id (draft 4),
  $comment, deprecated, readOnly, writeOnly, definitions, $defs, $anchor, $dynamicAnchor,
  $recursiveAnchor, $vocabulary, contentEncoding, contentMediaType, contentSchema (annotations
  in 2020-12). Keys that are not JSON Schema keywords in any draft (`_format`, `_uniqueItems`,
  `x-kubernetes-*`, Snowplow's `self`, OpenAPI's `nullable`, ...) are annotations too: validators
  ignore unknown keys, so the language is the same.

Limits (`SchemaLimits`, configurable): nesting depth, enum size, recursion unrolling, counted
string and array lengths, any-value depth, regex text length. Past one: `LimitError`, never a hang.
The regex limits (`corral.automata.Limits`) bound NFA and DFA sizes as for patterns.

Modules:
- `values`: JSON values as the schema writes (`dumps`) and compares them.
- `keywords`: keyword tables (annotations, supported keywords, the type each keyword implies),
  JSON pointers and refusals.
- `refs`: `$ref` resolution inside the document.
- `merge`: `allOf` merging; `disjoint`: the disjointness proofs that admit a `oneOf` as `anyOf`.
- `exact`: the canonical universe and the exactness predicate; `algebra`: the keywords compiled
  by products of DFAs (`corral.automata.product`).
- `compiler`: the dispatch over a subschema, `$ref` unrolling, `anyOf`/`oneOf`/`enum`, and the
  public entry points.
- `strings` (with `lengths`, DFA character-length analyses), `numbers` (with `multiples`),
  `formats`,
  `containers` (arrays and objects), `json_text` (scalars, any value, `json_object_regex`):
  the lowering of each JSON type to the form.
- `form`: the intermediate form and its tree builder; `text`: the regex-text renderer.
"""

from corral.automata.errors import NonFiniteNumberError, SchemaTextError
from corral.automata.limits import SchemaLimits
from corral.automata.schema.compiler import json_schema_to_regex, schema_to_dfa, schema_to_tree
from corral.automata.schema.json_text import json_object_regex, json_object_tree
from corral.automata.schema.values import dumps

__all__ = [
    "NonFiniteNumberError",
    "SchemaLimits",
    "SchemaTextError",
    "dumps",
    "json_object_regex",
    "json_object_tree",
    "json_schema_to_regex",
    "schema_to_dfa",
    "schema_to_tree",
]
