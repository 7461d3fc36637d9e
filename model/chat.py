"""Chat templates: a model's jinja2 template rendered the way transformers renders it
(docs/design.md section 6; transformers' `apply_chat_template`).

The template runs in jinja2's `ImmutableSandboxedEnvironment` with `trim_blocks` and
`lstrip_blocks`, the `loopcontrols` extension, transformers' `{% generation %}` block (its body
rendered as is), a `tojson` filter that keeps non-ASCII text, and the globals `raise_exception`
and `strftime_now`; it receives `messages`, `tools` (None when not given), `add_generation_prompt`
and the special tokens (`bos_token`, `eos_token`, ...). So a conversation renders to exactly the
text the model's Hugging Face tokenizer would produce (docs/tokenizers.md lists the real templates
checked against transformers). Any error the template meets while rendering (its own
`raise_exception`, or e.g. a loop over `tools` when none are given) is a `ChatTemplateError`.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache

import jinja2
import jinja2.ext
import jinja2.meta
from corral.model.errors import ChatTemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def _raise_exception(message: str):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _Generation(jinja2.ext.Extension):
    """transformers' `{% generation %}...{% endgeneration %}`: marks the assistant's text (for
    training masks); rendering outputs the body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _body(self, caller) -> str:
        return caller()


@lru_cache(maxsize=8)
def compile_template(template: str) -> jinja2.Template:
    """Compile a chat template once (cached by its text).

    Raises:
        ChatTemplateError: the template is not valid jinja2.
    """
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _Generation]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError as error:
        raise ChatTemplateError(f"chat template syntax error: {error}") from error


@lru_cache(maxsize=8)
def template_variables(template: str) -> frozenset[str]:
    """The variables a chat template reads from its context (e.g. `messages`, `tools`,
    `bos_token`, `enable_thinking`): what a caller may pass it.

    Raises:
        ChatTemplateError: the template is not valid jinja2.
    """
    environment = compile_template(template).environment
    try:
        return frozenset(jinja2.meta.find_undeclared_variables(environment.parse(template)))
    except jinja2.exceptions.TemplateSyntaxError as error:
        raise ChatTemplateError(f"chat template syntax error: {error}") from error


def takes_tools(template: str) -> bool:
    """Whether the template reads `tools` (Qwen2.5, Qwen3, Llama 3.x, Mistral, Hermes 3,
    gpt-oss, Gemma 4 do; SmolLM2, Gemma 2, Phi-3 do not): a caller passes tool schemas to a
    template that takes them, and otherwise describes them itself."""
    return "tools" in template_variables(template)


def render_chat(
    template: str,
    messages: list[dict],
    add_generation_prompt: bool = True,
    special_tokens: dict[str, str] | None = None,
    tools: list[dict] | None = None,
    **extra,
) -> str:
    """Render a conversation with a chat template.

    Args:
        template: the jinja2 chat template text (tokenizer_config.json's `chat_template`).
        messages: `[{"role": ..., "content": ...}, ...]`, passed to the template as is.
        add_generation_prompt: end with the opening of an assistant turn.
        special_tokens: e.g. `{"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}`.
        tools: tool schemas, for templates that render them (None for SmolLM2's).
        extra: further template variables.

    Raises:
        ChatTemplateError: the template is malformed, refused the conversation
            (`raise_exception`), or failed on it (any other error while rendering, named).
    """
    compiled = compile_template(template)
    try:
        return compiled.render(
            messages=messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            **(special_tokens or {}),
            **extra,
        )
    except jinja2.exceptions.TemplateError as error:
        raise ChatTemplateError(f"chat template: {error}") from error
    except Exception as error:  # the template's own fault on this conversation, e.g. a TypeError
        raise ChatTemplateError(f"chat template: {type(error).__name__}: {error}") from error
