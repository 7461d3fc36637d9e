"""Tool-call events and the OpenAI JSON shapes built from them (DESIGN.md section 5, "Shapes").

The streaming parser (`corral.tools.parser`) turns generated text into `ToolEvent`s; this module
folds events into an answer (`collect`), and writes the chat-completion `message` and the stream's
`delta` objects exactly as OpenAI's API does:

- message: `{"role":"assistant","content":null,"tool_calls":[{"id":...,"type":"function",
  "function":{"name":...,"arguments":"<JSON text>"}}]}`; content is null, never "", when the
  model wrote no text; `tool_calls` is left out when there is no call.
- deltas: `{"content":"..."}` for text; `{"tool_calls":[{"index":i,"id":...,"type":"function",
  "function":{"name":...,"arguments":""}}]}` when call i starts; `{"tool_calls":[{"index":i,
  "function":{"arguments":"<fragment>"}}]}` for each later piece of its arguments.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Content:
    """Text of the answer outside any call."""

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


ToolEvent = Content | CallStart | Arguments


@dataclass(frozen=True)
class ToolCall:
    """One complete call: `arguments` is JSON text, exactly as the model wrote it."""

    id: str
    name: str
    arguments: str


def collect(events) -> tuple[str | None, list[ToolCall]]:
    """Fold a stream of events into `(content, calls)`.

    `content` is the concatenated text, or None when there is none (so it is never "" beside
    tool calls). Raises ValueError for arguments of a call that never started.
    """
    text: list[str] = []
    starts: list[CallStart] = []
    arguments: list[list[str]] = []
    for event in events:
        if isinstance(event, Content):
            text.append(event.text)
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
    return (content or None), calls


def finish_reason(calls: int | list, engine_reason: str) -> str:
    """OpenAI's `finish_reason`: `tool_calls` when any call was made, unless the engine stopped
    for `length` (the last call may then be cut short, and clients must know); otherwise the
    engine's own reason (`stop` or `length`). `calls` is a count or a list of calls."""
    n = calls if isinstance(calls, int) else len(calls)
    if n > 0 and engine_reason != "length":
        return "tool_calls"
    return engine_reason


def call_json(call: ToolCall) -> dict:
    """One entry of a message's `tool_calls`."""
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def message_json(content: str | None, calls: list[ToolCall]) -> dict:
    """The assistant `message` of a chat completion, as a JSON-ready dict. An empty `content`
    becomes null; `tool_calls` is present only when there are calls."""
    message: dict = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [call_json(call) for call in calls]
    return message


def delta_json(event: ToolEvent) -> dict:
    """The `delta` of one streamed chunk for `event`, as a JSON-ready dict."""
    if isinstance(event, Content):
        return {"content": event.text}
    if isinstance(event, CallStart):
        return {
            "tool_calls": [
                {
                    "index": event.index,
                    "id": event.id,
                    "type": "function",
                    "function": {"name": event.name, "arguments": ""},
                }
            ]
        }
    if isinstance(event, Arguments):
        return {"tool_calls": [{"index": event.index, "function": {"arguments": event.fragment}}]}
    raise TypeError(f"not a ToolEvent: {event!r}")
