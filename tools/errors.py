"""`ToolError`: an API error in OpenAI's shape, and the one place where corral's `ConstrainError`
becomes one (docs/design.md section 5, "Errors": one hierarchy, mapped in one place).

Shape: `{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}`. Malformed requests
are 400 `invalid_request_error`, and so are fields corral does not honour (code
`unsupported_parameter`); what the regex or schema subset refuses is 422 with code
`unsupported_parameter`, `param` naming the request field and the message naming the keyword.
"""

from __future__ import annotations

from corral.automata import ConstrainError, SchemaError
from corral.model.errors import RequestError


class ToolError(Exception):
    """An error to answer with instead of a completion.

    Attributes:
        status: the HTTP status: 400 or 422, or 404 for a model not served (`check_model`).
        param: the request field at fault, as OpenAI writes it (`tools[0].function.parameters`,
            `messages[2].tool_calls[0].function.arguments`), or None for the body as a whole.
        code: OpenAI's machine-readable code (`invalid_value`, `invalid_type`,
            `missing_required_parameter`, `unsupported_parameter`, `unknown_parameter`,
            `invalid_json`) or None.
        message: a sentence for people.
    """

    def __init__(self, status: int, param: str | None, code: str | None, message: str):
        self.status = status
        self.param = param
        self.code = code
        self.message = message
        super().__init__(status, param, code, message)

    def __repr__(self) -> str:
        return f"ToolError({self.status}, {self.param!r}, {self.code!r}, {self.message!r})"

    def __str__(self) -> str:
        return f"{self.status} {self.param or '-'}: {self.message}"

    @property
    def type(self) -> str:
        """OpenAI's error `type`: always `invalid_request_error` for what this layer raises."""
        return "invalid_request_error"

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


def refused(error: RequestError) -> ToolError:
    """The 400 for a request the engine refuses at submission (`corral.model.RequestError`: a
    prompt past the context, code `context_length_exceeded`; a max_tokens below the shortest
    answer; a bad logit_bias), keeping the engine's `param` and `code`."""
    return ToolError(400, error.param, error.code, str(error))
