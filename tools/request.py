"""Reading a chat-completion request: `parse_tool_request(body) -> ToolRequest` (DESIGN.md
section 5; tool-calls-spec sections 2.4 and 4, `parse_tool_request_hand_example`).

The body is read with `json.loads`, which keeps the key order of every schema (property order is
part of the language, DESIGN.md section 3). Every field the engine uses is validated and
normalized here; schemas are not compiled here but by `corral.tools.grammar`, which refuses what
the schema subset cannot serve with a 422 naming the field (`tools[0].function.parameters`).

A malformed request is a 400 `invalid_request_error` naming the param: a body that is not a JSON
object, `messages` missing or malformed, `tools` not a list, a tool without a valid name or with
a non-object `parameters`, duplicate tool names, `tool_choice` naming an unknown tool or given
without tools, an unknown `response_format` type, sampling parameters of the wrong type or out
of OpenAI's ranges. Content parts that are not text are a 422 `unsupported_parameter`.

Decisions where OpenAI is silent or where corral differs: `tools: []` counts as no tools; tool
names are `[A-Za-z0-9_.-]{1,64}` (OpenAI's set plus `.`, which BFCL's names use); a tool without
`parameters` takes no arguments (`{}`); `strict` is accepted and changes nothing (corral always
enforces the schema); `max_completion_tokens` wins over the older `max_tokens`; fields this
layer does not know are ignored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from corral.tools.errors import ToolError, invalid

TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
FORMAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
ROLES = ("system", "developer", "user", "assistant", "tool")
NO_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(frozen=True, eq=False)
class Tool:
    """A function the model may call. `parameters` is its JSON Schema (key order kept)."""

    name: str
    parameters: dict = field(default_factory=lambda: dict(NO_PARAMETERS))
    description: str | None = None
    strict: bool | None = None

    def to_json(self) -> dict:
        """The tool as OpenAI writes it: `{"type":"function","function":{...}}`."""
        function: dict = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}


@dataclass(frozen=True, eq=False)
class ResponseFormat:
    """`response_format`: `type` is `text`, `json_object` or `json_schema`; for `json_schema`,
    `name`, `schema` (key order kept) and `strict` as given."""

    type: str = "text"
    name: str | None = None
    schema: dict | None = None
    strict: bool | None = None


@dataclass(frozen=True, eq=False)
class ToolRequest:
    """A validated chat-completion request.

    `tool_choice` is `none`, `auto`, `required` or `function` (then `function_name` names the
    tool). `messages` are the request's own dicts, validated (`check_messages`). Sampling fields
    carry OpenAI's defaults when absent; `max_tokens` is None when the request sets no limit.
    """

    messages: tuple = ()
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "none"
    function_name: str | None = None
    response_format: ResponseFormat = field(default_factory=ResponseFormat)
    parallel_tool_calls: bool = True
    model: str | None = None
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: bool = False
    top_logprobs: int | None = None
    stream: bool = False
    stream_include_usage: bool = False

    @property
    def calls_allowed(self) -> bool:
        """True when the answer may contain tool calls (there are tools and tool_choice is not
        `none`): only then are the tools described in the prompt and the answer parsed for
        calls."""
        return bool(self.tools) and self.tool_choice != "none"

    def tool(self, name: str) -> Tool:
        """The tool called `name`; KeyError if there is none."""
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(name)


def parse_tool_request(body: str | bytes | dict) -> ToolRequest:
    """Validate a chat-completion request body (JSON text or an already-parsed dict).

    Returns a `ToolRequest`. Raises `ToolError` (400 or 422, see the module docstring); pass a
    dict that came from `json.loads` so that schema key order is the client's.
    """
    if isinstance(body, (str, bytes)):
        try:
            body = json.loads(body)
        except ValueError as error:
            raise invalid(None, f"The body is not valid JSON: {error}", "invalid_json") from None
    if not isinstance(body, dict):
        raise invalid(None, "The body must be a JSON object.", "invalid_type")

    messages = check_messages(body.get("messages"))
    parallel = _field(body, "parallel_tool_calls", "", bool, "a boolean")
    max_tokens = _integer(body, "max_completion_tokens", 1, None)
    if max_tokens is None:
        max_tokens = _integer(body, "max_tokens", 1, None)
    stream_options = _field(body, "stream_options", "", dict, "an object") or {}
    model = _field(body, "model", "", str, "a string")
    sampling = {
        "temperature": _number(body, "temperature", 0.0, 2.0, 1.0),
        "top_p": _number(body, "top_p", 0.0, 1.0, 1.0, low_open=True),
        "seed": _integer(body, "seed", None, None),
        "stop": _stop(body.get("stop")),
        "n": _integer(body, "n", 1, 128) or 1,
        "presence_penalty": _number(body, "presence_penalty", -2.0, 2.0, 0.0),
        "frequency_penalty": _number(body, "frequency_penalty", -2.0, 2.0, 0.0),
        "logprobs": _boolean(body, "logprobs", ""),
        "top_logprobs": _integer(body, "top_logprobs", 0, 20),
        "stream": _boolean(body, "stream", ""),
        "stream_include_usage": _boolean(stream_options, "include_usage", "stream_options"),
    }
    tools = _tools(body.get("tools"))
    tool_choice, function_name = _tool_choice(body.get("tool_choice"), tools)
    response_format = _response_format(body.get("response_format"))
    return ToolRequest(
        messages=tuple(messages),
        tools=tools,
        tool_choice=tool_choice,
        function_name=function_name,
        response_format=response_format,
        parallel_tool_calls=True if parallel is None else parallel,
        model=model,
        max_tokens=max_tokens,
        **sampling,
    )


# --- tools, tool_choice, response_format ------------------------------------------------------


def _tools(value) -> tuple[Tool, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise invalid("tools", "'tools' must be a list of tools.", "invalid_type")
    tools: list[Tool] = []
    for i, entry in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(entry, dict):
            raise invalid(where, f"'{where}' must be an object.", "invalid_type")
        if entry.get("type", "function") != "function":
            raise invalid(f"{where}.type", f"'{where}.type' must be 'function'.")
        function = _field(entry, "function", where, dict, "an object", required=True)
        where += ".function"
        name = _name(function, where, TOOL_NAME, "a-z, A-Z, 0-9, '_', '.', '-'")
        if any(tool.name == name for tool in tools):
            raise invalid(f"{where}.name", f"Duplicate tool name '{name}'.")
        description = _field(function, "description", where, str, "a string")
        parameters = _field(function, "parameters", where, dict, "a JSON Schema object")
        strict = _field(function, "strict", where, bool, "a boolean")
        tools.append(Tool(name, parameters or dict(NO_PARAMETERS), description, strict))
    return tuple(tools)


def _tool_choice(value, tools: tuple[Tool, ...]) -> tuple[str, str | None]:
    if value is None:
        return ("auto" if tools else "none"), None
    if not tools:
        raise invalid("tool_choice", "'tool_choice' is only allowed when 'tools' are specified.")
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise invalid(
                "tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or a function."
            )
        return value, None
    if not isinstance(value, dict) or value.get("type") != "function":
        raise invalid(
            "tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or a function."
        )
    function = value.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise invalid(
            "tool_choice.function.name",
            "'tool_choice.function.name' must name a tool.",
            "missing_required_parameter",
        )
    if all(tool.name != name for tool in tools):
        raise invalid(
            "tool_choice.function.name", f"'tool_choice' names '{name}', which is not in 'tools'."
        )
    return "function", name


def _response_format(value) -> ResponseFormat:
    if value is None:
        return ResponseFormat()
    if not isinstance(value, dict):
        raise invalid("response_format", "'response_format' must be an object.", "invalid_type")
    kind = value.get("type")
    if kind in ("text", "json_object"):
        return ResponseFormat(kind)
    if kind == "json_schema":
        what = "an object with 'name' and 'schema'"
        spec = _field(value, "json_schema", "response_format", dict, what, required=True)
        where = "response_format.json_schema"
        name = _name(spec, where, FORMAT_NAME, "a-z, A-Z, 0-9, '_', '-'")
        schema = _field(spec, "schema", where, dict, "a JSON Schema object", required=True)
        strict = _field(spec, "strict", where, bool, "a boolean")
        return ResponseFormat("json_schema", name, schema, strict)
    raise invalid(
        "response_format.type",
        f"Unknown 'response_format.type' {kind!r}: use 'text', 'json_object' or 'json_schema'.",
    )


# --- messages ------------------------------------------------------------------------------


def check_messages(messages) -> list[dict]:
    """Validate OpenAI chat messages; return them unchanged (as a list).

    Roles: system, developer, user, assistant, tool. `content` is a string or a list of text
    parts; it may be missing or null only in an assistant turn. An assistant turn's `tool_calls`
    each need `function.name` and `function.arguments`, a JSON text or an object. Raises ToolError:
    400 naming the message index (`messages[2].tool_calls[0].function.arguments`) for what is
    malformed, 422 for content parts that are not text.
    """
    if not isinstance(messages, list) or not messages:
        raise invalid(
            "messages",
            "'messages' must be a non-empty list of messages.",
            "missing_required_parameter" if messages is None else "invalid_type",
        )
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid(where, f"'{where}' must be an object.", "invalid_type")
        role = message.get("role")
        if role not in ROLES:
            raise invalid(f"{where}.role", f"'{where}.role' must be one of {', '.join(ROLES)}.")
        content = message.get("content")
        if content is None and role != "assistant":
            raise invalid(
                f"{where}.content", f"'{where}.content' is required.", "missing_required_parameter"
            )
        message_text(message, i)
        if role == "assistant":
            message_calls(message, i)
    return list(messages)


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
        text = part.get("text")
        if not isinstance(text, str):
            raise invalid(
                f"{where}[{j}].text", f"'{where}[{j}].text' must be a string.", "invalid_type"
            )
        texts.append(text)
    return "".join(texts)


def message_calls(message: dict, i: int) -> list[tuple[str, str]]:
    """The `(name, arguments JSON text)` of each of `messages[i]`'s `tool_calls`, in order.

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
    result = []
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
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
            except ValueError:
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


