"""The streaming tool-call parser: generated text in, `ToolEvent`s out (docs/design.md section 5,
"Streaming parser"; each family's syntax: docs/tools.md, "Turn formats").

One explicit state machine over characters, driven by a `CallSyntax` (Hermes' by default):
THOUGHT_START and THOUGHT (a leading thinking block, for formats that think: its text becomes
`Reasoning`), TEXT (outside a call; a suffix that could still become the opener is held back,
and whitespace at the start or after a call is held as a separator), HEADER (the opener's rest
and the call's head up to the `{` that starts its arguments: that `{` emits `CallStart` and is
the first arguments fragment), ARGUMENTS (every character an `Arguments` fragment, brace depth
and string escapes tracked), CLOSE (the steps after the arguments) and NEXT (another call of the
same block, or the block's closer). Text that stops matching the markup is released as content:
only real markup is removed. Any split of the text into pieces gives the same events once
adjacent fragments are joined.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace

from corral.tools.events import Arguments, CallStart, Content, Reasoning, ToolEvent

OPENER = "<tool_call>"
"""The text that opens a Hermes call (docs/design.md section 5); `corral.tools.grammar` and
`corral.tools.render` write calls with it."""
CLOSER = "</tool_call>"
SEPARATOR = "\n"
"""What the grammar writes between parallel Hermes calls (the parser accepts any whitespace)."""


class _Step(str):
    """A header step that is not literal text (compared by identity)."""


NAME = _Step("NAME")
"""A header step: the function name as a JSON string (`"get_weather"`)."""
BARE_NAME = _Step("BARE_NAME")
"""A header step: the function name written bare, one or more of `[A-Za-z0-9_.-]`, ended by the
first other character (which the next step reads)."""
CALL_ID = _Step("CALL_ID")
"""A header or trailer step: the call's id as the model wrote it, one or more of
`[A-Za-z0-9]`, ended by the first other character (which the next step reads); it becomes the
call's `id` (Mistral's `[CALL_ID]123456789`, `"id": "123456789"`)."""
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_BARE = _ALNUM | frozenset("_.-")


@dataclass(frozen=True)
class CallSyntax:
    """How a family writes its calls, for the parser (each format's: `corral.tools.formats`).

    A block is `opener header ARGS trailer (separator header ARGS trailer)* closer`, ARGS a JSON
    object. Whitespace may come before a step that does not itself begin with whitespace.

    Attributes:
        opener: the text that opens a block (special tokens by their text).
        header: the steps from the opener to the arguments: literal texts, `NAME`, `BARE_NAME`;
            the last step is `{`, the arguments' first character.
        trailer: the steps after each call's arguments.
        separator: the text between two calls of one block; None: one call per block.
        closer: the text that closes a block ("" for none).
        thinking: `(open, close)` of a leading thinking block, or None.
        starts_in_thought: the prompt opened the thinking block (its text comes first).
        xml_strings: for XML parameters (Qwen3-Coder: `<parameter=P>\nVALUE\n</parameter>\n`
            after the header, up to `</function>`), function name -> the names of its
            parameters whose VALUE is raw text (a JSON string in the arguments); any other
            VALUE is JSON text. None: the arguments are one JSON object.
        dropped: markup removed wherever it stands outside calls and thoughts (Harmony's
            channel headers around content).
        variants: other `(opener, header)` pairs the parser also reads (the ways other
            runtimes and the family's template write a call: Harmony's recipient in the role
            header); headers of one opener are tried in order, the first that matches wins.
        other_trailers: other trailers the parser also reads, tried after `trailer`.
        id_after_arguments: a `CALL_ID` step may come in the trailer (Mistral Nemo's `"id"`
            after the arguments): each call's events are held back until its trailer is read,
            so its `CallStart` carries the id.
    """

    opener: str
    header: tuple
    trailer: tuple = ()
    separator: str | None = None
    closer: str = ""
    thinking: tuple[str, str] | None = None
    starts_in_thought: bool = False
    xml_strings: Mapping[str, frozenset] | None = None
    dropped: tuple[str, ...] = ()
    variants: tuple[tuple[str, tuple], ...] = ()
    other_trailers: tuple[tuple, ...] = ()
    id_after_arguments: bool = False

    def headers(self, opener: str) -> list[tuple]:
        """The headers that may follow `opener`, in the order they are tried."""
        pairs = ((self.opener, self.header), *self.variants)
        return [header for o, header in pairs if o == opener]

    @functools.cached_property
    def openers(self) -> tuple[str, ...]:
        """Every text that opens a block: `opener`, then the variants' own (computed once)."""
        return tuple(dict.fromkeys((self.opener, *(o for o, _ in self.variants))))


HERMES_SYNTAX = CallSyntax(
    OPENER, ("{", '"name"', ":", NAME, ",", '"arguments"', ":", "{"), ("}",), None, CLOSER
)

THOUGHT_START, THOUGHT = "THOUGHT_START", "THOUGHT"
TEXT, HEADER, ARGUMENTS, CLOSE, NEXT = "TEXT", "HEADER", "ARGUMENTS", "CLOSE", "NEXT"
XML = "XML"
PARAMETER, VALUE_END, END_FUNCTION = "<parameter=", "\n</parameter>", "</function>"

_SPACES = " \t\n\r"
_WHITESPACE = frozenset(_SPACES)


class ToolParser:
    """Incremental parser of one answer's text (docs/design.md section 5), in `syntax`.

    `push(piece)` returns the events the piece completes; `finish()` those left when the answer
    ends. Within one returned list, adjacent `Content`, adjacent `Reasoning` and adjacent
    `Arguments` of the same call are merged. Special tokens are read by their text (the caller
    maps their symbols back, `Vocabulary.text_of_symbols`). Raises RuntimeError when pushed
    after `finish()`.
    """

    def __init__(self, request_id: str, syntax: CallSyntax = HERMES_SYNTAX):
        self.request_id = request_id
        self.syntax = syntax
        self.state = TEXT
        if syntax.thinking is not None:
            self.state = THOUGHT if syntax.starts_in_thought else THOUGHT_START
        self.calls = 0  # calls started so far; the current call is calls - 1
        self.held = ""  # a possible start of the opener, of a closer, or markup read so far
        self.separator = ""  # TEXT: whitespace held (the module docstring)
        self.holding = True  # TEXT: nothing but whitespace since the start or the last call
        self.steps: tuple = ()  # HEADER/CLOSE: the steps being matched
        self.step = 0  # HEADER/CLOSE: index into the steps
        self.offset = 0  # HEADER/CLOSE: characters of the current step matched so far
        self.name: list[str] = []  # HEADER: raw characters of the name
        self.call_id: list[str] = []  # HEADER/CLOSE: characters of the call's id
        self.ways: list[tuple] = []  # HEADER/CLOSE: the other steps still to try on a mismatch
        self.mark = 0  # HEADER/CLOSE: where the steps' text begins in `held`
        self.ids: set[str] = set()  # the ids of this answer's calls so far
        self.pending: int | None = None  # index in _events of a call's CallStart held back
        self.escaped = False  # HEADER name / ARGUMENTS string: after a backslash
        self.in_string = False  # ARGUMENTS: inside a JSON string
        self.depth = 0  # ARGUMENTS: open braces and brackets
        self._thought_started = False  # THOUGHT: a character past the leading whitespace
        self._after_thought = False  # TEXT: right after a thought (whitespace is no content)
        self.xml: _XmlState | None = None  # XML: the call's parameters being read
        self.finished = False
        self._events: list[ToolEvent] = []

    def push(self, piece: str) -> list[ToolEvent]:
        """Read the next piece of generated text; return the events it completes."""
        if self.finished:
            raise RuntimeError("ToolParser.push after finish")
        for ch in piece:
            self._read(ch)
        return self._take()

    def finish(self) -> list[ToolEvent]:
        """The answer ended: return the last events. A held partial opener or an unfinished
        header is released as content, held whitespace only when no call was made; a call cut
        short inside its arguments keeps the fragments already emitted; a thought cut short
        keeps its text (but trailing whitespace) as reasoning."""
        if self.finished:
            return []
        if self.state == THOUGHT_START:
            held = self.held
            self._enter(TEXT)
            for c in held:
                self._read_text(c)
        if self.state == THOUGHT:
            self._reasoning(self.held.rstrip(_SPACES))
        elif self.state in (TEXT, HEADER, NEXT) and self.held:
            self._content(self.held)
        if self.calls == 0 and self.separator and not self._after_thought:
            self._content("")
        self.held = self.separator = ""
        self.finished = True
        self.pending = None
        return self._take()

    # --- the state machine ---------------------------------------------------------------

    def _read(self, ch: str) -> None:
        if self.state == TEXT:
            self._read_text(ch)
        elif self.state == HEADER:
            self._read_header(ch)
        elif self.state == ARGUMENTS:
            self._read_arguments(ch)
        elif self.state == CLOSE:
            self._read_close(ch)
        elif self.state == NEXT:
            self._read_next(ch)
        elif self.state == XML:
            self._read_xml(ch)
        elif self.state == THOUGHT_START:
            self._read_thought_start(ch)
        else:
            self._read_thought(ch)

    def _read_thought_start(self, ch: str) -> None:
        """Whitespace, then the thinking block's opener, or else plain text."""
        opener = self.syntax.thinking[0]
        self.held += ch
        start = self.held.lstrip(_SPACES)
        if start == opener:
            self._enter(THOUGHT)
        elif not opener.startswith(start):
            held = self.held
            self._enter(TEXT)
            for c in held:
                self._read_text(c)

    def _read_thought(self, ch: str) -> None:
        """The thought's text, without the whitespace at its ends; holds back whitespace and
        a possible start of the closer."""
        closer = self.syntax.thinking[1]
        if not self.held and ch in _WHITESPACE and not self._thought_started:
            return
        self._thought_started = True
        self.held += ch
        if self.held.endswith(closer):
            self._reasoning(self.held[: -len(closer)].rstrip(_SPACES))
            self._enter(TEXT)
            self.holding = True
            self._after_thought = True
            return
        body = self.held[: len(self.held) - _closer_start(self.held, closer)]
        text = body.rstrip(_SPACES)
        self._reasoning(text)
        self.held = self.held[len(text) :]

    def _read_text(self, ch: str) -> None:
        if self.holding and not self.held and ch in _WHITESPACE:
            self.separator += ch
            return
        if self._after_thought:  # whitespace after a thought is no content
            self._after_thought = False
            self.separator = ""
        self.held += ch
        openers = self.syntax.openers
        if self.held in openers:
            opened = self.held
            self._enter(HEADER)
            self.held, self.mark = opened, len(opened)
            self.steps, *self.ways = self.syntax.headers(opened)
            return
        if self.held in self.syntax.dropped:
            self.held = ""
            return
        markups = (*openers, *self.syntax.dropped)
        cut = 0  # keep the longest suffix that may still begin the opener or dropped markup
        while not any(m.startswith(self.held[cut:]) for m in markups):
            cut += 1
        if cut:
            self._content(self.held[:cut])
            self.held = self.held[cut:]

    def _read_header(self, ch: str) -> None:
        if self._read_markup(ch):
            index = self.calls
            self.calls += 1
            self.separator = ""
            name = "".join(self.name)
            if any(step is NAME for step in self.steps):
                name = json.loads('"' + name + '"')
            if self.syntax.id_after_arguments:
                self.pending = len(self._events)
            self._events.append(CallStart(index, self._new_id(index), name))
            self._arguments("{")
            if self.syntax.xml_strings is not None:
                self._enter(XML)
                self.xml = _XmlState(self.syntax.xml_strings.get(name, frozenset()))
                return
            self._enter(ARGUMENTS)
            self.depth = 1

    def _read_xml(self, ch: str) -> None:
        """XML parameters: between parameters, whitespace then `<parameter=NAME>` (and one
        newline) or `</function>`; inside a value, its text up to `\n</parameter>`, written
        as a JSON string for a raw-text parameter (held back while it may begin the closer),
        else as the JSON text itself (written when it ends). Other text between parameters is
        dropped (a malformed call: the grammar never writes it)."""
        x = self.xml
        if x.value is None:  # between parameters
            self.held += ch
            text = self.held.lstrip(_SPACES)
            if x.name is not None:  # reading `NAME>` after `<parameter=`
                if ch == ">":
                    x.name = "".join(x.name_chars)
                    x.value, x.newline, x.sent = "", True, 0
                    opening = "," if x.count else ""
                    x.count += 1
                    self._arguments(opening + json.dumps(x.name, ensure_ascii=False) + ":")
                    if x.name in x.strings:
                        self._arguments('"')
                    self.held = ""
                else:
                    x.name_chars.append(ch)
                return
            if text == PARAMETER:
                x.name, x.name_chars, self.held = "", [], ""
            elif text == END_FUNCTION:
                self._arguments("}")
                self._enter(CLOSE)
                self.steps = self.syntax.trailer
                if not self.steps:
                    self._after_close()
            elif not (PARAMETER.startswith(text) or END_FUNCTION.startswith(text)):
                self.held = ""
            return
        if x.newline:  # the newline after `<parameter=NAME>`
            x.newline = False
            if ch == "\n":
                return
        x.value += ch
        if x.value.endswith(VALUE_END):
            text = x.value[: -len(VALUE_END)]
            if x.name in x.strings:
                self._arguments(_json_body(text[x.sent :]) + '"')
            else:
                self._arguments(text.strip(_SPACES))
            x.name = x.value = None
            return
        if x.name in x.strings:
            upto = len(x.value) - _closer_start(x.value, VALUE_END)
            if upto > x.sent:
                self._arguments(_json_body(x.value[x.sent : upto]))
                x.sent = upto

    def _read_arguments(self, ch: str) -> None:
        self._arguments(ch)
        if self.in_string:
            if self.escaped:
                self.escaped = False
            elif ch == "\\":
                self.escaped = True
            elif ch == '"':
                self.in_string = False
        elif ch == '"':
            self.in_string = True
        elif ch in "{[":
            self.depth += 1
        elif ch in "}]":
            self.depth -= 1
            if self.depth == 0:
                self._after_arguments()

    def _new_id(self, index: int) -> str:
        """The id of call `index`: the one its header wrote, unless none was or this answer
        already used it (ids name calls uniquely), else `call_<request id>_<index>`."""
        written = "".join(self.call_id)
        self.call_id = []
        if written and written not in self.ids:
            self.ids.add(written)
            return written
        return f"call_{self.request_id}_{index}"

    def _after_arguments(self) -> None:
        syntax = self.syntax
        ways = [syntax.trailer, *syntax.other_trailers]
        if syntax.separator is None and syntax.closer:
            ways = [steps + (syntax.closer,) for steps in ways]
        self._enter(CLOSE)
        self.steps, *self.ways = ways
        if not self.steps:
            self._after_close()

    def _read_close(self, ch: str) -> None:
        if self._read_markup(ch):
            self._after_close()

    def _after_close(self) -> None:
        if self.pending is not None:  # the trailer may have written the call's id
            start = self._events[self.pending]
            if self.call_id:
                self.ids.discard(start.id)
                self._events[self.pending] = replace(start, id=self._new_id(start.index))
            self.pending = None
        if self.syntax.separator is None:
            self._enter(TEXT)
            self.holding = True
        else:
            self._enter(NEXT)

    def _read_next(self, ch: str) -> None:
        """After a call of a block that may hold several: its separator (another call) or its
        closer (the block ends); whitespace first when neither begins with it."""
        separator, closer = self.syntax.separator, self.syntax.closer
        spaced = separator[:1].isspace() or closer[:1].isspace()
        self.held += ch
        text = self.held if spaced else self.held.lstrip(_SPACES)
        if not text:
            return
        if text == separator:
            self._enter(HEADER)
            self.steps, *self.ways = self.syntax.headers(self.syntax.opener)
        elif text == closer:
            self._enter(TEXT)
            self.holding = True
        elif not (separator.startswith(text) or closer.startswith(text)):
            self._reject()
            self._read(ch)

    def _read_markup(self, ch: str) -> bool:
        """HEADER and CLOSE: hold `ch` and match it against the steps. On a mismatch, what was
        held is released as content and `ch` is read again in TEXT. True when the last step is
        complete."""
        self.held += ch
        matched = self._match(ch)
        while matched is False and self.ways:  # the next way of writing it, from its start
            self.steps = self.ways.pop(0)
            matched = self._replay(self.held[self.mark :])
        if matched is False:
            self._reject()
            self._read(ch)
        return matched is True

    def _replay(self, text: str) -> bool | None:
        """Match `text` against `self.steps` from their start: False on a mismatch or when the
        steps end before the text does, else as `_match` for its last character."""
        self.step = self.offset = 0
        self.name, self.call_id, self.escaped = [], [], False
        matched = None
        for k, c in enumerate(text):
            matched = self._match(c)
            if matched is False or (matched is True and k < len(text) - 1):
                return False
        return matched

    def _match(self, ch: str) -> bool | None:
        """Advance through the steps by one character: True when the last step is complete,
        False on a mismatch, None while more is needed. Whitespace may come before a step that
        does not begin with whitespace."""
        steps = self.steps
        step = steps[self.step]
        if step is BARE_NAME or step is CALL_ID:
            if ch in (_BARE if step is BARE_NAME else _ALNUM):
                (self.name if step is BARE_NAME else self.call_id).append(ch)
                self.offset = 1
                return None
            if self.offset == 0:
                return False
            self.step, self.offset = self.step + 1, 0
            if self.step == len(steps):
                return True
            step = steps[self.step]
        if self.offset == 0 and ch in _WHITESPACE and step[0] not in _WHITESPACE:
            return None
        if step is NAME:
            if self.offset == 0:
                if ch != '"':
                    return False
                self.offset = 1
            elif self.escaped:
                self.name.append(ch)
                self.escaped = False
            elif ch == "\\":
                self.name.append(ch)
                self.escaped = True
            elif ch == '"':
                if not _is_json_string("".join(self.name)):
                    return False
                self.step, self.offset = self.step + 1, 0
            elif ch < " ":
                return False
            else:
                self.name.append(ch)
        elif ch != step[self.offset]:
            return False
        else:
            self.offset += 1
            if self.offset == len(step):
                self.step, self.offset = self.step + 1, 0
        return True if self.step == len(steps) else None

    def _reject(self) -> None:
        """The held markup was not a call after all: all of it but the last character (which
        the caller reads again) is read again as text, but a header's first character, which
        is content: markup that began inside it (`<|end|>` after a broken Harmony header) is
        read as markup."""
        was, text = self.state, self.held[:-1]
        self._enter(TEXT)
        self.pending = None
        self.holding = False
        if was == HEADER:
            self._content(text[:1])
            text = text[1:]
        for c in text:
            self._read(c)

    def _enter(self, state: str) -> None:
        self.state = state
        self.held = ""
        self.steps = ()
        self.ways = []
        self.step = self.offset = self.mark = 0
        self.name, self.call_id = [], []
        self.escaped = self.in_string = False

    # --- events ----------------------------------------------------------------------------

    def _content(self, text: str) -> None:
        text = self.separator + text
        self.separator = ""
        self.holding = False
        if text:
            self._events.append(Content(text))

    def _reasoning(self, text: str) -> None:
        if text:
            self._events.append(Reasoning(text))

    def _arguments(self, fragment: str) -> None:
        self._events.append(Arguments(self.calls - 1, fragment))

    def _take(self) -> list[ToolEvent]:
        events, self._events = self._events, []
        if self.pending is not None:  # a call whose id may still come: held back
            events, self._events = events[: self.pending], events[self.pending :]
            self.pending = 0
        merged: list[ToolEvent] = []
        for event in events:
            last = merged[-1] if merged else None
            if isinstance(event, Content) and isinstance(last, Content):
                merged[-1] = Content(last.text + event.text)
            elif isinstance(event, Reasoning) and isinstance(last, Reasoning):
                merged[-1] = Reasoning(last.text + event.text)
            elif (
                isinstance(event, Arguments)
                and isinstance(last, Arguments)
                and last.index == event.index
            ):
                merged[-1] = Arguments(event.index, last.fragment + event.fragment)
            else:
                merged.append(event)
        return merged


class _XmlState:
    """One XML call's reading state (`ToolParser._read_xml`)."""

    def __init__(self, strings: frozenset):
        self.strings = strings  # the parameters whose values are raw text
        self.name: str | None = None  # the parameter being read ("" while its name is)
        self.name_chars: list[str] = []
        self.value: str | None = None  # the value read so far, None between parameters
        self.sent = 0  # characters of a raw value already written out
        self.newline = False  # a newline right after `<parameter=NAME>` is markup
        self.count = 0  # parameters written


def _closer_start(text: str, closer: str) -> int:
    """The length of the longest end of `text` that begins `closer` (shorter than it)."""
    return next(k for k in range(len(closer) - 1, -1, -1) if text.endswith(closer[:k]))


def _json_body(text: str) -> str:
    """`text` as the inside of a JSON string (json.dumps's escapes, non-ASCII kept)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _is_json_string(raw: str) -> bool:
    """True when `raw` is the inside of a valid JSON string (its escapes are well formed)."""
    try:
        json.loads('"' + raw + '"')
    except ValueError:
        return False
    return True


def parse_text(text: str, request_id: str = "0", syntax: CallSyntax = HERMES_SYNTAX) -> list:
    """All events of a whole answer at once (push then finish)."""
    parser = ToolParser(request_id, syntax)
    return parser.push(text) + parser.finish()
