"""The registry of process-wide caches, and the one bounded cache they are built from.

Each process-wide cache registers how to clear itself where it is defined, and `clear_caches()`
(public as `pushmask.clear_caches`) forgets them all.  These caches hold pure functions of their
keys (rule automata, leaf automata of JSON strings and numbers), so clearing them changes no
result, only how long the next compile takes: benchmarks clear them to measure cold starts.  A
GrammarCompiler's caches (its compiled grammars and token masks) are its own
(GrammarCompiler.clear_cache), not process-wide.

`BoundedCache` is the one least-recently-used map of the package: bounded by a total cost (one
per entry unless the cache weighs its values), safe to share between threads, and registered
here when it is given a name.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, overload

__all__ = ["BoundedCache", "clear_caches", "register", "registered", "release_free_heap"]

_CLEARERS: dict[str, Callable[[], None]] = {}

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")


def register(clear: Callable[[], None], name: str) -> Callable[[], None]:
    """Register a process-wide cache by the function that empties it; `name` says what it holds
    (one entry per name: registering a name again replaces it, as a reloaded module does)."""
    _CLEARERS[name] = clear
    return clear


def registered() -> tuple[str, ...]:
    """The names of the caches registered so far (those of the modules imported)."""
    return tuple(_CLEARERS)


def clear_caches() -> None:
    """Empty every registered process-wide cache (for cold-start measurements, or to give their
    memory back; results are unchanged), then hand the C heap's free pages back to the system."""
    for clear in list(_CLEARERS.values()):
        clear()
    release_free_heap()


def release_free_heap() -> None:
    """Return the C heap's free pages to the system (glibc's `malloc_trim`; a no-op elsewhere).
    Freed arrays and objects otherwise stay resident in glibc's heap: a process that emptied its
    caches after 300 MaskBench schemas kept 936 MiB resident, 651 MiB once trimmed."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _find_malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim among the symbols this process has loaded, or None where the C library
    has none (musl, macOS) or the process's own symbols cannot be opened (Windows)."""
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except (OSError, TypeError):
        return None


_malloc_trim = _find_malloc_trim()


class BoundedCache(Generic[K, V]):
    """A thread-safe map that drops its least recently used entries once their total cost passes
    `max_cost` (the newest entry always stays, whatever its cost).

    `cost(value)` weighs an entry when it is stored (1 each by default: a bound on entries);
    `max_cost` -1 means no bound.  With a `name` the cache is process-wide: it registers its
    `clear` with `clear_caches()` under that name.
    """

    def __init__(self, max_cost: int, *, cost: Callable[[V], int] | None = None, name: str | None = None):
        self.max_cost = max_cost
        self._cost = cost
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.total_cost = 0
        self.hits = 0
        self.misses = 0
        self.stored = 0
        self.evicted = 0
        if name is not None:
            register(self.clear, name)

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: D) -> V | D: ...

    def get(self, key: K, default: object = None) -> object:
        """The value stored under key (now the most recently used), or `default` (None: pass
        another default where None is a value stored)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return default
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: K, value: V) -> None:
        """Store value under key (replacing an earlier one), then drop the least recently used
        entries past max_cost."""
        weight = 1 if self._cost is None else int(self._cost(value))
        with self._lock:
            self.stored += 1
            old = self._entries.pop(key, None)
            if old is not None:
                self.total_cost -= old[1]
            self._entries[key] = (value, weight)
            self.total_cost += weight
            while 0 <= self.max_cost < self.total_cost and len(self._entries) > 1:
                self.total_cost -= self._entries.popitem(last=False)[1][1]
                self.evicted += 1

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The value under key, made by `make()` and stored on a miss (two threads missing at
        once may both make it; the later one is kept)."""
        value = self.get(key)
        if value is None:
            value = make()
            self.put(key, value)
        return value

    def values(self) -> list[V]:
        """The values stored now, least recently used first (a snapshot)."""
        with self._lock:
            return [value for value, _ in self._entries.values()]

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
            self.total_cost = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries
