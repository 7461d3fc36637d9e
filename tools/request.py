"""Reading a chat-completion request: `parse_tool_request(body) -> ToolRequest` (docs/design.md
section 5), every field the engine uses validated and normalized, every error a `ToolError` naming
the param. Schemas are compiled later, by `corral.tools.grammar`. Where corral chose what OpenAI
leaves open: docs/tools.md ("Requests").
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from corral.automata.schema.values import is_text, printable
from corral.tools.errors import ToolError, empty_array, invalid, not_honoured
from corral.tools.fields import HONOURED, NO_EFFECT, Field, check_keys, check_metadata
from corral.tools.messages import check_messages

TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
FORMAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOKEN_ID = re.compile(r"0|[1-9][0-9]{0,8}")
NO_PARAMETERS = {"type": "object", "properties": {}}
CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {"input": {"type": "string"}},
    "required": ["input"],
    "additionalProperties": False,
}
"""The arguments object a custom tool's call is written as (`Tool.custom`)."""
MAX_NESTING = 256
"""The deepest nesting of arrays and objects in a request body (a schema at most 64 subschemas
deep, the schema compiler's limit, fits well within it)."""
MAX_TOOLS = 128
"""The most tools one request may list (OpenAI's limit): past it, a 400 naming `tools` (code
`array_above_max_length`), before the rest of the body is walked and any tool is read, rendered
or compiled."""
LOGIT_BIAS_RANGE = 100
MAX_JSON_OBJECT_DEPTH = 7
"""The deepest `json_object_depth` a request may ask for: depth 7 is a DFA of 12,459 states
(0.9 s to build), depth 8 passes the DFA state limit while it is built (docs/tools.md)."""


_VLLM_REMOVED = "vLLM removed it in v0.12: use 'structured_outputs': {{'{}': ...}}"
FIELDS = {
    "messages": HONOURED,
    "model": HONOURED,  # the served model's name or absent (the server's check_model)
    "tools": HONOURED,
    "tool_choice": HONOURED,
    "parallel_tool_calls": HONOURED,
    "response_format": HONOURED,
    "max_completion_tokens": HONOURED,
    "max_tokens": HONOURED,
    "temperature": HONOURED,
    "top_p": HONOURED,
    "seed": HONOURED,
    "stop": HONOURED,
    "n": HONOURED,
    "presence_penalty": HONOURED,
    "frequency_penalty": HONOURED,
    "logprobs": HONOURED,
    "top_logprobs": HONOURED,
    "logit_bias": HONOURED,
    "jump_forward": HONOURED,  # corral's extension (see the module docstring)
    "json_object_depth": HONOURED,  # corral's extension (`ToolRequest.json_object_depth`)
    "allowed_mass": HONOURED,  # corral's extension (`ToolRequest.allowed_mass`)
    "structured_outputs": HONOURED,  # vLLM's extension (`StructuredOutputs`)
    "guided_regex": Field("refused", (), _VLLM_REMOVED.format("regex")),
    "guided_grammar": Field("refused", (), _VLLM_REMOVED.format("grammar")),
    "guided_choice": Field("refused", (), _VLLM_REMOVED.format("choice")),
    "guided_json": Field("refused", (), _VLLM_REMOVED.format("json")),
    "user": NO_EFFECT,
    "safety_identifier": NO_EFFECT,
    "metadata": NO_EFFECT,  # tags a stored completion (OpenAI's): none is stored
    "store": Field("refused", (False,), "corral stores no completion (send false or leave it out)"),
    "prompt_cache_key": NO_EFFECT,
    "prompt_cache_retention": Field(
        "refused", ("in_memory",), "corral's prefix cache lives in memory only: in_memory"
    ),
    "service_tier": Field("refused", ("auto", "default"), "corral has one tier: auto or default"),
    "modalities": Field("refused", (["text"],), "corral writes text only"),
    "stream": Field("refused", (False,), "a Batch line's answer is not streamed"),
    "stream_options": Field("refused", (), "only a streamed answer takes it"),
    "functions": Field("refused", (), "it is deprecated: use 'tools'"),
    "function_call": Field("refused", (), "it is deprecated: use 'tool_choice'"),
    "audio": Field("refused", (), "corral writes text only"),
    "prediction": Field("refused", (), "corral has no predicted outputs"),
    "web_search_options": Field("refused", (), "corral does not search the web"),
    "reasoning_effort": HONOURED,  # a thinking budget (`EFFORT_BUDGETS`), "none": off
    "thinking_token_budget": HONOURED,  # vLLM's extension: the thought's exact budget
    "verbosity": Field("refused", (), "corral does not steer verbosity"),
}
"""Every top-level field of OpenAI's chat completions request, and what corral does with it
(plus corral's extensions `jump_forward`, `json_object_depth` and `allowed_mass`, vLLM's
`structured_outputs` and `thinking_token_budget`, and vLLM's removed `guided_*` fields, refused
by name)."""


