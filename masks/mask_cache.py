"""Per-state token masks as a grammar's store hands them out (the cache that shares them across
grammars is masks/shared_masks.py).

A state's mask splits the grammar tokens into accepted (decided inside the state's rule),
rejected, and uncertain (what follows the rule's end decides, so the matcher checks them against
the real stacks).  Each mask is stored in whichever form is
smallest: an accepted-id list, a rejected-id list, an accepted bitset, or cumulative slice
bitsets plus an accepted-id list (the layouts are in masks/walk.py; computed by masks/state_masks.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.jit import njit


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


@njit(cache=True)
def ids_to_bitset(ids, num_words):
    words = np.zeros(num_words, dtype=np.int32)
    for t in ids:
        words[t >> 5] |= np.int32(1) << np.int32(t & 31)
    return words
