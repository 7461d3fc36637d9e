"""Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`: `ToolError`, and
the one mapping from corral's errors (and any other exception) to it, `openai_error`, which the
Batch runner, the server and the CLI use (docs/design.md section 5, "Errors").
"""

from __future__ import annotations

import re

from corral.automata import ConstrainError, SchemaError
from corral.model.errors import RequestError


class ToolError(Exception):
    """An error to answer with instead of a completion.

    Attributes:
        status: the HTTP status: 400 or 422, 404 for a model not served (`check_model`); the
            server's own 401, 405, 413, 415, 429; 500 for a fault of corral's own.
        param: the request field at fault, as OpenAI writes it (`tools[0].function.parameters`,
            `messages[2].tool_calls[0].function.arguments`), or None for the body as a whole.
        code: OpenAI's machine-readable code (`invalid_value`, `invalid_type`,
            `missing_required_parameter`, `unsupported_parameter`, `unknown_parameter`,
            `invalid_json`) or None.
        message: a sentence for people.
        type: OpenAI's error `type`: `invalid_request_error` (the default), `rate_limit_error`
            or `server_error`.
    """

    def __init__(
        self,
        status: int,
        param: str | None,
        code: str | None,
        message: str,
        type: str = "invalid_request_error",
    ):
        self.status = status
        self.param = param
        self.code = code
        self.message = message
        self.type = type
        super().__init__(status, param, code, message)

    def __repr__(self) -> str:
        return f"ToolError({self.status}, {self.param!r}, {self.code!r}, {self.message!r})"

    def __str__(self) -> str:
        return f"{self.status} {self.param or '-'}: {self.message}"

    def to_json(self) -> dict:
        """The error body, a JSON-ready dict in OpenAI's shape."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def invalid(param: str | None, message: str, code: str | None = "invalid_value") -> ToolError:
    """A 400 for a malformed request."""
    return ToolError(400, param, code, message)


def empty_array(param: str) -> ToolError:
    """The 400 `empty_array` for a list that must hold at least one item (`tools`, an
    assistant turn's `tool_calls`), worded as the OpenAI API words it."""
    message = (f"Invalid '{param}': empty array. Expected an array with minimum length 1, but "
               "got an empty array instead.")  # fmt: skip
    return ToolError(400, param, "empty_array", message)


def not_honoured(param: str, why: str) -> ToolError:
    """The 400 `unsupported_parameter` for a request field corral does not honour (`stream`,
    `functions`, `audio`, ...): refused rather than accepted and ignored; `why` ends the
    message."""
    return ToolError(400, param, "unsupported_parameter", f"'{param}' is not supported: {why}.")


def unsupported(param: str, error: ConstrainError) -> ToolError:
    """The 422 `unsupported_parameter` for a pattern or schema the subset refuses (or a grammar past
    a size limit). `param` names the request field holding the schema; the message names the
    keyword and the JSON pointer inside it when `error` is a `SchemaError`."""
    if isinstance(error, SchemaError):
        where = f"at '{error.pointer or '/'}'"
        if error.keyword is not None:
            message = f"Unsupported keyword '{error.keyword}' in '{param}' {where}: {error.reason}"
        else:
            message = f"Unsupported schema in '{param}' {where}: {error.reason}"
    else:
        message = f"Unsupported '{param}': {error}"
    return ToolError(422, param, "unsupported_parameter", message)


def refused(error: RequestError, max_tokens_field: str = "max_tokens") -> ToolError:
    """The 400 for a request the engine refuses at submission (`corral.model.RequestError`: a
    prompt past the context, code `context_length_exceeded`; a max_tokens below the shortest
    answer; a bad logit_bias), keeping the engine's `param` and `code`. `max_tokens_field` is
    the field the request set its limit with (`max_completion_tokens` or `max_tokens`): the
    engine's `max_tokens` is named as that field, in `param` and in the message."""
    param, message = error.param, str(error)
    if max_tokens_field != "max_tokens":
        message = re.sub(r"\bmax_tokens\b", max_tokens_field, message)
        param = max_tokens_field if param == "max_tokens" else param
    return ToolError(400, param, error.code, message)


def openai_error(error: BaseException, max_tokens_field: str = "max_tokens") -> ToolError:
    """The API error answering a request whose reading, validation, compiling or submission
    raised `error`: a `ToolError` is itself; a `corral.model.RequestError` (a prompt past the
    context, a max_tokens below the shortest answer) the 400 of `refused` (naming the engine's
    `max_tokens` as `max_tokens_field`, the field the request used); another
    `ConstrainError`, or a value Python cannot convert, encode or recurse through
    (`OverflowError`, `UnicodeError`, `RecursionError`), a 400 `invalid_value` (the error's
    own `param` and `code` when it has them) naming the exception; anything else a 500
    `server_error` naming the exception."""
    if isinstance(error, ToolError):
        return error
    if isinstance(error, RequestError):
        return refused(error, max_tokens_field)
    named = f"{type(error).__name__}: {error}"
    if isinstance(error, ConstrainError | RecursionError | OverflowError | UnicodeError):
        param, code = getattr(error, "param", None), getattr(error, "code", None)
        return ToolError(400, param, code or "invalid_value", named)
    return ToolError(500, None, "server_error", named, "server_error")


def engine_failure(error: BaseException) -> ToolError:
    """The 500 `server_error` for a request the engine failed after it was admitted (a failed
    forward pass): the server's fault, whatever the exception (a `ToolError` is itself)."""
    if isinstance(error, ToolError):
        return error
    return ToolError(500, None, None, f"The engine failed: {error}", "server_error")