MAX_SAFETY_IDENTIFIER = 64  # characters, OpenAI's bound
_STRICT = NO_EFFECT  # corral enforces every schema: `strict` changes nothing (docs/tools.md)
STREAM_OPTIONS = {
    "include_usage": HONOURED,
    "include_obfuscation": Field("refused", (False,), "corral does not pad stream events"),
}
TOOL_FIELDS = {
    "function": {"type": HONOURED, "function": HONOURED},
    "custom": {"type": HONOURED, "custom": HONOURED},
}
FUNCTION = {"name": HONOURED, "description": HONOURED, "parameters": HONOURED, "strict": _STRICT}
CUSTOM = {"name": HONOURED, "description": HONOURED, "format": HONOURED}
CUSTOM_FORMATS = {"text": {"type": HONOURED}, "grammar": {"type": HONOURED, "grammar": HONOURED}}
GRAMMAR = {"syntax": HONOURED, "definition": HONOURED}
TOOL_CHOICE = {
    "function": {"type": HONOURED, "function": HONOURED},
    "custom": {"type": HONOURED, "custom": HONOURED},
}
NAMED = {"name": HONOURED}
RESPONSE_FORMATS = {
    "text": {"type": HONOURED},
    "json_object": {"type": HONOURED},
    "json_schema": {"type": HONOURED, "json_schema": HONOURED},
}
JSON_SCHEMA = {
    "name": HONOURED,
    "schema": HONOURED,
    "strict": _STRICT,
    "description": Field(
        "refused",
        (),
        "corral does not show the response format to the model (the schema "
        "constrains the answer): leave it out or say it in a message",
    ),
}
_VLLM_ONLY = "corral takes one of 'regex', 'grammar', 'choice' and 'json'"
STRUCTURED_OUTPUTS = {
    **dict.fromkeys(("regex", "grammar", "choice", "json"), HONOURED),
    **dict.fromkeys(
        (
            "json_object", "disable_fallback", "disable_any_whitespace",
            "disable_additional_properties", "whitespace_pattern", "structural_tag",
        ),
        Field("refused", (), _VLLM_ONLY),
    ),
}  # fmt: skip
"""The members of each object nested in a request (`corral.tools.fields.check_keys`; messages:
`corral.tools.messages.MESSAGE_FIELDS`), by type where an object's `type` chooses them; a
schema (`parameters`, `schema`, `structured_outputs.json`), `logit_bias` and `metadata` are
maps, whose keys are the client's."""


@dataclass(frozen=True, eq=False)
class Tool:
    """A function the model may call. `parameters` is its JSON Schema (key order kept)."""

    name: str
    parameters: dict = field(default_factory=lambda: dict(NO_PARAMETERS))
    description: str | None = None
    strict: bool | None = None
    custom: tuple[str, str | None] | None = None
    """For an OpenAI custom tool, `(syntax, definition)`: `("text", None)` for free text,
    `("lark", text)` or `("regex", pattern)` for a grammar; None for a function. A custom
    tool's `parameters` are `CUSTOM_PARAMETERS`: its call is written in the `<tool_call>`
    envelope as the arguments `{"input": INPUT}`, INPUT a JSON string whose decoded text is in
    the grammar's language (docs/tools.md, "Custom tools")."""

    def to_json(self) -> dict:
        """The tool as the chat template shows it to the model: `{"type":"function",
        "function":{...}}` (a custom tool as a function of one string `input`, its grammar
        told in the description)."""
        function: dict = {"name": self.name}
        description = self.description
        if self.custom is not None and self.custom[1] is not None:
            told = f"'input' follows this {self.custom[0]} grammar:\n{self.custom[1]}"
            description = told if description is None else f"{description}\n{told}"
        if description is not None:
            function["description"] = description
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


STRUCTURED_KEYS = ("regex", "grammar", "choice", "json")


