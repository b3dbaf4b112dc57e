"""The compiler's cross-grammar mask cache as flat arrays: the store kernel looks a first visit's
mask up in it without a lock (masks/state_masks.py), and the masks a grammar computed go in under
the cache's lock, in one kernel call per step (state_masks.share_first_visits).

A mask is keyed by four int64s: its state's structural hash (automata/pda.py, state_hash) and its
rule's follow-pairs digest; equal keys mean equal masks for every grammar of one compiler.

    slots    int64 [capacity, a power of two]: 1 + the index of an entry, 0 = empty (open
             addressing, linear probing; at most half full)
    entries  int64 [rows, ENTRY_FIELDS]: the key, where the mask's words start in `pool`, its
             kind, data length, uncertain count and accepted count
    pool     int32 [words]: each entry's data, then its uncertain positions, ids and lcp, in a
             row (a grammar's mask store holds them the same way: masks/walk.py)

Masks go in under the cache's lock (a KernelLock: a batch fill's kernel puts in the masks a row
computed while it holds that row's grammar lock, taking the cache's only if free; Python waits
for it), into room made beforehand: a kernel inserts only into the arrays `current` names and
while `used` says they have room, else leaves the masks to Python (share_first_visits after the
step).  An entry and its words are written before the slot that names it, so a reader that finds a slot
finds them whole (x86 and ARM keep a thread's stores to different arrays in order for numba,
which cannot prove they do not alias).  A full table is replaced by a larger copy, never changed
in place, so a reader keeps using the arrays it started with; past the byte limit the cache
starts empty again (the masks stay in the grammars that copied them).
"""

from __future__ import annotations

import os

import numpy as np

from ..core.jit import njit
from .kernel_memory import KernelLock, release_fence

E_KEY, E_AT, E_KIND, E_SIZE, E_UNCERTAIN, E_ACCEPTED = 0, 4, 5, 6, 7, 8
ENTRY_FIELDS = 9
KEY_WORDS = 4
FIRST_ENTRIES = 256
FIRST_WORDS = 1 << 16
"""A table's least room once it holds a mask (it starts with none)."""


@njit(cache=True, inline="always")
def _slot_of(key, mask):
    """The first slot probed for a key (its state hash is already uniform)."""
    return (key[0] ^ key[2]) & mask


@njit(cache=True)
def find_shared(slots, entries, key):
    """The entry holding `key` (4 int64), or -1."""
    mask = slots.shape[0] - 1
    h = _slot_of(key, mask)
    while slots[h] != 0:
        e = slots[h] - 1
        if entries[e, 0] == key[0] and entries[e, 1] == key[1] and entries[e, 2] == key[2] and entries[e, 3] == key[3]:
            return e
        h = (h + 1) & mask
    return -1


@njit(cache=True)
def _link(slots, entries, e):
    """Name entry e from the first free slot of its probe sequence."""
    mask = slots.shape[0] - 1
    h = _slot_of(entries[e, :KEY_WORDS], mask)
    while slots[h] != 0:
        h = (h + 1) & mask
    slots[h] = e + 1


@njit(cache=True, nogil=True)
def _relink(slots, entries, n_entries):
    """Name entries 0..n_entries-1 from an empty (larger) slot array."""
    for e in range(n_entries):
        _link(slots, entries, e)


@njit(cache=True)
def has_room(slots, entries, pool, used, current, n_new, words):
    """Whether these arrays are the table's current ones (`current` names its slots; the caller
    holds the lock) with room for n_new more masks of `words` words in all."""
    return (
        slots.shape[0] > 0
        and current[0] == slots.ctypes.data
        and used[0] + n_new <= entries.shape[0]
        and used[1] + words <= pool.shape[0]
    )


@njit(cache=True)
def insert_mask(slots, entries, pool, used, key, words, kind, size, n_uncertain, accepted):
    """Add a mask (its words: data then uncertain parts) under `key` unless the key is there;
    used = [entries, pool words] (the caller made room).  Returns 1 if added, else 0."""
    if find_shared(slots, entries, key) >= 0:
        return 0
    total = size + 3 * n_uncertain
    e, to = used[0], used[1]
    pool[to : to + total] = words[:total]
    entries[e, :KEY_WORDS] = key
    entries[e, E_AT] = to
    entries[e, E_KIND] = kind
    entries[e, E_SIZE] = size
    entries[e, E_UNCERTAIN] = n_uncertain
    entries[e, E_ACCEPTED] = accepted
    used[0] = e + 1
    used[1] = to + total
    release_fence()  # a reader that finds the slot finds the entry whole
    _link(slots, entries, e)
    return 1


def _room(n_entries: int, n_words: int, rows: int, words: int) -> tuple[int, int]:
    """(rows, words) of a table that holds n_entries entries of n_words words in all, from one of
    `rows` and `words`: each doubled or grown by half when short (copies stay amortised linear),
    at least FIRST_ENTRIES / FIRST_WORDS."""
    if n_entries > rows:
        rows = max(FIRST_ENTRIES, 2 * rows, 1 << (n_entries - 1).bit_length())
    if n_words > words:
        words = max(FIRST_WORDS, n_words, words + words // 2)
    return rows, words


def _table_bytes(rows: int, words: int) -> int:
    """Bytes of a table with room for `rows` entries and `words` pool words."""
    return (2 * rows + rows * ENTRY_FIELDS) * 8 + words * 4


class SharedMasks:
    """The table above, its byte limit (-1: none, 0: holds nothing) and counters; `tables()` is
    what a store kernel reads (one consistent set, even while another thread adds), `secret` the
    state hashes' key (random per process: an input cannot be made to collide with another's)."""

    def __init__(self, max_bytes: int = -1):
        self.max_bytes = max_bytes
        self.secret = np.frombuffer(os.urandom(32), dtype=np.uint64).copy()
        self.lock = KernelLock()
        self.current = np.zeros(1, dtype=np.int64)  # the address of the current slots array
        self.hits = self.computed = self.evicted = 0
        self._start()

    def _start(self) -> None:
        """Empty: one free slot and no room (a lookup probes once and finds nothing; the store
        kernel still computes the keys of what it computes, which only NO_SHARED's zero slots
        spare: the first masks would go in under no key)."""
        self._set_tables(
            (
                np.zeros(1, dtype=np.int64),
                np.zeros((0, ENTRY_FIELDS), dtype=np.int64),
                np.zeros(0, dtype=np.int32),
            )
        )
        self._used = np.zeros(2, dtype=np.int64)

    def _set_tables(self, tables: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """Make these arrays the table (lock held)."""
        self._tables = tables
        self.current[0] = tables[0].ctypes.data

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(slots, entries, pool) as they are now, for lookups."""
        return self._tables

    def insert_view(self) -> tuple[np.ndarray, np.ndarray, int]:
        """(used, current, the lock's address): with tables(), what a kernel needs to insert
        into the table (has_room, insert_mask) under the lock it takes itself."""
        return self._used, self.current, self.lock.address

    def find(self, key: np.ndarray) -> int:
        """The entry holding `key` (CompiledGrammar.shared_key), or -1."""
        slots, entries, _ = self._tables
        return int(find_shared(slots, entries, key)) if len(slots) else -1

    def __len__(self) -> int:
        return int(self._used[0])

    @property
    def total_bytes(self) -> int:
        """Bytes the masks held take: their pool words, entries and two slots each."""
        return int(self._used[1]) * 4 + len(self) * (ENTRY_FIELDS + 2) * 8

    @property
    def allocated_bytes(self) -> int:
        """Bytes the table's arrays take (what max_bytes bounds; grown ahead of use); none for
        the empty table (its one slot)."""
        return sum(array.nbytes for array in self._tables) if len(self._tables[1]) else 0

    def clear(self) -> None:
        with self.lock:
            self.evicted += len(self)
            self._start()

    def make_room(self, n_new: int, words: int):
        """(slots, entries, pool, used) with room for n_new more masks of `words` words in all,
        grown, or past max_bytes emptied first; None when they alone would outweigh the cache.
        The caller holds `lock` and inserts with insert_mask."""
        if self.max_bytes == 0:
            return None
        _, entries, pool = self._tables
        n_entries, n_words = int(self._used[0]), int(self._used[1])
        if n_entries + n_new <= len(entries) and n_words + words <= len(pool):
            return (*self._tables, self._used)
        rows, size = _room(n_entries + n_new, n_words + words, len(entries), len(pool))
        if self.max_bytes > 0 and _table_bytes(rows, size) > self.max_bytes:
            self.evicted += n_entries  # past the limit: the cache starts again, empty
            self._start()
            n_entries = n_words = 0
            rows, size = _room(n_new, words, 0, 0)
            if _table_bytes(rows, size) > self.max_bytes:
                rows, size = 1 << (n_new - 1).bit_length(), words
                if _table_bytes(rows, size) > self.max_bytes:
                    return None
        return (*self._grown(rows, size, n_entries, n_words), self._used)

    def _grown(self, rows: int, words: int, n_entries: int, n_words: int):
        """A copy of the table with room for `rows` entries and `words` pool words (lock held).
        All three arrays are new: a reader of the old ones must never find an entry whose words
        lie past its pool."""
        _, entries, pool = self._tables
        grown_entries = np.zeros((rows, ENTRY_FIELDS), dtype=np.int64)
        grown_entries[:n_entries] = entries[:n_entries]
        slots = np.zeros(2 * rows, dtype=np.int64)
        _relink(slots, grown_entries, n_entries)
        grown_pool = np.zeros(words, dtype=np.int32)
        grown_pool[:n_words] = pool[:n_words]
        self._set_tables((slots, grown_entries, grown_pool))
        return self._tables
