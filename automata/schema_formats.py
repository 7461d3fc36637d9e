"""Regex texts for the parts of a JSON Schema that are not plain structure (DESIGN.md section 3):
the JSON scalar languages, integer and number ranges (`minimum`, `maximum`, `exclusiveMinimum`,
`exclusiveMaximum`), and the `format` values that have a strict regex.

Every text here is in DESIGN.md section 2's regex subset, so `corral.automata.parse` reads it, and
also means the same to Python's `re` (tests check the ranges against `re.fullmatch`).

Soundness notes (each language is a subset of what the JSON Schema validator accepts):
- Integer ranges are exact over canonical decimal integers (no `-0`, no leading zeros).
- Number ranges only take integer-valued bounds with magnitude at most 2**53 and write numbers
  without an exponent. With inclusive bounds, float rounding is monotonic, so a decimal inside the
  range parses to a float inside it. At an exclusive bound `b` the fraction must be at least
  0.000001, which keeps `b + fraction` distinct from `b` after rounding while |b| <= 2**30; above
  that the bound's own integer part takes no fraction.
- Formats follow RFC 3339 (date-time, date, time; no leap seconds, no February 29, upper-case `T`
  and `Z`), RFC 4122 text (uuid), dotted-quad IPv4 without leading zeros, a conservative dot-atom
  e-mail address, an RFC 1123 host name, and absolute `http`/`https`-style URIs without IP
  literals (also for iri, and for the non-standard url); uri-reference adds absolute paths;
  idn-email uses the ASCII e-mail regex; json-pointer follows RFC 6901. Formats without a regex
  here are refused by the schema compiler.
"""

from __future__ import annotations

# DESIGN.md section 3: compact JSON scalars.
STRING_CHAR = r'[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}'
STRING = r'"(?:' + STRING_CHAR + r')*"'
INTEGER = r"-?(?:0|[1-9][0-9]*)"
NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
BOOLEAN = r"true|false"
NULL = r"null"

MAX_EXACT_FLOAT_BOUND = 2**53
MAX_FRACTION_BOUND = 2**30

_DIGITS = "0123456789"


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


# RFC 3339 pieces. Days: 01-28 every month, 29-30 all but February, 31 in the long months.
_MONTH_DAY = (
    r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
    r"|(?:0[13-9]|1[0-2])-(?:29|30)"
    r"|(?:0[13578]|1[02])-31)"
)
_DATE = r"[0-9]{4}-" + _MONTH_DAY
_PARTIAL_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?"
_OFFSET = r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_DEC_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`\{\|\}~-]+"
_PATH_CHAR = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})"

FORMATS: dict[str, str] = {
    "date-time": _DATE + "T" + _PARTIAL_TIME + _OFFSET,
    "date": _DATE,
    "time": _PARTIAL_TIME + _OFFSET,
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "email": _ATOM + r"(?:\." + _ATOM + ")*@" + _LABEL + r"(?:\." + _LABEL + ")+",
    "ipv4": _DEC_OCTET + r"(?:\." + _DEC_OCTET + "){3}",
    "uri": r"[a-zA-Z][a-zA-Z0-9+.-]*://"
    + _LABEL
    + r"(?:\."
    + _LABEL
    + r")*(?::[0-9]{1,5})?(?:/"
    + _PATH_CHAR
    + r"*)*(?:\?(?:"
    + _PATH_CHAR
    + r"|[/?])*)?(?:#(?:"
    + _PATH_CHAR
    + r"|[/?])*)?",
}
# URI references: absolute URIs, or absolute paths with optional query and fragment.
FORMATS["uri-reference"] = (
    "(?:"
    + FORMATS["uri"]
    + r"|(?:/"
    + _PATH_CHAR
    + r"*)+(?:\?(?:"
    + _PATH_CHAR
    + r"|[/?])*)?(?:#(?:"
    + _PATH_CHAR
    + r"|[/?])*)?)"
)
FORMATS["iri"] = FORMATS["uri"]  # every URI is an IRI
FORMATS["iri-reference"] = FORMATS["uri-reference"]
FORMATS["url"] = FORMATS["uri"]  # non-standard (validators ignore it): read as an absolute URI
FORMATS["idn-email"] = FORMATS["email"]  # every ASCII address is an internationalized one
FORMATS["json-pointer"] = r'(?:/(?:[^~/"\\\x00-\x1f]|~[01])*)*'
"""`format` value -> regex text of the string's content (without the quotes). All are ASCII
without `"` or `\\`, so the JSON text of such a string is its value."""

INTEGER_FORMATS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
"""Non-standard integer formats (OpenAPI) read as ranges: a sound sub-language, since validators
ignore unknown formats."""

NUMBER_FORMATS = {"float", "double"}
"""Non-standard number formats (OpenAPI) that add no constraint we can express: accepted."""