@dataclass(frozen=True, eq=False)
class StructuredOutputs:
    """vLLM's request extension `structured_outputs`: exactly one of its keys.

    Attributes:
        kind: `regex` (a regex of docs/design.md section 2's subset), `grammar` (GBNF text, or
            Lark text when it holds no `::=`, as vLLM tells them apart), `choice` (exactly one
            of the strings) or `json` (a JSON Schema).
        value: the pattern or grammar text (str), the choices (tuple of str), the schema (dict).
    """

    kind: str
    value: object

    @property
    def param(self) -> str:
        """The request field that holds the value, for errors."""
        return f"structured_outputs.{self.kind}"


@dataclass(frozen=True, eq=False)
class ToolRequest:
    """A validated chat-completion request.

    `tool_choice` is `none`, `auto`, `required` or `function` (then `function_name` names the
    tool). `messages` are the request's own dicts, validated (`check_messages`). Sampling fields
    carry OpenAI's defaults when absent; `max_tokens` is None when the request sets no limit, and
    `max_tokens_field` names the field that set it (`max_completion_tokens` or `max_tokens`), for
    errors.
    `seed` is in [0, 2**64) (see the module docstring). `logprobs` asks for each token's logprob
    and `top_logprobs` (0 to 20, None when not asked) for the most likely alternatives;
    `logit_bias` holds `(token id, bias)` pairs, the bias in [-100, 100], added to the logits.
    `jump_forward` (corral's extension, default true): whether the engine may write the text the
    grammar forces without sampling it token by token. `structured_outputs` (vLLM's
    extension, None when absent) holds the whole answer to a regex, grammar, choice or schema.
    `json_object_depth` (corral's extension, 1 to `MAX_JSON_OBJECT_DEPTH`, None for the
    default, `corral.tools.grammar.JSON_OBJECT_DEPTH`): how deep a `json_object` answer nests.
    `allowed_mass` (corral's extension, a boolean; None when absent, which is false): report
    the constraint diagnostics, the probability mass the mask allowed each token (with its
    unmasked logprob in `logprobs.content`) and each answer's minimum and mean.
    """

    messages: tuple = ()
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "none"
    function_name: str | None = None
    response_format: ResponseFormat = field(default_factory=ResponseFormat)
    parallel_tool_calls: bool = True
    model: str | None = None
    max_tokens: int | None = None
    max_tokens_field: str = "max_tokens"
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: bool = False
    top_logprobs: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    jump_forward: bool = True
    structured_outputs: StructuredOutputs | None = None
    json_object_depth: int | None = None
    allowed_mass: bool | None = None
    reasoning_effort: str | None = None
    thinking_token_budget: int | None = None

    @property
    def calls_allowed(self) -> bool:
        """True when the answer may contain tool calls (there are tools and tool_choice is not
        `none`): only then are the tools described in the prompt and the answer parsed for
        calls."""
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def custom_names(self) -> frozenset[str]:
        """The names of the request's custom tools (their calls are answered as `custom`)."""
        return frozenset(t.name for t in self.tools if t.custom is not None)

    @property
    def thinking_budget(self) -> tuple[int | None, str]:
        """(the most tokens the thought may take, None for no bound but max_tokens; the field
        that set it): `thinking_token_budget`, else `reasoning_effort`'s (`EFFORT_BUDGETS`;
        0 turns thinking off)."""
        if self.thinking_token_budget is not None:
            return self.thinking_token_budget, "thinking_token_budget"
        if self.reasoning_effort is not None:
            return EFFORT_BUDGETS[self.reasoning_effort], "reasoning_effort"
        return None, "reasoning_effort"

    def tool(self, name: str) -> Tool:
        """The tool called `name`; KeyError if there is none."""
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(name)


EFFORT_BUDGETS = {"none": 0, "minimal": 256, "low": 1024, "medium": 4096, "high": 16384}
"""OpenAI's `reasoning_effort` values and the thinking budget in tokens each sets (docs/tools.md,
"Thinking budgets"): 0 turns thinking off."""
EFFORTS = tuple(EFFORT_BUDGETS)

MAX_INT_DIGITS = 4300
"""The most digits of a JSON integer read (Python's own limit on int(str))."""


def json_int(text: str) -> int:
    """A JSON integer's text as an int (`json.loads`' `parse_int`). Raises ValueError, in the
    request's terms, for one of more than `MAX_INT_DIGITS` digits."""
    if len(text) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS} are read)")
    return int(text)


