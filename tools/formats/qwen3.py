"""Qwen3: an optional `<think>...</think>` block, then Hermes calls (`<tool_call>` blocks), the
tools given to the template."""

from dataclasses import replace

from corral.tools.formats.format import Thinking
from corral.tools.formats.hermes import HERMES

QWEN3 = replace(
    HERMES,
    name="qwen3",
    family="Qwen3 (thinking, `enable_thinking`)",
    thinking=Thinking("<think>", "</think>", "\n\n", optional=True),
    markers=(("<tool_call>", "<think>"),),
    renders_tools=True,
)
