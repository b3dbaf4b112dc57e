"""The vocabulary as a token trie in flat arrays, split into *slices*, in the orders every mask
walk uses.

A slice is a byte language that dominates real grammars: digits, word characters, JSON string
content (but the line separators U+2028/U+2029 that a pattern's "." refuses).  Each grammar token (non-special, non-empty) belongs to the first slice whose characters
it is made of (its last character may be incomplete UTF-8), else to OTHER.  A state that accepts
every string of up to f slice characters (`walk.slice_bounds`) accepts the slice's tokens of up
to f characters with one OR of a cumulative bitset and walks only the rest of the trie.

Two orders of the tokens, each a `TrieOrder` (sorted runs of tokens by their bytes):
- `TokenTrie` itself: DIGITS, WORD, CONTENT, OTHER, each region sorted by bytes.  Every
  position a mask stores (uncertain tokens) is a position of this order.
- `bucketed`: the three slices again, each region split into buckets of character counts
  (BUCKET_BOUNDS), largest first, each bucket sorted by bytes; so "the tokens of more than k
  characters" is a prefix of the region, and a state that accepts up to f characters and
  rejects g or more walks only the buckets in between.

Layout of an order (N tokens): token_ids[N] int32 (token id at each position),
tok_offsets[N+1] int32, tok_bytes uint8 (the tokens' bytes in position order), lcp[N] int32
(common prefix length with the previous position, 0 where a run starts), next_lower[N] int32
(first later position whose lcp is smaller: skipping a dead prefix's subtree follows these);
`blob` packs them for the kernels (TRIE_HEADER).  group_start[G+1] int32 (the positions where
lcp is 0, then N) and group_byte[G] uint8 (their first byte): the runs of positions that share a
first byte, so a walk passes over a first byte no stack takes without reading its tokens.  One
level down, the *branches*: branch_start[R+1] int32 (the positions where lcp <= 1, then N),
branch_byte[R] int16 (their second byte, NO_SECOND_BYTE for a one-byte token) and
group_branches[G+1] int32 (group g's branches are branch_start[group_branches[g] :
group_branches[g + 1]]): the runs of positions that share two first bytes, so a walk passes over
a second byte no stack takes after the first.  The slice tables, S = 3 slices, B buckets:

    region_start[S+2]     int64  slice s occupies [region_start[s], region_start[s+1]) in both
                                 orders; OTHER last (in the main order only)
    above[S, B]           int64  bucketed positions [region_start[s], above[s, k]): slice s's
                                 tokens of bucket > k
    cumulative[S*B, W]    int32  row s*B+k: bitset (by token id) of slice s's tokens of bucket <= k
    cumulative_counts[S*B] int64 tokens in each row
    max_chars[S]          int32  largest character count of a token in slice s
    bucketed_position[N_slices] int32  main-order position of each bucketed position
    position_of[V]        int32  main-order position of every token id, -1 for special and padding
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..automata.dfa import build_rule_dfa
from ..core.jit import njit
from ..grammar.ir import CharClass, Repeat

_Arrays = tuple[np.ndarray, ...]

SLICE_DIGITS, SLICE_WORD, SLICE_CONTENT = 0, 1, 2
OTHER = 3
SLICE_NAMES = ("digits", "word", "json-string-content")
SLICE_CHARACTERS = (
    ((0x30, 0x39),),
    ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
    # JSON string content: every code point but '"', '\\' and controls (UTF-8 has no surrogates),
    # and but U+2028/U+2029, which a pattern's "." (ECMA-262) refuses: then "." strings take it whole
    ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0x2027), (0x202A, 0x10FFFF)),
)
BUCKET_BOUNDS = tuple(range(1, 17)) + (20, 24, 32, 48, 64, 96, 128, 1 << 30)
"""Upper character counts of the buckets; the last takes every longer token."""

NO_SECOND_BYTE = 256
"""branch_byte of a one-byte token."""

TRIE_HEADER = 2
"""Trie blob (int32): [n_tokens, n_bytes], tok_offsets[n+1], lcp[n], tok_bytes[n_bytes], next_lower[n]."""


class TrieOrder:
    """Tokens in one order, as flat arrays (layout in the module docstring); `run_start[k]`
    marks the positions where a separately sorted run begins."""

    def __init__(self, decoded_vocab: list[bytes], token_ids: np.ndarray, run_start: np.ndarray):
        self.token_ids = token_ids.astype(np.int32)
        tokens = [decoded_vocab[i] for i in self.token_ids.tolist()]
        lengths = np.array([len(t) for t in tokens], dtype=np.int64)
        self.tok_offsets = np.zeros(len(tokens) + 1, dtype=np.int32)
        np.cumsum(lengths, out=self.tok_offsets[1:])
        self.tok_bytes = np.frombuffer(b"".join(tokens), dtype=np.uint8).copy()
        self.lcp = np.zeros(len(tokens), dtype=np.int32)
        for k in range(1, len(tokens)):
            if not run_start[k]:
                previous, current = tokens[k - 1], tokens[k]
                limit = min(len(previous), len(current))
                n = 0
                while n < limit and previous[n] == current[n]:
                    n += 1
                self.lcp[k] = n
        self.next_lower = _next_lower(self.lcp)
        n = len(tokens)
        starts = np.flatnonzero(self.lcp == 0)
        self.group_start = np.append(starts, n).astype(np.int32)
        self.group_byte = self.tok_bytes[self.tok_offsets[starts]]
        branches = np.flatnonzero(self.lcp <= 1)  # every group start is one
        self.branch_start = np.append(branches, n).astype(np.int32)
        self.branch_byte = np.full(len(branches), NO_SECOND_BYTE, dtype=np.int16)
        two_or_more = self.tok_offsets[branches + 1] - self.tok_offsets[branches] >= 2
        self.branch_byte[two_or_more] = self.tok_bytes[self.tok_offsets[branches[two_or_more]] + 1]
        self.group_branches = np.searchsorted(branches, self.group_start).astype(np.int32)
        self.blob = np.empty(TRIE_HEADER + 3 * n + 1 + len(self.tok_bytes), dtype=np.int32)
        self.blob[:TRIE_HEADER] = (n, len(self.tok_bytes))
        o = TRIE_HEADER
        self.blob[o : o + n + 1] = self.tok_offsets
        self.blob[o + n + 1 : o + 2 * n + 1] = self.lcp
        self.blob[o + 2 * n + 1 : o + 2 * n + 1 + len(self.tok_bytes)] = self.tok_bytes
        self.blob[o + 2 * n + 1 + len(self.tok_bytes) :] = self.next_lower

    def __len__(self) -> int:
        return len(self.token_ids)

    def token_bytes(self, position: int) -> bytes:
        return self.tok_bytes[self.tok_offsets[position] : self.tok_offsets[position + 1]].tobytes()


def slice_automaton(s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The byte DFA of (slice s's characters)*, as CSR arrays (ptr, lo, hi, dst).

    State 0 is the only accepting state: the boundary between characters; every other state is
    inside a multi-byte character, so an edge from state 0 starts a character.
    """
    dfa = build_rule_dfa(Repeat(CharClass(SLICE_CHARACTERS[s]), 0, None))
    assert dfa.accepting[0] and not any(dfa.accepting[1:]), "a character-boundary state besides the start"
    ptr = np.zeros(dfa.num_states + 1, dtype=np.int32)
    lo, hi, dst = [], [], []
    for q, edges in enumerate(dfa.byte_edges):
        for a, b, t in edges:
            lo.append(a)
            hi.append(b)
            dst.append(t)
        ptr[q + 1] = len(lo)
    return ptr, np.array(lo, dtype=np.int32), np.array(hi, dtype=np.int32), np.array(dst, dtype=np.int32)


