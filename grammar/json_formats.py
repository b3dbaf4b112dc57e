"""JSON Schema `format` values as code-point automata (`format_dfa`, `KNOWN_FORMATS`).

Each supported format is a full-match regex (`FORMAT_REGEXES`, in the dialect of `ecma_regex`)
transcribed from its RFC; `format_dfa(name)` is its `Dfa`, which `json_strings.string_dfa`
intersects with the other string constraints.

Formats are sound with respect to both their RFC and `jsonschema`'s FormatChecker with the
optional packages installed here, and reject every invalid string of the official
JSON-Schema-Test-Suite.  Sound subsets, by design: no leap seconds (":60"), e-mail without
address literals, hostnames of at most 8 labels (a first of up to 63 characters,
the rest up to 26) without "--" in label positions 3-4, IDN formats restricted to ASCII, "regex"
limited to groups nested 3 deep (`_regex_syntax`).  Unknown formats are annotations:
`format_dfa` returns None for them (check `is_known_format` to decide otherwise).
"""

from __future__ import annotations

from ..core.caches import memoized
from .ecma_regex import fullmatch_dfa, pattern_dfa
from .fsm.codepoint_dfa import Dfa

__all__ = ["FORMAT_REGEXES", "KNOWN_FORMATS", "format_dfa", "is_known_format"]

_DEC_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_IPV4 = rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}"
_H16 = r"[0-9a-fA-F]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = "|".join(
    [
        rf"(?:{_H16}:){{6}}{_LS32}",
        rf"::(?:{_H16}:){{5}}{_LS32}",
        rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
        rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
        rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
        rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
        rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
    ]
)
# Days 1-28 always, 29-30 except February, 31 in the long months; February 29 only in
# leap years, which needs the year: we enumerate leap years mod 400 below.
_MONTH_DAY = (
    r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
    r"|(?:0[13-9]|1[0-2])-(?:29|30)"
    r"|(?:0[13578]|1[02])-31)"
)
# Leap years: divisible by 4 but not 100, or by 400 (four-digit years).
_LEAP_YEAR = (
    r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])"
    r"|(?:0[48]|[2468][048]|[13579][26])00)"
)
# Years 0001-9999: Python's date.fromisoformat (which jsonschema uses) has no year 0.
_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
_DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
# RFC 3339 partial-time; second 60 (leap second) is left out because checkers disagree on it.
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:[zZ]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_DATE_TIME = rf"{_DATE}[tT]{_TIME}"
# RFC 3339 Appendix A: units in order, none skipped in between (P1Y3D is not in the grammar).
_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DURATION = (
    rf"P(?:(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:{_DUR_TIME})?"
    rf"|{_DUR_TIME}|[0-9]+W)"
)
_HEX = "[0-9a-fA-F]"
_UUID = rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
_SHORT_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,24}[a-zA-Z0-9])?"
# RFC 1123 allows 253 characters in all; counting them exactly multiplies the automaton, so we
# accept a first label of up to 63 characters and up to 7 more of up to 26 (252 at most).
_HOSTNAME = rf"{_LABEL}(?:\.{_SHORT_LABEL}){{0,7}}"
# RFC 5321 Mailbox restricted to hostname domains (sound: every such address is valid, and
# contains '@' as jsonschema checks).
_ATEXT = r"[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]"
# The domain follows RFC 5321's Domain ABNF (labels of letters, digits and inner hyphens); the
# separate size limits of its section 4.5.3 are not counted, which keeps products with
# maxLength small (counting 63-character labels multiplies the automaton by ~60).
_LDH_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
# Local-part = Dot-string / Quoted-string; Quoted-string = DQUOTE *QcontentSMTP DQUOTE with
# qtextSMTP = %d32-33 / %d35-91 / %d93-126 and quoted-pairSMTP = %d92 %d32-126 (RFC 5321 4.1.2).
# These are the decoded characters: inside JSON text the quote and backslash come escaped.
_QUOTED_LOCAL = r'"(?:[ !#-\[\]-~]|\\[ -~])*"'
_EMAIL = rf"(?:{_ATEXT}+(?:\.{_ATEXT}+)*|{_QUOTED_LOCAL})@{_LDH_LABEL}(?:\.{_LDH_LABEL})*"
# RFC 3986 section 3 and appendix A, transcribed rule by rule; with `iri`, RFC 3987's
# additions (ucschar among the unreserved characters, iprivate in queries).
_UCSCHAR = (
    "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef"
    + "".join(f"{chr(plane << 16)}-{chr((plane << 16) + 0xFFFD)}" for plane in range(1, 14))
    + f"{chr(0xE1000)}-{chr(0xEFFFD)}"
)
_IPRIVATE = f"\ue000-\uf8ff{chr(0xF0000)}-{chr(0xFFFFD)}{chr(0x100000)}-{chr(0x10FFFD)}"


