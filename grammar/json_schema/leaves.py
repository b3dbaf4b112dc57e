"""The string and number automata the schema compiler builds its leaves from (codepoint_dfa,
ecma_regex, json_formats, json_strings, json_numbers), memoised where they are slow, and the
budget of their products."""

from __future__ import annotations

from collections.abc import Callable

from ...core.caches import BoundedCache
from ...core.limits import DEFAULT_LIMITS
from .. import json_numbers
from ..ecma_regex import pattern_dfa
from ..fsm.codepoint_dfa import StateLimitExceeded, any_string_dfa, budgeted, literal_dfa
from ..ir import Expr
from ..json_formats import format_dfa
from ..json_strings import (
    ANY_STRING,
    JSON_ESCAPE,
    RAW_STRING_CHAR,
    check_lengths,
    json_string_expr,
    json_string_without,
    string_dfa,
    string_literal_expr,
    string_literal_without,
)

# The string-automaton names the package uses come through here: one importer of those modules in it.
__all__ = [
    "ANY_STRING",
    "JSON_ESCAPE",
    "RAW_STRING_CHAR",
    "StateLimitExceeded",
    "any_string_dfa",
    "check_lengths",
    "format_dfa",
    "json_string_expr",
    "json_string_without",
    "literal_dfa",
    "pattern_dfa",
    "string_dfa",
    "string_literal_expr",
    "string_literal_without",
]

_leaf_cache: BoundedCache[tuple, Expr] = BoundedCache(
    4096, name="JSON Schema number leaf automata (grammar/json_schema/leaves.py)"
)


def cached_leaf(kind: str, kwargs: dict) -> Expr:
    """Leaf automata are pure functions of their arguments and can be slow: memoise them."""
    key = (kind, tuple(sorted((k, repr(v)) for k, v in kwargs.items() if k != "pointer")))
    makers: dict[str, Callable[..., Expr]] = {
        "integer": json_numbers.integer_expr,
        "number": json_numbers.number_expr,
        "literal": json_numbers.number_literal_expr,
    }
    fn = makers[kind]
    return _leaf_cache.get_or_make(key, lambda: fn(**kwargs))


def integer_leaf(**kwargs) -> Expr:
    return cached_leaf("integer", kwargs)


def number_leaf(**kwargs) -> Expr:
    return cached_leaf("number", kwargs)


def budgeted_dfa_op(fn: Callable, other, keyword: str, pointer: str, budget: int = DEFAULT_LIMITS.max_string_states):
    """`fn(other, budget)` for a product of string automata (Dfa.intersect / difference / union);
    past the budget, UnsupportedSchemaError(keyword) naming Limits.max_string_states."""
    return budgeted(keyword, pointer, fn, other, budget)


_search_cache: BoundedCache[tuple[str, str], bool] = BoundedCache(
    65536, name="JSON Schema patternProperties matches of member names (grammar/json_schema/leaves.py)"
)


def pattern_search(pattern: str, name: str, pointer: str) -> bool:
    """Does the (ECMA, unanchored) pattern match `name`?  Decided by our pattern automaton."""
    return _search_cache.get_or_make(
        (pattern, name), lambda: pattern_dfa(pattern, f"{pointer}/patternProperties").accepts(name)
    )
