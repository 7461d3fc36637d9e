"""What the generation engine takes and gives (docs/design.md sections 4 and 7):
`GenerationRequest`, `GenerationResult`, and the checks a request passes when it is submitted
(`check_request`, `check_budget`), so that nothing a request carries can fail once it runs.

The semantics (context length, max_tokens of None, budget-aware ending, logit_bias, logprobs and
top_logprobs) are in docs/engine.md.
"""

from __future__ import annotations

import codecs
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from corral.kernels import Constraint, SamplingParams
from corral.kernels.masks.budget import ThoughtBudget
from corral.model.errors import ContextLengthError, RequestError

DEFAULT_PARAMS = SamplingParams()
MAX_TOP_LOGPROBS = 20  # OpenAI's bound on top_logprobs
MAX_LOGIT_BIAS = 100.0  # OpenAI's bound on a logit_bias value, either sign
CONTEXT_LIMIT = "this model's maximum context length is {} tokens"  # as ContextLengthError's
ENGINE_LIMIT = "this engine holds at most {} tokens per sequence (its max_len)"


class BudgetTooSmallError(RequestError):
    """`max_tokens` is below 1 or smaller than the shortest answer the constraint allows."""

    param = "max_tokens"


class ThinkingBudgetTooSmallError(RequestError):
    """The thinking budget cannot hold the thinking block's markup (its opener and closer take
    more tokens than the budget gives) and the block cannot be left out."""

    param = "thinking_token_budget"


class MaxLenError(RequestError):
    """The prompt plus `max_tokens` exceed the engine's `max_len`, smaller than the model's
    context, whether or not they also exceed the context (the limit named is the one the engine
    enforces): the same overflow as `ContextLengthError` (code `context_length_exceeded`, the
    context being the one the engine serves), `param` naming the field to change in the same
    way: `max_tokens` when it was set and the prompt alone leaves room, else `messages`.

    Attributes:
        max_len: the engine's limit, in tokens.
        prompt_tokens: the prompt's length, in tokens.
        max_tokens: the tokens asked for after the prompt (None: absent, and the prompt alone
            leaves no room for an answer).
    """

    code = "context_length_exceeded"

    def __init__(self, max_len: int, prompt_tokens: int, max_tokens: int | None):
        self.max_len = max_len
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        asked = (
            "leaves no room for an answer"
            if max_tokens is None
            else f"max_tokens asks for {max_tokens} more"
        )
        super().__init__(
            f"{ENGINE_LIMIT.format(max_len)}; the prompt has {prompt_tokens} tokens and {asked}",
            "max_tokens" if max_tokens is not None and prompt_tokens < max_len else "messages",
        )


def sequence_limit(context_length: int, max_len: int | None = None) -> tuple[int, str]:
    """The most tokens one sequence may hold, the smaller of the model's `context_length` and
    an engine's `max_len` (None: the context), and the words that name it in an error ("this
    model's maximum context length is N tokens" or "this engine holds at most N tokens per
    sequence (its max_len)")."""
    if max_len is None or max_len >= context_length:
        return context_length, CONTEXT_LIMIT.format(context_length)
    return max_len, ENGINE_LIMIT.format(max_len)


def length_error(
    context_length: int, max_len: int | None, prompt_tokens: int, max_tokens: int | None
) -> RequestError:
    """The error of a prompt of `prompt_tokens` plus `max_tokens` (None: absent) past what a
    sequence may hold (`sequence_limit`): a `MaxLenError` naming `max_len` when it is smaller
    than the context, however far past the context the request also goes, else a
    `ContextLengthError` naming the context."""
    limit, _ = sequence_limit(context_length, max_len)
    if limit < context_length:
        return MaxLenError(limit, prompt_tokens, max_tokens)
    return ContextLengthError(context_length, prompt_tokens, max_tokens)


