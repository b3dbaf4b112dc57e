"""Unicode property escapes of ECMA-262 'u' mode regexes (`\\p{L}`, `\\p{Letter}`,
`\\p{gc=Lu}`, `\\p{Script=Greek}`, `\\p{scx=Grek}`, `\\p{Alphabetic}`) as code-point ranges.

Names follow ECMA-262 (sec. "Runtime Semantics: UnicodeMatchProperty"): `\\p{Name=Value}` with
Name one of General_Category / gc, Script / sc, Script_Extensions / scx, or a lone name that is
a General_Category value or one of ECMA's binary properties, spelt exactly (long or short alias).

General categories come from the standard library (`unicodedata`: one pass over the code points,
all categories at once, cached); scripts, script extensions and binary properties from the
`regex` package, whose property tables give the code points (its runs over a string of every
code point are the ranges, as `re_class` does for `re`).  The Unicode versions
are those of the running Python and of `regex`.  Surrogates are never included: decoded JSON
strings hold none.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

from ...core.caches import memoized
from ..ir import MAX_CODE_POINT, SURROGATES, normalize_ranges

Ranges = tuple[tuple[int, int], ...]

# General_Category values: short name -> the one-letter groups or two-letter categories it covers,
# with every alias ECMA accepts (PropertyValueAliases.txt).
_GC_ALIASES = {
    "C": ("C", "Other"),
    "Cc": ("Cc", "Control", "cntrl"),
    "Cf": ("Cf", "Format"),
    "Cn": ("Cn", "Unassigned"),
    "Co": ("Co", "Private_Use"),
    "Cs": ("Cs", "Surrogate"),
    "L": ("L", "Letter"),
    "LC": ("LC", "Cased_Letter"),
    "Ll": ("Ll", "Lowercase_Letter"),
    "Lm": ("Lm", "Modifier_Letter"),
    "Lo": ("Lo", "Other_Letter"),
    "Lt": ("Lt", "Titlecase_Letter"),
    "Lu": ("Lu", "Uppercase_Letter"),
    "M": ("M", "Mark", "Combining_Mark"),
    "Mc": ("Mc", "Spacing_Mark"),
    "Me": ("Me", "Enclosing_Mark"),
    "Mn": ("Mn", "Nonspacing_Mark"),
    "N": ("N", "Number"),
    "Nd": ("Nd", "Decimal_Number", "digit"),
    "Nl": ("Nl", "Letter_Number"),
    "No": ("No", "Other_Number"),
    "P": ("P", "Punctuation", "punct"),
    "Pc": ("Pc", "Connector_Punctuation"),
    "Pd": ("Pd", "Dash_Punctuation"),
    "Pe": ("Pe", "Close_Punctuation"),
    "Pf": ("Pf", "Final_Punctuation"),
    "Pi": ("Pi", "Initial_Punctuation"),
    "Po": ("Po", "Other_Punctuation"),
    "Ps": ("Ps", "Open_Punctuation"),
    "S": ("S", "Symbol"),
    "Sc": ("Sc", "Currency_Symbol"),
    "Sk": ("Sk", "Modifier_Symbol"),
    "Sm": ("Sm", "Math_Symbol"),
    "So": ("So", "Other_Symbol"),
    "Z": ("Z", "Separator"),
    "Zl": ("Zl", "Line_Separator"),
    "Zp": ("Zp", "Paragraph_Separator"),
    "Zs": ("Zs", "Space_Separator"),
}
GENERAL_CATEGORIES = {alias: short for short, aliases in _GC_ALIASES.items() for alias in aliases}
"""Every spelling of a General_Category value -> its short name."""

BINARY_PROPERTIES = frozenset(
    """
ASCII ASCII_Hex_Digit AHex Alphabetic Alpha Any Assigned Bidi_Control Bidi_C Bidi_Mirrored Bidi_M
Case_Ignorable CI Cased Changes_When_Casefolded CWCF Changes_When_Casemapped CWCM Changes_When_Lowercased CWL
Changes_When_NFKC_Casefolded CWKCF Changes_When_Titlecased CWT Changes_When_Uppercased CWU Dash
Default_Ignorable_Code_Point DI Deprecated Dep Diacritic Dia Emoji Emoji_Component EComp Emoji_Modifier EMod
Emoji_Modifier_Base EBase Emoji_Presentation EPres Extended_Pictographic ExtPict Extender Ext Grapheme_Base
Gr_Base Grapheme_Extend Gr_Ext Hex_Digit Hex IDS_Binary_Operator IDSB IDS_Trinary_Operator IDST ID_Continue IDC
ID_Start IDS Ideographic Ideo Join_Control Join_C Logical_Order_Exception LOE Lowercase Lower Math
Noncharacter_Code_Point NChar Pattern_Syntax Pat_Syn Pattern_White_Space Pat_WS Quotation_Mark QMark Radical
Regional_Indicator RI Sentence_Terminal STerm Soft_Dotted SD Terminal_Punctuation Term Unified_Ideograph UIdeo
Uppercase Upper Variation_Selector VS White_Space space XID_Continue XIDC XID_Start XIDS
""".split()
)
"""ECMA-262's binary Unicode properties (long and short names)."""

