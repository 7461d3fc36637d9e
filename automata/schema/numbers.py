"""Numbers of a JSON Schema (docs/design.md section 3, beyond the subset: `minimum`, `maximum`,
`exclusiveMinimum`, `exclusiveMaximum`, `multipleOf` through `corral.automata.schema.multiples`):
bounds to regex text, and the lowering of `integer` and `number` subschemas to the schema form.

Soundness notes (each language is a subset of what the JSON Schema validator accepts; tests
check the ranges against `re.fullmatch`):
- Integer ranges are exact over canonical decimal integers (no `-0`, no leading zeros).
- Number ranges take bounds of magnitude at most 2**53 and write numbers without an exponent.
  Integer bounds (`number_range`): with inclusive bounds, float rounding is monotonic, so a
  decimal inside the range parses to a float inside it. At an exclusive bound `b` the fraction
  must be at least 0.000001, which keeps `b + fraction` distinct from `b` after rounding while
  |b| <= 2**30; above that the bound's own integer part takes no fraction.
  Other bounds (`decimal_range`, `float_bound`): an exact decimal comparison with the shortest
  decimal of the bound's float (or, for an exclusive bound, of the next float past it);
  rounding is monotonic, so a decimal on the right side of it parses to a float on the right
  side of the bound, and an integer compares exactly.

Limits (a bound is never converted to a float, so `"maximum": 1e400` written as an integer is
as safe as any other):
- Integers have at most `MAX_INTEGER_DIGITS` (20) digits, enough for every 64-bit integer: an
  upper bound above `LARGEST_INTEGER` (10**20 - 1) is lowered to it and a lower bound below its
  negative raised to it, so `"maximum": 1e308` means "any integer of at most 20 digits"; a
  `minimum` above it (or a `maximum` below its negative) is refused naming the keyword. A range
  of n-digit bounds is regex text nested about n levels deep, and a DFA of O(n) states.
- Numbers stay within +-2**53 the same way (lowered upper bound, raised lower bound).
- Without any bound, a number is a finite double of at most 17 digits and an exponent of at
  most 289 in magnitude (`SHORT_NUMBER_FORM`, `corral.automata.schema.json_text`): a
  documented narrowing. An integer without bounds keeps JSON's grammar: a cap of its digits
  costs about 20 DFA states per integer member, which large schemas of many optional integer
  members cannot afford under `max_dfa_states`.
"""

from __future__ import annotations

import math
from decimal import Decimal

from corral.automata.errors import SchemaError
from corral.automata.schema.form import Regex, Subtree
from corral.automata.schema.formats import INTEGER_FORMATS
from corral.automata.schema.json_text import INTEGER_FORM, SHORT_NUMBER_FORM
from corral.automata.schema.multiples import (
    MAX_UNBOUNDED_MULTIPLE,
    divisible_product,
    integer_step,
)
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


def _fraction(lo: str | None, hi: str | None, nonzero: bool) -> tuple[bool, list[str]]:
    """The fraction digit strings F with 0.lo <= 0.F <= 0.hi (lo None: no lower bound; hi None:
    no upper bound; lo and hi without trailing zeros), and with a non-zero digit when `nonzero`:
    (whether F may be empty, alternatives for a non-empty F). Recursion over the first digit."""
    if not lo:
        lo = None
    if lo is None and hi is None:
        return not nonzero, ["0*[1-9][0-9]*" if nonzero else "[0-9]+"]
    if hi == "":  # 0.F <= 0: only zeros
        return lo is None and not nonzero, ([] if lo is not None or nonzero else ["0+"])
    zeros = _leading_zeros(lo, hi)
    if zeros:  # a run of zeros in the bounds (5e-324 has 323) is one counted group, not nested
        return _after_zeros(lo, hi, nonzero, zeros)
    first = int(lo[0]) if lo is not None else 0
    last = int(hi[0]) if hi is not None else 9
    out, free = [], []
    for digit in range(first, last + 1):
        at_lo = lo is not None and digit == first
        at_hi = hi is not None and digit == last
        still_zero = nonzero and digit == 0
        if not (at_lo or at_hi or still_zero):
            free.append(digit)
            continue
        empty, rest = _fraction(lo[1:] if at_lo else None, hi[1:] if at_hi else None, still_zero)
        if rest:
            out.append(f"{digit}(?:{'|'.join(rest)})" + ("?" if empty else ""))
        elif empty:
            out.append(str(digit))
    if free:
        out.append(_digit_class(str(free[0]), str(free[-1])) + "[0-9]*")
    return lo is None and not nonzero, out


