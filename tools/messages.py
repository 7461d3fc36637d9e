"""Checking the `messages` of a chat-completion request (docs/design.md section 5, "Rendering"):
roles, text content, and the tool calls of assistant turns, each error a `ToolError` naming the
message index (`messages[2].tool_calls[0].function.arguments`).
"""

from __future__ import annotations

import json

from corral.tools.errors import ToolError, empty_array, invalid
from corral.tools.fields import HONOURED, Field, check_keys

ROLES = ("system", "developer", "user", "assistant", "tool")
_NAME = Field("refused", (), "corral's chat templates do not show a participant's name")
_SPOKEN = {"role": HONOURED, "content": HONOURED, "name": _NAME}
MESSAGE_FIELDS = {
    "system": _SPOKEN,
    "developer": _SPOKEN,
    "user": _SPOKEN,
    "assistant": {
        **_SPOKEN,
        "tool_calls": HONOURED,
        "refusal": Field("refused", (), "corral does not render a past refusal"),
        "audio": Field("refused", (), "corral writes text only"),
        "function_call": Field("refused", (), "it is deprecated: use 'tool_calls'"),
        "reasoning_content": HONOURED,
    },
    "tool": {"role": HONOURED, "content": HONOURED, "tool_call_id": HONOURED},
}
"""The members of a message of each role (OpenAI's, and vLLM's `reasoning_content`, which corral
answers with and a client sends back with the turn), and what corral does with each
(`corral.tools.fields.check_keys`). A turn's `reasoning_content` goes to the chat template, which
writes it or leaves it out as the family's own format does (`corral.tools.render`)."""
TEXT_PART = {"type": HONOURED, "text": HONOURED}
CALL_FIELDS = {
    "function": (
        {"id": HONOURED, "type": HONOURED, "function": HONOURED},
        {"name": HONOURED, "arguments": HONOURED},
    ),
    "custom": (
        {"id": HONOURED, "type": HONOURED, "custom": HONOURED},
        {"name": HONOURED, "input": HONOURED},
    ),
}
"""The members of an assistant turn's tool call of each type, and of its `function` / `custom`
object."""


def check_messages(messages) -> list[dict]:
    """Validate OpenAI chat messages; return them unchanged (as a list).

    Roles: system, developer, user, assistant, tool. `content` is a string or a list of text
    parts; it may be missing or null only in an assistant turn. A member a message, a text part,
    a tool call or its function does not take (`MESSAGE_FIELDS`, `TEXT_PART`, `CALL_FIELDS`) is a
    400 `unknown_parameter` naming its path (`messages[0].zzz`); one OpenAI defines that corral
    does not render (`name`, `refusal`, ...) a 400 `unsupported_parameter` unless it is null. An
    assistant turn's `tool_calls` each need `function.name` and `function.arguments`, a JSON text
    or an object. Raises ToolError:
    400 naming the message index (`messages[2].tool_calls[0].function.arguments`) for what is
    malformed, 422 for content parts that are not text.

    A `tool` message answers a call of the assistant turn it follows (other tool messages may
    come between, as OpenAI requires): its `tool_call_id` must be a string equal to the `id` of
    one of that turn's `tool_calls`; otherwise a 400 naming `messages[i].tool_call_id` (or
    `messages[i]` when no assistant turn with tool calls comes before it).
    """
    if not isinstance(messages, list) or not messages:
        raise invalid(
            "messages",
            "'messages' must be a non-empty list of messages.",
            "missing_required_parameter" if messages is None else "invalid_type",
        )
    answered = None  # (index, call ids) of the assistant turn the tool messages answer
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid(where, f"'{where}' must be an object.", "invalid_type")
        role = message.get("role")
        if role not in ROLES:
            raise invalid(f"{where}.role", f"'{where}.role' must be one of {', '.join(ROLES)}.")
        check_keys(message, MESSAGE_FIELDS[role], where)
        content = message.get("content")
        if content is None and role != "assistant":
            raise invalid(
                f"{where}.content", f"'{where}.content' is required.", "missing_required_parameter"
            )
        message_text(message, i)
        if role == "assistant":
            message_calls(message, i)
            thought = message.get("reasoning_content")
            if thought is not None and not isinstance(thought, str):
                raise invalid(
                    f"{where}.reasoning_content",
                    f"'{where}.reasoning_content' must be a string or null.",
                    "invalid_type",
                )
            calls = message.get("tool_calls")
            answered = (
                (i, {c.get("id") for c in calls if isinstance(c.get("id"), str)}) if calls else None
            )
        elif role == "tool":
            _check_answered_call(message, i, answered)
        else:
            answered = None
    return list(messages)


