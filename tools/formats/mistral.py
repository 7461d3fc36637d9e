"""Mistral: Nemo's `[TOOL_CALLS][{"name": NAME, "arguments": ARGS, "id": ID}, ...]` and Small
3.2's `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]ARGS` (one `[TOOL_CALLS]` per call); `[TOOL_CALLS]`,
`[CALL_ID]` and `[ARGS]` are special tokens of Mistral's vocabularies. ID is nine alphanumerics,
which both templates require of every earlier call and tool result (`history_id` maps other ids
to such ids). Devstral's template writes no ids (`[TOOL_CALLS]NAME[ARGS]ARGS`): `DEVSTRAL`. The
parsers also read calls without an id (Nemo's older output, Devstral's)."""

import hashlib
import re
from dataclasses import replace

from corral.tools.formats.format import CALL_ID, TurnFormat
from corral.tools.parser import BARE_NAME, NAME, CallSyntax
from corral.tools.parser import CALL_ID as ID_STEP

ID_PATTERN = "[a-zA-Z0-9]{9}"
"""The ids Mistral's templates accept (mistral-common's too): nine ASCII letters or digits."""
_ID = re.compile(ID_PATTERN)
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def history_id(call_id: str) -> str:
    """The id Mistral's templates are given for an id of the conversation: itself when it is
    nine alphanumerics (the ids Mistral models write), else nine base-62 digits of its SHA-256,
    so a call and the tool message answering it get one id, the same at every turn."""
    if _ID.fullmatch(call_id):
        return call_id
    n = int.from_bytes(hashlib.sha256(call_id.encode("utf-8")).digest(), "big")
    digits = []
    for _ in range(9):
        n, r = divmod(n, 62)
        digits.append(_ALPHABET[r])
    return "".join(digits)


MISTRAL_NEMO = TurnFormat(
    name="mistral-nemo",
    family="Mistral Nemo, Mistral 7B v0.3 (`[TOOL_CALLS][...]`)",
    opener="[TOOL_CALLS][",
    name_template='{{"name": {name}, "arguments": ',
    call_suffix=f', "id": "{CALL_ID}"}}',
    separator=", ",
    closer="]",
    syntax=CallSyntax(
        "[TOOL_CALLS][",
        ("{", '"name"', ":", NAME, ",", '"arguments"', ":", "{"),
        (",", '"id"', ":", '"', ID_STEP, '"', "}"),
        ",",
        "]",
        other_trailers=(("}",),),
        id_after_arguments=True,
    ),
    specials=("[TOOL_CALLS]",),
    markers=(("[TOOL_CALLS]",),),
    call_id=ID_PATTERN,
    history_id=history_id,
)

MISTRAL_SMALL = TurnFormat(
    name="mistral-small",
    family="Mistral Small 3.2 (`[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}`)",
    opener="[TOOL_CALLS]",
    name_template="{bare}[CALL_ID]{id}[ARGS]",
    call_suffix="",
    syntax=CallSyntax(
        "[TOOL_CALLS]",
        (BARE_NAME, "[CALL_ID]", ID_STEP, "[ARGS]", "{"),
        variants=(("[TOOL_CALLS]", (BARE_NAME, "[ARGS]", "{")),),
    ),
    specials=("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"),
    markers=(("[TOOL_CALLS]", "[CALL_ID]"),),
    call_id=ID_PATTERN,
    history_id=history_id,
)

DEVSTRAL = replace(
    MISTRAL_SMALL,
    name="devstral",
    family="Devstral, Mistral templates without ids (`[TOOL_CALLS]name[ARGS]{...}`)",
    name_template="{bare}[ARGS]",
    specials=("[TOOL_CALLS]", "[ARGS]"),
    markers=(("[TOOL_CALLS]", "[ARGS]"),),
    call_id=None,
    history_id=None,
)
