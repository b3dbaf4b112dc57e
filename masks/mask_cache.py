"""Per-state token masks and the cross-grammar cache that shares them.

A state's mask splits the grammar tokens into accepted (decided inside the state's rule),
rejected, and uncertain (what follows the rule's end decides, so the matcher checks them against
the real stacks).  Each mask is stored in whichever form is
smallest: an accepted-id list, a rejected-id list, an accepted bitset, or cumulative slice
bitsets plus an accepted-id list (the layouts are in masks/walk.py; computed by masks/state_masks.py).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from ..jit import njit



ENTRY_OVERHEAD = 800
"""Bytes a cached mask costs beyond its arrays' data (the object, four array headers, its key and
the cache's entry; measured: with 64 here the RSS freed by clearing the cache was ~1.5x the
count), so the byte cap holds for the many small masks."""


@dataclass
class StateMask:
    """kind says how `data` reads (masks/walk.py).  uncertain_positions are ascending trie
    positions, uncertain_ids the same tokens' ids and uncertain_lcp each one's common prefix
    length with the previous one (the online walk reuses the shared prefix)."""

    kind: int
    data: np.ndarray
    uncertain_positions: np.ndarray
    uncertain_ids: np.ndarray
    uncertain_lcp: np.ndarray
    num_accepted: int

    @property
    def parts(self) -> tuple[np.ndarray, ...]:
        """The int32 arrays a grammar's mask store holds, in its order."""
        return self.data, self.uncertain_positions, self.uncertain_ids, self.uncertain_lcp

    @property
    def nbytes(self) -> int:
        return sum(part.nbytes for part in self.parts) + ENTRY_OVERHEAD


@njit(cache=True)
def ids_to_bitset(ids, num_words):
    words = np.zeros(num_words, dtype=np.int32)
    for t in ids:
        words[t >> 5] |= np.int32(1) << np.int32(t & 31)
    return words


class MaskCache:
    """Masks keyed by (state key, follow-pairs digest), LRU-evicted past a byte limit; safe to
    share between threads (the grammars of one compiler read and fill it concurrently)."""

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], StateMask] = OrderedDict()
        self.total_bytes = 0
        self.hits = 0
        self.computed = 0
        self.evicted = 0

    def get(self, key: tuple[str, str]) -> StateMask | None:
        """The mask stored under key (now the most recently used), or None."""
        with self._lock:
            mask = self._entries.get(key)
            if mask is not None:
                self._entries.move_to_end(key)
                self.hits += 1
            return mask

    def put(self, key: tuple[str, str], mask: StateMask) -> None:
        """Store a computed mask, evicting the least recently used past max_bytes."""
        with self._lock:
            self.computed += 1
            old = self._entries.pop(key, None)
            if old is not None:
                self.total_bytes -= old.nbytes
            self._entries[key] = mask
            self.total_bytes += mask.nbytes
            while self.total_bytes > self.max_bytes and len(self._entries) > 1:
                _, dropped = self._entries.popitem(last=False)
                self.total_bytes -= dropped.nbytes
                self.evicted += 1

    def clear(self) -> None:
        """Forget every mask."""
        with self._lock:
            self._entries.clear()
            self.total_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)
