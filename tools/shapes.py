"""OpenAI's JSON shapes of an answer (docs/design.md section 5, "Shapes"): the `message` of a
chat completion, the `delta` of a stream chunk (from `corral.tools.events`), a choice's `logprobs`
and the whole `chat.completion` body, each written exactly as OpenAI's API writes it.
"""

from __future__ import annotations

import json
import math
import time

from corral.model.generation_request import decode_text
from corral.tools.events import (
    Arguments,
    CallStart,
    Content,
    Reasoning,
    ToolCall,
    ToolEvent,
    collect_turn,
)
from corral.tools.parser import HERMES_SYNTAX, ToolParser


def finish_reason(calls: int | list, engine_reason: str) -> str:
    """OpenAI's `finish_reason`: `tool_calls` when any call was made, unless the engine stopped
    for `length` (the last call may then be cut short, and clients must know); otherwise the
    engine's own reason (`stop` or `length`). `calls` is a count or a list of calls."""
    n = calls if isinstance(calls, int) else len(calls)
    if n > 0 and engine_reason != "length":
        return "tool_calls"
    return engine_reason


def call_json(call: ToolCall, custom: frozenset = frozenset()) -> dict:
    """One entry of a message's `tool_calls`; a call of a tool named in `custom` (a custom
    tool, its arguments `{"input": "..."}`) as `{"id", "type": "custom", "custom": {"name",
    "input"}}`."""
    if call.name in custom:
        text = json.loads(call.arguments)["input"]
        return {"id": call.id, "type": "custom", "custom": {"name": call.name, "input": text}}
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def message_json(
    content: str | None,
    calls: list[ToolCall],
    custom: frozenset = frozenset(),
    reasoning: str | None = None,
) -> dict:
    """The assistant `message` of a chat completion, as a JSON-ready dict. `content` is null
    only beside tool calls, when they come with no text (OpenAI's shape); without calls it is
    always a string, `""` for an empty answer (a regex or grammar whose match is empty, or
    an answer that ended at once). `tool_calls` is present only when there are calls
    (`call_json`, the custom tools named in `custom`); `reasoning_content` (vLLM's and
    DeepSeek's field) only when the answer thought."""
    message: dict = {"role": "assistant", "content": (content or None) if calls else content or ""}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [call_json(call, custom) for call in calls]
    return message


def delta_json(event: ToolEvent) -> dict:
    """The `delta` of one streamed chunk for `event`, as a JSON-ready dict: `{"content": "..."}`
    for text; `{"tool_calls": [{"index": i, "id", "type": "function", "function": {"name",
    "arguments": ""}}]}` when call i starts; `{"tool_calls": [{"index": i, "function":
    {"arguments": "<fragment>"}}]}` for each later piece of its arguments."""
    if isinstance(event, Content):
        return {"content": event.text}
    if isinstance(event, Reasoning):
        return {"reasoning_content": event.text}
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


