"""Errors of `corral.model` (docs/design.md section 6), in corral's one hierarchy under
`ConstrainError`.

A checkpoint that cannot be used is a `ModelLoadError` naming the file and what is wrong with it;
requests the generation engine refuses are `RequestError`s (for one request, never the batch);
a chat template that refuses a conversation (its own `raise_exception`) is a `ChatTemplateError`.
"""

from __future__ import annotations

from pathlib import Path

from corral.automata.errors import ConstrainError


class ModelError(ConstrainError):
    """Base of the errors raised by `corral.model`."""


class ModelLoadError(ModelError):
    """A model file is missing, malformed, of an unsupported architecture or of the wrong shape.

    Attributes:
        path: the file (or folder) at fault.
        reason: what is wrong with it, in a few words.
    """

    def __init__(self, path: str | Path, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class ChatTemplateError(ModelError):
    """The chat template failed to render the conversation (e.g. its `raise_exception` fired)."""


class CacheError(ModelError):
    """A prefill or decode would overflow a KV cache slot, or names a slot that does not exist."""


class RequestError(ModelError):
    """A generation request the engine refuses at submission, for that request only (the batch
    goes on). The API layer answers it with a 400.

    Attributes:
        param: the request field at fault, as OpenAI names it (`max_tokens`, `messages`,
            `logit_bias`, `top_logprobs`, `seed`, `stop`), or as `GenerationRequest` names a
            field OpenAI has not (`params`, `trigger`, `jump_forward`, ...).
        code: OpenAI's machine-readable error code.
    """

    param = "messages"
    code = "invalid_value"

    def __init__(self, message: str, param: str | None = None):
        if param is not None:
            self.param = param
        super().__init__(message)


class ContextLengthError(RequestError):
    """The prompt plus `max_tokens` exceed the model's context (OpenAI's
    `context_length_exceeded`). `param` names the field to change: `max_tokens` when the prompt
    alone leaves room for an answer, else `messages`.

    Attributes:
        context_length: the model's context, in tokens.
        prompt_tokens: the prompt's length, in tokens.
        max_tokens: the tokens asked for after the prompt (None: absent, and the prompt alone
            leaves no room for an answer).
    """

    code = "context_length_exceeded"

    def __init__(self, context_length: int, prompt_tokens: int, max_tokens: int | None):
        self.context_length = context_length
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        asked = (
            "leaves no room for an answer"
            if max_tokens is None
            else f"max_tokens asks for {max_tokens} more"
        )
        super().__init__(
            f"this model's maximum context length is {context_length} tokens; the prompt has "
            f"{prompt_tokens} tokens and {asked}",
            "max_tokens"
            if max_tokens is not None and prompt_tokens < context_length
            else "messages",
        )