def _uri_regexes(iri: bool) -> tuple[str, str]:
    """(absolute URI, URI reference) regexes; IRI versions when `iri`."""
    extra = _UCSCHAR if iri else ""
    pct = r"%[0-9a-fA-F]{2}"
    unreserved_sub = rf"[a-zA-Z0-9._~!$&'()*+,;={extra}-]"  # (i)unreserved / sub-delims
    pchar = rf"(?:{unreserved_sub}|{pct}|[:@])"
    segment = rf"{pchar}*"
    segment_nz = rf"{pchar}+"
    segment_nz_nc = rf"(?:{unreserved_sub}|{pct}|@)+"
    query = rf"(?:{pchar}|[/?{_IPRIVATE if iri else ''}])*"
    fragment = rf"(?:{pchar}|[/?])*"
    userinfo = rf"(?:{unreserved_sub}|{pct}|:)*"
    ip_literal = rf"\[(?:{_IPV6}|[vV][0-9a-fA-F]+\.(?:[a-zA-Z0-9._~!$&'()*+,;=-]|:)+)\]"
    reg_name = rf"(?:{unreserved_sub}|{pct})*"
    authority = rf"(?:{userinfo}@)?(?:{ip_literal}|{reg_name})(?::[0-9]*)?"
    path_abempty = rf"(?:/{segment})*"
    path_absolute = rf"/(?:{segment_nz}(?:/{segment})*)?"
    path_rootless = rf"{segment_nz}(?:/{segment})*"
    path_noscheme = rf"{segment_nz_nc}(?:/{segment})*"
    hier_part = rf"(?://{authority}{path_abempty}|{path_absolute}|{path_rootless}|)"
    relative_part = rf"(?://{authority}{path_abempty}|{path_absolute}|{path_noscheme}|)"
    tail = rf"(?:\?{query})?(?:#{fragment})?"
    uri = rf"[a-zA-Z][a-zA-Z0-9+.-]*:{hier_part}{tail}"
    return uri, rf"(?:{uri}|{relative_part}{tail})"


_URI, _URI_REFERENCE = _uri_regexes(iri=False)
_IRI, _IRI_REFERENCE = _uri_regexes(iri=True)
# RFC 6570 level 1-4 templates: literals and {expressions}.
_UT_LITERAL = r"(?:[\x21\x23-\x24\x26\x28-\x3b\x3d\x3f-\x5b\x5d\x5f\x61-\x7a\x7e]|%[0-9a-fA-F]{2})"
_UT_VARNAME = r"(?:[a-zA-Z0-9_]|%[0-9a-fA-F]{2})(?:\.?(?:[a-zA-Z0-9_]|%[0-9a-fA-F]{2}))*"
_UT_VARSPEC = rf"{_UT_VARNAME}(?::[1-9][0-9]{{0,3}}|\*)?"
_URI_TEMPLATE = rf"(?:{_UT_LITERAL}|\{{[+#./;?&]?{_UT_VARSPEC}(?:,{_UT_VARSPEC})*\}})*"
_JSON_POINTER = r"(?:/(?:[^/~]|~[01])*)*"
_RELATIVE_JSON_POINTER = rf"(?:0|[1-9][0-9]*)(?:#|{_JSON_POINTER})"


