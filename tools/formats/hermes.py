"""Hermes / Qwen2.5: `<tool_call>{"name":NAME,"arguments":ARGS}</tool_call>`, one block per call
joined by a newline; corral's own tool description in the system turn (the behaviour of every
model whose template does not take tools, SmolLM2's)."""

from corral.tools.formats.format import TurnFormat
from corral.tools.parser import CLOSER, HERMES_SYNTAX, OPENER, SEPARATOR

HERMES = TurnFormat(
    name="hermes",
    family="Hermes 2/3, Qwen2.5, and models whose template takes no tools (SmolLM2)",
    opener=OPENER,
    name_template='{{"name":{name},"arguments":',
    call_suffix="}",
    syntax=HERMES_SYNTAX,
    closer=CLOSER,
    block_separator=SEPARATOR,
    markers=(("<tool_call>",),),
    renders_tools=False,
)
