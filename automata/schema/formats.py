"""The `format` values with a strict regex (docs/design.md section 3, beyond the subset: "`format`
with a strict regex"), the OpenAPI formats read as ranges or as no constraint, and the unknown
formats validators ignore.

Every text is in docs/design.md section 2's regex subset and means the same to Python's `re`. Each
language is a subset of what the `jsonschema` format checker (with its format extras) accepts:
- date-time, date, time: RFC 3339 (years 0001 to 9999, February 29 exactly in leap years, which
  is a property of the year's digits: the last two a non-zero multiple of 4, or `00` after a
  century that is a multiple of 4; no leap seconds; upper-case `T` and `Z`);
- duration: RFC 3339 appendix A (`P1Y2M3DT4H5M6S`, `PT1M`, `P2W`), as JSON Schema 2019-09+
  defines it, digits only;
- hostname (and draft 3's host-name): RFC 1123 labels of letters, digits and inner hyphens, at
  most `HOST_LABELS` labels of at most `HOST_LABEL_LENGTH` characters, so that the name stays
  within the 253 characters RFC 1035 allows (no trailing dot), and no hyphen in a label's third
  position (`xn--` starts a Punycode A-label, and IDNA 2008 refuses any other `--` in positions
  3 and 4); idn-hostname: the same ASCII names;
- ipv6: RFC 4291 section 2.2 text (1 to 4 hex digits a group, one `::` standing for one or
  more zero groups, an IPv4 dotted quad in place of the last two groups; no zone id), exactly
  what Python's `ipaddress.IPv6Address` accepts without a zone;
- ipv4 (and draft 3's ip-address): dotted quad without leading zeros;
- uuid: RFC 4122 text; email, idn-email: a conservative dot-atom address;
- uri, iri, url (non-standard): absolute `scheme://host` URIs without IP literals;
  uri-reference, iri-reference add absolute paths; json-pointer: RFC 6901.

`SPEC_FORMATS` are the format names some JSON Schema draft defines: those without a regex here
are refused by the schema compiler. Any other name is unknown to validators, which ignore it
(JSON Schema 2020-12 section 7.2.3, and `jsonschema`'s checker does), so it constrains nothing.
"""

from __future__ import annotations

# RFC 3339 dates. Days: 01-28 every month, 29-30 all but February, 31 in the long months.
_MONTH_DAY = (
    r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
    r"|(?:0[13-9]|1[0-2])-(?:29|30)"
    r"|(?:0[13578]|1[02])-31)"
)
_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"  # 0001 to 9999
_MULTIPLE_OF_4 = r"(?:0[48]|[2468][048]|[13579][26])"  # two digits, 04 to 96
_LEAP_YEAR = rf"(?:[0-9]{{2}}{_MULTIPLE_OF_4}|{_MULTIPLE_OF_4}00)"
_DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_PARTIAL_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?"
_OFFSET = r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"

# RFC 3339 appendix A durations.
_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DUR_DATE = r"(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
_DURATION = rf"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)"

HOST_LABELS = 8
HOST_LABEL_LENGTH = 30
"""A hostname has at most `HOST_LABELS` labels of at most `HOST_LABEL_LENGTH` characters: 247
characters at most, within RFC 1035's 253 (a DFA of about 470 states; the exact length bound
would need one state per character and hyphen)."""

_ALNUM = "[A-Za-z0-9]"
_ALNUM_HYPHEN = "[A-Za-z0-9-]"
# The third character is never a hyphen (lengths 1, 2, 3, then 4 and more): `xn--` labels are
# Punycode, which JSON Schema's test suite checks, and IDNA 2008 refuses other `--` there.
_HOST_LABEL = (
    rf"{_ALNUM}(?:{_ALNUM}|{_ALNUM_HYPHEN}{_ALNUM}"
    rf"(?:{_ALNUM_HYPHEN}{{0,{HOST_LABEL_LENGTH - 4}}}{_ALNUM})?)?"
)


def _hostname(label: str) -> str:
    return rf"{label}(?:\.{label}){{0,{HOST_LABELS - 1}}}"


_DEC_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = _DEC_OCTET + r"(?:\." + _DEC_OCTET + "){3}"
_HEX_GROUP = "[0-9A-Fa-f]{1,4}"


def _groups(n: int, before: bool) -> str:
    """n groups, each followed (`before`) or preceded by a colon."""
    if n == 0:
        return ""
    one = f"{_HEX_GROUP}:" if before else f":{_HEX_GROUP}"
    return one if n == 1 else f"(?:{one}){{{n}}}"