def _check_answered_call(message: dict, i: int, answered: tuple[int, set] | None) -> None:
    """Check that tool message `messages[i]` answers a call of the assistant turn it follows,
    `answered` (its index and call ids; None when no assistant turn with tool calls comes
    before, with only tool messages between): see `check_messages`. O(1). Raises ToolError
    400."""
    where = f"messages[{i}]"
    if answered is None:
        raise invalid(
            where,
            f"'{where}' has role 'tool' but does not follow an assistant message with "
            "'tool_calls': a tool message answers one of its calls.",
        )
    j, ids = answered
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str):
        raise invalid(
            f"{where}.tool_call_id",
            f"'{where}.tool_call_id' must be a string naming a call of messages[{j}].",
            "missing_required_parameter" if call_id is None else "invalid_type",
        )
    if call_id not in ids:
        raise invalid(
            f"{where}.tool_call_id",
            f"'{where}.tool_call_id' is {call_id!r}, which names no call in the "
            f"'tool_calls' of messages[{j}].",
        )


def message_text(message: dict, i: int) -> str:
    """The text of `messages[i]`'s content: a string, text parts joined, or "" when missing.
    Raises ToolError as `check_messages` does."""
    content = message.get("content")
    where = f"messages[{i}].content"
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(where, f"'{where}' must be a string or a list of parts.", "invalid_type")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise invalid(f"{where}[{j}]", f"'{where}[{j}]' must be an object.", "invalid_type")
        if part.get("type") != "text":
            raise ToolError(
                422,
                f"{where}[{j}].type",
                "unsupported_parameter",
                f"Only text content parts are supported, not {part.get('type')!r}.",
            )
        check_keys(part, TEXT_PART, f"{where}[{j}]")
        text = part.get("text")
        if not isinstance(text, str):
            raise invalid(
                f"{where}[{j}].text", f"'{where}[{j}].text' must be a string.", "invalid_type"
            )
        texts.append(text)
    return "".join(texts)


def message_calls(message: dict, i: int) -> list[tuple[str, str]]:
    """The `(name, arguments JSON text)` of each of `messages[i]`'s `tool_calls`, in order (a
    custom tool's call, `{"type": "custom", "custom": {"name", "input"}}`, as the arguments
    `{"input": INPUT}` it was generated as).

    Arguments given as a string are kept verbatim (a conversation renders the way it was
    generated) after checking that they are JSON ("" counts as `{}`); arguments given as an object
    are written as compact JSON. Raises ToolError 400 naming the message and call index.
    """
    calls = message.get("tool_calls")
    if calls is None:
        return []
    where = f"messages[{i}].tool_calls"
    if not isinstance(calls, list):
        raise invalid(where, f"'{where}' must be a list.", "invalid_type")
    if not calls:  # as OpenAI answers it: leave `tool_calls` out for no calls
        raise empty_array(where)
    result = []
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        if not isinstance(call, dict):
            raise invalid(at, f"'{at}' must be an object.", "invalid_type")
        kind = "function" if call.get("type") is None else call["type"]
        if not isinstance(kind, str) or kind not in CALL_FIELDS:
            raise invalid(f"{at}.type", f"'{at}.type' must be 'function' or 'custom'.")
        fields, inner = CALL_FIELDS[kind]
        check_keys(call, fields, at)
        if isinstance(call.get(kind), dict):
            check_keys(call[kind], inner, f"{at}.{kind}")
        if kind == "custom":  # a custom tool's call
            custom = call.get("custom")
            name = custom.get("name") if isinstance(custom, dict) else None
            text = custom.get("input") if isinstance(custom, dict) else None
            if not (isinstance(name, str) and name and isinstance(text, str)):
                message = f"'{at}.custom' must hold a 'name' and an 'input', both strings."
                raise invalid(f"{at}.custom", message, "invalid_type")
            result.append(
                (name, json.dumps({"input": text}, ensure_ascii=False, separators=(",", ":")))
            )
            continue
        function = call.get("function")
        if not isinstance(function, dict):
            raise invalid(f"{at}.function", f"'{at}.function' must be an object.", "invalid_type")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise invalid(
                f"{at}.function.name", f"'{at}.function.name' must be a string.", "invalid_type"
            )
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            if arguments.strip() == "":
                arguments = "{}"
            try:
                json.loads(arguments)
            except (ValueError, RecursionError):
                raise invalid(
                    f"{at}.function.arguments",
                    f"The arguments of tool call {j} in message {i} are not valid JSON.",
                ) from None
        elif isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        else:
            raise invalid(
                f"{at}.function.arguments",
                f"The arguments of tool call {j} in message {i} must be JSON text or an object.",
                "invalid_type",
            )
        result.append((name, arguments))
    return result
