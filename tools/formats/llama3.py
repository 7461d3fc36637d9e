"""Llama 3.1 / 3.2: one bare JSON call `{"name": NAME, "parameters": ARGS}` (the template's
instruction; `<|python_tag|>` is for the built-in tools only, which corral does not offer)."""

from corral.tools.formats.format import TurnFormat
from corral.tools.parser import NAME, CallSyntax

LLAMA3 = TurnFormat(
    name="llama3",
    family="Llama 3.1, 3.2, 3.3 (JSON calls)",
    opener='{"name": ',
    name_template='{name}, "parameters": ',
    call_suffix="}",
    syntax=CallSyntax("{", ('"name"', ":", NAME, ",", '"parameters"', ":", "{"), ("}",)),
    markers=(("<|start_header_id|>", '"parameters"'), ("<|start_header_id|>", "<|python_tag|>")),
    max_calls=1,
)
