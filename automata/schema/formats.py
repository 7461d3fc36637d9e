"""The `format` values with a strict regex (DESIGN.md section 3, beyond the subset: "`format` with
a strict regex"), and the OpenAPI formats read as ranges or as no constraint.

Every text is in DESIGN.md section 2's regex subset and means the same to Python's `re`. Each
language is a subset of what the JSON Schema validator accepts: RFC 3339 (date-time, date, time;
no leap seconds, no February 29, upper-case `T` and `Z`), RFC 4122 text (uuid), dotted-quad IPv4
without leading zeros, a conservative dot-atom e-mail address, an RFC 1123 host name, and
absolute `http`/`https`-style URIs without IP literals (also for iri, and for the non-standard
url); uri-reference adds absolute paths; idn-email uses the ASCII e-mail regex; json-pointer
follows RFC 6901. Formats without a regex here are refused by the schema compiler.
"""

from __future__ import annotations

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