def _leading_zeros(lo: str | None, hi: str | None) -> int:
    """How many leading zeros `_after_zeros` takes at once: those the bounds share (both set),
    or those of the one bound set; 0 for fewer than 2 (the digit recursion is as short)."""
    count = [len(b) - len(b.lstrip("0")) for b in (lo, hi) if b is not None]
    zeros = min(count) if count else 0
    return zeros if zeros >= 2 else 0


def _after_zeros(lo: str | None, hi: str | None, nonzero: bool, k: int) -> tuple[bool, list[str]]:
    """`_fraction` when the bounds set start with k >= 2 zeros (each bound without trailing
    zeros, so it holds a non-zero digit after them): F = 0^k G with G within the bounds' rest,
    plus, with no lower bound, the F of fewer than k zeros (below any upper bound: F <= 0.0...),
    or, with no upper bound, the F with a non-zero digit among the first k (above the lower)."""
    empty, rest = _fraction(lo[k:] if lo else None, hi[k:] if hi else None, nonzero)
    out = [f"0{{{k}}}(?:{'|'.join(rest)})" + ("?" if empty else "")] if rest else []
    if not rest and empty:
        out.append(f"0{{{k}}}")
    if lo is None and not nonzero:
        out.append(f"0{{1,{k - 1}}}")  # 0.0...0 (fewer than k zeros) <= 0.hi
    if hi is None:
        out.append(f"0{{0,{k - 1}}}[1-9][0-9]*")  # > 0.lo: a non-zero digit before lo's first
    return lo is None and not nonzero, out


def _dotted(empty: bool, alternatives: list[str]) -> str | None:
    """`(.F)?` text from `_fraction`'s answer; None when no fraction fits."""
    if not alternatives:
        return "" if empty else None
    text = r"\.(?:" + "|".join(alternatives) + ")"
    return f"(?:{text})?" if empty else text


def _split(bound: Decimal) -> tuple[int, str]:
    """(integer part, fraction digits without trailing zeros) of a bound >= 0."""
    whole = int(bound)
    digits = format(bound - whole, "f")
    return whole, (digits.split(".")[1].rstrip("0") if "." in digits else "")


def _decimal_magnitude(lo: Decimal, hi: Decimal | None, positive: bool) -> list[str]:
    """Alternatives matching unsigned decimals `I(.F)?` (no exponent) with lo <= value <= hi
    (0 <= lo; hi None: unbounded), and value > 0 when `positive`."""
    a, a_frac = _split(lo)
    out = []
    if hi is not None:
        c, c_frac = _split(hi)
        if a == c:
            fraction = _dotted(*_fraction(a_frac, c_frac, positive and a == 0))
            return [] if fraction is None else [str(a) + fraction]
    fraction = _dotted(*_fraction(a_frac, None, positive and a == 0))
    if fraction is not None:
        out.append(str(a) + fraction)
    inner = natural_range(a + 1, None if hi is None else c - 1)
    if inner:
        out.append(_group(inner) + _ANY_FRACTION)
    if hi is not None:
        fraction = _dotted(*_fraction(None, c_frac, False))
        out.append(str(c) + fraction)
    return out


def decimal_range(lo: Decimal | None, hi: Decimal | None) -> str | None:
    """Regex text of the JSON numbers without exponent whose decimal value lies in [lo, hi]
    (None: unbounded; exact decimal comparison), `-0` forms excluded; None when empty."""
    if lo is not None and hi is not None and lo > hi:
        return None
    parts = []
    if hi is None or hi >= 0:
        parts += _decimal_magnitude(
            max(lo, Decimal(0)) if lo is not None else Decimal(0), hi, False
        )
    if lo is None or lo < 0:
        m_lo = Decimal(0) if hi is None or hi >= 0 else -hi
        negative = _decimal_magnitude(m_lo, None if lo is None else -lo, True)
        if negative:
            parts.append("-" + _group(negative))
    return "|".join(parts) if parts else None


