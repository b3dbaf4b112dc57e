"""Per-state token masks and the cross-grammar cache that shares them.

A state's mask splits the grammar tokens into accepted (decided inside the state's rule),
rejected, and uncertain (a path reaches the rule's end with bytes left, so the caller decides at
match time).  Each mask is stored in whichever form is smallest: an accepted-id list, a
rejected-id list, or an accepted bitset over the vocabulary.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..automata.kernels import (
    KIND_ACCEPTED_BITSET as ACCEPTED_BITSET,
    KIND_ACCEPTED_LIST as ACCEPTED_LIST,
    KIND_REJECTED_LIST as REJECTED_LIST,
    RESULT_ACCEPT,
    RESULT_REJECT,
    RESULT_UNCERTAIN,
)


@dataclass
class StateMask:
    """kind says how `data` reads: accepted ids, rejected ids (accepted = the rest minus the
    uncertain tokens), or an int32 bitset of accepted ids.  uncertain_positions are ascending
    trie positions; uncertain_ids the same tokens' ids."""

    kind: int
    data: np.ndarray
    uncertain_positions: np.ndarray
    uncertain_ids: np.ndarray
    num_accepted: int

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.uncertain_positions.nbytes + self.uncertain_ids.nbytes + 64


def build_state_mask(result: np.ndarray, token_ids: np.ndarray, vocab_size: int) -> StateMask:
    """Turn a walk's per-position classification into the smallest StateMask."""
    accepted = token_ids[result == RESULT_ACCEPT]
    rejected = token_ids[result == RESULT_REJECT]
    uncertain_positions = np.flatnonzero(result == RESULT_UNCERTAIN).astype(np.int32)
    uncertain_ids = token_ids[uncertain_positions]
    bitset_words = (vocab_size + 31) // 32
    smallest = min(len(accepted), len(rejected), bitset_words)
    if smallest == len(accepted):
        kind, data = ACCEPTED_LIST, np.sort(accepted).astype(np.int32)
    elif smallest == len(rejected):
        kind, data = REJECTED_LIST, np.sort(rejected).astype(np.int32)
    else:
        kind, data = ACCEPTED_BITSET, ids_to_bitset(accepted.astype(np.int32), bitset_words)
    return StateMask(kind, data, uncertain_positions, uncertain_ids.astype(np.int32), len(accepted))


@njit(cache=True)
def ids_to_bitset(ids, num_words):
    words = np.zeros(num_words, dtype=np.int32)
    for t in ids:
        words[t >> 5] |= np.int32(1) << np.int32(t & 31)
    return words


class MaskCache:
    """Masks keyed by (state structural key, FOLLOW set of its rule), LRU-evicted past a byte limit."""

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, int], StateMask] = OrderedDict()
        self.total_bytes = 0
        self.hits = 0
        self.computed = 0
        self.evicted = 0

    def get(self, key: tuple[str, int]) -> StateMask | None:
        mask = self._entries.get(key)
        if mask is not None:
            self._entries.move_to_end(key)
            self.hits += 1
        return mask

    def put(self, key: tuple[str, int], mask: StateMask) -> None:
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
        self._entries.clear()
        self.total_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)