class UnwritableGrammarError(RequestError):
    """No sequence of the vocabulary's tokens spells a complete answer of the constraint (its
    every answer needs a byte, or a byte sequence, that no token holds: SmolLM2's vocabulary
    has no token with the control bytes 0x04, 0x06, 0x13, 0x14, 0x16 or 0x1d)."""

    param = None


@dataclass(frozen=True, eq=False)
class GenerationRequest:
    """One sequence to generate.

    Attributes:
        prompt_ids: int token ids of the prompt, at least one.
        max_tokens: the most tokens to generate (EOS included), >= 1; None: what the context
            leaves after the prompt (OpenAI's default).
        params: temperature, top_k, top_p, min_p, penalties (`corral.kernels.SamplingParams`).
        seed: seeds this request's own random generator (None: fresh entropy).
        stop: strings that end free text (not returned).
        constraint: a fresh `Constraint` the output must satisfy (from the first token, or from
            the trigger); the engine works on a copy.
        trigger: when set, the constraint starts after the output's bytes contain this string.
        budget_aware: keep a constrained answer within `max_tokens` (docs/engine.md).
        logit_bias: token id -> bias in [-100, 100], added to the logits before the mask.
        top_logprobs: how many alternatives (0..20) to report per generated token; None: none.
        jump_forward: when the constraint forces the next bytes, write their tokens in one
            forward pass instead of one decode step each (docs/engine.md); False:
            every token is sampled, as without jump-forward. With `top_logprobs` set it stays
            on (the answer is the same), and the forced tokens carry the model's logprobs
            from the pass that writes them.
        allowed_mass: report the constraint diagnostics of every generated token
            (`GenerationResult.allowed_mass` and `unmasked_logprobs`, docs/engine.md); its rows'
            logits are computed whole (never by the masked LM head), and jump-forward stays on
            as with `top_logprobs`.
        thought: the `ThoughtBudget` of the index of the constraint (or of `prelude`) that
            holds the thinking block the answer opens with, or None: the block's tokens are
            counted (`GenerationResult.reasoning_tokens`), and held to `thinking_budget`.
        thinking_budget: with `thought`, the most tokens the thinking block may take (>= 0,
            its markup included; `corral.kernels.masks.budget.ThoughtBudget`): a token from a
            state inside the block is allowed only when the block can still close within the
            thought tokens left and the answer still complete within max_tokens. None: no
            bound but max_tokens. Needs a constraint from the first token, or `prelude`.
        prelude: a fresh `Constraint` of a thinking block followed by anything, for an answer
            whose block comes before free text (`constraint` None, or waiting for `trigger`):
            the answer is held to it from the first token until its state leaves the block,
            then the text is free (stop strings and the trigger are looked for only after the
            block). Needs `thought`, which tells the block's states.
    """

    prompt_ids: Sequence[int]
    max_tokens: int | None = 256
    params: SamplingParams = DEFAULT_PARAMS
    seed: int | None = None
    stop: tuple[str, ...] = ()
    constraint: Constraint | None = None
    trigger: str | None = None
    budget_aware: bool = True
    logit_bias: Mapping[int, float] | None = None
    top_logprobs: int | None = None
    jump_forward: bool = True
    allowed_mass: bool = False
    thought: ThoughtBudget | None = None
    thinking_budget: int | None = None
    prelude: Constraint | None = None

    @property
    def model_logprobs(self) -> bool:
        """Whether the tokens jump-forward writes need the model's logprobs (`top_logprobs` or
        `allowed_mass` asked for): then they come from the pass that writes them."""
        return self.top_logprobs is not None or self.allowed_mass


