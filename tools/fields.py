"""What corral does with each member of each object of a chat-completion request (`Field`), and
the one check every object of the request goes through, `check_keys`: a member the API does not
define is a 400 `unknown_parameter` naming its path, one corral does not honour a 400
`unsupported_parameter` naming it (docs/server.md, "Requests").
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.tools.errors import ToolError, invalid, not_honoured


@dataclass(frozen=True)
class Field:
    """How corral treats one field of the chat completions API.

    Attributes:
        use: `honoured` (validated here and applied), `no_effect` (accepted: it cannot change the
            output), or `refused` (a 400 `unsupported_parameter` naming it, unless it is null or
            one of `allowed`).
        allowed: the values of a refused field that ask for nothing corral does not do.
        why: the end of the refusal's message.
    """

    use: str
    allowed: tuple = ()
    why: str = "corral does not support it"


HONOURED = Field("honoured")
NO_EFFECT = Field("no_effect")


def check_keys(obj: dict, fields: dict[str, Field], where: str = "") -> None:
    """Refuse the members of `obj`, the object at path `where` ("" for the body), that `fields`
    does not take. O(len(obj)). Raises ToolError 400 whose `param` is the member's path
    (`messages[0].zzz`, `where.key`): code `unknown_parameter` ("Unknown parameter: 'PATH'.",
    OpenAI's wording) for a name not in `fields`, `unsupported_parameter` for a refused field
    whose value is neither null nor one of its `allowed` values."""
    for name, value in obj.items():
        param = f"{where}.{name}" if where else str(name)
        field = fields.get(name)
        if field is None:
            raise unknown(param)
        if field.use == "refused" and value is not None and not _allowed(value, field.allowed):
            raise not_honoured(param, field.why)


def unknown(param: str) -> ToolError:
    """The 400 `unknown_parameter` for a member the API does not define, as OpenAI words it."""
    return invalid(param, f"Unknown parameter: '{param}'.", "unknown_parameter")


def _allowed(value, allowed: tuple) -> bool:
    """Whether `value` is one of `allowed`, type included (`0` is not `False`)."""
    return any(type(value) is type(a) and value == a for a in allowed)
