"""Mistral: Nemo's `[TOOL_CALLS][{"name": NAME, "arguments": ARGS}, ...]` and Small 3.2's
`[TOOL_CALLS]NAME[ARGS]ARGS` (one `[TOOL_CALLS]` per call); `[TOOL_CALLS]` and `[ARGS]` are
special tokens of Mistral's vocabularies."""

from corral.tools.formats.format import TurnFormat
from corral.tools.parser import BARE_NAME, NAME, CallSyntax

MISTRAL_NEMO = TurnFormat(
    name="mistral-nemo",
    family="Mistral Nemo, Mistral 7B v0.3 (`[TOOL_CALLS][...]`)",
    opener="[TOOL_CALLS][",
    name_template='{{"name": {name}, "arguments": ',
    call_suffix="}",
    separator=", ",
    closer="]",
    syntax=CallSyntax(
        "[TOOL_CALLS][",
        ("{", '"name"', ":", NAME, ",", '"arguments"', ":", "{"),
        ("}",),
        ",",
        "]",
    ),
    specials=("[TOOL_CALLS]",),
    markers=(("[TOOL_CALLS]",),),
)

MISTRAL_SMALL = TurnFormat(
    name="mistral-small",
    family="Mistral Small 3.2, Magistral, Devstral (`[TOOL_CALLS]name[ARGS]{...}`)",
    opener="[TOOL_CALLS]",
    name_template="{bare}[ARGS]",
    call_suffix="",
    syntax=CallSyntax("[TOOL_CALLS]", (BARE_NAME, "[ARGS]", "{")),
    specials=("[TOOL_CALLS]", "[ARGS]"),
    markers=(("[TOOL_CALLS]", "[ARGS]"),),
)