def read_body(body: str | bytes | dict) -> dict:
    """A request body as a dict: JSON text parsed with `json.loads` (which keeps the client's key
    order), a dict as it is. Raises ToolError 400 (`invalid_json`, `invalid_type`)."""
    if isinstance(body, (str, bytes)):
        try:
            body = json.loads(body, parse_int=json_int)
        except RecursionError:
            raise invalid(None, "The body is nested too deeply.", "invalid_json") from None
        except ValueError as error:
            raise invalid(None, f"The body is not valid JSON: {error}", "invalid_json") from None
    if not isinstance(body, dict):
        raise invalid(None, "The body must be a JSON object.", "invalid_type")
    return body


def streaming_fields(body: dict) -> tuple[dict, bool, bool]:
    """For a server, which can stream: `(body without stream and stream_options, stream,
    include_usage)`, after checking them (`stream` a boolean; `stream_options` an object with at
    most a boolean `include_usage`, given only with `stream: true`). The rest of the body then
    goes to `parse_tool_request`, where a Batch line's `stream: true` is refused.
    Raises ToolError 400 naming the field."""
    rest = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    stream = _boolean(body, "stream", "")
    options = body.get("stream_options")
    if options is None:
        return rest, stream, False
    if not isinstance(options, dict):
        raise invalid("stream_options", "'stream_options' must be an object.", "invalid_type")
    if not stream:
        raise invalid("stream_options", "'stream_options' is only allowed with 'stream: true'.")
    check_keys(options, STREAM_OPTIONS, "stream_options")
    return rest, stream, _boolean(options, "include_usage", "stream_options")