# --- sampling fields -------------------------------------------------------------------------


def _number(
    body: dict, name: str, low: float, high: float, default: float, low_open=False
) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(name, f"'{name}' must be a number.", "invalid_type")
    if not (low < value <= high if low_open else low <= value <= high):
        bracket = "(" if low_open else "["
        raise invalid(name, f"'{name}' must be in {bracket}{low:g}, {high:g}], got {value!r}.")
    return float(value)


def _integer(body: dict, name: str, low: int | None, high: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(name, f"'{name}' must be an integer.", "invalid_type")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        raise invalid(name, f"'{name}' must be {bounds}, got {value}.")
    return value


def _field(obj: dict, key: str, where: str, kind: type, what: str, required: bool = False):
    """`obj[key]` when it is a `kind`, or None when it is missing (or null) and not `required`.
    Raises ToolError 400 naming `where.key` ("'where.key' must be WHAT."):
    `missing_required_parameter` for a required field that is missing, else `invalid_type`."""
    param = f"{where}.{key}" if where else key
    value = obj.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, kind):
        code = "missing_required_parameter" if value is None else "invalid_type"
        raise invalid(param, f"'{param}' must be {what}.", code)
    return value


def _name(obj: dict, where: str, pattern: re.Pattern, characters: str) -> str:
    """`obj["name"]` when it is 1 to 64 `characters` (`pattern`). Raises ToolError 400 naming
    `where.name`."""
    param = f"{where}.name"
    name = obj.get("name")
    if not isinstance(name, str) or not pattern.fullmatch(name):
        code = "missing_required_parameter" if name is None else "invalid_value"
        raise invalid(param, f"'{param}' must be 1 to 64 of {characters}.", code)
    return name


def _boolean(obj: dict, key: str, where: str) -> bool:
    """`obj[key]` as a boolean, False when missing. Raises ToolError 400 as `_field` does."""
    return bool(_field(obj, key, where, bool, "a boolean"))


def _stop(value) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, list)
        or len(value) > 4
        or not all(isinstance(s, str) and s for s in value)
    ):
        raise invalid("stop", "'stop' must be a non-empty string or a list of up to 4 of them.")
    return tuple(value)
