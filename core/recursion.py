"""XGrammar's process-wide maximum recursion depth, and the JSON reader it bounds.

pushmask's grammar parsers walk nesting with explicit stacks (bounded by `Limits.max_nesting`);
the one reader that recurses is Python's `json.loads`, used on schemas and structural tags given
as text.  `load_json_text` measures the text's nesting first, so too deep a document is a
`SchemaError` naming the depth, never a `RecursionError` from inside the parser.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

from .errors import InvalidArgumentError, SchemaError, check_integer

DEFAULT_MAX_RECURSION_DEPTH = 10_000
MAX_SETTABLE_DEPTH = 1_000_000  # XGrammar refuses larger values too

_max_depth = DEFAULT_MAX_RECURSION_DEPTH

# A JSON string (skipped: its brackets do not nest) or one bracket.  The string's loop is
# unrolled (runs of plain characters, then one escape): a megabyte string is one fast scan.
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def get_max_recursion_depth() -> int:
    """How deeply JSON text given to pushmask may nest (XGrammar's name; default 10,000)."""
    return _max_depth


def set_max_recursion_depth(depth: int) -> None:
    """Set get_max_recursion_depth() for the whole process (1 to 1,000,000)."""
    global _max_depth
    depth = check_integer(depth, "depth", "set_max_recursion_depth")
    if not 1 <= depth <= MAX_SETTABLE_DEPTH:
        raise InvalidArgumentError(f"set_max_recursion_depth: depth must be in [1, {MAX_SETTABLE_DEPTH}], got {depth}")
    _max_depth = depth


@contextlib.contextmanager
def max_recursion_depth(depth: int) -> Iterator[None]:
    """Within the block, get_max_recursion_depth() is `depth` (restored afterwards)."""
    previous = get_max_recursion_depth()
    set_max_recursion_depth(depth)
    try:
        yield
    finally:
        set_max_recursion_depth(previous)


def json_nesting(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON text (brackets inside strings skipped)."""
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def load_json_text(text: str | bytes, what: str, error: type[SchemaError] = SchemaError, **loads_options) -> Any:
    """`json.loads(text, **loads_options)`, refused with `error` (a SchemaError) when `what` nests
    past the recursion depth or past what Python's recursive parser can read."""
    decoded = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    depth = json_nesting(decoded)
    if depth > _max_depth:
        raise error(
            f"Maximum recursion depth exceeded: the {what} nests {depth} levels, more than "
            f"max_recursion_depth={_max_depth} (see pushmask.set_max_recursion_depth)"
        )
    try:
        return json.loads(text, **loads_options)
    except RecursionError:
        raise error(
            f"Maximum recursion depth exceeded: the {what} nests {depth} levels, deeper than Python's JSON reader goes"
        ) from None
