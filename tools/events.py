"""Tool-call events: what the streaming parser (`corral.tools.parser`) reads out of generated
text, and `collect`, which folds them into an answer's content and calls (docs/design.md
section 5, "Shapes")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Content:
    """Text of the answer outside any call."""

    text: str


@dataclass(frozen=True)
class Reasoning:
    """Text of the answer's thinking block (its markup removed): the message's and the deltas'
    `reasoning_content`, never `content`."""

    text: str


@dataclass(frozen=True)
class CallStart:
    """Call `index` (0-based, in order of appearance) to function `name` begins; `id` is
    `call_<request id>_<index>`."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class Arguments:
    """The next piece of call `index`'s arguments (JSON text, to be concatenated)."""

    index: int
    fragment: str


ToolEvent = Content | Reasoning | CallStart | Arguments


@dataclass(frozen=True)
class ToolCall:
    """One complete call: `arguments` is JSON text, exactly as the model wrote it."""

    id: str
    name: str
    arguments: str


def collect(events) -> tuple[str | None, list[ToolCall]]:
    """Fold a stream of events into `(content, calls)` (`collect_turn` without the reasoning).

    `content` is the concatenated text, or None when there is none (so it is never "" beside
    tool calls). Raises ValueError for arguments of a call that never started.
    """
    return collect_turn(events)[1:]


def collect_turn(events) -> tuple[str | None, str | None, list[ToolCall]]:
    """Fold a stream of events into `(reasoning, content, calls)`: the `Reasoning` texts joined
    (None when there are none), then as `collect`. Raises ValueError for arguments of a call
    that never started, TypeError for what is not a `ToolEvent`."""
    thought: list[str] = []
    text: list[str] = []
    starts: list[CallStart] = []
    arguments: list[list[str]] = []
    for event in events:
        if isinstance(event, Content):
            text.append(event.text)
        elif isinstance(event, Reasoning):
            thought.append(event.text)
        elif isinstance(event, CallStart):
            if event.index != len(starts):
                raise ValueError(f"call {event.index} starts out of order")
            starts.append(event)
            arguments.append([])
        elif isinstance(event, Arguments):
            if not 0 <= event.index < len(starts):
                raise ValueError(f"arguments for call {event.index}, which never started")
            arguments[event.index].append(event.fragment)
        else:
            raise TypeError(f"not a ToolEvent: {event!r}")
    calls = [ToolCall(s.id, s.name, "".join(a)) for s, a in zip(starts, arguments, strict=True)]
    content = "".join(text)
    return ("".join(thought) or None), (content or None), calls