_PROPERTY_NAMES = {
    "General_Category": "gc",
    "gc": "gc",
    "Script": "sc",
    "sc": "sc",
    "Script_Extensions": "scx",
    "scx": "scx",
}


class UnknownProperty(ValueError):
    """A `\\p{...}` body that names no property ECMA-262 knows (or one this build cannot compute)."""


def property_ranges(body: str) -> Ranges:
    """The code points of `\\p{body}` (sorted, disjoint, inclusive ranges, no surrogates)."""
    name, eq, value = body.partition("=")
    if not eq:
        if body in GENERAL_CATEGORIES:
            return _general_category(GENERAL_CATEGORIES[body])
        if body in BINARY_PROPERTIES:
            return _regex_property(body)
        raise UnknownProperty(f"\\p{{{body}}} names no General_Category value or binary property")
    kind = _PROPERTY_NAMES.get(name)
    if kind is None:
        raise UnknownProperty(f"\\p{{{body}}}: {name!r} is not General_Category, Script or Script_Extensions")
    if kind == "gc":
        if value not in GENERAL_CATEGORIES:
            raise UnknownProperty(f"\\p{{{body}}}: {value!r} is not a General_Category value")
        return _general_category(GENERAL_CATEGORIES[value])
    if not value or not value.replace("_", "").isalnum() or not value.isascii():
        raise UnknownProperty(f"\\p{{{body}}}: {value!r} is not a script name")
    return _regex_property(f"{kind}={value}")


@memoized(1, name="Unicode general category table (grammar/fsm/unicode_properties.py)", table=True)
def _category_table() -> dict[str, Ranges]:
    """Two-letter general category -> its ranges, from one pass over every code point."""
    runs: dict[str, list[list[int]]] = {}
    for cp in range(MAX_CODE_POINT + 1):
        if SURROGATES[0] <= cp <= SURROGATES[1]:
            continue
        cat = unicodedata.category(chr(cp))
        out = runs.setdefault(cat, [])
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return {cat: tuple((lo, hi) for lo, hi in found) for cat, found in runs.items()}


@memoized(len(_GC_ALIASES), name="Unicode general category ranges (grammar/fsm/unicode_properties.py)", table=True)
def _general_category(short: str) -> Ranges:
    table = _category_table()
    cats: tuple[str, ...]
    if short == "LC":
        cats = ("Ll", "Lt", "Lu")
    elif len(short) == 1:
        cats = tuple(c for c in table if c[0] == short)
    else:
        cats = (short,)
    return normalize_ranges(r for cat in cats for r in table.get(cat, ()))


REGEX_PROPERTIES_KEPT = 1024
"""Script, Script_Extensions and binary property tables kept, by their spelling: every one there
is (about 170 scripts, each under its long and short name, as both kinds, and the 98 spellings of
the binary properties: under 800)."""


@memoized(
    REGEX_PROPERTIES_KEPT,
    name="Unicode script and binary property ranges (grammar/fsm/unicode_properties.py)",
    table=True,
)
def _regex_property(spec: str) -> Ranges:
    """The code points `regex` puts in \\p{spec}: its runs in a string of every code point."""
    try:
        import regex
    except ImportError:  # pragma: no cover - regex is a dependency
        raise UnknownProperty(f"\\p{{{spec}}} needs the 'regex' package (pip install regex)") from None
    try:
        compiled = regex.compile(rf"\p{{{spec}}}+")
    except regex.error as exc:
        raise UnknownProperty(f"\\p{{{spec}}}: {exc}") from None
    runs = ((m.start(), m.end() - 1) for m in compiled.finditer(every_code_point()))
    return normalize_ranges(r for lo, hi in runs for r in _without_surrogates(lo, hi))


@memoized(1, name="the string of every code point, 4.4 MB (grammar/fsm/unicode_properties.py)", table=True)
def every_code_point() -> str:
    """A string of every code point, lone surrogates included (for regex engines to scan)."""
    return np.arange(MAX_CODE_POINT + 1, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")


@memoized(3, name="Python re classes \\d \\s \\w as ranges (grammar/fsm/unicode_properties.py)", table=True)
def re_class(letter: str) -> Ranges:
    """The code points Python's `re` puts in \\d, \\s or \\w (`letter`) in a str pattern without
    re.ASCII: the runs `re` itself finds in the string of every code point (no surrogate is in
    any of them).  One table per class for the process: the ECMA pattern reader and the Lark
    ignore reader both ask for them."""
    return tuple((m.start(), m.end() - 1) for m in re.finditer("\\" + letter + "+", every_code_point()))


def _without_surrogates(lo: int, hi: int):
    if hi < SURROGATES[0] or lo > SURROGATES[1]:
        yield lo, hi
        return
    if lo < SURROGATES[0]:
        yield lo, SURROGATES[0] - 1
    if hi > SURROGATES[1]:
        yield SURROGATES[1] + 1, hi
