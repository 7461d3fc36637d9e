"""The grammar of an answer per tool_choice and response_format, and the one place where grammars
are compiled (docs/design.md sections 4 and 5; its decisions: docs/tools.md, "Grammars").

`grammar(request)` writes a `Grammar` as a small expression (`Text`, `Special`, `Thought`,
`Schema`, `Arguments`, `JsonObject`, `Regex`, `Seq`, `Alt`, `Repeat`), from which come its
regex tree, its cache key (the expression as compact JSON) and, on demand, its regex text. A
call is written in the request's turn format (`corral.tools.formats`; Hermes' by default,
`<tool_call>{"name":"NAME","arguments":ARGS}</tool_call>`), ARGS the JSON objects of the tool's
`parameters`; ARGS and the call's suffix are a `Piece`, compiled alone, cached, and stitched
into the grammar's DFA (docs/tools.md, "Many tools: stitched grammars"). `compile_dfa` builds a
grammar's DFA; `GrammarCompiler` keeps the token indexes of the most recently used grammars in
one bounded cache, shared by every request.
"""

from __future__ import annotations

import functools
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
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
from corral.automata.product import difference, intersection, union
from corral.automata.schema.compiler import Unrolling, narrower_limits, unrolled_tree
from corral.automata.schema.values import check_document
from corral.automata.shallower import STATE_LIMIT_ERRORS, StateLimit, retry_shallower
from corral.automata.special import special_symbol, special_token
from corral.automata.stitch import hole_tree, stitch
from corral.automata.tree_ops import ALL_BYTES, is_empty, starting_with
from corral.kernels import TokenIndex, Vocabulary
from corral.kernels.masks.budget import ThoughtBudget, thought_region
from corral.tools.errors import ToolError, invalid, unsupported
from corral.tools.formats import HERMES, TurnFormat
from corral.tools.formats.format import CALL_ID
from corral.tools.formats.qwen3_coder import CLOSE as XML_CLOSE
from corral.tools.formats.qwen3_coder import xml_parameters
from corral.tools.request import ToolRequest

MAX_PARALLEL_CALLS = 4
JSON_OBJECT_DEPTH = 3
DEFAULT_MAX_GRAMMARS = 64
"""The token indexes a `GrammarCompiler` keeps by default. An index holds at most 32 MiB of
masks (`corral.kernels.EAGER_LIMIT_BYTES`; a lazy one at most `LAZY_CACHE_ROWS` rows), and a
tool-call grammar with a few small schemas about 1 MiB at V = 49,152."""
MAX_PIECE_STATES = 200_000
"""The most DFA states the `Piece` cache keeps, summed over its DFAs (about 200 MB of tables;
a BFCL tool's arguments take 30 to 350 states, so some thousands of tools)."""


# --- the expression of a grammar ------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """Literal text."""

    text: str


@dataclass(frozen=True)
class Special:
    """The special token `id` (whose text is `text`), by its symbol (docs/special-tokens.md)."""

    text: str
    id: int


@dataclass(frozen=True)
class Thought:
    """The text of a thinking block: any UTF-8 text that does not contain `close`."""

    close: str


@dataclass(frozen=True, eq=False)
class RawText:
    """A string parameter's raw text (Qwen3-Coder's XML values): one of its `enum`/`const`
    strings, else any text of `minLength`..`maxLength` characters without `</parameter>`;
    `param` names its schema, for errors."""

    schema: dict
    param: str


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


@dataclass(frozen=True, eq=False)
class Piece:
    """`part`'s language, compiled to a DFA of its own, cached across grammars by its key
    (`piece_dfa`), and stitched into the grammar's DFA where it occurs
    (`corral.automata.stitch`). A tool call is prefix(name) + Piece(arguments + suffix): the
    envelope and the names compile as one small DFA, each tool's arguments once. `param`
    names the field refused when the piece alone passes a state limit."""

    part: object
    param: str


