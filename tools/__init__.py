"""corral.tools: the OpenAI surface (docs/design.md section 5): requests, grammars per tool_choice,
rendering with tools, the streaming tool-call parser and the answer's JSON shapes; the Batch job,
the server and the `corral` command (ARCHITECTURE.md maps the modules).
"""

# First, for its effect: corral.kernels sets the thread variables before NumPy loads OpenBLAS
# (the `corral` command's first import is this package)
import corral.kernels  # noqa: F401, I001

from corral.tools.bfcl import bfcl_to_json_schema, bfcl_tools
from corral.tools.errors import ToolError
from corral.tools.grammar import (
    Grammar,
    GrammarCompiler,
    compile_dfa,
    grammar,
    regex_grammar,
    schema_grammar,
)
from corral.tools.parser import ToolParser, parse_text
from corral.tools.render import render_messages, render_prompt, render_request, tools_prompt
from corral.tools.request import ResponseFormat, Tool, ToolRequest, parse_tool_request
from corral.tools.events import Arguments, CallStart, Content, ToolCall, ToolEvent, collect
from corral.tools.shapes import delta_json, finish_reason, message_json

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
