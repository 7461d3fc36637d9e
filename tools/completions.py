"""The adapter between OpenAI's chat completions and corral's engine: a validated request to the
`GenerationRequest`s of its choices (prompt, grammar, sampling), and their results to the
`chat.completion` body. The Batch runner and the server share one `Completions`.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from corral.kernels import Constraint, SamplingParams, TokenIndex
from corral.model.generate import GenerationRequest, GenerationResult
from corral.model.generation_request import length_error, sequence_limit
from corral.tools.errors import ToolError, invalid, not_honoured, refused
from corral.tools.formats import (
    HERMES,
    TurnFormat,
    detect_format,
    format_named,
    no_format_error,
    reads_tools,
    rendering_for,
)
from corral.tools.grammar import (
    DEFAULT_MAX_GRAMMARS,
    GrammarCompiler,
    grammar,
    prelude_dfa,
    thought_budget,
)
from corral.tools.parser import CallSyntax
from corral.tools.prompt_bound import PromptBound
from corral.tools.render import render_request
from corral.tools.request import ToolRequest
from corral.tools.shapes import completion_json

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def served_name(model_path: str | Path | None) -> str:
    """The name a model is served under (the `model` of requests and answers, as vLLM's
    `--served-model-name` defaults to the model's path): SmolLM2-135M-Instruct for the default
    model (None), else the name of the `--model` folder, or of the GGUF file without `.gguf`."""
    if model_path is None:
        return DEFAULT_MODEL_NAME
    path = Path(model_path)
    return path.stem if path.suffix == ".gguf" else path.name


class Completions:
    """Chat completions requests to engine requests and their results to `chat.completion`
    bodies, over a model, its vocabulary, and the `GrammarCompiler` whose bounded cache of token
    indexes every request shares.

    Args:
        model: a `corral.model.Model`.
        model_name: the served model's name: answers carry it, and a request naming another
            model is refused (`corral.tools.request.check_model`; `served_name`).
        max_grammars: how many token indexes the compiler keeps (`DEFAULT_MAX_GRAMMARS`).
        tool_format: the turn format's name or `TurnFormat` (`corral.tools.formats`); None:
            detected from the model's chat template (`detect_format`). When no format fits,
            a request that sends tools is refused (422 naming the template).

    The format's special tokens that the model's tokenizer has (`[TOOL_CALLS]`) are given
    their symbols in `model.vocabulary` (`Vocabulary.with_special_symbols`), so that its
    grammars can require them and generators made after this one write them.
    """

    def __init__(
        self,
        model,
        model_name: str = DEFAULT_MODEL_NAME,
        max_grammars: int = DEFAULT_MAX_GRAMMARS,
        tool_format: str | TurnFormat | None = None,
    ):
        self.model = model
        self.model_name = model_name
        template = getattr(model, "chat_template", None)
        if isinstance(tool_format, str):
            tool_format = format_named(tool_format)
        fmt = tool_format if tool_format is not None else detect_format(template)
        self.tool_format = rendering_for(fmt, template)
        shown = template is None or reads_tools(template) or not self.tool_format.renders_tools
        if tool_format is not None and not shown:  # the prompt would not show the tools
            raise invalid(
                "tool_format",
                f"The tool format {self.tool_format.name!r} needs a chat template that renders "
                "the tools, and this model's takes none: use 'hermes' (corral describes the "
                "tools in the system turn) or a model whose template takes tools.",
            )
        self.specials = self._specials(model)
        if self.specials:
            model.vocabulary = model.vocabulary.with_special_symbols(
                {i: text for text, i in self.specials.items()}
            )
        self.vocabulary = model.vocabulary
        self.compiler = GrammarCompiler(self.vocabulary, max_grammars)
        self.prompt_bound = PromptBound.of(model)
        self._prelude_index: TokenIndex | None = None

    def _specials(self, model) -> dict[str, int]:
        """text -> id of the format's texts that are one special token of the model (not EOS,
        which ends the answer instead)."""
        found: dict[str, int] = {}
        token_id = getattr(getattr(model, "tokenizer", None), "token_id", None)
        if self.tool_format is None or token_id is None:
            return found
        tokens, eos = model.vocabulary.tokens, set(model.vocabulary.eos_ids)
        for text in self.tool_format.specials:
            i = token_id(text)
            if i is not None and 0 <= i < len(tokens) and tokens[i] is None and i not in eos:
                found[text] = i
        return found

    def thinking(self, request: ToolRequest) -> bool:
        """Whether the answer opens with the format's thinking block: the format thinks and the
        request does not turn it off (a thinking budget of 0: `reasoning_effort: "none"` or
        `thinking_token_budget: 0`)."""
        fmt = self.tool_format
        return fmt is not None and fmt.thinking is not None and request.thinking_budget[0] != 0

    def _check_thinking(self, request: ToolRequest) -> None:
        """Refuse a thinking budget above 0 for a format that does not think (docs/tools.md,
        "Thinking budgets"). Raises ToolError 400 `unsupported_parameter` naming the field
        that set it."""
        budget, param = request.thinking_budget
        fmt = self.tool_format
        if budget and (fmt is None or fmt.thinking is None):
            name = "no turn format" if fmt is None else f"the turn format {fmt.name!r}"
            raise not_honoured(param, f"the model has {name}, which does not think")

    def _prelude(self) -> Constraint:
        """A fresh constraint of the format's `prelude_dfa` (its index built once)."""
        if self._prelude_index is None:
            marks = tuple(sorted(self.specials.items()))
            self._prelude_index = TokenIndex(prelude_dfa(self.tool_format, marks), self.vocabulary)
        return Constraint(self._prelude_index)

    def _grammar_thought(self, index: TokenIndex, budget: int | None, param: str):
        """The `ThoughtBudget` of a grammar that opens with the thinking block
        (`thought_budget`). Without a budget a grammar whose states do not tell the block from
        the answer gets None (its reasoning tokens are not counted) rather than a 422: the
        budget needs the states, the answer does not."""
        try:
            return thought_budget(index, self.tool_format, self.specials, param)
        except ToolError:
            if budget is not None:
                raise
            return None

    def syntax(self, request: ToolRequest) -> CallSyntax | None:
        """The parser's syntax for the request's answers (None: no calls and no thinking, all
        text is content)."""
        fmt = self.tool_format
        if fmt is None or not (request.calls_allowed or self.thinking(request)):
            return None
        return fmt.parser_syntax(self.thinking(request), request.tools)

    def requests(
        self,
        request: ToolRequest,
        default_max_tokens: int | None = None,
        max_len: int | None = None,
    ) -> list[GenerationRequest]:
        """The engine requests of a chat request's `n` choices (their budget is checked when
        they are submitted, `Generator.submit`), for an engine of `max_len` tokens per sequence
        (None: the model's context).

        Raises ToolError: 422 for a schema the subset refuses or a grammar past a size limit;
        400 for messages the template refuses, and 400 `context_length_exceeded` (param
        `messages`) for a prompt that fills the model's context or the smaller `max_len`
        (naming that limit: `corral.model.generation_request.length_error`), found before any
        grammar is built (from its length, then from its tokens): the tools' schemas are in the
        prompt, so a grammar of tools is built only for schemas that fit in the context."""
        if request.calls_allowed and self.tool_format is None:
            raise no_format_error(self.model_name, getattr(self.model, "chat_template", None))
        thinking = self.thinking(request)
        text = render_request(self.model, request, turn_format=self.tool_format, thinking=thinking)
        context = self.model.context_length
        self.prompt_bound.check(text, context, max_len)  # from the length, before tokenizing
        prompt = self.model.tokenizer.encode(text)
        if len(prompt) >= sequence_limit(context, max_len)[0]:
            raise refused(length_error(context, max_len, len(prompt), None))
        constraint, trigger, thought, prelude = None, None, None, None
        fmt = self.tool_format or HERMES
        found = grammar(request, fmt, self.specials, thinking)
        budget, param = request.thinking_budget
        self._check_thinking(request)
        if found is not None:
            index = self.compiler.index(found)
            constraint = Constraint(index)
            trigger = found.trigger
        if thinking:  # the block's tokens counted, and held to the budget if there is one
            if found is not None and trigger is None:  # the block is the grammar's first part
                thought = self._grammar_thought(index, budget, param)
            else:  # the block, then free text (with the lazy trigger, if any)
                prelude = self._prelude()
                thought = thought_budget(prelude.index, fmt, self.specials, param)
        params = SamplingParams(
            temperature=request.temperature,
            top_p=request.top_p,
            presence_penalty=request.presence_penalty,
            frequency_penalty=request.frequency_penalty,
        )
        max_tokens = request.max_tokens or default_max_tokens
        out = []
        for i in range(request.n):
            seed = None if request.seed is None else (request.seed + i) % 2**64
            out.append(
                GenerationRequest(
                    prompt,
                    max_tokens,
                    params,
                    seed,
                    request.stop,
                    constraint,
                    trigger,
                    logit_bias=dict(request.logit_bias) or None,
                    top_logprobs=(request.top_logprobs or 0) if request.logprobs else None,
                    jump_forward=request.jump_forward,
                    allowed_mass=bool(request.allowed_mass),
                    thought=thought,
                    thinking_budget=None if thought is None else budget,
                    prelude=prelude,
                )
            )
        return out

    def completion(self, request: ToolRequest, results: list[GenerationResult]) -> dict:
        """The `chat.completion` body answering `request` with its choices' `results`, in
        order (`corral.tools.shapes.completion_json`, under a new request id)."""
        return completion_json(
            request,
            results,
            uuid.uuid4().hex[:12],
            self.model_name,
            self.vocabulary,
            self.syntax(request),
        )
