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


METADATA_PAIRS, METADATA_KEY_LENGTH, METADATA_VALUE_LENGTH = 16, 64, 512
"""OpenAI's bounds on a `metadata` object: pairs, characters of a key, characters of a value."""


def check_metadata(value) -> None:
    """Refuse a `metadata` (a chat completion's or a batch's) that OpenAI refuses: anything but
    null or an object of at most 16 pairs whose keys are strings of at most 64 characters and
    whose values strings of at most 512. O(len(value)). Raises ToolError 400: `param`
    `metadata` for a value that is not an object, too many pairs or a key too long (the key
    named in the message), `metadata.KEY` for a value that is not a string or is too long."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise invalid(
            "metadata", "'metadata' must be an object of string keys and values.", "invalid_type"
        )
    if len(value) > METADATA_PAIRS:
        raise invalid(
            "metadata",
            f"'metadata' holds {len(value)} pairs; at most {METADATA_PAIRS} are allowed.",
            "object_above_max_properties",
        )
    for key, item in value.items():
        if len(key) > METADATA_KEY_LENGTH:
            raise invalid(
                "metadata",
                f"'metadata' key {key[:70]!r} has {len(key)} characters; at most "
                f"{METADATA_KEY_LENGTH} are allowed.",
            )
        if not isinstance(item, str):
            raise invalid(
                f"metadata.{key}",
                f"'metadata.{key}' must be a string.",
                "invalid_type",
            )
        if len(item) > METADATA_VALUE_LENGTH:
            raise invalid(
                f"metadata.{key}",
                f"Invalid 'metadata.{key}': string too long. Expected a string with maximum "
                f"length {METADATA_VALUE_LENGTH}, but got a string with length {len(item)} "
                "instead.",
                "string_above_max_length",
            )


def unknown(param: str) -> ToolError:
    """The 400 `unknown_parameter` for a member the API does not define, as OpenAI words it."""
    return invalid(param, f"Unknown parameter: '{param}'.", "unknown_parameter")


def _allowed(value, allowed: tuple) -> bool:
    """Whether `value` is one of `allowed`, type included (`0` is not `False`)."""
    return any(type(value) is type(a) and value == a for a in allowed)