def parse_tool_request(body: str | bytes | dict, vocabulary_size: int | None = None) -> ToolRequest:
    """Validate a chat-completion request body (JSON text or an already-parsed dict).

    Returns a `ToolRequest`. Raises `ToolError`, and nothing else whatever the body holds; pass a
    dict that came from `json.loads` so that schema key order is the client's (property order is
    part of the language, docs/design.md section 3). `vocabulary_size` (V) bounds the token ids
    of `logit_bias`. Linear in the body's size (a server runs it off its event loop).

    Raises:
        ToolError: 400 `invalid_request_error` naming the param for a malformed request: a body
            that is not a JSON object, `messages` missing or malformed, `tools` not a list or
            longer than `MAX_TOOLS` (128, OpenAI's limit: code `array_above_max_length`), a tool
            without a valid name or with a non-object `parameters`, duplicate tool names,
            `tool_choice` naming an unknown tool or given without tools, an unknown
            `response_format` type, sampling parameters of the wrong type or out of OpenAI's
            ranges. 422 `unsupported_parameter` for content parts that are not text.
            Every top-level field is in `FIELDS`: honoured; accepted because it cannot change
            the output (the identifiers `user`, `safety_identifier`, `prompt_cache_key`, and
            `metadata`, which tags a stored completion, and none is stored), when its value is
            one OpenAI takes (strings; `safety_identifier` at most 64 characters; `metadata`
            as `corral.tools.fields.check_metadata` says), else a 400 naming it; refused unless its
            value asks for nothing corral does not do (`store` `false`, `service_tier`
            `auto`/`default`, `modalities` `["text"]`, `prompt_cache_retention` `in_memory`);
            or refused with a 400
            `unsupported_parameter` naming it (`stream: true`, which a Batch line cannot use,
            the deprecated `functions` / `function_call`, `audio`, `prediction`, ...; null
            counts as absent). A field the API does not define is a 400 `unknown_parameter`,
            at the top level and in every object nested in the body (a message, a content
            part, a tool call, a tool, `tool_choice`, `response_format`, `structured_outputs`:
            `STREAM_OPTIONS` to `STRUCTURED_OUTPUTS`, `corral.tools.messages.MESSAGE_FIELDS`),
            its `param` the member's path (`messages[0].zzz`); a member OpenAI defines that
            corral does not honour (a message's `name`, ...) a 400 `unsupported_parameter`.
            A value Python cannot convert, encode or recurse through is a 400 naming the
            param, checked first over the whole body without recursion (`check_values`): a
            string or key that is not UTF-8 text (a lone surrogate, `"\\ud800"`), NaN or an
            infinity (`NaN`, `Infinity`, `1e400` in the JSON text), an integer beyond the range
            of a double (2**1024), nesting deeper than `MAX_NESTING` levels.
    """
    body = read_body(body)
    listed = body.get("tools")
    if isinstance(listed, list) and len(listed) > MAX_TOOLS:  # before the body is walked
        raise invalid(
            "tools",
            f"'tools' holds {len(listed)} tools; at most {MAX_TOOLS} are allowed.",
            "array_above_max_length",
        )
    check_values(body)
    check_fields(body)
    check_metadata(body.get("metadata"))
    for name in ("user", "safety_identifier", "prompt_cache_key"):  # identifiers: strings
        _field(body, name, "", str, "a string")
    if len(body.get("safety_identifier") or "") > MAX_SAFETY_IDENTIFIER:
        raise invalid(
            "safety_identifier",
            f"'safety_identifier' holds more than {MAX_SAFETY_IDENTIFIER} characters.",
            "string_above_max_length",
        )

    messages = check_messages(body.get("messages"))
    parallel = _field(body, "parallel_tool_calls", "", bool, "a boolean")
    max_tokens = _max_tokens(body)
    model = _field(body, "model", "", str, "a string")
    seed = _integer(body, "seed", -(2**63), 2**63 - 1)
    logprobs = _boolean(body, "logprobs", "")
    top_logprobs = _integer(body, "top_logprobs", 0, 20)
    if top_logprobs is not None and not logprobs:
        raise invalid("top_logprobs", "'top_logprobs' needs 'logprobs' to be true.")
    sampling = {
        "temperature": _number(body, "temperature", 0.0, 2.0, 1.0),
        "top_p": _number(body, "top_p", 0.0, 1.0, 1.0, low_open=True),
        "seed": None if seed is None else seed % 2**64,
        "stop": _stop(body.get("stop")),
        "n": _integer(body, "n", 1, 128) or 1,
        "presence_penalty": _number(body, "presence_penalty", -2.0, 2.0, 0.0),
        "frequency_penalty": _number(body, "frequency_penalty", -2.0, 2.0, 0.0),
        "logprobs": logprobs,
        "top_logprobs": top_logprobs,
        "logit_bias": _logit_bias(body.get("logit_bias"), vocabulary_size),
        "jump_forward": _field(body, "jump_forward", "", bool, "a boolean") is not False,
    }
    tools = _tools(body.get("tools"))
    tool_choice, function_name = _tool_choice(body.get("tool_choice"), tools)
    response_format = _response_format(body.get("response_format"))
    structured = _structured_outputs(body.get("structured_outputs"))
    depth = _integer(body, "json_object_depth", 1, MAX_JSON_OBJECT_DEPTH)
    allowed_mass = _field(body, "allowed_mass", "", bool, "a boolean")
    thinking_budget = _integer(body, "thinking_token_budget", 0, None)
    if thinking_budget is not None and body.get("reasoning_effort") is not None:
        raise invalid(
            "thinking_token_budget",
            "Setting 'thinking_token_budget' and 'reasoning_effort' at the same time is not "
            "supported: both set the thinking budget.",
            "invalid_parameter_combination",
        )
    if depth is not None and response_format.type != "json_object":
        raise invalid(
            "json_object_depth",
            "'json_object_depth' bounds a 'response_format' of type 'json_object': give one.",
        )
    if structured is not None and response_format.type != "text":
        raise invalid(
            "structured_outputs",
            "'structured_outputs' and a 'response_format' other than text both constrain the "
            "whole answer: give one of them.",
            "invalid_parameter_combination",
        )
    if structured is not None and tools and tool_choice != "none":
        raise invalid(
            "structured_outputs",
            "'structured_outputs' constrains the whole answer, so no tool can be called: drop "
            "it, or set 'tool_choice' to 'none'.",
            "invalid_parameter_combination",
        )
    if sampling["stop"] and structured is not None:
        raise not_honoured(
            "stop",
            "the whole answer is held to 'structured_outputs', and cutting it at a stop string "
            "would leave its language",
        )
    if sampling["stop"] and not _starts_free(tool_choice, response_format):
        raise not_honoured(
            "stop",
            "the whole answer is grammar-constrained (a response_format json_object or "
            "json_schema, or tool_choice required or a named function), and cutting it at a "
            "stop string would break the JSON",
        )
    return ToolRequest(
        messages=tuple(messages),
        tools=tools,
        tool_choice=tool_choice,
        function_name=function_name,
        response_format=response_format,
        parallel_tool_calls=True if parallel is None else parallel,
        model=model,
        max_tokens=max_tokens,
        max_tokens_field=(
            "max_tokens" if body.get("max_completion_tokens") is None else "max_completion_tokens"
        ),
        structured_outputs=structured,
        json_object_depth=depth,
        allowed_mass=allowed_mass,
        reasoning_effort=body.get("reasoning_effort"),
        thinking_token_budget=thinking_budget,
        **sampling,
    )