@dataclass(frozen=True)
class GenerationResult:
    """What one request produced.

    Attributes:
        data: the generated bytes (stop string and EOS excluded), as the tokens spell them.
        token_ids: the generated token ids (EOS excluded).
        logprobs: float per token of `token_ids`, the logprob the sampler used (docs/engine.md);
            for a token written by jump-forward, the model's over the whole vocabulary when the
            request asked for top_logprobs, else 0.0 (the grammar forced it, and no one asked).
        finish_reason: `stop` (EOS, a stop string, or a complete answer with nothing left to
            write) or `length` (max_tokens reached).
        prompt_tokens, completion_tokens: usage, as OpenAI counts it: completion_tokens is
            len(token_ids), the tokens `logprobs` lists (EOS, which ends the answer and writes
            nothing, is in neither; `max_tokens` counts it).
        top_logprobs: per token of `token_ids`, its request's `top_logprobs` most likely
            alternatives `((token id, logprob), ...)`, most likely first (ties: lower id first);
            None when the request asked for none.
        allowed_mass: per token of `token_ids`, the probability mass the mask allowed: the sum
            over the allowed tokens of the softmax of the logits `logprobs` are read from, over
            the whole vocabulary (1.0 for free text; a token jump-forward wrote has the mass of
            the mask before it, as had it been sampled; a trigger's respelling, the model's
            probability of that one token); None when the request did not ask
            (`GenerationRequest.allowed_mass`).
        unmasked_logprobs: per token, its log-softmax over the whole vocabulary of the same
            logits (its logprob had nothing been masked); None likewise.
        reasoning_tokens: the tokens written from states inside the thinking block
            (`GenerationRequest.thought`, with or without a thinking budget), its opener and
            closer included; 0 without one, or when an optional block was left out.
        cached_tokens: the prompt tokens whose keys and values the prefix cache gave (copied
            or kept from a prompt prefilled before, not computed for this request), at most
            prompt_tokens; 0 without the prefix cache (OpenAI's
            `prompt_tokens_details.cached_tokens`). Not compared by `==`: two results are
            equal when their answers are, whatever the cache held.

    `text` is `data` decoded (`decode_text`), a property, so that no path can decode the bytes
    otherwise. Raises TypeError when `data` is not bytes (a str given for the text).
    """

    data: bytes
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] | None = None
    allowed_mass: tuple[float, ...] | None = None
    unmasked_logprobs: tuple[float, ...] | None = None
    reasoning_tokens: int = 0
    cached_tokens: int = field(default=0, compare=False)  # what was cached, not the answer

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes):
            raise TypeError(f"GenerationResult.data must be bytes, not {type(self.data).__name__}")

    @property
    def text(self) -> str:
        """The generated text: `data` decoded by the one rule for bytes that are not UTF-8
        (`decode_text`), the rule a stream of the same bytes follows piece by piece."""
        return decode_text(self.data)


def decode_text(data: bytes) -> str:
    """The text of generated bytes: UTF-8, each maximal invalid subsequence replaced by U+FFFD
    (Python's `bytes.decode("utf-8", "replace")`, the Unicode standard's practice). Streams
    apply the same rule incrementally (`text_decoder`), so that the concatenation of a stream's
    pieces is the text of its bytes, however they are cut."""
    return data.decode("utf-8", errors="replace")


def text_decoder() -> codecs.IncrementalDecoder:
    """An incremental decoder of `decode_text`'s rule: `decode(piece)` for each piece, then
    `decode(b"", final=True)`; the joined output equals `decode_text` of the joined pieces (a
    sequence cut between pieces is held until it completes or proves invalid)."""
    return codecs.getincrementaldecoder("utf-8")(errors="replace")


