"""Numbers of a JSON Schema (DESIGN.md section 3, beyond the subset: `minimum`, `maximum`,
`exclusiveMinimum`, `exclusiveMaximum`, `multipleOf: 1`): bounds to regex text, and the lowering
of `integer` and `number` subschemas to the schema form.

Soundness notes (each language is a subset of what the JSON Schema validator accepts; tests
check the ranges against `re.fullmatch`):
- Integer ranges are exact over canonical decimal integers (no `-0`, no leading zeros).
- Number ranges only take integer-valued bounds with magnitude at most 2**53 and write numbers
  without an exponent. With inclusive bounds, float rounding is monotonic, so a decimal inside the
  range parses to a float inside it. At an exclusive bound `b` the fraction must be at least
  0.000001, which keeps `b + fraction` distinct from `b` after rounding while |b| <= 2**30; above
  that the bound's own integer part takes no fraction.

Limits (a bound is never converted to a float, so `"maximum": 1e400` written as an integer is
as safe as any other):
- Integers have at most `MAX_INTEGER_DIGITS` (20) digits, enough for every 64-bit integer: an
  upper bound above `LARGEST_INTEGER` (10**20 - 1) is lowered to it and a lower bound below its
  negative raised to it, so `"maximum": 1e308` means "any integer of at most 20 digits"; a
  `minimum` above it (or a `maximum` below its negative) is refused naming the keyword. A range
  of n-digit bounds is regex text nested about n levels deep, and a DFA of O(n) states.
- Numbers stay within +-2**53 the same way (lowered upper bound, raised lower bound).
"""

from __future__ import annotations

import math

from corral.automata.errors import SchemaError
from corral.automata.schema.form import Regex
from corral.automata.schema.formats import INTEGER_FORMATS
from corral.automata.schema.json_text import INTEGER_FORM, NUMBER_FORM
from corral.automata.schema.keywords import unsupported
from corral.automata.schema.values import is_number

MAX_EXACT_FLOAT_BOUND = 2**53
MAX_FRACTION_BOUND = 2**30
MAX_INTEGER_DIGITS = 20
LARGEST_INTEGER = 10**MAX_INTEGER_DIGITS - 1


def _digit_class(lo: str, hi: str) -> str:
    """One digit in lo..hi as regex text."""
    if lo == hi:
        return lo
    if lo == "0" and hi == "9":
        return "[0-9]"
    return f"[{lo}-{hi}]"


def _same_length(lo: str, hi: str) -> list[str]:
    """Alternatives matching the digit strings of len(lo) == len(hi) between lo and hi
    (inclusive, compared as numbers, leading zeros allowed: callers fix the first digit)."""
    if not lo:
        return [""]
    if lo[0] == hi[0]:
        return [lo[0] + rest for rest in _same_length(lo[1:], hi[1:])]
    n = len(lo) - 1
    if lo[1:] == "0" * n and hi[1:] == "9" * n:
        return [_digit_class(lo[0], hi[0]) + _repeat_digits(n)]
    out = [lo[0] + _group(_same_length(lo[1:], "9" * n))]
    first, last = chr(ord(lo[0]) + 1), chr(ord(hi[0]) - 1)
    if first <= last:
        out.append(_digit_class(first, last) + _repeat_digits(n))
    out.append(hi[0] + _group(_same_length("0" * n, hi[1:])))
    return out


def _repeat_digits(n: int) -> str:
    if n == 0:
        return ""
    if n == 1:
        return "[0-9]"
    return f"[0-9]{{{n}}}"


def _group(alternatives: list[str]) -> str:
    """Alternatives as one concatenable piece."""
    if len(alternatives) == 1:
        return alternatives[0]
    return "(?:" + "|".join(alternatives) + ")"


def natural_range(lo: int, hi: int | None) -> list[str]:
    """Alternatives matching the canonical decimal naturals in [lo, hi] (hi None: unbounded);
    lo >= 0. Empty list when the range is empty."""
    if hi is not None and lo > hi:
        return []
    out = []
    current, length = lo, len(str(lo))
    while True:
        top = 10**length - 1
        if hi is not None and hi <= top:
            out.extend(_same_length(str(current), str(hi)))
            return out
        if hi is None and length > 1 and current == 10 ** (length - 1):
            out.append(f"[1-9][0-9]{{{length - 1},}}")
            return out
        out.extend(_same_length(str(current), str(top)))
        current, length = top + 1, length + 1


