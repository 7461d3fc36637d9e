"""DeepSeek R1 (and its Qwen and Llama distills): the prompt opens `<think>\\n`, the answer
thinks up to `</think>`, then `<｜tool▁calls▁begin｜>` blocks of calls
`<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\nARGS\\n```<｜tool▁call▁end｜>`."""

from corral.tools.formats.format import Thinking, TurnFormat
from corral.tools.parser import BARE_NAME, CallSyntax

BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL, SEP, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"

DEEPSEEK_R1 = TurnFormat(
    name="deepseek-r1",
    family="DeepSeek R1 and its distills (thinking)",
    opener=BEGIN,
    name_template=CALL + "function" + SEP + "{bare}\n```json\n",
    call_suffix="\n```" + CALL_END,
    separator="\n",
    closer=END,
    syntax=CallSyntax(
        BEGIN,
        (CALL, "function", SEP, BARE_NAME, "\n```json\n", "{"),
        ("```", CALL_END),  # whitespace (the grammar's newline) may come before it
        "\n",
        END,
    ),
    thinking=Thinking("<think>\n", "</think>", "\n\n", prompt_opens=True),
    markers=(("tool▁calls▁begin",),),
)