@dataclass(frozen=True)
class Hole:
    """Where piece `index` goes in an envelope (`_envelope`)."""

    index: int


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
    if isinstance(e, Special):
        return special_token(e.id)
    if isinstance(e, Thought):
        return regex_tree.Automaton(thought_dfa(e.close))
    if isinstance(e, RawText):
        return raw_text_tree(e.schema)
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
    if isinstance(e, Piece):
        return _tree(e.part, schema_limits, unrollings)
    if isinstance(e, Hole):
        return hole_tree(e.index)
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
    if isinstance(e, Special):
        return {"special": e.id}
    if isinstance(e, Thought):
        return {"thought": e.close}
    if isinstance(e, RawText):
        return {"raw_text": e.schema}
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
    if isinstance(e, Piece):
        return _key(e.part)
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
    if isinstance(e, Piece):
        return _pattern(e.part)
    if isinstance(e, Special):
        raise ValueError(f"the special token {e.text!r} has no regex text")
    if isinstance(e, Thought):
        return "(?:(?!" + automata.escape(e.close) + r")(?:.|\n))*"
    if isinstance(e, RawText):
        raise ValueError(f"'{e.param}' is raw text: it has no regex text here")
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


def grammar(
    request: ToolRequest,
    turn_format: TurnFormat = HERMES,
    specials: Mapping[str, int] | None = None,
    thinking: bool = False,
) -> Grammar | None:
    """The grammar for a validated request (see the module docstring's table); None when the
    answer is free text.

    Args:
        request: the validated request.
        turn_format: how the model writes calls and thoughts (`corral.tools.formats`).
        specials: text -> id of the format's texts that are special tokens of the model (each
            written as its symbol); None or missing: written as text.
        thinking: the answer opens with the format's thinking block (its text any text without
            the closer) before the constrained part, under `required`, a named function, a
            response format (with `auto` or without tools); under `auto` alone the thought is
            free text before the trigger (`prelude_dfa` holds it to a budget).

    Raises ToolError 422 `unsupported_parameter` naming the field of a schema the subset refuses
    (`tools[1].function.parameters`, `response_format.json_schema.schema`), or of a tool's
    parameters that admit no JSON object.
    """
    fmt, marks = turn_format, dict(specials or {})
    tools = request.tools
    thought = _thought(fmt, thinking, marks)
    if request.calls_allowed and request.tool_choice == "function":
        i = [t.name for t in tools].index(request.function_name)
        call = _block(fmt, marks, _call(request, i, fmt, marks), 1)
        kind = "custom.format" if tools[i].custom is not None else "function.parameters"
        return _grammar(_seq(thought, call), None, f"tools[{i}].{kind}")
    calls_param = "tools"
    if len(tools) == 1:
        calls_param = "tools[0]." + ("custom.format" if tools[0].custom else "function.parameters")
    most = min(MAX_PARALLEL_CALLS, fmt.max_calls) if request.parallel_tool_calls else 1
    if request.calls_allowed and request.tool_choice == "required":
        call = _block(fmt, marks, _any_call(request, fmt, marks), most)
        return _grammar(_seq(thought, call), None, calls_param)
    content, content_param = _content(request)
    if request.calls_allowed:  # auto: one block after its opener (today's Hermes: one call)
        any_call = _any_call(request, fmt, marks)
        opener = _marked(fmt.opener, marks)
        rest = _seq(any_call, *_marked(fmt.closer, marks))
        if fmt.separator is not None:
            more = Repeat(_seq(*_marked(fmt.separator, marks), any_call), 0, most - 1)
            rest = _seq(any_call, more, *_marked(fmt.closer, marks))
        if content is not None:
            calls = _alt([content, _seq(*opener, rest)])
            return _grammar(_seq(thought, calls), None, "tools")
        if opener and isinstance(opener[0], Special):  # no trigger: text never writes a symbol
            free, block = Regex(r"(.|\n)*", "tools"), _seq(*opener, rest)
            if fmt.content_prefix:  # the answer's text has its own header (Harmony)
                calls = _alt([_seq(*_marked(fmt.content_prefix, marks), free), block])
            else:
                calls = _seq(free, Repeat(block, 0, 1))
            return _grammar(_seq(thought, calls), None, calls_param)
        return _grammar(rest, fmt.opener, calls_param)
    if content is None:
        return None
    if thought == Seq(()):  # no thinking block: the grammar (and its key) of the content alone
        return _grammar(content, None, content_param)
    return _grammar(_seq(thought, content), None, content_param)


