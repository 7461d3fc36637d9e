"""Turn formats: how each model family writes tool calls and thoughts (docs/tools.md, "Turn
formats"), one module a family, and their registry. `detect_format` reads a chat template's text
for the family's marker strings, as llama.cpp's chat handlers do; `format_named` answers the
`--tool-format` override."""

from __future__ import annotations

from dataclasses import replace

from corral.model.chat import takes_tools as template_takes_tools
from corral.model.errors import ChatTemplateError
from corral.tools.errors import ToolError, invalid
from corral.tools.formats.deepseek_r1 import DEEPSEEK_R1
from corral.tools.formats.format import Thinking, TurnFormat
from corral.tools.formats.harmony import HARMONY
from corral.tools.formats.hermes import HERMES
from corral.tools.formats.llama3 import LLAMA3
from corral.tools.formats.mistral import DEVSTRAL, MISTRAL_NEMO, MISTRAL_SMALL
from corral.tools.formats.qwen3 import QWEN3
from corral.tools.formats.qwen3_coder import QWEN3_CODER

FORMATS: dict[str, TurnFormat] = {
    f.name: f
    for f in (
        HERMES,
        QWEN3,
        QWEN3_CODER,
        LLAMA3,
        MISTRAL_NEMO,
        MISTRAL_SMALL,
        DEVSTRAL,
        DEEPSEEK_R1,
        HARMONY,
    )
}
"""Every format by its name."""

DETECTION_ORDER = (
    HARMONY,
    MISTRAL_SMALL,
    DEVSTRAL,
    MISTRAL_NEMO,
    DEEPSEEK_R1,
    QWEN3_CODER,
    QWEN3,
    HERMES,
    LLAMA3,
)
"""Most specific first: a template holding Small 3.2's `[CALL_ID]` also holds Devstral's
`[ARGS]`, which comes with Nemo's `[TOOL_CALLS]`; Qwen3's `<think>` and Qwen3-Coder's
`<function=` come with Hermes' `<tool_call>`."""


def format_named(name: str, param: str = "tool_format") -> TurnFormat:
    """The format called `name`. Raises ToolError 400 naming `param` and the known names."""
    found = FORMATS.get(name)
    if found is None:
        known = ", ".join(FORMATS)
        raise invalid(param, f"Unknown tool format {name!r}: the formats are {known}.")
    return found


def detect_format(template: str | None, takes_tools: bool | None = None) -> TurnFormat | None:
    """The format a chat template writes calls in, from its text: the first format of
    `DETECTION_ORDER` all of one of whose marker groups the template holds. A template that
    takes no tools (SmolLM2's, Gemma 2's; None: no template) gets `HERMES`, corral's own
    description of the tools in the system turn. None when the template takes tools but no
    format fits it. `takes_tools`: whether it reads the
    `tools` variable (default: `corral.model.chat.takes_tools`)."""
    if template is None:
        return HERMES
    for candidate in DETECTION_ORDER:
        if any(all(m in template for m in group) for group in candidate.markers):
            return candidate
    if takes_tools is None:
        try:
            takes_tools = template_takes_tools(template)
        except ChatTemplateError:
            takes_tools = "tools" in template
    return None if takes_tools else HERMES


def rendering_for(fmt: TurnFormat | None, template: str | None) -> TurnFormat | None:
    """`fmt`, rendering the tools through the template when the template takes them (Hermes 3's
    and Qwen2.5's write their own tool prompts, the one the model was trained on; Hermes 3's
    cannot render without them), else describing them in corral's system turn."""
    if fmt is None or fmt.renders_tools or template is None:
        return fmt
    return replace(fmt, renders_tools=True) if reads_tools(template) else fmt


def reads_tools(template: str) -> bool:
    """Whether the chat template reads `tools` (`corral.model.chat.takes_tools`; False for a
    template jinja2 cannot parse, which rendering will refuse by name)."""
    try:
        return template_takes_tools(template)
    except ChatTemplateError:
        return False


def no_format_error(template_name: str, template: str | None) -> ToolError:
    """The 422 for tools sent to a model whose template no format fits, naming the template."""
    why = "no format fits it" if template else "it has none"
    known = ", ".join(FORMATS)
    return ToolError(
        422,
        "tools",
        "unsupported_parameter",
        f"The chat template of {template_name} writes tool calls in a syntax corral cannot "
        f"constrain ({why}); choose one with --tool-format ({known}).",
    )


__all__ = [
    "DEEPSEEK_R1",
    "DEVSTRAL",
    "HARMONY",
    "FORMATS",
    "HERMES",
    "LLAMA3",
    "MISTRAL_NEMO",
    "MISTRAL_SMALL",
    "QWEN3",
    "QWEN3_CODER",
    "Thinking",
    "TurnFormat",
    "detect_format",
    "format_named",
    "no_format_error",
]
