"""The registry of process-wide caches: each cache registers how to clear itself where it is
defined, and `clear_caches()` (public as `pushmask.clear_caches`) forgets them all.

These caches hold pure functions of their keys (rule automata, leaf automata of JSON strings and
numbers), so clearing them changes no result, only how long the next compile takes: benchmarks
clear them to measure cold starts.  A GrammarCompiler's token-mask cache is its own
(GrammarCompiler.clear_cache), not process-wide.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["clear_caches", "register", "registered"]

_CLEARERS: dict[str, Callable[[], None]] = {}


def register(clear: Callable[[], None], name: str) -> Callable[[], None]:
    """Register a process-wide cache by the function that empties it; `name` says what it holds
    (one entry per name: registering a name again replaces it, as a reloaded module does)."""
    _CLEARERS[name] = clear
    return clear


def registered() -> tuple[str, ...]:
    """The names of the caches registered so far (those of the modules imported)."""
    return tuple(_CLEARERS)


def clear_caches() -> None:
    """Empty every registered process-wide cache (for cold-start measurements; results are
    unchanged)."""
    for clear in list(_CLEARERS.values()):
        clear()
