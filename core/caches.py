"""The registry of process-wide caches, and the one bounded cache they are built from.

Every process-wide cache of the package is a `BoundedCache` given a name where it is defined
(directly, or behind `memoized` for a pure function), which registers it here: `registered()`
lists them, `cache_registry()` (public as `pushmask.cache_registry`) says how full each is, and
`clear_caches()` (public as `pushmask.clear_caches`) empties them all.  These caches hold pure
functions of their keys (rule automata, leaf automata of JSON strings and numbers, Unicode
tables), so clearing them changes no result, only how long the next compile takes: benchmarks
clear them to measure cold starts.  A GrammarCompiler's caches (its compiled grammars and token
masks) and a matcher's memos are their own (`BoundedCache`s without a name), not process-wide;
so is what a weak dictionary keeps beside an object for its lifetime (a grammar's budget table,
a trie's automaton), which the object's owner frees.

`BoundedCache` is the one least-recently-used map of the package: bounded by a total cost (one
per entry unless the cache weighs its values), safe to share between threads.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, NamedTuple, TypeVar, cast, overload

__all__ = [
    "BoundedCache",
    "CacheInfo",
    "cache_registry",
    "clear_caches",
    "memoized",
    "registered",
    "release_free_heap",
]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")
F = TypeVar("F", bound=Callable[..., Any])

_REGISTRY: dict[str, BoundedCache[Any, Any]] = {}
_MISSING = object()  # get's default where a stored None must not read as a miss


class CacheInfo(NamedTuple):
    """How full a BoundedCache is: its entries, their total cost against `max_cost` (-1: no
    bound; the cost is the entry count unless the cache weighs its values), and its look-ups."""

    entries: int
    cost: int
    max_cost: int
    hits: int
    misses: int


def registered() -> tuple[str, ...]:
    """The names of the process-wide caches registered so far (those of the modules imported)."""
    return tuple(_REGISTRY)


CACHE_MODULES = (
    "pushmask.automata.utf8",
    "pushmask.grammar.ecma_regex",
    "pushmask.grammar.json_formats",
    "pushmask.grammar.json_numbers",
    "pushmask.grammar.json_strings",
    "pushmask.grammar.json_schema.documents",
    "pushmask.grammar.json_schema.leaves",
    "pushmask.grammar.json_schema.metaschema",
    "pushmask.jsonschemabench.runner",
)
"""The modules with process-wide caches that `import pushmask` does not import (the front ends
load on first use); cache_registry imports them to list every cache."""


def cache_registry() -> dict[str, CacheInfo]:
    """Every process-wide cache of the package by name (what it holds, and its file), with how
    full it is now."""
    for module in CACHE_MODULES:
        importlib.import_module(module)
    return {name: cache.info() for name, cache in list(_REGISTRY.items())}


def clear_caches(*, tables: bool = True) -> None:
    """Empty every registered process-wide cache (for cold-start measurements, or to give their
    memory back; results are unchanged), then hand the C heap's free pages back to the system.
    `tables=False` keeps the caches of fixed tables (`BoundedCache(table=True)`: Unicode,
    metaschema checkers, kernel stamps), which no input changes and a server builds once: what a
    benchmark of a new request's cold compile clears."""
    for cache in list(_REGISTRY.values()):
        if tables or not cache.table:
            cache.clear()
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
    `max_cost` -1 means no bound.  With a `name` (what it holds, and its file) the cache is
    process-wide: it is registered under that name, and `clear_caches()` empties it (naming a
    cache again replaces the entry, as a reloaded module does).  `table`: it holds fixed tables,
    the same whatever the input (see clear_caches).
    """

    def __init__(
        self, max_cost: int, *, cost: Callable[[V], int] | None = None, name: str | None = None, table: bool = False
    ):
        self.max_cost = max_cost
        self.table = table
        self._cost = cost
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.total_cost = 0
        self.hits = 0
        self.misses = 0
        self.stored = 0
        self.evicted = 0
        if name is not None:
            _REGISTRY[name] = self

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
        once may both make it; the later one is kept).  A stored None is a value, not a miss."""
        value = self.get(key, _MISSING)
        if value is _MISSING:
            value = make()
            self.put(key, value)
        return value  # type: ignore[return-value]

    def values(self) -> list[V]:
        """The values stored now, least recently used first (a snapshot)."""
        with self._lock:
            return [value for value, _ in self._entries.values()]

    def info(self) -> CacheInfo:
        """How full the cache is now, and its hits and misses so far."""
        with self._lock:
            return CacheInfo(len(self._entries), self.total_cost, self.max_cost, self.hits, self.misses)

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


def memoized(max_entries: int, *, name: str, table: bool = False) -> Callable[[F], F]:
    """Memoise a pure function of hashable positional arguments in a process-wide BoundedCache of
    `max_entries` entries registered as `name` (`table`: of fixed tables, as BoundedCache says):
    functools.lru_cache's job under this module's policy (bounded, thread-safe, emptied by
    clear_caches).  A call that raises stores nothing.  The wrapper's `cache` is its BoundedCache."""

    def decorate(function: F) -> F:
        cache: BoundedCache[tuple[Hashable, ...], object] = BoundedCache(max_entries, name=name, table=table)

        @functools.wraps(function)
        def memo(*args: Hashable) -> object:
            return cache.get_or_make(args, lambda: function(*args))

        memo.cache = cache  # type: ignore[attr-defined]
        return cast(F, memo)

    return decorate
