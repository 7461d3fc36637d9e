"""corral.automata.schema: JSON Schema to a regex tree, regex text and canonical DFA (docs/design.md
section 3; the subset, keyword by keyword: docs/subsets.md).

The language is compact JSON (no whitespace) with object members in the order the schema lists
them. Every string the DFA accepts parses with `json.loads` and validates against the schema
(soundness); the language may be smaller than the set of valid instances, never larger. A keyword
outside the subset raises `SchemaError` naming the keyword and the JSON pointer; past a
`SchemaLimits` limit, `LimitError`.

Entry points: `schema_to_tree` (the regex tree, the primary path), `schema_to_dfa` (the
canonical DFA), `json_schema_to_regex` (regex text; `LimitError` past
`SchemaLimits.max_regex_length`), `json_object_tree` / `json_object_regex` (any JSON value),
`dumps` (JSON values as the compiler writes them), `compile_schema_dfa` (the DFA and whether its
bounds were narrowed to fit the state limits: `SchemaCompile`).
"""

from corral.automata.errors import NonFiniteNumberError, SchemaTextError
from corral.automata.limits import SchemaLimits
from corral.automata.schema.compiler import (
    SchemaCompile,
    compile_schema_dfa,
    json_schema_to_regex,
    schema_to_dfa,
    schema_to_tree,
)
from corral.automata.schema.json_text import json_object_regex, json_object_tree
from corral.automata.schema.values import dumps

__all__ = [
    "NonFiniteNumberError",
    "SchemaCompile",
    "SchemaLimits",
    "SchemaTextError",
    "compile_schema_dfa",
    "dumps",
    "json_object_regex",
    "json_object_tree",
    "json_schema_to_regex",
    "schema_to_dfa",
    "schema_to_tree",
]