def check_model(model: str | None, served: str) -> None:
    """Refuse a request that names a model other than the one served, as the OpenAI API and
    vLLM do (a request that names none is answered by `served`).

    Raises ToolError 404 `model_not_found` (param `model`) naming both."""
    if model is not None and model != served:
        raise ToolError(
            404,
            "model",
            "model_not_found",
            f"The model '{model}' does not exist: this server serves '{served}' only.",
        )


def _max_tokens(body: dict) -> int | None:
    """`max_completion_tokens`, or the older `max_tokens`; both set (not null) is a 400 naming
    `max_tokens` (code `invalid_parameter_combination`), as the OpenAI API answers."""
    newer = _integer(body, "max_completion_tokens", 1, None)
    older = _integer(body, "max_tokens", 1, None)
    if newer is not None and older is not None:
        raise invalid(
            "max_tokens",
            "Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported.",
            "invalid_parameter_combination",
        )
    return older if newer is None else newer


def _starts_free(tool_choice: str, response_format: ResponseFormat) -> bool:
    """Whether the answer begins as free text (where a stop string can end it): the
    response_format is text and tool_choice is `none` or `auto` (no tools counts as `none`)."""
    return response_format.type == "text" and tool_choice in ("none", "auto")


# --- what every request must be ----------------------------------------------------------------


def check_values(body: dict) -> None:
    """Walk the whole body without recursion, in O(its size), and refuse what Python cannot
    convert, encode or recurse through: a string or member name that is not UTF-8 text (a lone
    surrogate), a float that is NaN or infinite, an integer of magnitude 2**1024 or more (beyond
    any double), arrays and objects nested deeper than `MAX_NESTING`. A value's path is written
    only for the error (a body nested deep under long names would otherwise copy them at every
    level).

    Raises ToolError 400 `invalid_value` whose `param` is the value's path
    (`tools[0].function.parameters.properties.x`, lone surrogates written `\\ud800`)."""
    stack: list = [(body, None, 0)]  # (value, place, depth); a place is (parent place, step)
    while stack:
        value, place, depth = stack.pop()
        if isinstance(value, str):
            if not is_text(value):
                param = _param(place)
                raise invalid(param, f"'{param}' is not UTF-8 text: it holds a lone surrogate.")
        elif isinstance(value, float) and not math.isfinite(value):
            param = _param(place)
            raise invalid(param, f"'{param}' must be a finite number (a double), not {value!r}.")
        elif isinstance(value, int) and abs(value).bit_length() > 1024:
            param = _param(place)
            raise invalid(param, f"'{param}' is beyond the range of a JSON number (a double).")
        elif isinstance(value, (dict, list)):
            if depth >= MAX_NESTING:
                param = _param(place)
                where = param if len(param) <= 80 else f"{param[:80]}... ({len(param)} characters)"
                raise invalid(param, f"'{where}' is nested deeper than {MAX_NESTING} levels.")
            if isinstance(value, list):
                stack.extend((v, (place, [i]), depth + 1) for i, v in enumerate(value))
                continue
            for key, item in value.items():
                if not is_text(str(key)):
                    where = _param((place, key))
                    raise invalid(where, f"The name '{where}' is not UTF-8 text.")
                stack.append((item, (place, key), depth + 1))


def _param(place) -> str | None:
    """The path of a place of `check_values` (None: the body): names joined by `.`, array
    indexes (`[i]`, held as one-item lists) appended, names made printable."""
    steps = []
    while place is not None:
        place, step = place
        steps.append(step)
    param = None
    for step in reversed(steps):
        if isinstance(step, list):
            param = f"{param}[{step[0]}]"
        else:
            name = printable(str(step))
            param = name if param is None else f"{param}.{name}"
    return param


def check_fields(body: dict) -> None:
    """Refuse the fields corral does not honour (`FIELDS`, `check_keys`). Raises ToolError 400:
    code `unknown_parameter` for a field the API does not define, `unsupported_parameter` for a
    refused one that is neither null nor one of its allowed values; `param` names it."""
    check_keys(body, FIELDS)
    value = body.get("reasoning_effort")
    if value is not None and value not in EFFORTS:
        efforts = ", ".join(EFFORTS)
        message = f"'reasoning_effort' must be one of {efforts}."
        code = "invalid_value" if isinstance(value, str) else "invalid_type"
        raise invalid("reasoning_effort", message, code)


# --- tools, tool_choice, response_format ------------------------------------------------------


