"""Per-state token masks and the cross-grammar cache that shares them.

A state's mask splits the grammar tokens into accepted (decided inside the state's rule),
rejected, and uncertain (what follows the rule's end decides, so the matcher checks them against
the real stacks).  Each mask is stored in whichever form is
smallest: an accepted-id list, a rejected-id list, an accepted bitset, or cumulative slice
bitsets plus an accepted-id list (the layouts are in masks/walk.py; computed by masks/state_masks.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..grammar.core.caches import BoundedCache
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


class MaskCache(BoundedCache[tuple[str, str], StateMask]):
    """Masks keyed by (state key, follow-pairs digest), LRU-evicted past a byte limit (-1: none);
    safe to share between threads (the grammars of one compiler read and fill it concurrently)."""

    def __init__(self, max_bytes: int = -1):
        super().__init__(max_bytes, cost=lambda mask: mask.nbytes)

    @property
    def max_bytes(self) -> int:
        return self.max_cost

    @property
    def total_bytes(self) -> int:
        return self.total_cost

    @property
    def computed(self) -> int:
        """Masks stored (each one computed or read from disk on a miss)."""
        return self.stored
