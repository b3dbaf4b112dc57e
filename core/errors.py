"""Errors raised by pushmask. They live in the lowest layer so every layer can raise them."""

from __future__ import annotations

import operator
import time
from typing import Any


class PushmaskError(Exception):
    """Base class of every error pushmask raises on bad input or exhausted limits."""


class GrammarError(PushmaskError, ValueError, RuntimeError):
    """A malformed grammar: carries the 1-based line and column where the problem is, when known.
    Also a RuntimeError, which XGrammar raises for the same inputs."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        where = f" (line {line}, column {column})" if line is not None else ""
        super().__init__(f"{message}{where}")


class SchemaError(PushmaskError, ValueError, RuntimeError):
    """A malformed or unsatisfiable JSON Schema; `pointer` is the JSON pointer of the offending
    keyword. Also a RuntimeError, which XGrammar raises for the same inputs."""

    def __init__(self, message: str, pointer: str = ""):
        self.message = message
        self.pointer = pointer
        super().__init__(f"{message} (at {pointer or '#'})")


class InvalidJSONError(SchemaError):
    """Schema text that is not JSON (XGrammar's name); the message says where it breaks."""


class UnsupportedSchemaError(SchemaError):
    """A valid schema keyword the grammar cannot express exactly (pass lenient=True to widen it)."""

    def __init__(self, keyword: str, pointer: str = "", detail: str = ""):
        self.keyword = keyword
        message = f"unsupported JSON Schema keyword {keyword!r}"
        if detail:
            message += f": {detail}"
        message += "; pass lenient=True to widen it with a warning"
        super().__init__(message, pointer)


class UnsupportedFormatError(GrammarError):
    """A structural-tag format (or option) pushmask cannot compile exactly."""


class NotProvidedError(PushmaskError, NotImplementedError):
    """An XGrammar name pushmask keeps so that code importing it loads, but does not implement:
    one of XGrammar's internals (its EBNF text, its rule FSMs); the message says what to use."""


class LimitExceededError(PushmaskError, RuntimeError):
    """A compile or match limit (states, stack tops, work units) ran out; the message says how to fix it."""


class ArgumentTypeError(PushmaskError, TypeError):
    """A public entry point got an argument of the wrong type; the message names the argument."""


class InvalidArgumentError(PushmaskError, ValueError, RuntimeError):
    """A public entry point got an argument of the right type but a bad value (a token id outside
    the vocabulary, a bitmask too narrow, a rollback past the history); the message names the
    argument and what would be accepted. Also a RuntimeError, as XGrammar raises for these."""


class IndexOutOfRangeError(InvalidArgumentError, IndexError):
    """An index argument (a row of the logits or bitmask, a template position) outside what it
    indexes; also an IndexError, as Python's own sequences raise."""


class InvalidDraftTreeError(InvalidArgumentError, RuntimeError):
    """A draft token tree that is not one (an edge outside the nodes, a node reached twice, a root
    with siblings) or does not fit its arrays; also a RuntimeError, as XGrammar raises."""


class MatcherStateError(PushmaskError, RuntimeError):
    """A matcher call its current state does not allow (accepting after a stop token ended the
    match); the message says which call brings it back (reset() or rollback())."""


class IncompatibleEnvironmentError(PushmaskError, RuntimeError):
    """The installed packages lack what pushmask was written for (a vLLM without the
    structured-output interfaces pushmask plugs into); the message names the fix."""


class InternalError(PushmaskError, RuntimeError):
    """A check of pushmask's own invariants failed: a bug in pushmask, to be reported with the
    grammar and the input that raised it."""


def check_argument(value: object, expected: type | tuple[type, ...], name: str, where: str, hint: str = "") -> None:
    """Raise ArgumentTypeError unless `value` is an instance of `expected`."""
    if not isinstance(value, expected):
        types = expected if isinstance(expected, tuple) else (expected,)
        wanted = " or ".join(t.__name__ for t in types)
        raise ArgumentTypeError(
            f"{where}: {name} must be {wanted}, got {type(value).__name__}" + (f"; {hint}" if hint else "")
        )


def check_integer(value: Any, name: str, where: str, minimum: int | None = None) -> int:
    """`value` as an int: ArgumentTypeError unless it is an integer (a numpy or 0-d torch integer
    passes, a bool, float or string does not), InvalidArgumentError below `minimum`."""
    if not isinstance(value, bool):
        try:
            value = operator.index(value)
        except TypeError:
            pass
    if not isinstance(value, int) or isinstance(value, bool):
        hint = "; pass text to accept_string" if isinstance(value, (str, bytes)) and name == "token_id" else ""
        raise ArgumentTypeError(f"{where}: {name} must be an int, got {type(value).__name__} {value!r:.40}{hint}")
    if minimum is not None and value < minimum:
        raise InvalidArgumentError(f"{where}: {name} must be >= {minimum}, got {value}")
    return value


def check_integers(values: Any, name: str, where: str) -> list[int]:
    """A sequence of ints (token ids) as a list: ArgumentTypeError for text or a non-sequence."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ArgumentTypeError(f"{where}: {name} must be a sequence of ints, got {type(values).__name__}")
    return [check_integer(v, f"{name}[{i}]", where) for i, v in enumerate(values)]


class CompileClock:
    """The wall-clock compile limit (`Limits.compile_time_limit_s`), checked between compile
    steps (passes, rules, subschemas).  The last resort: the size budgets fire first and
    sooner; a single numba kernel call is never interrupted, only the step after it."""

    def __init__(self, limit_s: float | None = None):
        self.limit_s = limit_s
        self.deadline = None if limit_s is None else time.monotonic() + limit_s

    def check(self, stage: str) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise LimitExceededError(
                f"compiling took longer than compile_time_limit_s={self.limit_s} s (stopped "
                f"in {stage}); simplify the input or raise Limits.compile_time_limit_s"
            )


class BudgetTooSmallError(PushmaskError, ValueError):
    """A token budget (max_tokens / max_new_tokens) below what the grammar needs to finish; the
    message says how many tokens suffice."""
