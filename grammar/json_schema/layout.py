"""The whitespace layout of emitted JSON: flexible, compact, fixed separators or json.dumps indent."""

from __future__ import annotations

from ...core.errors import InvalidArgumentError
from ..ir import EPSILON, CharClass, lit, rep, seq

INDENT_DEPTH_LIMIT = 12
"""Nesting depth up to which `indent=` layout is exact; deeper values use flexible whitespace."""
_WS_RANGES = ((9, 10), (13, 13), (32, 32))


class Layout:
    """Token separators for one nesting depth.

    depth None means "depth-independent": flexible or compact whitespace, or fixed separators.
    With indent, depth d gives json.dumps(indent=N) text at that depth.
    """

    def __init__(self, whitespace: str, indent, max_whitespace, separators, root_whitespace: bool = True):
        if whitespace not in ("flexible", "compact"):
            raise InvalidArgumentError(f"whitespace must be 'flexible' or 'compact', got {whitespace!r}")
        if max_whitespace is not None and (not isinstance(max_whitespace, int) or max_whitespace < 0):
            raise InvalidArgumentError(f"max_whitespace must be a non-negative int, got {max_whitespace!r}")
        if isinstance(indent, int) and not isinstance(indent, bool):
            indent = " " * indent if indent >= 0 else None
        elif indent is not None and not isinstance(indent, str):
            raise InvalidArgumentError(f"indent must be an int or a string, got {indent!r}")
        self.indent = indent
        if separators is not None:
            item_sep, key_sep = separators
        elif indent is not None:
            item_sep, key_sep = ",", ": "
        elif whitespace == "compact":
            item_sep, key_sep = ",", ":"
        else:
            item_sep, key_sep = None, None
        self.fixed = separators is not None or indent is not None or whitespace == "compact"
        self.item_sep, self.key_sep = item_sep, key_sep
        cls = CharClass(_WS_RANGES)
        self.flex_ws = rep(cls, 0, max_whitespace)
        self.root_ws = EPSILON if self.fixed or not root_whitespace else self.flex_ws

    def child(self, depth):
        if self.indent is None or depth is None:
            return None
        return depth + 1 if depth + 1 < INDENT_DEPTH_LIMIT else None

    def start_depth(self):
        return 0 if self.indent is not None else None

    def parts(self, depth, open_: str, close: str):
        """(open, first_prefix, next_prefix, colon, item_end, close_empty, close_nonempty)."""
        if self.indent is not None and depth is not None:
            inner = "\n" + self.indent * (depth + 1)
            outer = "\n" + self.indent * depth
            return (
                lit(open_),
                lit(inner),
                lit(self.item_sep + inner),
                lit(self.key_sep),
                EPSILON,
                lit(close),
                lit(outer + close),
            )
        if self.fixed and not (self.indent is not None and depth is None):
            return (lit(open_), EPSILON, lit(self.item_sep), lit(self.key_sep), EPSILON, lit(close), lit(close))
        ws = self.flex_ws
        return (seq(lit(open_), ws), EPSILON, seq(lit(","), ws), seq(ws, lit(":"), ws), ws, lit(close), lit(close))
