"""corral.tools: the OpenAI surface (docs/design.md section 5): requests, grammars per tool_choice,
rendering with tools, the streaming tool-call parser and the answer's JSON shapes; the Batch job,
the server and the `corral` command (ARCHITECTURE.md maps the modules).
"""

# Names load on first use (PEP 562): the `corral` command (`corral.tools.command`) configures
# the threads before NumPy and Numba load (`corral.kernels.threads.configure`)
import importlib

_MODULES = {
    "corral.tools.bfcl": (
        "bfcl_to_json_schema",
        "bfcl_tools",
    ),
    "corral.tools.errors": ("ToolError",),
    "corral.tools.grammar": (
        "Grammar",
        "GrammarCompiler",
        "compile_dfa",
        "grammar",
        "regex_grammar",
        "schema_grammar",
    ),
    "corral.tools.parser": (
        "ToolParser",
        "parse_text",
    ),
    "corral.tools.render": (
        "render_messages",
        "render_prompt",
        "render_request",
        "tools_prompt",
    ),
    "corral.tools.request": (
        "ResponseFormat",
        "Tool",
        "ToolRequest",
        "parse_tool_request",
    ),
    "corral.tools.events": (
        "Arguments",
        "CallStart",
        "Content",
        "ToolCall",
        "ToolEvent",
        "collect",
    ),
    "corral.tools.shapes": (
        "delta_json",
        "finish_reason",
        "message_json",
    ),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str):
    """The public name `name`, imported from its module on first use."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'corral.tools' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Arguments",
    "CallStart",
    "Content",
    "Grammar",
    "GrammarCompiler",
    "ResponseFormat",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolEvent",
    "ToolParser",
    "ToolRequest",
    "bfcl_to_json_schema",
    "bfcl_tools",
    "collect",
    "compile_dfa",
    "delta_json",
    "finish_reason",
    "grammar",
    "message_json",
    "parse_text",
    "parse_tool_request",
    "regex_grammar",
    "render_messages",
    "render_prompt",
    "render_request",
    "schema_grammar",
    "tools_prompt",
]