def _marked(text: str, specials: Mapping[str, int]) -> list:
    """`text` as `Text` parts and a `Special` for each occurrence of a text of `specials`."""
    parts: list = []
    while text:
        found = [(text.find(s), s) for s in specials if s in text]
        if not found:
            parts.append(Text(text))
            break
        at, special = min(found)
        if at:
            parts.append(Text(text[:at]))
        parts.append(Special(special, specials[special]))
        text = text[at + len(special) :]
    return parts


def _block(fmt: TurnFormat, specials: Mapping[str, int], call, most: int) -> Seq:
    """One to `most` calls (`call`, the expression of any one call) as the format writes them:
    in one block between its opener and closer, or in blocks of one call each."""
    opener, closer = _marked(fmt.opener, specials), _marked(fmt.closer, specials)
    if fmt.separator is not None:
        more = Repeat(_seq(*_marked(fmt.separator, specials), call), 0, most - 1)
        return _seq(*opener, call, more, *closer)
    block = _seq(*opener, call, *closer)
    if most == 1:
        return block
    return _seq(block, Repeat(_seq(*_marked(fmt.block_separator, specials), block), 0, most - 1))


def _thought(fmt: TurnFormat, thinking: bool, specials: Mapping[str, int]) -> Seq:
    """The format's thinking block when thinking is on (`grammar`), else nothing. Its text
    excludes the closer's text too (the parser reads special tokens by their text)."""
    t = fmt.thinking
    if t is None or not thinking:
        return Seq(())
    opening = [] if t.prompt_opens else _marked(t.open, specials)
    block = _seq(*opening, Thought(t.close), *_marked(t.close + t.after, specials))
    return Repeat(block, 0, 1) if t.optional else block


@functools.lru_cache(maxsize=DEFAULT_MAX_GRAMMARS)
def block_dfa(fmt: TurnFormat, specials: tuple[tuple[str, int], ...]) -> Dfa:
    """The DFA of the format's thinking block alone as the answer writes it (the opener unless
    the prompt opens it, the thought, the closer), special tokens by their symbols
    (`specials`: sorted (text, id) pairs): what `ThoughtBudget` tells the block's states by."""
    t, marks = fmt.thinking, dict(specials)
    opening = [] if t.prompt_opens else _marked(t.open, marks)
    return automata.tree_to_dfa(_tree(_seq(*opening, Thought(t.close), *_marked(t.close, marks))))


def _opened(fmt: TurnFormat, marks: tuple, trans: np.ndarray) -> np.ndarray:
    """bool `[block_dfa states]`: the states after the block's opener (all when the prompt
    opens it): those reachable from the state the opener's bytes lead to."""
    t = fmt.thinking
    state = 0
    if not t.prompt_opens:
        for part in _marked(t.open, dict(marks)):
            data = special_symbol(part.id) if isinstance(part, Special) else part.text.encode()
            for b in data:
                state = int(trans[state, b])
    opened = np.zeros(len(trans), dtype=bool)
    stack = [state]
    opened[state] = True
    while stack:
        for nxt in trans[stack.pop()].tolist():
            if nxt >= 0 and not opened[nxt]:
                opened[nxt] = True
                stack.append(nxt)
    return opened


