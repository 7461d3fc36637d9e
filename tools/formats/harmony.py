"""gpt-oss (Harmony): an optional `<|channel|>analysis<|message|>THOUGHT<|end|>`, then
`<|start|>assistant` and either the call `<|channel|>commentary to=functions.NAME
<|constrain|>json<|message|>ARGS` (ended by `<|call|>`, a stop token) or the answer
`<|channel|>final<|message|>TEXT`; every `<|...|>` is a special token of gpt-oss's vocabulary."""

from corral.tools.formats.format import Thinking, TurnFormat
from corral.tools.parser import BARE_NAME, CallSyntax

OPENER = "<|channel|>commentary to=functions."
FINAL = "<|channel|>final<|message|>"

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
    ),
    specials=("<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|constrain|>"),
    thinking=Thinking(
        "<|channel|>analysis<|message|>", "<|end|>", "<|start|>assistant", optional=True
    ),
    markers=(("<|channel|>",),),
    content_prefix=FINAL,
    max_calls=1,
)