def integer_range(lo: int | None, hi: int | None) -> str | None:
    """Regex text of the canonical JSON integers in [lo, hi] (None: unbounded on that side),
    `-0` excluded; None when the range is empty."""
    parts = []
    if hi is None or hi >= 0:
        parts += natural_range(max(lo, 0) if lo is not None else 0, hi)
    if lo is None or lo < 0:
        magnitude_lo = 1 if hi is None or hi >= 0 else -hi
        magnitude_hi = None if lo is None else -lo
        negative = natural_range(magnitude_lo, magnitude_hi)
        if negative:
            parts.append("-" + _group(negative))
    if not parts:
        return None
    return "|".join(parts)


_ANY_FRACTION = r"(?:\.[0-9]+)?"
_ZERO_FRACTION = r"(?:\.0+)?"
_POSITIVE_FRACTION = r"\.0{0,5}[1-9][0-9]*"  # at least 0.000001
_SHORT_FRACTION = r"(?:\.[0-9]{1,6})?"  # at most 0.999999
_POSITIVE_SHORT_FRACTION = r"\.[0-9]{0,5}[1-9]"  # both


def _small(bound: int) -> bool:
    return abs(bound) < MAX_FRACTION_BOUND


def _magnitude(lo: int, lo_open: bool, hi: int | None, hi_open: bool) -> list[str]:
    """Alternatives matching unsigned decimals `I(.F)?` (no exponent) whose value lies between
    lo and hi (0 <= lo; *_open: exclusive; hi None: unbounded). The bounds are integers, so the
    integer part I decides everything except at I == lo and, for an open hi, I == hi - 1 (the
    fraction is kept 0.000001 away from an open bound, see the module docstring)."""
    out = []
    if hi is None or hi > lo:  # I == lo
        open_neighbour = hi is not None and hi == lo + 1 and hi_open
        if lo_open:
            if _small(lo) and not open_neighbour:
                out.append(str(lo) + _POSITIVE_FRACTION)
            elif _small(lo) and _small(hi):
                out.append(str(lo) + _POSITIVE_SHORT_FRACTION)
        elif open_neighbour:
            out.append(str(lo) + (_SHORT_FRACTION if _small(hi) else _ZERO_FRACTION))
        else:
            out.append(str(lo) + _ANY_FRACTION)
    elif hi == lo and not lo_open and not hi_open:
        out.append(str(lo) + _ZERO_FRACTION)
    if hi is None:
        inner = natural_range(lo + 1, None)
        if inner:
            out.append(_group(inner) + _ANY_FRACTION)
    elif hi_open:
        inner = natural_range(lo + 1, hi - 2)
        if inner:
            out.append(_group(inner) + _ANY_FRACTION)
        if hi - 1 > lo:
            out.append(str(hi - 1) + (_SHORT_FRACTION if _small(hi) else _ZERO_FRACTION))
    else:
        inner = natural_range(lo + 1, hi - 1)
        if inner:
            out.append(_group(inner) + _ANY_FRACTION)
        if hi > lo:
            out.append(str(hi) + _ZERO_FRACTION)
    return out


def number_range(lo: int | None, lo_open: bool, hi: int | None, hi_open: bool) -> str | None:
    """Regex text of JSON numbers without exponent whose value lies between the integer bounds
    (None: unbounded; *_open: exclusive); `-0` forms excluded. None when empty. The caller
    checks |bound| <= 2**53."""
    parts = []
    if hi is None or hi > 0 or (hi == 0 and not hi_open):  # values >= 0
        if lo is None or lo < 0:
            parts += _magnitude(0, False, hi, hi_open)
        else:
            parts += _magnitude(lo, lo_open, hi, hi_open)
    if lo is None or lo < 0:  # values -m, m > 0
        if hi is None or hi >= 0:
            m_lo, m_lo_open = 0, True
        else:
            m_lo, m_lo_open = -hi, hi_open
        negative = _magnitude(m_lo, m_lo_open, None if lo is None else -lo, lo_open)
        if negative:
            parts.append("-" + _group(negative))
    if not parts:
        return None
    return "|".join(parts)


# Lowering -------------------------------------------------------------------------------------


def bounds(schema: dict, pointer: str) -> tuple:
    """`((lo, lo_open, key) or None, (hi, hi_open, key) or None)` from the four bound keywords
    (draft-4 boolean `exclusiveMinimum`/`exclusiveMaximum` and the later numeric forms); the
    tightest bound wins and `key` names the keyword it came from. Raises SchemaError on a bound
    that is not a finite number."""
    lows, highs = [], []
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key not in schema:
            continue
        value = schema[key]
        if isinstance(value, bool) and key.startswith("exclusive"):
            continue  # draft 4: a flag on minimum / maximum
        if not is_number(value) or (isinstance(value, float) and not math.isfinite(value)):
            raise SchemaError(pointer, key, f"{key} must be a number")
        if key == "minimum":
            lows.append((value, schema.get("exclusiveMinimum") is True, key))
        elif key == "maximum":
            highs.append((value, schema.get("exclusiveMaximum") is True, key))
        elif key == "exclusiveMinimum":
            lows.append((value, True, key))
        else:
            highs.append((value, True, key))
    low = max(lows, key=lambda b: (b[0], b[1])) if lows else None
    high = min(highs, key=lambda b: (b[0], not b[1])) if highs else None
    return low, high