def check_budget(request: GenerationRequest) -> None:
    """Raise `UnwritableGrammarError` if no token sequence completes the constraint, and
    `BudgetTooSmallError` if `max_tokens` is below 1 or cannot hold the shortest
    constrained answer (`Constraint.completes_within`, exact: its bound only skips the token
    distances when it suffices; checked only for a budget-aware request
    whose constraint starts at the first token). With a thinking budget (`thought`), raise
    `ThinkingBudgetTooSmallError` when the block's markup cannot fit it, and
    `BudgetTooSmallError` when max_tokens cannot hold the shortest answer whose thought fits
    it (`ThoughtBudget.fits`). A `max_tokens` of None is not checked against the answer
    (`check_request` resolves it first)."""
    if request.max_tokens is not None and request.max_tokens < 1:
        raise BudgetTooSmallError(f"max_tokens must be at least 1, not {request.max_tokens}")
    limit = math.inf if request.max_tokens is None else request.max_tokens
    c = request.constraint
    if request.prelude is not None:
        _check_thought(request, request.prelude, limit)
    if c is None or request.trigger is not None:
        return
    if request.budget_aware and not c.completes_within(limit):
        needed = c.tokens_to_complete()
        if needed < 0:
            raise UnwritableGrammarError(
                "no answer can be written: every answer the grammar allows needs bytes that no "
                "token of the model's vocabulary spells (a grammar may name a byte, such as a "
                "control character, that the tokenizer cannot produce)"
            )
        raise BudgetTooSmallError(
            f"max_tokens={request.max_tokens} is too small: the shortest answer the grammar "
            f"allows takes {needed} tokens"
        )
    if request.prelude is None:
        _check_thought(request, c, limit)


def _check_thought(request: GenerationRequest, c: Constraint, limit: int | float) -> None:
    """`check_budget`'s checks of the thinking budget, on the constraint `c` that holds the
    thinking block."""
    thought, budget = request.thought, request.thinking_budget
    if thought is None or budget is None or c.done:
        return
    if thought.closing(c.state, budget) < 0 and c.tokens_to_complete() >= 0:
        raise ThinkingBudgetTooSmallError(
            f"thinking_token_budget={budget} is too small: the thinking block's markup "
            "alone takes more tokens (use 0 to turn thinking off)"
        )
    if request.budget_aware and not thought.fits(c.state, budget, limit):
        raise BudgetTooSmallError(
            f"max_tokens={request.max_tokens} is too small: with a thinking budget of "
            f"{budget} tokens the shortest answer the grammar allows takes "
            f"{thought.closing(c.state, budget)} tokens"
        )


def check_request(
    request: GenerationRequest, context_length: int, vocab_size: int, max_len: int | None = None
) -> GenerationRequest:
    """Check everything a request carries, so that running it cannot fail; return it with
    `max_tokens` resolved (None becomes max_len - prompt: what the context leaves, OpenAI's
    default, or what an engine with a smaller `max_len` leaves).

    Args:
        request: the request.
        context_length: the model's context: the most tokens a sequence may hold, >= 1.
        vocab_size: V, the number of token ids.
        max_len: the most tokens the engine's KV cache holds per sequence (None: the context).

    Raises:
        RequestError: a field of the wrong type or out of range (`check_fields`), an empty
            prompt or a token id outside 0..V-1 (param `messages`), a max_tokens that is not
            an integer, a `logit_bias` that is not a mapping, or an id in it outside 0..V-1 or
            a value that is not a number within [-100, 100], or a `top_logprobs` outside
            0..20.
        ContextLengthError: the prompt plus max_tokens (absent: one token) exceed
            `context_length`, and `max_len` is not smaller.
        MaxLenError: they exceed a `max_len` smaller than the context: the limit the engine
            enforces, named whether or not they also exceed the context (`length_error`).
        BudgetTooSmallError: see `check_budget`.
    """
    if not isinstance(request, GenerationRequest):
        raise TypeError(f"a request must be a GenerationRequest, not {_shown(request)}")
    check_fields(request)
    ids = np.asarray(request.prompt_ids)
    if ids.ndim != 1 or len(ids) == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise RequestError("the prompt (prompt_ids) must be at least one integer token id")
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise RequestError(f"the prompt's token ids must lie within 0..{vocab_size - 1}")
    prompt, max_tokens = len(ids), request.max_tokens
    if max_tokens is not None and not is_integer(max_tokens):
        raise RequestError(f"max_tokens must be an integer, not {max_tokens!r}", "max_tokens")
    if max_tokens is not None and max_tokens < 1:
        check_budget(request)
    limit, _ = sequence_limit(context_length, max_len)
    if prompt + (max_tokens or 1) > limit:
        raise length_error(context_length, max_len, prompt, max_tokens)
    if max_tokens is None:
        request = replace(request, max_tokens=limit - prompt)
    check_budget(request)
    top = request.top_logprobs
    if top is not None and not (is_integer(top) and 0 <= top <= MAX_TOP_LOGPROBS):
        raise RequestError(
            f"top_logprobs must be an integer within 0..{MAX_TOP_LOGPROBS}, not {top!r}",
            "top_logprobs",
        )
    if request.logit_bias is not None and not isinstance(request.logit_bias, Mapping):
        raise RequestError(
            "logit_bias must be a mapping of token id to bias, not "
            f"{type(request.logit_bias).__name__}",
            "logit_bias",
        )
    for token, bias in (request.logit_bias or {}).items():
        if not (is_integer(token) and 0 <= token < vocab_size):
            raise RequestError(
                f"logit_bias names token {token!r}, not an id within 0..{vocab_size - 1}",
                "logit_bias",
            )
        real = isinstance(bias, int | float | np.integer | np.floating) and not isinstance(
            bias, bool
        )
        if not (real and -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS):
            raise RequestError(
                f"logit_bias of token {token} is {bias!r}, not a number within [-100, 100]",
                "logit_bias",
            )
    return request