@njit(cache=True)
def _character_counts(data, offsets, ids, ptr, lo, hi, dst):
    """Per token in `ids`: its number of characters (lead bytes) if it is a path of the slice
    automaton from state 0 (an incomplete last character counts), else -1."""
    out = np.empty(ids.shape[0], dtype=np.int32)
    for i in range(ids.shape[0]):
        t = ids[i]
        q = 0
        count = 0
        for k in range(offsets[t], offsets[t + 1]):
            b = data[k]
            nxt = -1
            for e in range(ptr[q], ptr[q + 1]):
                if lo[e] <= b <= hi[e]:
                    nxt = dst[e]
                    break
            if nxt < 0:
                count = -1
                break
            if q == 0:
                count += 1
            q = nxt
        out[i] = count
    return out


@njit(cache=True)
def _next_lower(lcp):
    n = lcp.shape[0]
    out = np.empty(n, dtype=np.int32)
    stack = np.empty(n + 1, dtype=np.int32)
    top = 0
    for p in range(n - 1, -1, -1):  # monotone stack: nearest later position with a smaller lcp
        while top > 0 and lcp[stack[top - 1]] >= lcp[p]:
            top -= 1
        out[p] = stack[top - 1] if top > 0 else n
        stack[top] = p
        top += 1
    return out


def _bucket_of(count: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.array(BUCKET_BOUNDS), count, side="left")