def _tools(value) -> tuple[Tool, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise invalid("tools", "'tools' must be a list of tools.", "invalid_type")
    if not value:  # as OpenAI answers it: leave `tools` out for no tools
        raise empty_array("tools")
    tools: list[Tool] = []
    names: set[str] = set()
    for i, entry in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(entry, dict):
            raise invalid(where, f"'{where}' must be an object.", "invalid_type")
        kind = entry.get("type", "function")
        if isinstance(kind, str) and kind in TOOL_FIELDS:
            check_keys(entry, TOOL_FIELDS[kind], where)
        if kind == "custom":
            tool = _custom_tool(entry, where)
            if tool.name in names:
                raise invalid(f"{where}.custom.name", f"Duplicate tool name '{tool.name}'.")
            names.add(tool.name)
            tools.append(tool)
            continue
        if kind != "function":
            raise invalid(f"{where}.type", f"'{where}.type' must be 'function' or 'custom'.")
        function = _field(entry, "function", where, dict, "an object", required=True)
        where += ".function"
        check_keys(function, FUNCTION, where)
        name = _name(function, where, TOOL_NAME, "a-z, A-Z, 0-9, '_', '.', '-'")
        if name in names:
            raise invalid(f"{where}.name", f"Duplicate tool name '{name}'.")
        names.add(name)
        description = _field(function, "description", where, str, "a string")
        parameters = _field(function, "parameters", where, dict, "a JSON Schema object")
        strict = _field(function, "strict", where, bool, "a boolean")
        tools.append(Tool(name, parameters or dict(NO_PARAMETERS), description, strict))
    return tuple(tools)


def _custom_tool(entry: dict, where: str) -> Tool:
    """An OpenAI custom tool `{"type": "custom", "custom": {"name", "description"?, "format"?}}`,
    `format` `{"type": "text"}` (the default) or `{"type": "grammar", "grammar": {"syntax":
    "lark" | "regex", "definition"}}`. Raises ToolError 400 naming the field."""
    custom = _field(entry, "custom", where, dict, "an object", required=True)
    where += ".custom"
    check_keys(custom, CUSTOM, where)
    name = _name(custom, where, TOOL_NAME, "a-z, A-Z, 0-9, '_', '.', '-'")
    description = _field(custom, "description", where, str, "a string")
    fmt = _field(custom, "format", where, dict, "an object") or {"type": "text"}
    kind = fmt.get("type")
    if isinstance(kind, str) and kind in CUSTOM_FORMATS:
        check_keys(fmt, CUSTOM_FORMATS[kind], f"{where}.format")
    if kind == "text":
        return Tool(name, dict(CUSTOM_PARAMETERS), description, None, ("text", None))
    if kind != "grammar":
        raise invalid(f"{where}.format.type", f"'{where}.format.type' must be 'text' or 'grammar'.")
    spec = _field(fmt, "grammar", f"{where}.format", dict, "an object", required=True)
    where += ".format.grammar"
    check_keys(spec, GRAMMAR, where)
    syntax = spec.get("syntax")
    if syntax not in ("lark", "regex"):
        raise invalid(f"{where}.syntax", f"'{where}.syntax' must be 'lark' or 'regex'.")
    definition = _field(spec, "definition", where, str, "a string", required=True)
    return Tool(name, dict(CUSTOM_PARAMETERS), description, None, (syntax, definition))


def check_stream(request: ToolRequest, stream: bool) -> None:
    """Refuse `stream: true` for a request with custom tools (their calls are not streamed
    yet). Raises ToolError 400 `unsupported_parameter` naming `stream`."""
    if stream and request.custom_names and request.calls_allowed:
        raise not_honoured("stream", "custom tools' calls are not streamed yet")


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
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "allowed_tools":  # OpenAI's subset of the tools with a mode: not built here
        raise not_honoured(
            "tool_choice.type",
            "'allowed_tools' is not served (send the allowed tools as 'tools' with 'auto' or "
            "'required')",
        )
    if kind not in ("function", "custom"):
        raise invalid(
            "tool_choice",
            "'tool_choice' must be 'none', 'auto', 'required', a function or a custom tool.",
        )
    check_keys(value, TOOL_CHOICE[kind], "tool_choice")
    function = value.get(kind)
    if isinstance(function, dict):
        check_keys(function, NAMED, f"tool_choice.{kind}")
    name = function.get("name") if isinstance(function, dict) else None
    param = f"tool_choice.{kind}.name"
    if not isinstance(name, str):
        raise invalid(param, f"'{param}' must name a tool.", "missing_required_parameter")
    named = [tool for tool in tools if tool.name == name]
    if not named:
        raise invalid(param, f"'tool_choice' names '{name}', which is not in 'tools'.")
    if (named[0].custom is not None) != (kind == "custom"):
        raise invalid(param, f"'tool_choice' names '{name}' as a {kind} tool, which it is not.")
    return "function", name


def _response_format(value) -> ResponseFormat:
    if value is None:
        return ResponseFormat()
    if not isinstance(value, dict):
        raise invalid("response_format", "'response_format' must be an object.", "invalid_type")
    kind = value.get("type")
    if isinstance(kind, str) and kind in RESPONSE_FORMATS:
        check_keys(value, RESPONSE_FORMATS[kind], "response_format")
    if kind in ("text", "json_object"):
        return ResponseFormat(kind)
    if kind == "json_schema":
        what = "an object with 'name' and 'schema'"
        spec = _field(value, "json_schema", "response_format", dict, what, required=True)
        where = "response_format.json_schema"
        check_keys(spec, JSON_SCHEMA, where)
        name = _name(spec, where, FORMAT_NAME, "a-z, A-Z, 0-9, '_', '-'")
        schema = _field(spec, "schema", where, dict, "a JSON Schema object", required=True)
        strict = _field(spec, "strict", where, bool, "a boolean")
        return ResponseFormat("json_schema", name, schema, strict)
    raise invalid(
        "response_format.type",
        f"Unknown 'response_format.type' {kind!r}: use 'text', 'json_object' or 'json_schema'.",
    )


def _structured_outputs(value) -> StructuredOutputs | None:
    """vLLM's `structured_outputs`: an object with exactly one of `STRUCTURED_KEYS` (null ones
    count as absent). Raises ToolError 400 naming the field: not an object, none or several
    keys, another of vLLM's keys (`whitespace_pattern`, `structural_tag`, ...: refused by
    name), a value of the wrong type, an empty choice list."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid(
            "structured_outputs", "'structured_outputs' must be an object.", "invalid_type"
        )
    check_keys(value, STRUCTURED_OUTPUTS, "structured_outputs")
    given = [k for k, v in value.items() if v is not None]
    if len(given) != 1:
        raise invalid(
            "structured_outputs",
            "'structured_outputs' must hold exactly one of 'regex', 'grammar', 'choice' and "
            f"'json', not {len(given)}.",
        )
    kind = given[0]
    item = value[kind]
    param = f"structured_outputs.{kind}"
    if kind in ("regex", "grammar"):
        if not isinstance(item, str):
            raise invalid(param, f"'{param}' must be a string.", "invalid_type")
        return StructuredOutputs(kind, item)
    if kind == "choice":
        if not isinstance(item, list) or not item or not all(isinstance(c, str) for c in item):
            raise invalid(param, f"'{param}' must be a non-empty list of strings.")
        return StructuredOutputs(kind, tuple(item))
    if isinstance(item, str):  # vLLM takes the schema as JSON text too
        try:
            item = json.loads(item)
        except ValueError as error:
            raise invalid(param, f"'{param}' is not valid JSON: {error}") from None
        check_values({param: item})
    if not isinstance(item, dict):
        raise invalid(param, f"'{param}' must be a JSON Schema object.", "invalid_type")
    return StructuredOutputs(kind, item)


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


def _logit_bias(value, vocabulary_size: int | None) -> tuple[tuple[int, float], ...]:
    """`logit_bias` as `(token id, bias)` pairs in the given order. Raises ToolError 400 naming
    `logit_bias` (or `logit_bias.<key>`) for a key that is not a token id (decimal, within the
    vocabulary when its size is known) or a bias that is not a number in [-100, 100]."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise invalid("logit_bias", "'logit_bias' must be an object.", "invalid_type")
    pairs = []
    for key, bias in value.items():
        param = f"logit_bias.{key}"
        if not TOKEN_ID.fullmatch(key) or (
            vocabulary_size is not None and int(key) >= vocabulary_size
        ):
            within = "" if vocabulary_size is None else f" below {vocabulary_size}"
            raise invalid(param, f"'logit_bias' keys must be token ids{within}, not '{key}'.")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)):
            raise invalid(param, f"'{param}' must be a number.", "invalid_type")
        if not -LOGIT_BIAS_RANGE <= bias <= LOGIT_BIAS_RANGE:
            raise invalid(param, f"'{param}' must be in [-100, 100], got {bias!r}.")
        pairs.append((int(key), float(bias)))
    return tuple(pairs)


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
