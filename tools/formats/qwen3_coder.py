"""Qwen3-Coder: XML calls, `<tool_call>\\n<function=NAME>\\n` then each given parameter as
`<parameter=P>\\nVALUE\\n</parameter>\\n`, then `</function>\\n</tool_call>`. A string
parameter's VALUE is its raw text (the arguments hold it as a JSON string), any other's its JSON
text; each VALUE is constrained by its parameter's schema (docs/tools.md, "Turn formats")."""

from __future__ import annotations

from corral.tools.errors import ToolError
from corral.tools.formats.format import TurnFormat
from corral.tools.parser import BARE_NAME, CallSyntax

OBJECT_KEYS = frozenset(
    {"type", "properties", "required", "additionalProperties", "description", "title"}
)
"""The keywords of a parameters schema that XML parameters can honour exactly."""
STRING_KEYS = frozenset(
    {"type", "description", "title", "minLength", "maxLength", "enum", "const", "default"}
)
"""The keywords of a string parameter whose raw text the grammar constrains exactly."""
CLOSE = "</parameter>"


def xml_parameters(schema: dict, param: str) -> list[tuple[str, dict, bool, bool]]:
    """The parameters of a tool's `parameters` schema as XML writes them, in schema order:
    `(name, schema, required, raw)`, `raw` when the value is raw text (a string parameter of
    `STRING_KEYS` only). Raises ToolError 422 naming `param` (and `.properties.NAME`) for a
    schema XML parameters cannot honour exactly: keywords past `OBJECT_KEYS`, a parameter
    that may be a string but has keywords past `STRING_KEYS`, or a raw value that would hold
    `</parameter>`."""
    extra = sorted(set(schema) - OBJECT_KEYS)
    if schema.get("type", "object") != "object" or extra:
        what = f"the keywords {extra}" if extra else "a type other than object"
        raise _refused(param, f"it has {what}")
    required = set(schema.get("required", ()))
    out = []
    for name, sub in (schema.get("properties") or {}).items():
        where = f"{param}.properties.{name}"
        if not isinstance(sub, dict) or not isinstance(name, str) or ">" in name:
            raise _refused(where, "a parameter needs a schema object and a name without '>'")
        raw = _admits_strings(sub)
        if raw and (sub.get("type") != "string" or set(sub) - STRING_KEYS):
            raise _refused(where, "a string parameter may use only " + ", ".join(STRING_KEYS))
        values = sub.get("enum", [sub["const"]] if "const" in sub else [])
        if raw and any(CLOSE in v for v in values if isinstance(v, str)):
            raise _refused(where, f"a value holds {CLOSE}")
        out.append((name, sub, name in required, raw))
    return out


def string_parameters(tools) -> dict[str, frozenset]:
    """Function name -> its raw-text parameters, for the parser (`CallSyntax.xml_strings`);
    a tool whose schema XML cannot write gets none (its request is refused by the grammar)."""
    out = {}
    for tool in tools:
        try:
            params = xml_parameters(tool.parameters, "parameters")
        except ToolError:
            params = []
        out[tool.name] = frozenset(name for name, _, _, raw in params if raw)
    return out


def _admits_strings(schema: dict) -> bool:
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind == "string"
    if isinstance(kind, list):
        return "string" in kind
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if values is not None:
        return any(isinstance(v, str) for v in values)
    return True


def _refused(param: str, why: str) -> ToolError:
    return ToolError(
        422,
        param,
        "unsupported_parameter",
        f"'{param}' cannot be written as Qwen3-Coder's XML parameters: {why}.",
    )


QWEN3_CODER = TurnFormat(
    name="qwen3-coder",
    family="Qwen3-Coder (XML parameters)",
    opener="<tool_call>\n",
    name_template="<function={bare}>\n",
    call_suffix="</function>\n",
    closer="</tool_call>",
    block_separator="\n",
    syntax=CallSyntax("<tool_call>", ("<function=", BARE_NAME, ">"), ("</tool_call>",)),
    markers=(("<tool_call>", "<function="),),
    xml_parameters=True,
    string_parameters=string_parameters,
)
