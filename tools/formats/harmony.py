"""gpt-oss (Harmony): an optional `<|channel|>analysis<|message|>THOUGHT<|end|>`, then
`<|start|>assistant` and either the call `<|channel|>commentary to=functions.NAME
<|constrain|>json<|message|>ARGS` (ended by `<|call|>`, a stop token: one call an answer) or the
answer `<|channel|>final<|message|>TEXT`; every `<|...|>` is a special token of gpt-oss's
vocabulary. The parser also reads the other headers (`VARIANTS`) and several calls in a row
(`ARGS<|call|><|start|>assistant` then the next call), as llama.cpp's does."""

from corral.tools.formats.format import Thinking, TurnFormat
from corral.tools.parser import BARE_NAME, CallSyntax

OPENER = "<|channel|>commentary to=functions."
FINAL = "<|channel|>final<|message|>"
CONSTRAINTS = (("<|constrain|>json",), ("json",), ())
"""What may stand between the recipient and `<|message|>`: `<|constrain|>json` (the model's, the
grammar's), `json` (the template's `<|channel|>commentary json`), nothing (llama.cpp reads it)."""
VARIANTS = (
    *((OPENER, (BARE_NAME, *c, "<|message|>", "{")) for c in CONSTRAINTS[1:]),
    *(
        ("<|channel|>analysis to=functions.", (BARE_NAME, *c, "<|message|>", "{"))
        for c in CONSTRAINTS
    ),
    *(
        ("to=functions.", (BARE_NAME, f"<|channel|>{channel}", *c, "<|message|>", "{"))
        for channel in ("commentary", "analysis")
        for c in CONSTRAINTS
    ),
)
"""The other call headers llama.cpp's parser reads: the recipient in the channel header or in
the role header (`<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>`,
as gpt-oss's template writes earlier calls), in the commentary or the analysis channel, with or
without the constraint."""

HARMONY = TurnFormat(
    name="harmony",
    family="gpt-oss (Harmony channels)",
    opener=OPENER,
    name_template="{bare} <|constrain|>json<|message|>",
    call_suffix="",
    syntax=CallSyntax(
        OPENER,
        (BARE_NAME, "<|constrain|>json", "<|message|>", "{"),
        dropped=(
            "<|start|>assistant",
            FINAL,
            "<|channel|>commentary<|message|>",
            "<|end|>",
            "<|call|>",
            "<|return|>",
        ),
        variants=VARIANTS,
    ),
    specials=("<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|constrain|>"),
    thinking=Thinking(
        "<|channel|>analysis<|message|>",
        "<|end|>",
        "<|start|>assistant",
        optional=True,
        history_key="thinking",
    ),
    markers=(("<|channel|>",),),
    content_prefix=FINAL,
    max_calls=1,
)
