"""Per-state token masks and the cross-grammar cache that shares them.

A state's mask splits the grammar tokens into accepted (decided inside the state's rule),
rejected, and uncertain (what follows the rule's end decides, so the matcher checks them against
the real stacks).  Each mask is stored in whichever form is
smallest: an accepted-id list, a rejected-id list, an accepted bitset, or cumulative slice
bitsets plus an accepted-id list (the layouts are in masks/walk.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..grammar.caches import BoundedCache
from ..jit import njit

from .walk import (
    KIND_ACCEPTED_BITSET as ACCEPTED_BITSET,
    KIND_ACCEPTED_LIST as ACCEPTED_LIST,
    KIND_REJECTED_LIST as REJECTED_LIST,
    KIND_SLICE as SLICE,
    bitset_ids,
    candidate_lcp,
)


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


def make_state_mask(trie, words: np.ndarray, rows: list[int], num_accepted: int, walk_accepted: np.ndarray,
                    walk_complete: bool, uncertain_positions: np.ndarray, grammar_words: np.ndarray) -> StateMask:
    """The smallest StateMask for a walk's outcome: `words` holds every accepted token's bit
    (slice rows included), walk_accepted the ids the walk accepted (all of them when
    walk_complete), uncertain_positions the uncertain trie positions."""
    n_uncertain = len(uncertain_positions)
    n_rejected = len(trie) - num_accepted - n_uncertain
    uncertain_ids = trie.token_ids[uncertain_positions]
    sliced = any(row >= 0 for row in rows)
    options = [(len(words), ACCEPTED_BITSET), (n_rejected, REJECTED_LIST)]
    if walk_complete:
        options.append((len(rows) + len(walk_accepted), SLICE) if sliced else (num_accepted, ACCEPTED_LIST))
    _, kind = min(options)
    if kind == ACCEPTED_LIST:
        data = np.sort(walk_accepted)
    elif kind == SLICE:
        data = np.concatenate([np.array(rows, dtype=np.int32), np.sort(walk_accepted)])
    elif kind == REJECTED_LIST:
        data = bitset_ids(_rejected_words(grammar_words, words, uncertain_ids), n_rejected)
    else:
        data = words.copy()
    lcp = candidate_lcp(trie.blob, uncertain_positions)
    return StateMask(kind, data.astype(np.int32), uncertain_positions.astype(np.int32), uncertain_ids.astype(np.int32),
                     lcp, num_accepted)


@njit(cache=True)
def _rejected_words(grammar_words, accepted_words, uncertain_ids):
    out = grammar_words & ~accepted_words
    for t in uncertain_ids:
        out[t >> 5] &= ~(np.int32(1) << np.int32(t & 31))
    return out


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