class ChoiceDeltas:
    """The deltas of one streamed choice, shaped so that joined as OpenAI's client joins them (a
    member's first value taken as it is, strings concatenated) they give the answer's `message`
    (`message_json`) in every member: the role comes with the choice's first delta; `content`
    is `""` before the first text (OpenAI's `{"role": "assistant", "content": ""}`), null beside
    a call when no text came before it (OpenAI's first delta of a pure tool-call answer is
    `{"role": "assistant", "content": null, "tool_calls": [...]}`), and `""` on the last delta
    of an answer that ended with neither text nor calls. A thought's first delta carries the
    role and its `reasoning_content` alone, since the content is not known yet.

    Args:
        text_only: the choice can only hold text (no calls, no thought): its role delta is sent
            at once (`opening`), as its content is a string whatever comes.
    """

    def __init__(self, text_only: bool):
        self.text_only = text_only
        self.role = False  # the role was sent
        self.content = False  # a `content` member was sent
        self.calls = 0

    def opening(self) -> list[dict]:
        """The deltas to send before any event: the role's when `text_only`, else none."""
        if not self.text_only:
            return []
        self.role = self.content = True
        return [{"role": "assistant", "content": ""}]

    def event(self, event: ToolEvent) -> list[dict]:
        """The deltas of one event (none for empty text)."""
        if isinstance(event, Content) and not event.text:
            return []
        deltas = []
        if isinstance(event, Content) and not self.content:
            if not self.role:
                deltas.append({"role": "assistant", "content": ""})
            self.role = self.content = True
        delta = delta_json(event)
        if isinstance(event, CallStart):
            self.calls += 1
            if not self.content:
                delta = {"content": None, **delta}
                self.content = True
        if not self.role:
            delta = {"role": "assistant", **delta}
            self.role = True
        return [*deltas, delta]

    def closing(self) -> dict:
        """The delta of the choice's last chunk (the one with its `finish_reason`): `{}`, or
        what the message still needs (the role, a `""` content)."""
        delta = {}
        if not self.role:
            delta["role"] = "assistant"
        if not self.content:
            delta["content"] = None if self.calls else ""
        self.role = self.content = True
        return delta


def token_json(token_id: int, logprob: float, vocabulary) -> dict:
    """`{"token", "logprob", "bytes"}` of one token: `bytes` are its raw bytes as a list of ints
    (`vocabulary.tokens[token_id]`, a `corral.kernels.Vocabulary`) and `token` those bytes
    decoded as UTF-8 with errors replaced (a token may hold part of a character); a special
    token, which has no bytes, is `""` with `bytes` null."""
    raw = vocabulary.tokens[token_id]
    if raw is None:
        return {"token": "", "logprob": float(logprob), "bytes": None}
    return {"token": raw.decode("utf-8", "replace"), "logprob": float(logprob), "bytes": list(raw)}


def logprobs_json(
    token_ids, logprobs, top_logprobs, vocabulary, top_n: int, diagnostics=None
) -> dict:
    """A choice's `logprobs` in OpenAI's shape: `{"content": [...], "refusal": null}`, one
    `token_json` per generated token with its `top_logprobs`, the first `top_n` of that token's
    `(token id, logprob)` alternatives (most likely first), and, when `diagnostics` is given,
    corral's `allowed_mass` and `unmasked_logprob` beside its `logprob`.

    Args:
        token_ids: int ids of the generated tokens (EOS excluded), length T.
        logprobs: float per token, the logprob the sampler reported (over the allowed tokens).
        top_logprobs: per token a list of `(token id, logprob)` pairs, or None when the engine
            reported none (then every `top_logprobs` is `[]`).
        vocabulary: the model's `corral.kernels.Vocabulary`.
        top_n: 0 to 20 alternatives per token.
        diagnostics: None, or `(allowed masses, unmasked logprobs)`, a float per token each
            (`GenerationResult.allowed_mass` and `unmasked_logprobs`).
    """
    content = []
    for j, (token_id, logprob) in enumerate(zip(token_ids, logprobs, strict=True)):
        alternatives = [] if top_logprobs is None else top_logprobs[j][:top_n]
        entry = token_json(token_id, logprob, vocabulary)
        if diagnostics is not None:
            entry["allowed_mass"] = _finite(diagnostics[0][j])
            entry["unmasked_logprob"] = _finite(diagnostics[1][j])
        entry["top_logprobs"] = [token_json(t, lp, vocabulary) for t, lp in alternatives]
        content.append(entry)
    return {"content": content, "refusal": None}


def allowed_mass_json(allowed_mass) -> dict:
    """A choice's `allowed_mass` (corral's): `{"min", "mean"}` of its tokens' allowed masses
    (`GenerationResult.allowed_mass`), both null for an answer of no token."""
    if not allowed_mass:
        return {"min": None, "mean": None}
    return {
        "min": _finite(min(allowed_mass)),
        "mean": _finite(math.fsum(allowed_mass) / len(allowed_mass)),
    }