@functools.lru_cache(maxsize=DEFAULT_MAX_GRAMMARS)
def prelude_dfa(fmt: TurnFormat, specials: tuple[tuple[str, int], ...]) -> Dfa:
    """The DFA of a thinking block that opens an answer otherwise free (`auto` with a text
    trigger, or no tools): the block (as `block_dfa`), then any bytes; for an optional block
    (Qwen3) also any text that does not begin with the block's opener (and is not a prefix of
    it). The engine holds the answer to it until a state outside the block (`ThoughtBudget`),
    then the rest is free text."""
    t, marks = fmt.thinking, dict(specials)
    opening = [] if t.prompt_opens else _marked(t.open, marks)
    block = _tree(_seq(*opening, Thought(t.close), *_marked(t.close, marks)))
    anything = regex_tree.Repeat(regex_tree.ByteSet(ALL_BYTES), 0, None)
    with_block = automata.tree_to_dfa(regex_tree.Concat((block, anything)))
    if not t.optional or not opening:
        return with_block
    opener = b"".join(
        special_symbol(p.id) if isinstance(p, Special) else p.text.encode() for p in opening
    )
    prefixes = [regex_tree.literal_bytes(opener[:i]) for i in range(len(opener) + 1)]
    started = regex_tree.Concat((regex_tree.literal_bytes(opener), anything))
    diverging = difference(
        automata.tree_to_dfa(anything),
        automata.tree_to_dfa(regex_tree.Alt((started, *prefixes))),
    )
    return union(with_block, diverging)


_thought_budgets: weakref.WeakKeyDictionary[TokenIndex, ThoughtBudget] = weakref.WeakKeyDictionary()
_thought_lock = threading.Lock()


def thought_budget(
    index: TokenIndex, fmt: TurnFormat, specials: Mapping[str, int], param: str
) -> ThoughtBudget:
    """The `ThoughtBudget` of a grammar's index whose answer opens with the format's thinking
    block (`grammar(..., thinking=True)` without a trigger), built once per index. Raises
    ToolError 422 naming `param` when the grammar's states do not tell whether the block is
    open (a state reached both inside and after it)."""
    with _thought_lock:
        found = _thought_budgets.get(index)
    if found is not None:
        return found
    marks = tuple(sorted(specials.items()))
    tracker = block_dfa(fmt, marks)
    trans = np.ascontiguousarray(tracker.trans, dtype=np.int32)
    accept = np.ascontiguousarray(tracker.accept, dtype=np.bool_)
    inside, opened, ok = thought_region(index._trans, trans, accept, _opened(fmt, marks, trans))
    if not ok:
        raise ToolError(
            422,
            param,
            "unsupported_parameter",
            f"'{param}': this grammar's states do not tell the thinking block from the answer "
            "after it, so its budget cannot be held to.",
        )
    found = ThoughtBudget(index, inside, opened)
    with _thought_lock:
        _thought_budgets[index] = found
    return found


@functools.cache
def thought_dfa(close: str) -> Dfa:
    """The DFA of the UTF-8 texts that do not contain `close` (a thought before its closer)."""
    text = automata.regex_to_dfa(r"(.|\n)*")
    containing = automata.regex_to_dfa(r"(.|\n)*" + automata.escape(close) + r"(.|\n)*")
    return difference(text, containing)


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


def _call(
    request: ToolRequest, i: int, fmt: TurnFormat = HERMES, specials: Mapping[str, int] = {}
) -> Seq:
    """The per-tool call: the format's prefix for the request's tool i (Hermes':
    `{"name":"NAME","arguments":`), its arguments, the format's suffix (`}`)."""
    tool = request.tools[i]
    prefix = _with_id(fmt.call_prefix(tool.name), fmt, specials)
    suffix = _with_id(fmt.call_suffix, fmt, specials)
    if fmt.xml_parameters:
        piece = _seq(_xml_arguments(tool, i), *suffix)
        return _seq(*prefix, Piece(piece, f"tools[{i}].function.parameters"))
    if tool.custom is not None:
        syntax, definition = tool.custom
        where = f"tools[{i}].custom.format" + (".grammar.definition" if definition else "")
        piece = _seq(Text('{"input":'), CustomInput(syntax, definition, where), Text("}"), *suffix)
        return _seq(*prefix, Piece(piece, where))
    arguments = Arguments(tool.parameters, f"tools[{i}].function.parameters")
    return _seq(*prefix, Piece(_seq(arguments, *suffix), arguments.param))