class TokenTrie(TrieOrder):
    """The main order (slices, then OTHER, each sorted by bytes) plus the bucketed order and the
    slice tables."""

    def __init__(self, decoded_vocab: list[bytes], vocab_size: int, excluded_ids=()):
        excluded = set(int(i) for i in excluded_ids)
        ids = np.array([i for i, b in enumerate(decoded_vocab) if b and i not in excluded], dtype=np.int32)
        self.vocab_size = vocab_size
        data = np.frombuffer(b"".join(decoded_vocab), dtype=np.uint8)
        offsets = np.zeros(len(decoded_vocab) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in decoded_vocab], out=offsets[1:])

        # slice and character count of every token (the narrowest slice wins)
        n_slices, n_buckets = len(SLICE_CHARACTERS), len(BUCKET_BOUNDS)
        group = np.full(len(ids), OTHER, dtype=np.int64)
        chars = np.zeros(len(ids), dtype=np.int32)
        self.automata = [slice_automaton(s) for s in range(n_slices)]
        # the automata as walk.run_slice_bounds takes them: tuples of ptr, lo, hi, dst, then caps
        ptrs, los, his, dsts = (tuple(a[k] for a in self.automata) for k in range(4))
        self.slice_automata: tuple[_Arrays, _Arrays, _Arrays, _Arrays, np.ndarray | None] = (ptrs, los, his, dsts, None)
        for s in reversed(range(n_slices)):
            counts = _character_counts(data, offsets, ids, *self.automata[s])
            member = counts > 0
            group[member] = s
            chars[member] = counts[member]
        bucket = np.where(group < OTHER, _bucket_of(chars), 0)

        # sort keys of Python ints and bytes: comparing numpy scalars made these sorts most of the build
        groups, tokens = group.tolist(), [decoded_vocab[i] for i in ids.tolist()]
        main = np.array(sorted(range(len(ids)), key=lambda i: (groups[i], tokens[i])), dtype=np.int64)
        run_start = np.ones(len(ids), dtype=bool)
        run_start[1:] = group[main][1:] != group[main][:-1]
        super().__init__(decoded_vocab, ids[main], run_start)
        self.region_start = np.searchsorted(group[main], np.arange(n_slices + 2)).astype(np.int64)
        self.position_of = np.full(vocab_size, -1, dtype=np.int32)
        self.position_of[self.token_ids] = np.arange(len(ids), dtype=np.int32)
        self.all_positions = np.arange(len(ids), dtype=np.int32)
        self.max_token_length = int(np.diff(self.tok_offsets).max()) if len(ids) else 0

        buckets = bucket.tolist()
        in_slice = [i for i in range(len(ids)) if groups[i] < OTHER]
        order = np.array(sorted(in_slice, key=lambda i: (groups[i], -buckets[i], tokens[i])), dtype=np.int64)
        run_start = np.ones(len(order), dtype=bool)
        run_start[1:] = (group[order][1:] != group[order][:-1]) | (bucket[order][1:] != bucket[order][:-1])
        self.bucketed = TrieOrder(decoded_vocab, ids[order], run_start)
        self.bucketed_position = self.position_of[self.bucketed.token_ids]
        group, bucket, chars = group[order], bucket[order], chars[order]

        self.above = np.empty((n_slices, n_buckets), dtype=np.int64)
        words = (vocab_size + 31) // 32
        self.cumulative = np.zeros((n_slices * n_buckets, words), dtype=np.int32)
        self.cumulative_counts = np.zeros(n_slices * n_buckets, dtype=np.int64)
        self.max_chars = np.zeros(n_slices, dtype=np.int64)
        for s in range(n_slices):
            lo, hi = self.region_start[s], self.region_start[s + 1]
            region_buckets = bucket[lo:hi]  # descending
            if hi > lo:
                self.max_chars[s] = int(chars[lo:hi].max())
            for k in range(n_buckets):
                self.above[s, k] = lo + int(np.sum(region_buckets > k))
                members = self.bucketed.token_ids[self.above[s, k] : hi]
                self.cumulative_counts[s * n_buckets + k] = len(members)
                np.bitwise_or.at(
                    self.cumulative[s * n_buckets + k],
                    members >> 5,
                    (np.ones(len(members), dtype=np.uint32) << (members & 31).astype(np.uint32)).view(np.int32),
                )

        self.slice_automata = (*self.slice_automata[:4], self.max_chars)

    def fingerprint(self, vocab_hash: str) -> str:
        """What a mask's token ids and positions depend on: the vocabulary and this order."""
        h = hashlib.blake2b(digest_size=16)
        h.update(vocab_hash.encode())
        h.update(repr((SLICE_CHARACTERS, BUCKET_BOUNDS, TRIE_HEADER)).encode())
        return h.hexdigest()
