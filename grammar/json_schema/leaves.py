"""The string and number automata the schema compiler builds its leaves from (codepoint_dfa,
ecma_regex, json_formats, json_strings, json_numbers), memoised where they are slow, and the
budget of their products."""

from __future__ import annotations

from collections.abc import Callable

from .. import caches, ecma_regex, json_formats, json_numbers
from ..codepoint_dfa import StateBudgetExceeded, any_string_dfa, budgeted, literal_dfa
from ..ecma_regex import pattern_dfa
from ..errors import UnsupportedSchemaError
from ..ir import Expr
from ..json_formats import format_dfa
from ..json_strings import (
    ANY_STRING,
    JSON_ESCAPE,
    RAW_STRING_CHAR,
    check_lengths,
    json_string_expr,
    string_dfa,
    string_literal_expr,
)
from ..limits import DEFAULT_LIMITS

# The string-automaton names the package uses come through here: one importer of those modules in it.
__all__ = [
    "ANY_STRING", "JSON_ESCAPE", "RAW_STRING_CHAR", "any_string_dfa", "check_lengths", "format_dfa",
    "json_string_expr", "literal_dfa", "pattern_dfa", "string_dfa", "string_literal_expr", "clear_leaf_cache",
]

_leaf_cache: dict = {}


def clear_leaf_cache() -> None:
    """Forget the memoised leaf automata: numbers, patterns, formats (for cold-start measurements)."""
    _leaf_cache.clear()
    ecma_regex._pattern_dfa_cached.cache_clear()
    json_formats._format_dfa_cached.cache_clear()


caches.register(clear_leaf_cache, "JSON Schema leaf automata: numbers, patterns, formats")


def cached_leaf(kind: str, kwargs: dict) -> Expr:
    """Leaf automata are pure functions of their arguments and can be slow: memoise them."""
    key = (kind, tuple(sorted((k, repr(v)) for k, v in kwargs.items() if k != "pointer")))
    if key not in _leaf_cache:
        if len(_leaf_cache) > 4096:
            _leaf_cache.clear()
        fn = {"integer": json_numbers.integer_expr, "number": json_numbers.number_expr,
              "literal": json_numbers.number_literal_expr}[kind]
        _leaf_cache[key] = fn(**kwargs)
    return _leaf_cache[key]


def integer_leaf(**kwargs) -> Expr:
    return cached_leaf("integer", kwargs)


def number_leaf(**kwargs) -> Expr:
    return cached_leaf("number", kwargs)


def budgeted_dfa_op(fn: Callable, other, keyword: str, pointer: str, budget: int = DEFAULT_LIMITS.max_string_states):
    """`fn(other, budget)` for a product of string automata (Dfa.intersect / difference / union);
    past the budget, UnsupportedSchemaError(keyword) naming Limits.max_string_states."""
    return budgeted(keyword, pointer, fn, other, budget)


_search_cache: dict[tuple[str, str], bool] = {}
caches.register(_search_cache.clear, "JSON Schema patternProperties matches")


def pattern_search(pattern: str, name: str, pointer: str) -> bool:
    """Does the (ECMA, unanchored) pattern match `name`?  Decided by our pattern automaton."""
    key = (pattern, name)
    if key not in _search_cache:
        if len(_search_cache) > 65536:
            _search_cache.clear()
        _search_cache[key] = pattern_dfa(pattern, f"{pointer}/patternProperties").accepts(name)
    return _search_cache[key]


def closed_names_disjoint(x: dict, y: dict) -> bool:
    """Both terms are closed objects and no member name is allowed by both (conservative:
    a name excluded by other keywords still counts as allowed)."""
    sources = []
    for f in (x, y):
        if f.get("additionalProperties") is not False:
            return False
        names = [n for n, sub in (f.get("properties") or {}).items() if sub is not False]
        patterns = [p for p, sub in (f.get("patternProperties") or {}).items() if sub is not False]
        sources.append((set(names), patterns))
    (names_x, patterns_x), (names_y, patterns_y) = sources
    if names_x & names_y:
        return False
    if any(pattern_search(p, n, "#") for p in patterns_y for n in names_x) or \
            any(pattern_search(p, n, "#") for p in patterns_x for n in names_y):
        return False
    try:
        return all(pattern_dfa(p, "#").intersect(pattern_dfa(q, "#")).is_empty()
                   for p in patterns_x for q in patterns_y)
    except (StateBudgetExceeded, UnsupportedSchemaError):
        return False
