"""The grammar of an answer per tool_choice and response_format, and the one place where grammars
are compiled (docs/design.md sections 4 and 5; its decisions: docs/tools.md, "Grammars").

`grammar(request)` writes a `Grammar` as a small expression (`Text`, `Schema`, `Arguments`,
`JsonObject`, `Regex`, `Seq`, `Alt`, `Repeat`), from which come its regex tree, its cache key
(the expression as compact JSON) and, on demand, its regex text. A call is
`<tool_call>{"name":"NAME","arguments":ARGS}</tool_call>`, ARGS the JSON objects of the tool's
`parameters`. `compile_dfa` builds a grammar's DFA; `GrammarCompiler` keeps the token indexes of
the most recently used grammars in one bounded cache, shared by every request.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import cached_property

from corral import automata
from corral.automata import ConstrainError, Dfa
from corral.automata import tree as regex_tree
from corral.automata.compile import deep_recursion
from corral.automata.errors import GrammarError
from corral.automata.gbnf import parse_gbnf
from corral.automata.grammar_tree import unroll
from corral.automata.grammars import compile_grammar_text
from corral.automata.lark import parse_lark
from corral.automata.limits import DEFAULT_SCHEMA_LIMITS
from corral.automata.schema.compiler import Unrolling, narrower_limits, unrolled_tree
from corral.automata.schema.values import check_document
from corral.automata.shallower import STATE_LIMIT_ERRORS, StateLimit, retry_shallower
from corral.automata.tree_ops import ALL_BYTES, is_empty, starting_with
from corral.kernels import TokenIndex, Vocabulary
from corral.tools.errors import ToolError, invalid, unsupported
from corral.tools.parser import CLOSER, OPENER, SEPARATOR
from corral.tools.request import ToolRequest

MAX_PARALLEL_CALLS = 4
JSON_OBJECT_DEPTH = 3
DEFAULT_MAX_GRAMMARS = 64
"""The token indexes a `GrammarCompiler` keeps by default. An index holds at most 32 MiB of
masks (`corral.kernels.EAGER_LIMIT_BYTES`; a lazy one at most `LAZY_CACHE_ROWS` rows), and a
tool-call grammar with a few small schemas about 1 MiB at V = 49,152."""


# --- the expression of a grammar ------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """Literal text."""

    text: str


@dataclass(frozen=True, eq=False)
class Schema:
    """The JSON values of a JSON Schema (docs/design.md section 3); `param` names the request field
    that holds it, for errors."""

    schema: dict
    param: str


@dataclass(frozen=True, eq=False)
class Arguments:
    """The JSON objects among the values of a tool's `parameters` schema (the module
    docstring); `param` names its field, for errors."""

    schema: dict
    param: str


@dataclass(frozen=True)
class JsonObject:
    """Any JSON object nested at most `depth` levels (`corral.automata.json_object_tree`)."""

    depth: int


@dataclass(frozen=True)
class Regex:
    """A regex of docs/design.md section 2's subset; `param` names where it came from, for
    errors."""

    pattern: str
    param: str


@dataclass(frozen=True)
class Cfg:
    """A context-free grammar's text in `syntax` (`gbnf` or `lark`, docs/grammars.md), recursion
    unrolled to the deepest bound whose DFA fits alone; `param` names where it came from."""

    text: str
    syntax: str
    param: str


@dataclass(frozen=True)
class CustomInput:
    """A custom tool's input as a JSON string (with its quotes) whose decoded text is in the
    language of `definition` in `syntax` (`text`: any text; `lark`; `regex`), each character
    escaped as `json.dumps(..., ensure_ascii=False)` writes it; `param` names the tool's
    format, for errors."""

    syntax: str
    definition: str | None
    param: str


@dataclass(frozen=True)
class Seq:
    """The parts one after the other."""

    parts: tuple


@dataclass(frozen=True)
class Alt:
    """Any one of the options."""

    options: tuple


@dataclass(frozen=True)
class Repeat:
    """`part` `low` to `high` times."""

    part: object
    low: int
    high: int


def _seq(*parts) -> Seq:
    """A `Seq` with nested sequences flattened and adjacent texts joined."""
    flat: list = []
    for part in parts:
        for p in part.parts if isinstance(part, Seq) else (part,):
            if isinstance(p, Text) and flat and isinstance(flat[-1], Text):
                flat[-1] = Text(flat[-1].text + p.text)
            else:
                flat.append(p)
    return Seq(tuple(flat))


def _alt(options: list):
    return options[0] if len(options) == 1 else Alt(tuple(options))


def _tree(e, schema_limits=None, unrollings: list | None = None) -> regex_tree.Node:
    """The regex tree of an expression, its schemas compiled under `schema_limits` (None: the
    defaults) by `unrolled_tree`: a `$ref` unrolling whose NFA is counted past the limit is
    skipped for a shallower one, as `schema_to_dfa` skips it. Appends each schema's
    `Unrolling` to `unrollings` (when given). Raises ToolError 422 naming the field of a
    schema or regex that the subset refuses."""
    if isinstance(e, Text):
        return regex_tree.literal_bytes(e.text.encode("utf-8"))
    if isinstance(e, (Schema, Regex)):
        try:
            if isinstance(e, Schema):
                unrolling = unrolled_tree(e.schema, schema_limits=schema_limits)
                if unrollings is not None:
                    unrollings.append(unrolling)
                return unrolling.tree
            return automata.parse(e.pattern)
        except ConstrainError as error:
            raise unsupported(e.param, error) from None
    if isinstance(e, Arguments):
        objects = _objects(_tree(Schema(e.schema, e.param), schema_limits, unrollings))
        if is_empty(objects):
            raise ToolError(
                422,
                e.param,
                "unsupported_parameter",
                f"'{e.param}' admits no JSON object: a tool's arguments are always an object.",
            )
        return objects
    if isinstance(e, JsonObject):
        return automata.json_object_tree(e.depth)
    if isinstance(e, Cfg):
        return cfg_tree(e.text, e.syntax, e.param)
    if isinstance(e, CustomInput):
        if e.syntax == "text":
            inner = automata.parse(r"(.|\n)*")
        elif e.syntax == "regex":
            inner = _tree(Regex(e.definition, e.param))
        else:
            inner = cfg_tree(e.definition, "lark", e.param)
        quote = regex_tree.SINGLE_BYTES[ord('"')]
        return regex_tree.Concat((quote, json_string_tree(inner, e.param), quote))
    if isinstance(e, Seq):
        return regex_tree.Concat(tuple(_tree(p, schema_limits, unrollings) for p in e.parts))
    if isinstance(e, Alt):
        return regex_tree.Alt(tuple(_tree(o, schema_limits, unrollings) for o in e.options))
    return regex_tree.Repeat(_tree(e.part, schema_limits, unrollings), e.low, e.high)


def _key(e):
    """The expression as a JSON value: a text is a string, a sequence a list, anything else an
    object with one tag (`schema`, `json_object`, `regex`, `alt`, `repeat`)."""
    if isinstance(e, Text):
        return e.text
    if isinstance(e, Schema):
        return {"schema": e.schema}
    if isinstance(e, Arguments):
        return {"arguments": e.schema}
    if isinstance(e, JsonObject):
        return {"json_object": e.depth}
    if isinstance(e, Regex):
        return {"regex": e.pattern}
    if isinstance(e, Cfg):
        return {e.syntax: e.text}
    if isinstance(e, CustomInput):
        return {"custom_input": [e.syntax, e.definition]}
    if isinstance(e, Seq):
        return [_key(p) for p in e.parts]
    if isinstance(e, Alt):
        return {"alt": [_key(o) for o in e.options]}
    return {"repeat": _key(e.part), "min": e.low, "max": e.high}


def _pattern(e) -> str:
    """The regex text of an expression (docs/design.md section 2's subset)."""
    if isinstance(e, Text):
        return automata.escape(e.text)
    if isinstance(e, Schema):
        return f"(?:{automata.json_schema_to_regex(e.schema)})"
    if isinstance(e, Arguments):
        text = f"(?:{automata.json_schema_to_regex(e.schema)})"
        values = _tree(Schema(e.schema, e.param))
        if is_empty(starting_with(values, ALL_BYTES & ~BRACE)):
            return text  # the schema's values are all objects already
        return r"(?=\{)" + text  # a lookahead: Python's re reads it, the subset does not
    if isinstance(e, JsonObject):
        return f"(?:{automata.json_object_regex(e.depth)})"
    if isinstance(e, Regex):
        return f"(?:{e.pattern})"
    if isinstance(e, (Cfg, CustomInput)):
        raise ValueError(f"'{e.param}' is a {e.syntax} grammar: it has no regex text")
    if isinstance(e, Seq):
        return "".join(_pattern(p) for p in e.parts)
    if isinstance(e, Alt):
        return "(?:" + "|".join(_pattern(o) for o in e.options) + ")"
    return f"(?:{_pattern(e.part)}){{{e.low},{e.high}}}"


BRACE = 1 << ord("{")
PARSERS = {"gbnf": parse_gbnf, "lark": parse_lark}


def _objects(node: regex_tree.Node) -> regex_tree.Node:
    """The strings of `node`'s language that begin with `{`: for a language of compact JSON
    texts, its objects."""
    return starting_with(node, BRACE)


# --- grammars ---------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Grammar:
    """The language an answer is held to.

    Attributes:
        trigger: None when the whole answer is constrained from its first token; otherwise the
            text (`<tool_call>`) after which the constraint starts: the output is free until it
            ends with the trigger, and from the byte after it (a token may carry bytes past the
            trigger: they are the first bytes under the constraint) it must match the grammar.
        tree: the regex tree (`corral.automata.tree`) of the constrained text, each schema at
            the deepest `$ref` unrolling whose NFA is not counted past the limit
            (`corral.automata.schema.compiler.unrolled_tree`).
        key: the grammar's expression as compact JSON, schema key order kept (property order is
            part of the language). Equal keys, equal languages: the cache key of token indexes.
        param: the request field named when the whole grammar is refused (its DFA passes a size
            limit): `tools[i].function.parameters` when it holds one tool's schema, `tools`,
            `response_format` or `response_format.json_schema.schema`.
        expression: what the tree and the key were built from (`Text`, `Schema`, ...).
        recursive: True when a schema's compile unrolled a `$ref` cycle: `compile_dfa` may then
            build the DFA from a shallower unrolling than `tree` when `tree` passes a state
            limit (a sub-language of `tree`'s; `pattern` renders the schemas unrolled
            `SchemaLimits.max_recursion` deep).
        unrollings: the `Unrolling` of each schema in `tree`, in expression order.
    """

    trigger: str | None
    tree: regex_tree.Node = field(repr=False)
    key: str = field(repr=False)
    param: str
    expression: object = field(repr=False)
    recursive: bool = False
    unrollings: tuple[Unrolling, ...] = field(default=(), repr=False)

    @cached_property
    def pattern(self) -> str:
        """The regex text of the constrained text, for display and tests:
        `re.fullmatch(pattern, text, re.ASCII)` agrees with the DFA. Rendered on first use.
        Raises LimitError when a schema's text form passes `SchemaLimits.max_regex_length` (the
        DFA does not need the text)."""
        return _pattern(self.expression)


def _grammar(expression, trigger: str | None, param: str) -> Grammar:
    key = json.dumps(_key(expression), ensure_ascii=False, separators=(",", ":"))
    unrollings: list[Unrolling] = []
    tree = _tree(expression, None, unrollings)
    recursive = any(u.recursive for u in unrollings)
    return Grammar(trigger, tree, key, param, expression, recursive, tuple(unrollings))


def grammar(request: ToolRequest) -> Grammar | None:
    """The grammar for a validated request (see the module docstring's table); None when the
    answer is free text.

    Raises ToolError 422 `unsupported_parameter` naming the field of a schema the subset refuses
    (`tools[1].function.parameters`, `response_format.json_schema.schema`), or of a tool's
    parameters that admit no JSON object.
    """
    tools = request.tools
    if request.calls_allowed and request.tool_choice == "function":
        i = [t.name for t in tools].index(request.function_name)
        call = _seq(Text(OPENER), _call(request, i), Text(CLOSER))
        kind = "custom.format" if tools[i].custom is not None else "function.parameters"
        return _grammar(call, None, f"tools[{i}].{kind}")
    calls_param = "tools"
    if len(tools) == 1:
        calls_param = "tools[0]." + ("custom.format" if tools[0].custom else "function.parameters")
    if request.calls_allowed and request.tool_choice == "required":
        call = _seq(Text(OPENER), _any_call(request), Text(CLOSER))
        if request.parallel_tool_calls:
            call = _seq(call, Repeat(_seq(Text(SEPARATOR), call), 0, MAX_PARALLEL_CALLS - 1))
        return _grammar(call, None, calls_param)
    content, content_param = _content(request)
    if request.calls_allowed:  # auto
        rest = _seq(_any_call(request), Text(CLOSER))
        if content is None:
            return _grammar(rest, OPENER, calls_param)
        return _grammar(_alt([content, _seq(Text(OPENER), rest)]), None, "tools")
    if content is None:
        return None
    return _grammar(content, None, content_param)


def schema_grammar(schema: dict, param: str = "schema") -> Grammar:
    """The grammar of the JSON values of `schema` from the first token (the quick form of
    `corral generate`). Raises ToolError 422 naming `param` for what the subset refuses,
    lone surrogates and nesting past `MAX_NESTING` included (checked before the schema is
    written as its cache key)."""
    try:
        check_document(schema)
    except ConstrainError as error:
        raise unsupported(param, error) from None
    return _grammar(Schema(schema, param), None, param)


def regex_grammar(pattern: str, param: str = "regex") -> Grammar:
    """The grammar of a regex (docs/design.md section 2) from the first token. Raises ToolError 422
    naming `param` for what the subset refuses."""
    return _grammar(Regex(pattern, param), None, param)


def text_grammar(text: str, syntax: str, param: str = "grammar") -> Grammar:
    """The grammar of a GBNF or Lark text (`syntax`: `gbnf` or `lark`) from the first token.
    Raises ToolError as `cfg_tree` does, naming `param`."""
    return _grammar(Cfg(text, syntax, param), None, param)


def _call(request: ToolRequest, i: int) -> Seq:
    """`{"name":"NAME","arguments":ARGS}` for the request's tool i."""
    tool = request.tools[i]
    name = json.dumps(tool.name, ensure_ascii=False)
    if tool.custom is not None:
        syntax, definition = tool.custom
        where = f"tools[{i}].custom.format" + (".grammar.definition" if definition else "")
        start = '{"name":' + name + ',"arguments":{"input":'
        return _seq(Text(start), CustomInput(syntax, definition, where), Text("}}"))
    arguments = Arguments(tool.parameters, f"tools[{i}].function.parameters")
    return _seq(Text('{"name":' + name + ',"arguments":'), arguments, Text("}"))


def _any_call(request: ToolRequest):
    return _alt([_call(request, i) for i in range(len(request.tools))])


def _content(request: ToolRequest) -> tuple[object | None, str]:
    """The expression of the response_format's or structured_outputs' language (None for free
    text) and its field."""
    structured = request.structured_outputs
    if structured is not None:
        return structured_expression(structured.kind, structured.value), structured.param
    fmt = request.response_format
    if fmt.type == "json_object":
        return JsonObject(request.json_object_depth or JSON_OBJECT_DEPTH), "response_format"
    if fmt.type == "json_schema":
        param = "response_format.json_schema.schema"
        return Schema(fmt.schema, param), param
    return None, "response_format"


def structured_expression(kind: str, value, param: str | None = None):
    """The expression of vLLM's `structured_outputs` entry `kind` (`regex`, `grammar`,
    `choice`, `json`) holding `value`; `param` defaults to `structured_outputs.KIND`. A grammar
    is GBNF when its text holds `::=`, else Lark (vLLM's rule)."""
    param = param or f"structured_outputs.{kind}"
    if kind == "regex":
        return Regex(value, param)
    if kind == "grammar":
        return Cfg(value, "gbnf" if "::=" in value else "lark", param)
    if kind == "choice":
        return _alt([Text(c) for c in dict.fromkeys(value)])
    return Schema(value, param)


def grammar_error(param: str, error: GrammarError) -> ToolError:
    """The error for a grammar text that corral does not compile: a construct the dialect
    refuses (`... is not supported`, a left-recursive rule) is a 422 `unsupported_parameter`,
    any other fault (a syntax error, an undefined rule) a 400 `invalid_value`; both name
    `param` and the line and column."""
    message = f"Invalid grammar in '{param}' at line {error.line} column {error.column}: "
    if "not supported" in error.reason or "left-recursive" in error.reason:
        return ToolError(422, param, "unsupported_parameter", message + error.reason)
    return invalid(param, message + error.reason)


ESCAPED = {b: json.dumps(chr(b))[1:-1].encode() for b in range(0x20)} | {
    ord('"'): b'\\"',
    ord("\\"): b"\\\\",
}
"""The JSON escape of each byte a JSON string cannot hold as itself (`json.dumps`'s)."""
ESCAPED_MASK = sum(1 << b for b in ESCAPED)


def json_string_tree(node: regex_tree.Node, param: str) -> regex_tree.Node:
    """The tree of the JSON string bodies (no quotes) whose decoded bytes are in `node`'s
    language: the homomorphism that writes each byte of `ESCAPED` as its escape and any other
    byte as itself, applied leaf by leaf (shared nodes stay shared). Linear in the tree's size.
    Raises ToolError 422 naming `param` for a tree holding a finished DFA (`Automaton`)."""
    done: dict[int, regex_tree.Node] = {}

    def walk(n):
        key = id(n)
        if key in done:
            return done[key]
        if isinstance(n, regex_tree.ByteSet):
            kept = n.mask & ~ESCAPED_MASK
            options = [regex_tree.ByteSet(kept)] if kept else []
            options += [regex_tree.literal_bytes(ESCAPED[b]) for b in ESCAPED if n.mask >> b & 1]
            out = options[0] if len(options) == 1 else regex_tree.Alt(tuple(options))
        elif isinstance(n, regex_tree.Concat):
            out = regex_tree.Concat(tuple(walk(i) for i in n.items))
        elif isinstance(n, regex_tree.Alt):
            out = regex_tree.Alt(tuple(walk(i) for i in n.items))
        elif isinstance(n, regex_tree.Repeat):
            out = regex_tree.Repeat(walk(n.item), n.min, n.max)
        else:
            raise ToolError(
                422, param, "unsupported_parameter", f"'{param}' cannot be written as a JSON string"
            )
        done[key] = out
        return out

    with deep_recursion():
        return walk(node)


@functools.lru_cache(maxsize=DEFAULT_MAX_GRAMMARS)
def cfg_tree(text: str, syntax: str, param: str) -> regex_tree.Node:
    """The regex tree of a grammar text (`Cfg`), unrolled at the deepest recursion bound at
    which the grammar alone compiles (`corral.automata.grammars.compile_grammar_text`), the
    most recent ones cached. Raises ToolError (`grammar_error`; 422 naming `param` for a
    grammar past a state limit or deriving no string)."""
    parse = PARSERS[syntax]
    try:
        depth = compile_grammar_text(text, syntax).max_recursion
        return unroll(parse(text), depth)[0]
    except GrammarError as error:
        raise grammar_error(param, error) from None
    except ConstrainError as error:
        raise unsupported(param, error) from None


# --- compiling ----------------------------------------------------------------------------


def compile_dfa(grammar: Grammar) -> Dfa:
    """The canonical DFA of a grammar (`corral.automata.tree_to_dfa`), built anew. Past an NFA
    or DFA state limit, a grammar whose schemas unrolled a `$ref` cycle is built again with a
    shallower unrolling (`corral.automata.shallower.retry_shallower`, the loop
    `schema_to_dfa` runs): a schema alone compiles here to the same DFA as there, trying the
    same depths, then the same narrower string and array bounds
    (`corral.automata.schema.compiler.narrower_limits`). Raises ToolError 422
    `unsupported_parameter` naming `grammar.param` when every attempt passes a limit (with the
    first error: a skipped unrolling's, else the first build's) or the language is empty."""

    deepest = DEFAULT_SCHEMA_LIMITS.max_recursion  # the depth `grammar.tree` was built at

    def attempt(depth: int) -> Dfa:
        tree, unrollings = grammar.tree, grammar.unrollings
        if depth != deepest:  # a shallower try: the tree built again at `depth`
            schema_limits = replace(DEFAULT_SCHEMA_LIMITS, max_recursion=depth)
            built: list[Unrolling] = []
            tree, unrollings = _tree(grammar.expression, schema_limits, built), tuple(built)
        try:
            return automata.tree_to_dfa(tree)
        except STATE_LIMIT_ERRORS as error:
            recursive = [u.max_recursion for u in unrollings if u.recursive]
            raise StateLimit(error, bool(recursive), max(recursive, default=1)) from None

    first = next((u.skipped for u in grammar.unrollings if u.skipped is not None), None)
    try:
        return retry_shallower(attempt, deepest, first, (ConstrainError, ToolError))[0]
    except STATE_LIMIT_ERRORS as error:  # then the schemas' narrower bounds, as schema_to_dfa
        longest = [max((u.longest[i] for u in grammar.unrollings), default=0) for i in (0, 1)]
        for bounds in narrower_limits(DEFAULT_SCHEMA_LIMITS, longest):
            if any(u.recursive for u in grammar.unrollings):
                bounds = replace(bounds, max_recursion=1)
            try:
                return automata.tree_to_dfa(_tree(grammar.expression, bounds))
            except (ConstrainError, ToolError):
                continue  # the first error stands
        raise unsupported(grammar.param, error) from None
    except ConstrainError as error:
        raise unsupported(grammar.param, error) from None


class GrammarCompiler:
    """Grammars to token indexes over one vocabulary, with one bounded cache (docs/design.md
    section 4: an index is built once and shared by every request that uses its grammar).

    The cache maps `Grammar.key` to its `TokenIndex` and keeps the `max_entries` most recently
    used (least recently used dropped first). Thread-safe: two threads asking for the same new
    grammar at once may both build it; one result is kept.

    Args:
        vocabulary: the model's `corral.kernels.Vocabulary`.
        max_entries: how many token indexes to keep (`DEFAULT_MAX_GRAMMARS`); at least 1.

    Attributes:
        hits: lookups answered from the cache, since creation.
        misses: lookups that built an index, or tried to (a grammar seen for the first time,
            again after it was dropped, or refused), since creation. The hit rate of a run is
            the difference of both counts before and after it.
    """

    def __init__(self, vocabulary: Vocabulary, max_entries: int = DEFAULT_MAX_GRAMMARS):
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self.vocabulary = vocabulary
        self.max_entries = max_entries
        self._indexes: OrderedDict[str, TokenIndex] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        """The number of token indexes in the cache."""
        return len(self._indexes)

    @property
    def hit_rate(self) -> float:
        """hits / (hits + misses), 0.0 before any lookup."""
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0

    def index(self, grammar: Grammar) -> TokenIndex:
        """The token index of `grammar`: from the cache, or built (`compile_dfa`, then
        `TokenIndex`) and cached. Raises ToolError 422 as `compile_dfa` does."""
        with self._lock:
            index = self._indexes.get(grammar.key)
            if index is not None:
                self._indexes.move_to_end(grammar.key)
                self.hits += 1
                return index
            self.misses += 1
        index = TokenIndex(compile_dfa(grammar), self.vocabulary)
        with self._lock:
            self._indexes[grammar.key] = index
            while len(self._indexes) > self.max_entries:
                self._indexes.popitem(last=False)
        return index