def _with_id(text: str, fmt: TurnFormat, specials: Mapping[str, int]) -> list:
    """`_marked(text)` with the format's call id language where `CALL_ID` stands."""
    pieces = text.split(CALL_ID) if fmt.call_id else [text]
    parts = _marked(pieces[0], specials)
    for piece in pieces[1:]:
        parts += [Regex(fmt.call_id, "tools"), *_marked(piece, specials)]
    return parts


def _xml_arguments(tool, i: int) -> Seq:
    """A tool's arguments as XML parameters (`corral.tools.formats.qwen3_coder`): each in
    schema order, optional unless required, its value raw text or JSON. Raises ToolError 422
    naming the tool's schema (or the parameter) when XML cannot honour it exactly."""
    param = f"tools[{i}].function.parameters"
    if tool.custom is not None:
        where = f"tools[{i}].custom"
        raise ToolError(
            422, where, "unsupported_parameter", f"'{where}': XML parameters take no custom tool."
        )
    parts = []
    for name, schema, required, raw in xml_parameters(tool.parameters, param):
        where = f"{param}.properties.{name}"
        value = RawText(schema, where) if raw else Schema(schema, where)
        part = _seq(Text(f"<parameter={name}>\n"), value, Text(f"\n{XML_CLOSE}\n"))
        parts.append(part if required else Repeat(part, 0, 1))
    return _seq(*parts)


def raw_text_tree(schema: dict) -> regex_tree.Node:
    """The tree of `RawText(schema)`."""
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if values is not None:
        texts = [v for v in values if isinstance(v, str)]
        if not texts:
            return regex_tree.Alt(())
        return regex_tree.Alt(tuple(regex_tree.literal_bytes(v.encode()) for v in texts))
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    return regex_tree.Automaton(_raw_text_dfa(low, high))


@functools.lru_cache(maxsize=DEFAULT_MAX_GRAMMARS)
def _raw_text_dfa(low: int, high: int | None) -> Dfa:
    text = thought_dfa(XML_CLOSE)
    if low == 0 and high is None:
        return text
    lengths = automata.regex_to_dfa(r"(.|\n){" + f"{low},{'' if high is None else high}" + "}")
    return intersection(lengths, text)


def _any_call(request: ToolRequest, fmt: TurnFormat = HERMES, specials: Mapping[str, int] = {}):
    """The union of the request's per-tool calls."""
    return _alt([_call(request, i, fmt, specials) for i in range(len(request.tools))])


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
    """The DFA of a grammar, built anew: the canonical one (`corral.automata.tree_to_dfa`), or,
    when the grammar holds `Piece`s, the envelope's canonical DFA with each piece's DFA
    (`piece_dfa`, cached) stitched in (`corral.automata.stitch`: not minimal). Past an NFA
    or DFA state limit, a grammar whose schemas unrolled a `$ref` cycle is built again with a
    shallower unrolling (`corral.automata.shallower.retry_shallower`, the loop
    `schema_to_dfa` runs), each piece on its own: a schema alone compiles here to the same DFA
    as there, trying the same depths, then the same narrower string and array bounds
    (`corral.automata.schema.compiler.narrower_limits`). Raises ToolError 422
    `unsupported_parameter` naming `grammar.param` (a piece's own `param` for a piece) when
    every attempt passes a limit (with the first error: a skipped unrolling's, else the first
    build's), the stitched table passes `corral.automata.limits.MAX_STITCHED_STATES` or the
    language is empty."""
    pieces: dict[str, Piece] = {}
    envelope = _envelope(grammar.expression, pieces)
    if not pieces:
        return _compile(grammar.expression, grammar.param, grammar.tree, grammar.unrollings)
    dfas = [piece_dfa(piece) for piece in pieces.values()]
    built: list[Unrolling] = []
    tree = _tree(envelope, None, built)
    try:
        return stitch(_compile(envelope, grammar.param, tree, tuple(built)), dfas)
    except ConstrainError as error:
        raise unsupported(grammar.param, error) from None


