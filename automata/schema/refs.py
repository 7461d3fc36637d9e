"""`$ref` resolution inside one schema document (docs/design.md section 3, beyond the subset).

A `$ref` may name a local JSON pointer (`#`, `#/definitions/..`, `#/$defs/..`, any `#/...`), a
root-relative URI equal to the root's `$id`, or a `#name` anchor (`$anchor`, or `$id`/`id`
`#name`). Anything else (another document, a `$ref` under a nested `$id`, whose base URI would
differ) is refused. How refs are inlined, unrolled and merged with their siblings is the
compiler's business (`corral.automata.schema.compiler`, `corral.automata.schema.merge`).
"""

from __future__ import annotations

from urllib.parse import unquote

from corral.automata.errors import SchemaError
from corral.automata.schema.keywords import LEGACY_DRAFTS, child, is_constraint, unsupported


def has_own_id(schema: dict) -> bool:
    """True when the subschema starts a resource of its own (a `$id`/`id` that is not a bare
    `#anchor`)."""
    for key in ("$id", "id"):
        value = schema.get(key)
        if isinstance(value, str) and value and not value.startswith("#"):
            return True
    return False


def ref_siblings(schema: dict) -> dict:
    """The constraint keywords next to `$ref` (annotations left out)."""
    return {k: v for k, v in schema.items() if k != "$ref" and is_constraint(k)}


class RefResolver:
    """Finds the targets of `$ref`s in the document `root` (the parsed schema).

    Attributes:
        root: the whole document.
        legacy: True when `$schema` names draft 3 to 7, where the siblings of `$ref` are ignored.
        root_id: the root's `$id`/`id` without fragment, or None.
        nested_ids: how many subschemas with their own `$id` enclose the one being compiled
            (kept by the compiler); a `$ref` is refused while it is above 0.
    """

    def __init__(self, root):
        self.root = root
        schema_uri = root.get("$schema", "") if isinstance(root, dict) else ""
        self.legacy = isinstance(schema_uri, str) and any(d in schema_uri for d in LEGACY_DRAFTS)
        root_id = root.get("$id", root.get("id")) if isinstance(root, dict) else None
        self.root_id = root_id.split("#")[0] if isinstance(root_id, str) else None
        self.nested_ids = 0

    def resolve(self, ref, pointer: str) -> tuple[str, object]:
        """`(target pointer, target schema)` of a `$ref` met at `pointer`.

        Raises:
            SchemaError (keyword `$ref`): not a string, another document, under a nested `$id`,
                or nothing at the pointer or anchor.
        """
        if not isinstance(ref, str):
            raise SchemaError(pointer, "$ref", "$ref must be a string")
        if self.nested_ids:
            raise unsupported(pointer, "$ref", "a $ref under a nested $id")
        base, _, fragment = ref.partition("#")
        if base and base != self.root_id:
            raise unsupported(pointer, "$ref", f"{ref!r} refers to another document")
        fragment = unquote(fragment)
        if fragment and not fragment.startswith("/"):
            return self._resolve_anchor(fragment, ref, pointer)
        path = [node for _, node in walk_pointer(self.root, fragment)]
        if len(path) < fragment.count("/"):
            raise SchemaError(pointer, "$ref", f"$ref {ref!r} does not resolve")
        return fragment, path[-1] if path else self.root

    def _resolve_anchor(self, name: str, ref: str, pointer: str) -> tuple[str, object]:
        """The subschema with anchor `name`, searched depth-first outside value keywords and
        outside nested resources."""
        stack = [("", self.root)]
        while stack:
            where, node = stack.pop()
            if isinstance(node, dict):
                if where and has_own_id(node):
                    continue  # another resource: its anchors are not this document's
                if (
                    node.get("$anchor") == name
                    or node.get("$id") == "#" + name
                    or node.get("id") == "#" + name
                ):
                    return where, node
                for key, value in node.items():
                    if key not in ("enum", "const", "default", "examples"):
                        stack.append((child(where, key), value))
            elif isinstance(node, list):
                stack.extend((child(where, i), v) for i, v in enumerate(node))
        raise SchemaError(pointer, "$ref", f"$ref {ref!r} does not resolve")


def walk_pointer(root, pointer: str):
    """`(token, node)` for each token of the JSON `pointer` (RFC 6901, `~1` and `~0` unescaped)
    in turn, while it names a node of `root`; it stops at the first token that names none."""
    node = root
    for token in pointer.split("/")[1:]:
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return
        yield token, node
