"""JSON string tokens under JSON Schema string constraints, as grammar IR.

The pipeline has two layers:

1. The *decoded* language: a code-point automaton (`codepoint_dfa.Dfa`) that accepts exactly
   the decoded string values allowed by minLength / maxLength / pattern (`ecma_regex`) / format
   (`json_formats`) / const-like literals.
2. The *encoded* language: `encode_json_string(dfa)` turns every code-point edge into all of
   its JSON spellings -- raw UTF-8 where JSON allows it unescaped, the short escapes
   (\\" \\\\ \\/ \\b \\f \\n \\r \\t), \\uXXXX with upper- or lower-case hex digits, and
   surrogate pairs \\uD8xx\\uDCxx for code points above U+FFFF -- as one deterministic IR
   `CharFsm` between the quotes.  The encoder runs as a numba kernel (`string_kernels`).

API: `string_expr`, `string_literal_expr`, `string_excluding_expr` give whole string tokens;
`JSON_CHAR` / `ANY_STRING` / `RAW_STRING_CHAR` / `JSON_ESCAPE` are the unconstrained pieces.  To
combine constraints yourself, build decoded automata (`string_dfa` here, `pattern_dfa`,
`format_dfa`, `literal_dfa`, `length_dfa`, `any_string_dfa`), combine them with `Dfa.intersect`
/ `union` / `difference` (which raise `StateLimitExceeded` past `Limits.max_string_states`) and
encode the result with `json_string_expr`.

Lone surrogate escapes (\\ud800 without a low half) are never accepted: they decode to strings
that are not Unicode text, and json.dumps never produces them for real text.  Unknown formats
are annotations: `string_expr(..., format=unknown)` accepts any string.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from json.encoder import encode_basestring, encode_basestring_ascii

import numpy as np

from ..core.caches import BoundedCache
from ..core.errors import SchemaError, UnsupportedSchemaError
from ..core.limits import DEFAULT_LIMITS
from .ecma_regex import pattern_dfa
from .fsm import string_kernels
from .fsm.codepoint_dfa import (
    ALL_CHARS,
    Dfa,
    StateLimitExceeded,
    any_string_dfa,
    budgeted,
    dfa_to_char_fsm,
    intersect_ranges,
    length_dfa,
    literal_dfa,
    without_strings,
)
from .ir import (
    MAX_CODE_POINT,
    NOTHING,
    SURROGATES,
    CharClass,
    CharFsm,
    Expr,
    alt,
    char_fsm_of_columns,
    iter_nodes,
    lit,
    rep,
    seq,
)
from .json_formats import format_dfa

__all__ = [
    "string_expr",
    "string_literal_expr",
    "string_literal_without",
    "string_excluding_expr",
    "string_dfa",
    "check_lengths",
    "encode_json_string",
    "json_string_expr",
    "json_string_without",
    "JSON_CHAR",
    "ANY_STRING",
    "RAW_STRING_CHAR",
    "JSON_ESCAPE",
]

# ---------------------------------------------------------------------------------------------
# Encoding a decoded-language DFA as JSON string text.

# The JSON text of a decoded string spells each code point raw where JSON allows it unescaped,
# as a short escape (\" \\ \/ \b \f \n \r \t), as \uXXXX with upper- or lower-case hex digits,
# or above U+FFFF as a surrogate pair \uD8xx\uDCxx.  The automaton (`string_kernels.encode`) keeps
# the decoded states and gives each an escape state (after '\').  After "\u" come the states
# reading the four hex digits: the state that reads the last `level` digits of the code units in
# one aligned block of 16**level is hash-consed on (level, the states its 16 digits lead to), so
# equal blocks share one state across all decoded states (a block that leads everywhere to one
# state -- most of them -- is one state per level).  A high surrogate leads to a pair state that
# reads "\u" and the low half; pair states are shared by the hex states of their low halves.


def _encode(dfa: Dfa, budget: int, capacity: int | None = None) -> tuple:
    """The trimmed JSON text automaton of `dfa` as flat arrays (see `string_kernels.trim`);
    StateLimitExceeded past `budget` states or twice as many edges.  The kernel starts with room for
    `capacity` states and retries with four times more while that is too little."""
    start, count, lo, hi, target, final = dfa.arrays()
    if capacity is None:
        capacity = 8 * dfa.size + 2 * lo.shape[0] + 64  # more than key automata need (~7 per state)
    while True:
        status, n, st, edges = string_kernels.encode(start, count, lo, hi, target, budget, capacity)
        if status != string_kernels.FULL:
            break
        capacity *= 4
    if status == string_kernels.STATES:
        raise StateLimitExceeded("JSON string automaton", budget)
    if status == string_kernels.EDGES:
        raise StateLimitExceeded("JSON string automaton", 2 * budget, "edges")
    final = np.concatenate((final, np.zeros(n - dfa.size, np.bool_)))  # the decoded states' finals
    (start, count), (lo, hi, target) = st.T.copy(), edges.T.copy()
    return string_kernels.trim(start, count, lo, hi, target, final)


def encode_json_string(dfa: Dfa, budget: int = DEFAULT_LIMITS.max_encoded_string_states) -> Dfa:
    """The DFA over JSON text (between the quotes) of every encoding of every string `dfa` accepts."""
    return Dfa.from_arrays(*_encode(dfa, budget))


STRING_TOKENS_KEPT = 400_000
"""Transitions of the JSON string tokens kept by `json_string_expr` per process (about 150 bytes
each): one automaton recurs across a document's objects and strings (the same "any other key"
or format automaton), and each build writes out its thousands of transition tuples."""
_string_tokens: BoundedCache[tuple[bytes, int], Expr] = BoundedCache(
    STRING_TOKENS_KEPT,
    cost=lambda expr: 1 + sum(len(node.transitions) for node in iter_nodes(expr) if type(node) is CharFsm),
    name="JSON string tokens of string automata (grammar/json_strings.py)",
)


def json_string_expr(
    dfa: Dfa, pointer: str = "", keyword: str = "pattern", budget: int = DEFAULT_LIMITS.max_encoded_string_states
) -> Expr:
    """The whole JSON string token (with quotes) for the decoded language of `dfa`.

    Past `budget` states (or twice as many edges) raises UnsupportedSchemaError(keyword).
    Memoised by the automaton's content and the budget (a pure function of them; an error,
    which names `pointer`, is not kept).
    """
    if dfa.is_empty():
        return NOTHING
    content = hashlib.blake2b(digest_size=16)
    for column in dfa.arrays():  # each column's type and length, then its values
        content.update(f"{column.dtype.str}{column.shape}".encode())
        content.update(column.tobytes())
    key = (content.digest(), budget)
    token = _string_tokens.get(key)
    if token is None:
        token = _string_token(dfa, pointer, keyword, budget)
        _string_tokens.put(key, token)
    return token


def _string_token(dfa: Dfa, pointer: str, keyword: str, budget: int) -> Expr:
    """`json_string_expr` of a non-empty `dfa`, built."""
    try:
        start, count, lo, hi, target, final = _encode(dfa, budget)
    except StateLimitExceeded as exc:
        raise UnsupportedSchemaError(
            keyword, pointer, f"{exc}; simplify the constraint or raise Limits.max_encoded_string_states"
        ) from None
    if not final.any():
        return NOTHING
    # edges come state by state, each state's sorted: the order dfa_to_char_fsm sorts into
    source = np.repeat(np.arange(start.shape[0]), count)
    # trimmed (every state reachable and reaching a final state) with a final state: not empty
    automaton = char_fsm_of_columns(0, frozenset(np.flatnonzero(final).tolist()), source, lo, hi, target, nonempty=True)
    return seq(lit('"'), automaton, lit('"'))


def json_string_without(
    dfa: Dfa, excludes: Iterable[str], pointer: str = "", budget: int = DEFAULT_LIMITS.max_encoded_string_states
) -> Expr:
    """The JSON string tokens of `dfa`'s strings whose text between the quotes, as written (escapes
    not decoded), holds none of `excludes` (XGrammar's json_schema ``excludes``: ``\\u0061b`` is
    not ``ab``, and ``\\"`` holds ``"``).  Every spelling of each string is tried; past `budget`
    states raises UnsupportedSchemaError("excludes")."""
    try:
        text = encode_json_string(dfa, budget).intersect(without_strings(excludes), budget)
    except StateLimitExceeded as exc:
        raise UnsupportedSchemaError(
            "excludes", pointer, f"{exc}; simplify the constraint or raise Limits.max_encoded_string_states"
        ) from None
    automaton = dfa_to_char_fsm(text)
    return NOTHING if automaton == NOTHING else seq(lit('"'), automaton, lit('"'))


JSON_CHAR: Expr = dfa_to_char_fsm(encode_json_string(length_dfa(1, 1)))
"""One JSON-encoded character (any code point but a lone surrogate), without quotes."""

ANY_STRING: Expr = seq(lit('"'), rep(JSON_CHAR, 0, None), lit('"'))
"""Any JSON string token."""

RAW_STRING_CHAR: Expr = CharClass(intersect_ranges(((0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CODE_POINT)), ALL_CHARS))
"""One code point JSON allows unescaped in a string."""


def _escape_part(char: CharFsm) -> CharFsm:
    """A one-character JSON automaton with its start state's raw edges removed: the spellings
    that begin with a backslash (its start state has no incoming edges)."""
    transitions = tuple(t for t in char.transitions if t[0] != char.initial or t[1] == t[2] == ord("\\"))
    return CharFsm(char.initial, char.finals - {char.initial}, transitions)


assert isinstance(JSON_CHAR, CharFsm)  # the language of one character is not empty
JSON_ESCAPE: Expr = _escape_part(JSON_CHAR)
"""One JSON-escaped character: \\n, \\uXXXX, a surrogate pair... (one code point)."""


# ---------------------------------------------------------------------------------------------
# Public entry points.


def check_lengths(min_length, max_length, pointer, allow_empty: bool = False):
    """(minLength, maxLength) as ints; SchemaError for bad values, and for an empty range unless
    allow_empty (then the caller handles lo > hi)."""
    for name, value in (("minLength", min_length), ("maxLength", max_length)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value)
        ):
            raise SchemaError(f"{name} must be a non-negative integer, got {value!r}", f"{pointer}/{name}")
    lo = int(min_length) if min_length is not None else 0
    hi = int(max_length) if max_length is not None else None
    if hi is not None and lo > hi and not allow_empty:
        raise SchemaError(f"minLength {lo} > maxLength {hi}: no string satisfies both", pointer)
    return lo, hi


def string_dfa(
    *,
    min_length=None,
    max_length=None,
    pattern=None,
    format=None,
    pointer: str = "",
    budget: int = DEFAULT_LIMITS.max_string_states,
) -> Dfa | None:
    """The decoded language as a Dfa, or None when it is "any string" (no effective constraint).

    The format is intersected last, so a product past the budget that involves a format is
    reported as UnsupportedSchemaError("format") -- which lenient callers may widen by
    dropping the format (e.g. format "email" with maxLength 100 is ~50k states).
    """
    lo, hi = check_lengths(min_length, max_length, pointer)
    parts: list[tuple[str, Dfa]] = []
    if pattern is not None:
        if not isinstance(pattern, str):
            raise SchemaError(f"pattern must be a string, got {pattern!r}", f"{pointer}/pattern")
        pdfa = pattern_dfa(pattern, f"{pointer}/pattern", budget)
        if not pdfa.is_universal():  # e.g. "([A-Z]+)?" finds a (possibly empty) match anywhere
            parts.append(("pattern", pdfa))
    if lo > 0 or hi is not None:
        keyword = "maxLength" if hi is not None else "minLength"
        parts.append((keyword, budgeted(keyword, f"{pointer}/{keyword}", length_dfa, lo, hi, budget)))
    if format is not None:
        fmt = format_dfa(format)
        if fmt is not None:
            parts.append(("format", fmt))
    if not parts:
        return None
    keyword, dfa = parts[0]
    for keyword, other in parts[1:]:
        dfa = budgeted(keyword, f"{pointer}/{keyword}", dfa.intersect, other, budget)
    return dfa


def string_expr(*, min_length=None, max_length=None, pattern=None, format=None, pointer: str = "") -> Expr:
    """The JSON string token (quotes included) of strings meeting the constraints.

    Lengths count code points.  `pattern` is an unanchored ECMA-262 regex.  Unknown formats
    are annotations and constrain nothing (see `is_known_format`).  An unsatisfiable combination
    gives NOTHING (the empty language); minLength > maxLength raises SchemaError.
    """
    lo, hi = check_lengths(min_length, max_length, pointer)
    if (pattern is None or pattern_dfa(pattern, f"{pointer}/pattern").is_universal()) and (
        format is None or format_dfa(format) is None
    ):
        return seq(lit('"'), rep(JSON_CHAR, lo, hi), lit('"'))
    dfa = string_dfa(min_length=lo, max_length=hi, pattern=pattern, format=format, pointer=pointer)
    assert dfa is not None  # the pattern or the format constrains the string (above)
    keyword = "pattern" if pattern is not None else "format"
    return json_string_expr(dfa, pointer, keyword)


def string_literal_expr(value: str) -> Expr:
    """The JSON spellings of exactly the string `value` that json.dumps writes (for const, enum
    and property names): each character as json.dumps writes it with ensure_ascii=True or False
    (raw, short escapes, lowercase \\uXXXX, surrogate pairs).

    Other legal spellings (\\u0061 for "a", upper-case hex) decode to the same value but are not
    accepted: a key like "name" stays one literal instead of an automaton per character, which
    keeps objects with many properties small.  Sound either way; complete for json.dumps output.

    A lone surrogate (json.loads reads "\\ud800" as one) has only its escape; a high surrogate
    followed by a low one in `value` is NOTHING, since json.loads joins their escapes into one
    code point, so no JSON text decodes to such a value.
    """
    text = encode_basestring_ascii(value)  # json.dumps(value), and with ensure_ascii=False
    if text == encode_basestring(value):  # one spelling per character (an escape is longer
        return lit(text)  # than the raw character): the one literal the loop below gives
    spellings = _literal_spellings(value)
    if spellings is None:
        return NOTHING
    return seq(lit('"'), *(alt(*(lit(s) for s in options)) for options in spellings), lit('"'))


def string_literal_without(value: str, excludes: Iterable[str]) -> Expr:
    """`string_literal_expr(value)` less the spellings whose text between the quotes holds one of
    `excludes` (XGrammar's json_schema ``excludes`` on a const, an enum value or a property name)."""
    excludes = list(excludes)
    text = encode_basestring_ascii(value)
    if text == encode_basestring(value):  # one spelling
        return NOTHING if any(e in text[1:-1] for e in excludes) else lit(text)
    spellings = _literal_spellings(value)
    if spellings is None:
        return NOTHING
    # The spellings as a chain automaton: a character's spellings are its raw code point and an
    # escape beginning with a backslash, so they part at their first code point (deterministic).
    trans: list[dict[int, int]] = [{}]
    state = 0
    for options in spellings:
        after = len(trans)
        trans.append({})
        for spelling in options:
            here = state
            for ch in spelling[:-1]:
                trans.append({})
                trans[here][ord(ch)] = len(trans) - 1
                here = len(trans) - 1
            trans[here][ord(spelling[-1])] = after
        state = after
    chain = Dfa([sorted((cp, cp, t) for cp, t in edges.items()) for edges in trans], [state])
    automaton = dfa_to_char_fsm(chain.intersect(without_strings(excludes)))
    return NOTHING if automaton == NOTHING else seq(lit('"'), automaton, lit('"'))


def _literal_spellings(value: str) -> list[list[str]] | None:
    """Per character of `value`, its spellings in `string_literal_expr` (json.dumps with
    ensure_ascii=True and False); None when no JSON text decodes to `value` (a high surrogate
    followed by a low one, which json.loads joins)."""
    spellings = []
    for i, ch in enumerate(value):
        if (
            _HIGH_SURROGATE[0] <= ord(ch) <= _HIGH_SURROGATE[1]
            and i + 1 < len(value)
            and _HIGH_SURROGATE[1] < ord(value[i + 1]) <= SURROGATES[1]
        ):
            return None
        options = {json.dumps(ch)[1:-1]}
        if not SURROGATES[0] <= ord(ch) <= SURROGATES[1]:
            options.add(json.dumps(ch, ensure_ascii=False)[1:-1])
        spellings.append(sorted(options))
    return spellings


_HIGH_SURROGATE = (0xD800, 0xDBFF)


def string_excluding_expr(
    excluded: Iterable[str] = (),
    excluded_patterns: Iterable[str] = (),
    *,
    pattern_constraint: str | None = None,
    min_length=None,
    max_length=None,
    format=None,
    pointer: str = "",
) -> Expr:
    """JSON strings whose value is not in `excluded` and matched by none of `excluded_patterns`.

    For additionalProperties keys: `excluded` are the names in `properties`, `excluded_patterns`
    the `patternProperties` regexes (unanchored ECMA-262).  The optional constraints (a pattern
    the string must match, lengths, format -- e.g. from propertyNames) are intersected in.
    Returns NOTHING when no string is left.
    """
    base = string_dfa(
        min_length=min_length, max_length=max_length, pattern=pattern_constraint, format=format, pointer=pointer
    )
    dfa = base if base is not None else any_string_dfa()
    names = list(excluded)
    if names:
        dfa = budgeted("additionalProperties", pointer, dfa.difference, literal_dfa(names))
    for pat in excluded_patterns:
        dfa = budgeted("patternProperties", pointer, dfa.difference, pattern_dfa(pat, f"{pointer}/patternProperties"))
    return json_string_expr(dfa, pointer, "additionalProperties")