def _envelope(e, pieces: dict):
    """`e` with each `Piece` replaced by a `Hole` naming its index in `pieces` (key -> Piece,
    filled in order of first occurrence; equal pieces share one index)."""
    if isinstance(e, Piece):
        key = json.dumps(_key(e), ensure_ascii=False, separators=(",", ":"))
        pieces.setdefault(key, e)
        return Hole(list(pieces).index(key))
    if isinstance(e, Seq):
        return Seq(tuple(_envelope(p, pieces) for p in e.parts))
    if isinstance(e, Alt):
        return Alt(tuple(_envelope(o, pieces) for o in e.options))
    if isinstance(e, Repeat):
        return Repeat(_envelope(e.part, pieces), e.low, e.high)
    return e


_pieces: OrderedDict[str, Dfa] = OrderedDict()
_pieces_lock = threading.Lock()


def piece_dfa(piece: Piece) -> Dfa:
    """The canonical DFA of `piece.part`, from a cache shared by every grammar (keyed by the
    part's expression as compact JSON; least recently used dropped first once the cached DFAs
    hold more than `MAX_PIECE_STATES` states) or compiled as `compile_dfa` compiles a grammar.
    Thread-safe. Raises ToolError 422 naming `piece.param`, as `compile_dfa` does."""
    key = json.dumps(_key(piece), ensure_ascii=False, separators=(",", ":"))
    with _pieces_lock:
        dfa = _pieces.get(key)
        if dfa is not None:
            _pieces.move_to_end(key)
            return dfa
    built: list[Unrolling] = []
    dfa = _compile(piece.part, piece.param, _tree(piece.part, None, built), tuple(built))
    with _pieces_lock:
        _pieces[key] = dfa
        total = sum(d.n_states for d in _pieces.values())
        while total > MAX_PIECE_STATES and len(_pieces) > 1:
            total -= _pieces.popitem(last=False)[1].n_states
    return dfa


def _compile(expression, param: str, tree, unrollings: tuple) -> Dfa:
    """The canonical DFA of `expression`, whose tree at the default depth is `tree` (built
    with `unrollings`), shallower on a state limit (`compile_dfa`)."""

    deepest = DEFAULT_SCHEMA_LIMITS.max_recursion  # the depth `tree` was built at

    def attempt(depth: int) -> Dfa:
        node, built = tree, unrollings
        if depth != deepest:  # a shallower try: the tree built again at `depth`
            schema_limits = replace(DEFAULT_SCHEMA_LIMITS, max_recursion=depth)
            built = []
            node = _tree(expression, schema_limits, built)
        try:
            return automata.tree_to_dfa(node)
        except STATE_LIMIT_ERRORS as error:
            recursive = [u.max_recursion for u in built if u.recursive]
            raise StateLimit(error, bool(recursive), max(recursive, default=1)) from None

    first = next((u.skipped for u in unrollings if u.skipped is not None), None)
    try:
        return retry_shallower(attempt, deepest, first, (ConstrainError, ToolError))[0]
    except STATE_LIMIT_ERRORS as error:  # then the schemas' narrower bounds, as schema_to_dfa
        longest = [max((u.longest[i] for u in unrollings), default=0) for i in (0, 1)]
        for bounds in narrower_limits(DEFAULT_SCHEMA_LIMITS, longest):
            if any(u.recursive for u in unrollings):
                bounds = replace(bounds, max_recursion=1)
            try:
                return automata.tree_to_dfa(_tree(expression, bounds))
            except (ConstrainError, ToolError):
                continue  # the first error stands
        raise unsupported(param, error) from None
    except ConstrainError as error:
        raise unsupported(param, error) from None


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
