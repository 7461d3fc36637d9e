"""The streaming tool-call parser: generated text in, `ToolEvent`s out (docs/design.md section 5,
"Streaming parser").

One explicit state machine over characters: TEXT (outside a call; a suffix that could still
become `<tool_call>` is held back, and whitespace at the start or after a call is held as a
separator), HEADER (`{"name":"NAME","arguments":{`; its last `{` emits `CallStart` and is the
first arguments fragment), ARGUMENTS (every character an `Arguments` fragment, brace depth and
string escapes tracked) and CLOSE (`}</tool_call>`). Text that stops matching the markup is
released as content: only real markup is removed. Any split of the text into pieces gives the
same events once adjacent fragments are joined.
"""

from __future__ import annotations

import json

from corral.tools.events import Arguments, CallStart, Content, ToolEvent

OPENER = "<tool_call>"
"""The text that opens a call (docs/design.md section 5); `corral.tools.grammar` and
`corral.tools.render` write calls with it."""
CLOSER = "</tool_call>"
SEPARATOR = "\n"
"""What the grammar writes between parallel calls (the parser accepts any whitespace there)."""

TEXT, HEADER, ARGUMENTS, CLOSE = "TEXT", "HEADER", "ARGUMENTS", "CLOSE"

_WHITESPACE = frozenset(" \t\n\r")
_NAME = None  # the header step that reads the function name, a JSON string
_HEADER_STEPS = ("{", '"name"', ":", _NAME, ",", '"arguments"', ":", "{")
_CLOSE_STEPS = ("}", CLOSER)


class ToolParser:
    """Incremental parser of one answer's text (docs/design.md section 5).

    `push(piece)` returns the events the piece completes; `finish()` those left when the answer
    ends. Within one returned list, adjacent `Content` events and adjacent `Arguments` of the same
    call are merged. Raises RuntimeError when pushed after `finish()`.
    """

    def __init__(self, request_id: str):
        self.request_id = request_id
        self.state = TEXT
        self.calls = 0  # calls started so far; the current call is calls - 1
        self.held = ""  # TEXT: a possible start of the opener; HEADER/CLOSE: markup read so far
        self.separator = ""  # TEXT: whitespace held (the module docstring)
        self.holding = True  # TEXT: nothing but whitespace since the start or the last call
        self.step = 0  # HEADER/CLOSE: index into the steps
        self.offset = 0  # HEADER/CLOSE: characters of the current step matched so far
        self.name: list[str] = []  # HEADER: raw characters of the name string
        self.escaped = False  # HEADER name / ARGUMENTS string: after a backslash
        self.in_string = False  # ARGUMENTS: inside a JSON string
        self.depth = 0  # ARGUMENTS: open braces and brackets
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
        short inside its arguments keeps the fragments already emitted."""
        if self.finished:
            return []
        if self.state in (TEXT, HEADER) and self.held:
            self._content(self.held)
        if self.calls == 0 and self.separator:
            self._content("")
        self.held = self.separator = ""
        self.finished = True
        return self._take()

    # --- the state machine ---------------------------------------------------------------

    def _read(self, ch: str) -> None:
        if self.state == TEXT:
            self._read_text(ch)
        elif self.state == HEADER:
            self._read_header(ch)
        elif self.state == ARGUMENTS:
            self._read_arguments(ch)
        else:
            self._read_close(ch)

    def _read_text(self, ch: str) -> None:
        if self.holding and not self.held and ch in _WHITESPACE:
            self.separator += ch
            return
        self.held += ch
        if self.held == OPENER:
            self._enter(HEADER)
            self.held = OPENER
            return
        cut = 0  # keep the longest suffix that may still begin the opener
        while not OPENER.startswith(self.held[cut:]):
            cut += 1
        if cut:
            self._content(self.held[:cut])
            self.held = self.held[cut:]

    def _read_header(self, ch: str) -> None:
        if self._read_markup(_HEADER_STEPS, ch):
            index = self.calls
            self.calls += 1
            self.separator = ""
            name = json.loads('"' + "".join(self.name) + '"')
            self._events.append(CallStart(index, f"call_{self.request_id}_{index}", name))
            self._enter(ARGUMENTS)
            self.depth = 1
            self._arguments("{")

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
                self._enter(CLOSE)

    def _read_close(self, ch: str) -> None:
        if self._read_markup(_CLOSE_STEPS, ch):
            self._enter(TEXT)
            self.holding = True

    def _read_markup(self, steps: tuple, ch: str) -> bool:
        """HEADER and CLOSE: hold `ch` and match it against `steps`. On a mismatch, what was
        held is released as content and `ch` is read again in TEXT. True when the last step is
        complete."""
        self.held += ch
        matched = self._match(steps, ch)
        if matched is False:
            self._reject()
            self._read(ch)
        return matched is True

    def _match(self, steps: tuple, ch: str) -> bool | None:
        """Advance through `steps` by one character: True when the last step is complete,
        False on a mismatch, None while more is needed. Whitespace may come before a step."""
        step = steps[self.step]
        if self.offset == 0 and ch in _WHITESPACE:
            return None
        if step is _NAME:
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
        """The held markup was not a call after all: all of it but the last character (read
        again by the caller) becomes content."""
        text = self.held[:-1]
        self._enter(TEXT)
        self._content(text)

    def _enter(self, state: str) -> None:
        self.state = state
        self.held = ""
        self.step = self.offset = 0
        self.name = []
        self.escaped = self.in_string = False

    # --- events ----------------------------------------------------------------------------

    def _content(self, text: str) -> None:
        text = self.separator + text
        self.separator = ""
        self.holding = False
        if text:
            self._events.append(Content(text))

    def _arguments(self, fragment: str) -> None:
        self._events.append(Arguments(self.calls - 1, fragment))

    def _take(self) -> list[ToolEvent]:
        merged: list[ToolEvent] = []
        for event in self._events:
            last = merged[-1] if merged else None
            if isinstance(event, Content) and isinstance(last, Content):
                merged[-1] = Content(last.text + event.text)
            elif (
                isinstance(event, Arguments)
                and isinstance(last, Arguments)
                and last.index == event.index
            ):
                merged[-1] = Arguments(event.index, last.fragment + event.fragment)
            else:
                merged.append(event)
        self._events = []
        return merged


def _is_json_string(raw: str) -> bool:
    """True when `raw` is the inside of a valid JSON string (its escapes are well formed)."""
    try:
        json.loads('"' + raw + '"')
    except ValueError:
        return False
    return True


def parse_text(text: str, request_id: str = "0") -> list[ToolEvent]:
    """All events of a whole answer at once (push then finish)."""
    parser = ToolParser(request_id)
    return parser.push(text) + parser.finish()
