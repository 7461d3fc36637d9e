"""The grammar of an answer, per tool_choice and response_format (DESIGN.md section 5;
tool-calls-spec section 2.4, `grammar_by_tool_choice`).

A call is `<tool_call>{"name":"NAME","arguments":ARGS}</tool_call>` (compact JSON, the name
written as a JSON string), ARGS being the tool's `parameters` compiled by DESIGN.md section 3;
calls are separated by `\\n`.

- named function f: exactly one call of f, from the first token (no trigger).
- `required`: one call of any tool, or 1 to 4 calls joined by `\\n` when `parallel_tool_calls`
  (the OpenAI default) is true (no trigger).
- `auto`: free text; once the output ends with the trigger `<tool_call>`, the rest of one call,
  `{"name":...,"arguments":...}</tool_call>`, is constrained.
- `none`, or no tools: free text (no grammar), or the response_format language (no trigger).

Decisions (the specification says "the rest of one call"):
- Under `auto`, the grammar's pattern is what follows the trigger, and it ends with the call:
  its last state accepts and allows nothing but EOS, so a call ends the answer. Text may come
  before the call, not after it, and there is at most one call. Clients that want several calls
  in one turn ask for `required` (parallel calls are a forced-call feature here).
- Under `auto` with a `json_object` or `json_schema` response_format, the answer is constrained
  from the first token to be either that JSON (the content) or one call: the content must match
  the format, so free text is not allowed, and the trigger is not needed.
- Under a named function or `required`, response_format does not apply (the answer is calls).

The pattern text is for display and tests (built on demand); the DFA is built from the regex tree
assembled from the same pieces (literals, and each schema's `schema_to_tree`), so large schemas
never go through their (possibly quadratic) text.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property

from corral import automata
from corral.automata import ConstrainError, Dfa
from corral.automata.tree import Alt, Concat, Node, Repeat, literal_bytes
from corral.tools.errors import unsupported
from corral.tools.request import Tool, ToolRequest

OPENER = "<tool_call>"
CLOSER = "</tool_call>"
SEPARATOR = "\n"
MAX_PARALLEL_CALLS = 4
_DFA_CACHE_SIZE = 64


@dataclass(frozen=True, eq=False)
class Grammar:
    """The language an answer is held to.

    Attributes:
        trigger: None when the whole answer is constrained from its first token; otherwise the
            text (`<tool_call>`) after which the constraint starts: the output is free until it
            ends with the trigger, and from the byte after it (a token may carry bytes past the
            trigger: they are the first bytes under the constraint) it must match `pattern`.
        tree: the regex tree of the constrained text, built from the pieces and each schema's
            `schema_to_tree`, without going through the pattern text.
        param: the request field the grammar comes from, named in errors
            (`tools[i].function.parameters` when it holds one tool's schema, `tools`,
            `response_format`, `response_format.json_schema.schema`).
        chunks: the pattern as literal regex text and `_Schema` references, joined on demand.
    """

    trigger: str | None
    tree: Node = field(repr=False)
    param: str = "tools"
    chunks: tuple = field(default=(), repr=False)

    @cached_property
    def pattern(self) -> str:
        """The regex (DESIGN.md section 2's subset) of the constrained text, for display and
        tests; `re.fullmatch(pattern, text, re.ASCII)` agrees with `dfa()`. Built on first use.
        Raises LimitError when a schema's text form passes `SchemaLimits.max_regex_length` (the
        DFA does not need the text)."""
        return "".join(
            c if isinstance(c, str) else automata.json_schema_to_regex(c.schema)
            for c in self.chunks
        )

    @cached_property
    def key(self) -> str:
        """A string that identifies the language: the chunks with each schema as compact JSON
        (key order kept). Equal keys, equal languages: a cache key for DFAs and token indexes."""
        return json.dumps(
            [c if isinstance(c, str) else {"schema": c.schema} for c in self.chunks],
            ensure_ascii=False,
            separators=(",", ":"),
        )

    def dfa(self) -> Dfa:
        """The canonical DFA of the grammar, built once per distinct `key` (a small LRU cache
        shared by every request). Raises ToolError 422 `unsupported_parameter` naming `param`
        when the automaton passes a size limit or the language is empty."""
        dfa = _DFA_CACHE.get(self.key)
        if dfa is None:
            try:
                dfa = automata.tree_to_dfa(self.tree)
            except ConstrainError as error:
                raise unsupported(self.param, error) from None
            _DFA_CACHE[self.key] = dfa
            while len(_DFA_CACHE) > _DFA_CACHE_SIZE:
                _DFA_CACHE.popitem(last=False)
        else:
            _DFA_CACHE.move_to_end(self.key)
        return dfa


_DFA_CACHE: OrderedDict[str, Dfa] = OrderedDict()


def grammar(request: ToolRequest) -> Grammar | None:
    """The grammar for `request` (see the module docstring's table); None when the answer is
    free text. Raises ConstrainError only if a schema that `parse_tool_request` accepted fails
    to compile to a pattern (it should not)."""
    tools = request.tools
    if request.calls_allowed and request.tool_choice == "function":
        call = _call(request.tool(request.function_name))
        param = _tools_param(request, [request.function_name])
        return _grammar(_seq(_literal(OPENER), call, _literal(CLOSER)), None, param)
    if request.calls_allowed and request.tool_choice == "required":
        call = _seq(_literal(OPENER), _alt([_call(t) for t in tools]), _literal(CLOSER))
        if request.parallel_tool_calls:
            more = _repeat(_seq(_literal(SEPARATOR), call), 0, MAX_PARALLEL_CALLS - 1)
            call = _seq(call, more)
        return _grammar(call, None, _tools_param(request, [t.name for t in tools]))
    content = _response_format(request)
    if request.calls_allowed:  # auto
        rest = _seq(_alt([_call(t) for t in tools]), _literal(CLOSER))
        if content is None:
            return _grammar(rest, OPENER, _tools_param(request, [t.name for t in tools]))
        return _grammar(_alt([content, _seq(_literal(OPENER), rest)]), None, "tools")
    if content is None:
        return None
    return _grammar(content, None, _format_param(request))


# --- pieces: a pattern's chunks and its tree, built side by side ----------------------------


@dataclass(frozen=True, eq=False)
class _Schema:
    """A schema inside a pattern: its text is `json_schema_to_regex(schema)`."""

    schema: dict


@dataclass(frozen=True, eq=False)
class _Piece:
    chunks: tuple  # str (regex text) | _Schema
    tree: Node


def _grammar(piece: _Piece, trigger: str | None, param: str) -> Grammar:
    return Grammar(trigger, piece.tree, param, piece.chunks)


def _literal(text: str) -> _Piece:
    return _Piece((automata.escape(text),), literal_bytes(text.encode("utf-8")))


def _seq(*pieces: _Piece) -> _Piece:
    chunks = tuple(c for p in pieces for c in p.chunks)
    return _Piece(chunks, Concat(tuple(p.tree for p in pieces)))


def _alt(pieces: list[_Piece]) -> _Piece:
    if len(pieces) == 1:
        return pieces[0]
    chunks: list = ["(?:"]
    for i, piece in enumerate(pieces):
        chunks += [*(["|"] if i else []), *piece.chunks]
    return _Piece((*chunks, ")"), Alt(tuple(p.tree for p in pieces)))


def _repeat(piece: _Piece, low: int, high: int) -> _Piece:
    return _Piece(("(?:", *piece.chunks, f"){{{low},{high}}}"), Repeat(piece.tree, low, high))


def _schema(schema: dict, tree: Node) -> _Piece:
    return _Piece(("(?:", _Schema(schema), ")"), tree)


def _call(tool: Tool) -> _Piece:
    """`{"name":"NAME","arguments":ARGS}` for one tool."""
    name = json.dumps(tool.name, ensure_ascii=False)
    return _seq(
        _literal('{"name":' + name + ',"arguments":'),
        _schema(tool.parameters, tool.tree),
        _literal("}"),
    )


def _response_format(request: ToolRequest) -> _Piece | None:
    fmt = request.response_format
    if fmt.type == "json_object":
        return _Piece(("(?:", automata.json_object_regex(3), ")"), fmt.tree)
    if fmt.type == "json_schema":
        return _schema(fmt.schema, fmt.tree)
    return None


def _tools_param(request: ToolRequest, names: list[str]) -> str:
    """`tools[i].function.parameters` when the grammar holds one tool's schema, else `tools`."""
    if len(names) == 1:
        i = [t.name for t in request.tools].index(names[0])
        return f"tools[{i}].function.parameters"
    return "tools"


def _format_param(request: ToolRequest) -> str:
    if request.response_format.type == "json_schema":
        return "response_format.json_schema.schema"
    return "response_format"