def _regex_syntax(depth: int) -> str:
    """A sound subset of the regexes both ECMA-262 (with or without the u flag) and Python's
    `re.compile` (jsonschema's check) accept, with groups nested at most `depth` deep.

    Literals are any character but the syntax characters; escapes are \\d \\w \\s (and
    negations), \\n \\r \\t \\f \\v, \\uXXXX, \\xXX and escaped syntax characters or
    '/'; classes hold such characters and escapes, ranges a-z, A-Z, 0-9 in order, and '-' first
    or last; every atom may take one quantifier (* + ? {n} {n,} {n,m} with n <= m, numbers below 1000), lazy or not;
    ^ $ \\b \\B are never quantified.  Left out: lookarounds, backreferences, named groups,
    ranges across character kinds, lone ']' or '{' (literals only without the u flag).
    """
    syntax = r"\\^$.|?*+()\[\]{}"
    literal = rf"[^{syntax}]"
    escape = rf"\\(?:[dDwWsSnrtfv]|[{syntax}/]|u[0-9a-fA-F]{{4}}|x[0-9a-fA-F]{{2}})"
    class_escape = rf"\\(?:[dDwWsSnrtfvb]|[{syntax}/-]|u[0-9a-fA-F]{{4}}|x[0-9a-fA-F]{{2}})"
    ordered = [
        f"{c}-[{c}-{last}]"
        for first, last in (("0", "9"), ("a", "z"), ("A", "Z"))
        for c in map(chr, range(ord(first), ord(last) + 1))
    ]
    class_item = "|".join([r"[^\\\[\]^-]", class_escape] + ordered)
    char_class = rf"\[\^?(?:-(?:{class_item})*-?|(?:{class_item})+-?)\]"  # '-' also first or last
    number = "(?:0|[1-9][0-9]{0,2})"
    pairs = [f"{d},[{d}-9]" for d in range(10)]  # n <= m, both one digit
    pairs += ["[0-9],[1-9][0-9]{1,2}", "[1-9][0-9],[1-9][0-9]{2}"]  # m has more digits
    pairs += [f"{a}[0-9],[{a + 1}-9][0-9]" for a in range(1, 9)]  # two digits each
    pairs += [f"{a}{b},{a}[{b}-9]" for a in range(1, 10) for b in range(10)]
    quantifier = rf"(?:[*+?]|\{{{number},?\}}|\{{(?:{'|'.join(pairs)})\}})\??"
    anchor = r"\^|\$|\\[bB]"
    alternation = ""
    for level in range(depth + 1):
        group = [rf"\((?:\?:)?{alternation}\)"] if level else []
        atom = "|".join([literal, r"\.", escape, char_class] + group)
        term = rf"(?:{anchor}|(?:{atom})(?:{quantifier})?)"
        alternation = rf"(?:{term}*(?:\|{term}*)*)"
    return alternation


_REGEX = _regex_syntax(3)

FORMAT_REGEXES: dict[str, str] = {
    "date-time": _DATE_TIME,
    "date": _DATE,
    "time": _TIME,
    "duration": _DURATION,
    "email": _EMAIL,
    "idn-email": _EMAIL,
    "hostname": _HOSTNAME,
    "idn-hostname": _HOSTNAME,  # the ASCII subset (LDH labels), which idna.encode accepts
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "uuid": _UUID,
    "uri": _URI,
    "iri": _IRI,
    "uri-reference": _URI_REFERENCE,
    "iri-reference": _IRI_REFERENCE,
    "uri-template": _URI_TEMPLATE,
    "json-pointer": _JSON_POINTER,
    "relative-json-pointer": _RELATIVE_JSON_POINTER,
    "regex": _REGEX,
}
"""Full-match regexes (our dialect) for each supported format; each is a sound subset."""


KNOWN_FORMATS = frozenset(FORMAT_REGEXES)


def is_known_format(name: str) -> bool:
    """Whether `format` constrains strings here (other formats are annotations only)."""
    return name in KNOWN_FORMATS


@memoized(len(FORMAT_REGEXES), name="JSON Schema format automata (grammar/json_formats.py)", table=True)
def _format_dfa_cached(name: str) -> Dfa:
    """`format_dfa` of a known format, memoised.  The regexes are ours, not the input's, so their
    bound of 200,000 states is no user budget: every format fits well within it."""
    dfa = fullmatch_dfa(FORMAT_REGEXES[name], "", 200_000)
    if name in ("hostname", "idn-hostname"):
        # IDNA (RFC 5891, and the idna package jsonschema uses) rejects "--" in the 3rd and
        # 4th positions of a label, which also leaves out "xn--" labels (maybe bad Punycode)
        dfa = dfa.difference(pattern_dfa(r"(?:^|\.)[^.][^.]--"), 200_000)
    return dfa


def format_dfa(name: str) -> Dfa | None:
    """The decoded strings valid for `format`, or None for a format that is only an annotation."""
    if name not in FORMAT_REGEXES:
        return None
    return _format_dfa_cached(name)