def _finite(x: float) -> float | None:
    """`x` as a float, None (JSON null) when it is not finite: JSON has no NaN or infinity
    (an unmasked logprob is -inf only for logits that are -inf)."""
    x = float(x)
    return x if math.isfinite(x) else None


def completion_json(
    request, results, request_id: str, model_name: str, vocabulary, syntax=HERMES_SYNTAX
) -> dict:
    """The `chat.completion` body answering `request` (a `ToolRequest`) with one
    `corral.model.GenerationResult` per choice, in order.

    When calls are allowed (or `syntax` thinks), each choice's text, its special tokens'
    symbols written as their texts (`Vocabulary.text_of_symbols`), goes through the stream
    parser in `syntax` (a `CallSyntax`; None: all text is content; call ids
    `call_<request_id>_<index>`, with `_<choice>` after the request id when n > 1); `logprobs`
    is `logprobs_json` when the request asks for them, else null; `model` is `model_name`, the
    model that wrote the answer (whatever name the request gave); `usage` is `usage_json`'s. A
    result's `top_logprobs` is read when present (`getattr`), so results without it answer
    with empty `top_logprobs` lists. When the request asks for
    `allowed_mass` (corral's), each choice has `allowed_mass` (`allowed_mass_json`) and each
    `logprobs.content` entry its token's `allowed_mass` and `unmasked_logprob`.
    """
    choices = []
    for i, result in enumerate(results):
        reasoning, content, calls = None, result.text, []
        if syntax is not None and (request.calls_allowed or syntax.thinking is not None):
            parser = ToolParser(f"{request_id}_{i}" if len(results) > 1 else request_id, syntax)
            text = result.text
            if getattr(vocabulary, "special_texts", None):
                text = decode_text(vocabulary.text_of_symbols(result.data))
            reasoning, content, calls = collect_turn(parser.push(text) + parser.finish())
        logprobs = None
        if request.logprobs:
            top = getattr(result, "top_logprobs", None)
            n = request.top_logprobs or 0
            diagnostics = _diagnostics(request, result)
            logprobs = logprobs_json(
                result.token_ids, result.logprobs, top, vocabulary, n, diagnostics
            )
        choice = {
            "index": i,
            "message": message_json(content, calls, request.custom_names, reasoning),
            "logprobs": logprobs,
            "finish_reason": finish_reason(calls, result.finish_reason),
        }
        if getattr(request, "allowed_mass", None):
            choice["allowed_mass"] = allowed_mass_json(result.allowed_mass)
        choices.append(choice)
    return {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": choices,
        "usage": usage_json(results),
    }


def usage_json(results) -> dict:
    """OpenAI's `usage` of a request's choices' `corral.model.GenerationResult`s: the prompt's
    tokens (counted once, as every choice has the same prompt), the completion tokens of every
    choice, their total, and `completion_tokens_details.reasoning_tokens`, the tokens of every
    choice's thinking block (`GenerationResult.reasoning_tokens`: opener and closer included,
    part of `completion_tokens`), 0 for an answer that does not think, as OpenAI reports it
    for a model that does not reason; `prompt_tokens_details.cached_tokens`, the prompt's
    tokens the prefix cache gave (`GenerationResult.cached_tokens`; the prompt counted once,
    the fewest of any choice: the other choices reuse the prompt the first prefills), 0 when
    none, as OpenAI and vLLM report it."""
    prompt_tokens = results[-1].prompt_tokens if results else 0
    completion_tokens = sum(result.completion_tokens for result in results)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {
            "cached_tokens": min((result.cached_tokens for result in results), default=0)
        },
        "completion_tokens_details": {
            "reasoning_tokens": sum(result.reasoning_tokens for result in results)
        },
    }


def _diagnostics(request, result) -> tuple | None:
    """`(allowed masses, unmasked logprobs)` of a result whose request asked for
    `allowed_mass`, else None."""
    if not getattr(request, "allowed_mass", None):
        return None
    return result.allowed_mass, result.unmasked_logprobs