def float_bound(value, is_open: bool, upward: bool) -> Decimal:
    """The inclusive decimal bound of the numbers that validate against a bound `value`: a
    decimal x >= (upward) or <= the result parses to a float on the right side of `value`.
    Parsing rounds monotonically, so an inclusive bound is the shortest decimal of the float
    itself and an exclusive one that of the next float past it (`math.nextafter`)."""
    if not is_open:
        return Decimal(repr(float(value))) if isinstance(value, float) else Decimal(value)
    return Decimal(repr(math.nextafter(float(value), math.inf if upward else -math.inf)))


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
    `-LARGEST_INTEGER`: a sub-language, like `maxLength` above its limit), and the multiples of
    `multipleOf` (`corral.automata.schema.multiples`). Raises SchemaError naming the keyword on
    a refused `multipleOf`, on a `minimum` above `LARGEST_INTEGER` or a `maximum` below
    `-LARGEST_INTEGER`, or on an empty range."""
    k, cap = integer_step(schema["multipleOf"], pointer) if "multipleOf" in schema else (1, None)
    largest = LARGEST_INTEGER if cap is None else min(cap, LARGEST_INTEGER)
    low, high = bounds(schema, pointer)
    lo = None if low is None else (math.floor(low[0]) + 1 if low[1] else math.ceil(low[0]))
    hi = None if high is None else (math.ceil(high[0]) - 1 if high[1] else math.floor(high[0]))
    if lo is not None and lo > largest:
        raise _out_of_reach(pointer, low, largest)
    if hi is not None and hi < -largest:
        raise _out_of_reach(pointer, high, largest)
    if k != 1 or cap is not None:  # a bounded range: the product's, or |x * m| < 2**53
        side = largest if k == 1 else min(largest, MAX_UNBOUNDED_MULTIPLE)
        lo = -side if lo is None else lo
        hi = side if hi is None else hi
    lo = None if lo is None else max(lo, -largest)
    hi = None if hi is None else min(hi, largest)
    fmt = schema.get("format")
    if fmt in INTEGER_FORMATS:
        f_lo, f_hi = INTEGER_FORMATS[fmt]
        lo = f_lo if lo is None else max(lo, f_lo)
        hi = f_hi if hi is None else min(hi, f_hi)
    if lo is None and hi is None:
        return INTEGER_FORM
    text = integer_range(lo, hi)
    if text is None:
        raise SchemaError(
            pointer,
            (high or low or ("", "", "multipleOf"))[2],
            "no integer lies between the bounds",
        )
    if k == 1:
        return Regex(text, 1)
    product = divisible_product(text, k)
    if product is None:
        raise SchemaError(pointer, "multipleOf", f"no multiple of {k} lies between the bounds")
    return Subtree(product)


def lower_number(schema: dict, pointer: str):
    """The form of the numbers `schema` allows: without bounds a finite double of at most 17
    digits (`SHORT_NUMBER_FORM`), else a range without exponent
    (exact for integer bounds, see the module docstring; for other bounds, the decimals on the
    right side of each bound's float, `float_bound`). Values stay within +-2**53
    (`MAX_EXACT_FLOAT_BOUND`): a larger upper bound is lowered to it, a smaller lower bound
    raised to it, and a missing side of a one-sided range set to it (a sub-language: never the
    hundreds of digits that a double parser reads as infinity). With `multipleOf`, the integers
    `lower_integer` writes (a sub-language). Raises SchemaError naming the keyword on a refused
    `multipleOf`, on a `minimum` above 2**53 or a `maximum` below -2**53, or on an empty range."""
    if "multipleOf" in schema:
        return lower_integer(schema, pointer)
    low, high = bounds(schema, pointer)
    if low is None and high is None:
        return SHORT_NUMBER_FORM
    largest = MAX_EXACT_FLOAT_BOUND
    if low is not None and low[0] > largest:
        raise _out_of_reach(pointer, low, largest)
    if high is not None and high[0] < -largest:
        raise _out_of_reach(pointer, high, largest)
    if low is not None and low[0] < -largest:
        low = (-largest, False, low[2])
    if high is not None and high[0] > largest:
        high = (largest, False, high[2])
    low = (-largest, False, high[2]) if low is None else low  # one bound: the other at 2**53,
    high = (largest, False, low[2]) if high is None else high  # so a reader holds a finite double
    if any(isinstance(b[0], float) and not b[0].is_integer() for b in (low, high) if b):
        text = decimal_range(
            None if low is None else float_bound(low[0], low[1], upward=True),
            None if high is None else float_bound(high[0], high[1], upward=False),
        )
    else:
        text = number_range(
            None if low is None else int(low[0]),
            bool(low and low[1]),
            None if high is None else int(high[0]),
            bool(high and high[1]),
        )
    if text is None:
        raise SchemaError(pointer, (high or low)[2], "no number lies between the bounds")
    return Regex(text, 1)
