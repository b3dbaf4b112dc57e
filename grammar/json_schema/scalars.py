"""String and number values: the leaf automata of one flat term's string / number keywords
(functions over the emitter, which memoises the counted-string rules)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.errors import SchemaError, UnsupportedSchemaError
from ..ir import NOTHING, Expr, alt, lit, seq
from .forms import Term, ranges_disjoint
from .leaves import (
    JSON_ESCAPE,
    RAW_STRING_CHAR,
    any_string_dfa,
    check_lengths,
    format_dfa,
    integer_leaf,
    literal_dfa,
    number_leaf,
)

if TYPE_CHECKING:
    from .emit import Emitter

STRING_COUNT_BLOCK = 1024
"""Strings with only a length bound count characters directly up to this many, in a chain of
rules of this many past it (each character a raw code point or a reference to one shared escape
rule, ~8 states a count; see `chained`)."""
STRING_CHAIN_MAX_LINKS = 96
"""Past this many blocks a chain's automata outgrow Limits.max_total_states, so longer bounds
(up to maxLength 2**32 and beyond) count in nested blocks instead (`counted`, a few rules for
any bound, exact; its masks defer more tokens at block ends)."""
SHORT_STRING = 64
"""Length bounds up to this go into the string's code-point automaton (escapes spelt out)."""


def string_value(em: Emitter, f: Term, pointer: str) -> Expr:
    """The IR of the strings one flat term allows (length, patterns, format, excluded values)."""
    s = f.string
    # a pattern that finds a match in every string (e.g. "([a-z]+)?") constrains nothing
    patterns = [em.string_pattern(p, f"{pointer}/pattern") for p in s.patterns]
    patterns = [p for p in patterns if not em.pattern_dfa(p, f"{pointer}/pattern").is_universal()]
    fmt = s.format
    exclusions = f.exclusions
    excluded = [v for part in exclusions for v in part.enum or ()]
    excluded_patterns = [part.pattern for part in exclusions if part.pattern is not None]
    lo, hi = check_lengths(s.min_length, s.max_length, pointer, allow_empty=True)
    if hi is not None and lo > hi:  # e.g. merged from allOf/oneOf branches: this term is empty
        em.ctx.note_empty(pointer, f"minLength {lo} > maxLength {hi}: no string satisfies both")
        return NOTHING
    # JsonOptions.string_excludes filter the strings not held to a pattern or a known format (XGrammar's)
    own_pattern = bool(s.patterns) or (fmt is not None and format_dfa(fmt) is not None)
    filtered = bool(em.ctx.options.string_excludes) and not own_pattern
    if (
        max(lo, hi or 0) > SHORT_STRING
        and not patterns
        and not exclusions
        and not filtered
        and (fmt is None or format_dfa(fmt) is None)
    ):
        # only a length constraint: count characters, escapes as one shared rule
        key = ("string_chars", lo, hi)
        if key not in em.memo:  # one rule per length bound: shared by its strings, not inlined
            count = em.chained if max(lo, hi or 0) <= STRING_CHAIN_MAX_LINKS * STRING_COUNT_BLOCK else em.counted
            em.memo[key] = em.rule_ref("string_chars", count(json_char(em), lo, hi, "string_chars", STRING_COUNT_BLOCK))
        return seq(lit('"'), em.memo[key], lit('"'))
    try:
        dfa = em.string_dfa(
            min_length=lo, max_length=hi, pattern=patterns[0] if patterns else None, format=fmt, pointer=pointer
        )
    except UnsupportedSchemaError as exc:
        if exc.keyword != "format" or not em.ctx.mode.lenient:
            raise
        em.ctx.unsupported("format", pointer, str(exc.message))
        dfa = em.string_dfa(min_length=lo, max_length=hi, pattern=patterns[0] if patterns else None, pointer=pointer)
    if dfa is None and len(patterns) <= 1 and not exclusions:
        return em.string_token(None, pointer, "pattern", filtered)
    if dfa is None:
        dfa = any_string_dfa()
    for extra in patterns[1:]:
        dfa = em.dfa_op(dfa.intersect, em.pattern_dfa(extra, f"{pointer}/allOf"), "pattern", pointer)
    if excluded:
        dfa = em.dfa_op(dfa.difference, literal_dfa(excluded), "not", pointer)
    for pattern in excluded_patterns:
        dfa = em.dfa_op(dfa.difference, em.pattern_dfa(pattern, f"{pointer}/not/pattern"), "not", pointer)
    return em.string_token(dfa, pointer, "pattern", filtered)


def json_char(em: Emitter) -> Expr:
    """One JSON string character: a raw code point, or a reference to the escape rule
    (backslash escapes and surrogate pairs), so counted strings hold it once."""
    if em.escape_rule is None:
        em.escape_rule = em.rule_ref("string_escape", JSON_ESCAPE)
    return alt(RAW_STRING_CHAR, em.escape_rule)


def number_value(em: Emitter, f: Term, pointer: str, integer: bool) -> Expr:
    """The IR of the numbers (integers) one flat term allows."""
    n = f.number
    kwargs: dict[str, object] = dict(
        minimum=n.minimum,
        maximum=n.maximum,
        exclusive_minimum=n.exclusive_minimum,
        exclusive_maximum=n.exclusive_maximum,
        multiple_of=n.multiple_of,
        pointer=pointer,
        budget=em.ctx.limits.max_string_states,
    )
    lo, hi = n.range()
    if ranges_disjoint(lo, hi, lo, hi):
        em.ctx.note_empty(pointer, "minimum/maximum leave no number")
        return NOTHING
    non_integral = any(part.integer for part in f.exclusions)
    if integer and non_integral:
        return NOTHING
    not_multiple_of = tuple(sorted({int(part.multiple_of) for part in f.exclusions if part.multiple_of is not None}))
    if not_multiple_of:
        kwargs["not_multiple_of"] = not_multiple_of
    kwargs["remainder_budget"] = em.ctx.limits.max_rule_states  # the rule holds the remainder automaton
    if integer:
        kwargs["zero_fraction"] = em.ctx.draft != "draft4"
    elif non_integral:
        kwargs["non_integral"] = True
    try:
        return integer_leaf(**kwargs) if integer else number_leaf(**kwargs)
    except UnsupportedSchemaError as exc:
        if not em.ctx.mode.lenient or exc.keyword != "multipleOf":
            raise
        em.ctx.unsupported("multipleOf", pointer, exc.message)
        kwargs["multiple_of"] = None
        return integer_leaf(**kwargs) if integer else number_leaf(**kwargs)
    except SchemaError as exc:  # the leaf reports an empty range (e.g. no integer in (1, 2))
        em.ctx.note_empty(exc.pointer or pointer, exc.message)
        return NOTHING
