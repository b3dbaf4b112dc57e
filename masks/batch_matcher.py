"""XGrammar's BatchGrammarMatcher: one object that fills the bitmask rows of many matchers over
threads and advances them together (matcher.batch_fill_next_token_bitmask does the filling)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..core.errors import ArgumentTypeError, InvalidArgumentError
from ..core.threads import resolve_max_threads
from .matcher import GrammarMatcher, batch_fill_next_token_bitmask

__all__ = ["BatchGrammarMatcher"]


class BatchGrammarMatcher:
    """Fills and advances a batch of GrammarMatchers, as XGrammar's class of the same name."""

    def __init__(self, max_threads: int | str = "auto"):
        """`max_threads`: the most threads a fill uses; "auto" is half the CPU cores (at least
        one, at most 8), as XGrammar advises (core/threads.py)."""
        self.max_threads = resolve_max_threads(max_threads, "BatchGrammarMatcher")

    def batch_fill_next_token_bitmask(
        self,
        matchers: Sequence[GrammarMatcher],
        bitmask,
        indices: Sequence[int] | None = None,
        debug_print: bool = False,
    ) -> None:
        """Fill row indices[i] (default i) of the int32 [rows, ceil(V / 32)] bitmask for matcher i.
        debug_print (XGrammar's flag) prints how many tokens each filled row allows."""
        batch_fill_next_token_bitmask(matchers, bitmask, indices, max_threads=self.max_threads)
        if debug_print:
            rows = np.asarray(bitmask)
            for k, row in enumerate(range(len(matchers)) if indices is None else indices):
                allowed = int(
                    np.unpackbits(rows[row].view(np.uint8), bitorder="little")[: matchers[k].vocab_size].sum()
                )
                print(f"row {row}: {allowed} tokens allowed")

    @staticmethod
    def batch_fill_temperature(
        matchers: Sequence[GrammarMatcher], temperatures, indices: Sequence[int] | None = None
    ) -> None:
        """XGrammar's batch_fill_temperature: temperatures[indices[i]] (default: [i]) gets
        matchers[i].temperature, -1 for a matcher without one; `temperatures` is a 1-D float32
        CPU tensor."""
        from .draft import check_temperature_vector

        rows = list(range(len(matchers))) if indices is None else [int(i) for i in indices]
        if len(rows) != len(matchers):
            raise InvalidArgumentError(
                f"batch_fill_temperature: indices size {len(rows)} differs from the {len(matchers)} matchers"
            )
        check_temperature_vector(temperatures, 0, "batch_fill_temperature")
        for matcher, row in zip(matchers, rows):
            if not 0 <= row < len(temperatures):
                raise InvalidArgumentError(
                    f"batch_fill_temperature: index {row} is out of bounds for {len(temperatures)} temperatures"
                )
            temperatures[row] = -1.0 if matcher.temperature is None else matcher.temperature

    @staticmethod
    def batch_accept_token(
        matchers: Sequence[GrammarMatcher], tokens: Sequence[int], debug_print: bool = False
    ) -> list[bool]:
        """Matcher i accepts tokens[i]; whether each did (a refused token changes nothing).
        debug_print (XGrammar's flag) prints that list."""
        _same_length(matchers, tokens, "tokens")
        return _report([matcher.accept_token(token) for matcher, token in zip(matchers, tokens)], debug_print)

    @staticmethod
    def batch_rollback(matchers: Sequence[GrammarMatcher], num_tokens: Sequence[int] | int = 1) -> None:
        """Matcher i rolls back num_tokens[i] tokens (one count for all when an int), as XGrammar's."""
        counts = [num_tokens] * len(matchers) if isinstance(num_tokens, int) else num_tokens
        _same_length(matchers, counts, "num_tokens")
        for matcher, count in zip(matchers, counts):
            matcher.rollback(count)

    @staticmethod
    def batch_accept_string(
        matchers: Sequence[GrammarMatcher], strings: Sequence[str | bytes], debug_print: bool = False
    ) -> list[bool]:
        """Matcher i accepts strings[i]; whether each did.  debug_print (XGrammar's flag) prints
        that list."""
        _same_length(matchers, strings, "strings")
        return _report([matcher.accept_string(text) for matcher, text in zip(matchers, strings)], debug_print)


def _report(accepted: list[bool], debug_print: bool) -> list[bool]:
    """`accepted`, printed first when debug_print (XGrammar's flag) is set."""
    if debug_print:
        print(f"accepted: {accepted}")
    return accepted


def _same_length(matchers, items, name: str) -> None:
    """Check that `matchers` and `items` are sequences of one length (one item per matcher)."""
    for value, what in ((matchers, "matchers"), (items, name)):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ArgumentTypeError(f"BatchGrammarMatcher: {what} must be a list, got {type(value).__name__}")
    if not all(isinstance(matcher, GrammarMatcher) for matcher in matchers):
        raise ArgumentTypeError("BatchGrammarMatcher: matchers must be a list of GrammarMatcher")
    if len(matchers) != len(items):
        raise InvalidArgumentError(
            f"BatchGrammarMatcher: {name} must hold one item per matcher: {len(matchers)} matchers but "
            f"{len(items)} {name}"
        )