def _ipv6() -> str:
    """RFC 4291 section 2.2: eight groups, or fewer around one `::`; the last two groups may be
    an IPv4 dotted quad."""
    alternatives = []
    for tail, width in ((_HEX_GROUP, 1), (_IPV4, 2)):
        alternatives.append(_groups(8 - width, True) + tail)  # no `::`
        for left in range(0, 8 - width):  # `::` after `left` groups, stands for >= 1 group
            for right in range(0, 8 - width - left):
                head = "::" if left == 0 else _groups(left - 1, True) + _HEX_GROUP + "::"
                if width == 1 and right == 0:
                    alternatives.append(head)
                elif width == 1:
                    alternatives.append(head + _groups(right - 1, True) + _HEX_GROUP)
                else:
                    alternatives.append(head + _groups(right, True) + _IPV4)
    return "(?:" + "|".join(alternatives) + ")"


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`\{\|\}~-]+"
_PATH_CHAR = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})"
_QUERY = r"(?:\?(?:" + _PATH_CHAR + r"|[/?])*)?"
_FRAGMENT = r"(?:#(?:" + _PATH_CHAR + r"|[/?])*)?"
_URI = (
    r"[a-zA-Z][a-zA-Z0-9+.-]*://"
    + _LABEL
    + r"(?:\."
    + _LABEL
    + r")*(?::[0-9]{1,5})?(?:/"
    + _PATH_CHAR
    + r"*)*"
    + _QUERY
    + _FRAGMENT
)
# URI references: absolute URIs, or absolute paths with optional query and fragment.
_URI_REFERENCE = "(?:" + _URI + r"|(?:/" + _PATH_CHAR + r"*)+" + _QUERY + _FRAGMENT + ")"
_EMAIL = _ATOM + r"(?:\." + _ATOM + ")*@" + _LABEL + r"(?:\." + _LABEL + ")+"

FORMATS: dict[str, str] = {
    "date-time": _DATE + "T" + _PARTIAL_TIME + _OFFSET,
    "date": _DATE,
    "time": _PARTIAL_TIME + _OFFSET,
    "duration": _DURATION,
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "email": _EMAIL,
    "idn-email": _EMAIL,  # every ASCII address is an internationalized one
    "hostname": _hostname(_HOST_LABEL),
    "host-name": _hostname(_HOST_LABEL),  # draft 3
    "idn-hostname": _hostname(_HOST_LABEL),
    "ipv4": _IPV4,
    "ip-address": _IPV4,  # draft 3
    "ipv6": _ipv6(),
    "uri": _URI,
    "iri": _URI,  # every URI is an IRI
    "url": _URI,  # non-standard (validators ignore it): read as an absolute URI
    "uri-reference": _URI_REFERENCE,
    "iri-reference": _URI_REFERENCE,
    "json-pointer": r'(?:/(?:[^~/"\\\x00-\x1f]|~[01])*)*',
}
"""`format` value -> regex text of the string's content (without the quotes). All are ASCII
except json-pointer, and none holds `"`, `\\` or a control character raw, so the JSON text of
such a string is its value."""

SPEC_FORMATS = frozenset(
    {
        # 2020-12 (also 2019-09, 7, 6, 4)
        "date-time", "date", "time", "duration", "email", "idn-email", "hostname",
        "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid",
        "uri-template", "json-pointer", "relative-json-pointer", "regex",
        # draft 3
        "utc-millisec", "color", "style", "phone", "ip-address", "host-name",
    }
)  # fmt: skip
"""Format names defined by a JSON Schema draft (3 to 2020-12): validators may check them, so
the compiler refuses those without a regex in `FORMATS` rather than ignore them."""

INTEGER_FORMATS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
"""Non-standard integer formats (OpenAPI) read as ranges: a sound sub-language, since validators
ignore unknown formats."""

NUMBER_FORMATS = {"float", "double"}
"""Non-standard number formats (OpenAPI) that add no constraint we can express: accepted."""


def string_format(name: str) -> str | None:
    """The regex text of the strings of format `name`; None when the format constrains nothing
    (a name no JSON Schema draft defines: validators ignore it). Raises KeyError for a format
    some draft defines that has no regex here (the caller refuses it)."""
    if name in FORMATS:
        return FORMATS[name]
    if name in SPEC_FORMATS:
        raise KeyError(name)
    return None