def check_fields(request: GenerationRequest) -> None:
    """Raise a `RequestError` naming the field (its `param`) when a field other than the
    prompt, `max_tokens`, `logit_bias`'s entries and `top_logprobs` (`check_request` checks
    those against the model) has the wrong type or an out-of-range value: `params` not a
    `SamplingParams`; `seed` not None or an integer within 0..2**64-1; `stop` not a tuple or
    list of non-empty strings (a bare str is refused, not split into characters); `constraint` or
    `prelude` not None or a `Constraint`; `trigger` not None or a non-empty str, or set without
    a constraint; `budget_aware`, `jump_forward` or `allowed_mass` not a boolean; `thought` not
    None or a `ThoughtBudget`; `thinking_budget` not None or an integer >= 0, or set without
    `thought`; `prelude` without `thought`."""
    r = request

    def refuse(param: str, wanted: str) -> RequestError:
        value = getattr(r, param)
        return RequestError(f"{param} must be {wanted}, not {_shown(value)}", param)

    if not isinstance(r.params, SamplingParams):
        raise refuse("params", "a SamplingParams")
    if r.seed is not None and not (is_integer(r.seed) and 0 <= r.seed < 2**64):
        raise refuse("seed", "None or an integer within 0..2**64-1")
    stop = r.stop
    if not isinstance(stop, tuple | list) or not all(isinstance(s, str) and s for s in stop):
        raise refuse("stop", "a tuple or list of non-empty strings")
    for param in ("constraint", "prelude"):
        if getattr(r, param) is not None and not isinstance(getattr(r, param), Constraint):
            raise refuse(param, "None or a Constraint")
    if r.trigger is not None and not (isinstance(r.trigger, str) and r.trigger):
        raise refuse("trigger", "None or a non-empty string")
    if r.trigger is not None and r.constraint is None:
        raise RequestError("trigger is set without a constraint to start", "trigger")
    for param in ("budget_aware", "jump_forward", "allowed_mass"):
        if not isinstance(getattr(r, param), bool | np.bool_):
            raise refuse(param, "a boolean")
    if r.thought is not None and not isinstance(r.thought, ThoughtBudget):
        raise refuse("thought", "None or a ThoughtBudget")
    budget = r.thinking_budget
    if budget is not None and not (is_integer(budget) and budget >= 0):
        raise refuse("thinking_budget", "None or an integer >= 0")
    for param in ("thinking_budget", "prelude"):
        if getattr(r, param) is not None and r.thought is None:
            raise RequestError(f"{param} is set without thought (the thinking block)", param)


def _shown(value) -> str:
    """`value` in an error message: its repr, cut to 60 characters, and its type."""
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def is_integer(value) -> bool:
    """Whether `value` is an integer (a Python or NumPy int, not a bool)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)