def _out_of_reach(pointer: str, bound: tuple, largest: int) -> SchemaError:
    """The refusal of a bound that leaves no value of magnitude <= `largest` (the value itself
    is not shown: it may have more digits than Python writes)."""
    key = bound[2]
    side = "above " if key in ("minimum", "exclusiveMinimum") else "below -"
    reason = f"{key} is {side}{largest}, past the largest magnitude corral writes"
    return SchemaError(pointer, key, reason)


def lower_integer(schema: dict, pointer: str):
    """The form of the integers `schema` allows: an exact decimal range from its bounds and an
    OpenAPI `int32`/`int64` format, over integers of at most `MAX_INTEGER_DIGITS` digits (a
    larger upper bound is lowered to `LARGEST_INTEGER`, a smaller lower bound raised to
    `-LARGEST_INTEGER`: a sub-language, like `maxLength` above its limit). Raises SchemaError
    naming the keyword on `multipleOf` other than 1, on a `minimum` above `LARGEST_INTEGER` or a
    `maximum` below `-LARGEST_INTEGER`, or on an empty range."""
    multiple = schema.get("multipleOf")
    if multiple is not None and multiple != 1:
        raise unsupported(pointer, "multipleOf", f"multipleOf {multiple!r}")
    low, high = bounds(schema, pointer)
    lo = None if low is None else (math.floor(low[0]) + 1 if low[1] else math.ceil(low[0]))
    hi = None if high is None else (math.ceil(high[0]) - 1 if high[1] else math.floor(high[0]))
    if lo is not None and lo > LARGEST_INTEGER:
        raise _out_of_reach(pointer, low, LARGEST_INTEGER)
    if hi is not None and hi < -LARGEST_INTEGER:
        raise _out_of_reach(pointer, high, LARGEST_INTEGER)
    lo = None if lo is None else max(lo, -LARGEST_INTEGER)
    hi = None if hi is None else min(hi, LARGEST_INTEGER)
    fmt = schema.get("format")
    if fmt in INTEGER_FORMATS:
        f_lo, f_hi = INTEGER_FORMATS[fmt]
        lo = f_lo if lo is None else max(lo, f_lo)
        hi = f_hi if hi is None else min(hi, f_hi)
    if lo is None and hi is None:
        return INTEGER_FORM
    text = integer_range(lo, hi)
    if text is None:
        raise SchemaError(pointer, (high or low)[2], "no integer lies between the bounds")
    return Regex(text, 1)


def lower_number(schema: dict, pointer: str):
    """The form of the numbers `schema` allows: any JSON number, or a range without exponent
    when the bounds are integers. Values stay within +-2**53 (`MAX_EXACT_FLOAT_BOUND`): a larger
    upper bound is lowered to it and a smaller lower bound raised to it (a sub-language). Raises
    SchemaError naming the keyword on `multipleOf`, on a bound that is not an integer, on a
    `minimum` above 2**53 or a `maximum` below -2**53, or on an empty range."""
    if "multipleOf" in schema:
        raise unsupported(pointer, "multipleOf", "multipleOf on numbers")
    low, high = bounds(schema, pointer)
    if low is None and high is None:
        return NUMBER_FORM
    largest = MAX_EXACT_FLOAT_BOUND
    if low is not None and low[0] > largest:
        raise _out_of_reach(pointer, low, largest)
    if high is not None and high[0] < -largest:
        raise _out_of_reach(pointer, high, largest)
    if low is not None and low[0] < -largest:
        low = (-largest, False, low[2])
    if high is not None and high[0] > largest:
        high = (largest, False, high[2])
    for bound in (low, high):
        if bound is not None and isinstance(bound[0], float) and not bound[0].is_integer():
            raise unsupported(
                pointer, bound[2], f"a number bound {bound[0]!r} that is not an integer"
            )
    text = number_range(
        None if low is None else int(low[0]),
        bool(low and low[1]),
        None if high is None else int(high[0]),
        bool(high and high[1]),
    )
    if text is None:
        raise SchemaError(pointer, (high or low)[2], "no number lies between the bounds")
    return Regex(text, 1)
