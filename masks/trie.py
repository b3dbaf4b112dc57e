"""The vocabulary as a sorted token trie in flat arrays, the order every mask walk uses.

Layout (N grammar tokens: non-special, non-empty; sorted by their bytes):

    token_ids[N]        int32   token id at each trie position
    tok_offsets[N+1]    int32   byte offsets of each position's token into tok_bytes
    tok_bytes[...]      uint8   the tokens' bytes, concatenated in sorted order
    lcp[N]              int32   length of the common prefix with the previous position (lcp[0] = 0)
    position_of[V]      int32   trie position of every token id, -1 for special and padding ids
    first_byte_start[257] int64 positions [first_byte_start[b], first_byte_start[b+1]) start with byte b

`blob` packs tok_offsets, lcp and tok_bytes (as int32) for the kernels (layout: kernels.TRIE_HEADER).
"""

from __future__ import annotations

import numpy as np

from ..automata.kernels import TRIE_HEADER


class TokenTrie:
    def __init__(self, decoded_vocab: list[bytes], vocab_size: int, excluded_ids=()):
        excluded = set(int(i) for i in excluded_ids)
        ids = [i for i, b in enumerate(decoded_vocab) if b and i not in excluded]
        ids.sort(key=lambda i: decoded_vocab[i])
        self.vocab_size = vocab_size
        self.token_ids = np.array(ids, dtype=np.int32)
        lengths = np.array([len(decoded_vocab[i]) for i in ids], dtype=np.int64)
        self.tok_offsets = np.zeros(len(ids) + 1, dtype=np.int32)
        np.cumsum(lengths, out=self.tok_offsets[1:])
        self.tok_bytes = np.frombuffer(b"".join(decoded_vocab[i] for i in ids), dtype=np.uint8).copy()
        self.lcp = np.zeros(len(ids), dtype=np.int32)
        previous = b""
        for k, i in enumerate(ids):
            current = decoded_vocab[i]
            limit = min(len(previous), len(current))
            n = 0
            while n < limit and previous[n] == current[n]:
                n += 1
            self.lcp[k] = n
            previous = current
        self.position_of = np.full(vocab_size, -1, dtype=np.int32)
        self.position_of[self.token_ids] = np.arange(len(ids), dtype=np.int32)
        self.max_token_length = int(lengths.max()) if len(ids) else 0
        self.all_positions = np.arange(len(ids), dtype=np.int32)
        # first_byte_start[b] .. first_byte_start[b + 1]: the positions whose token starts with byte b
        first_bytes = self.tok_bytes[self.tok_offsets[:-1]] if len(ids) else np.zeros(0, dtype=np.uint8)
        self.first_byte_start = np.searchsorted(first_bytes, np.arange(257)).astype(np.int64)
        n = len(ids)
        self.blob = np.empty(TRIE_HEADER + 2 * n + 1 + len(self.tok_bytes), dtype=np.int32)
        self.blob[:TRIE_HEADER] = (n, len(self.tok_bytes))
        o = TRIE_HEADER
        self.blob[o : o + n + 1] = self.tok_offsets
        self.blob[o + n + 1 : o + 2 * n + 1] = self.lcp
        self.blob[o + 2 * n + 1 :] = self.tok_bytes

    def __len__(self) -> int:
        return len(self.token_ids)

    def token_bytes(self, position: int) -> bytes:
        return self.tok_bytes[self.tok_offsets[position] : self.tok_offsets[position + 1]].tobytes()
