"""The one automaton minimiser: Hopcroft's partition refinement in Valmari and Lehtinen's
formulation (O(m log n) for m edges; partial automata allowed), on a letter-sorted edge list.

The rule DFAs (automata/dfa_kernels.py: letters are byte classes and rule references) and the
code-point automata (string_kernels.py: letters are the intervals between the code-point bounds
of their edges) both hand it their edges, so both get the coarsest partition of their states
into language-equivalent blocks from the same kernel.
"""

from __future__ import annotations

import numpy as np

from ...core.jit import njit
from .graph_kernels import grown

# A refinable partition of 0..n-1 in three arrays, so that what is kept per set is sized to the
# sets there are, not to the elements: an automaton's cords are far fewer than its edges (a
# `format: regex` table: 3,181 cords of 701,574 edges), and four int32 rows per edge for them
# were most of the minimiser's memory.  E (int32, 3 rows of n): the elements of set s are
# E[ELEMS, S[s, FIRST]:S[s, PAST]], its marked ones in front (S[s, MARKED] of them); E[LOC] is
# the inverse of E[ELEMS]; E[SET, e] is e's set.  S (int32, a row per set, grown by the caller):
# the first C[TOUCHED_SETS] entries of column TOUCHED are the sets with marked elements.
# C (int64): the counts.
ELEMS, LOC, SET = range(3)
FIRST, PAST, MARKED, TOUCHED = range(4)
N_SETS, TOUCHED_SETS = 0, 1


@njit(cache=True)
def _partition(n, capacity):
    """One set holding 0..n-1, with rows for `capacity` sets: (E, S, C) as above."""
    E = np.empty((3, n), np.int32)
    E[ELEMS] = np.arange(n)
    E[LOC] = np.arange(n)
    E[SET] = 0
    S = np.zeros((max(capacity, 1), 4), np.int32)
    S[0, PAST] = n
    C = np.zeros(2, np.int64)
    C[N_SETS] = 1 if n > 0 else 0
    return E, S, C


@njit(cache=True, inline="always")
def _mark(E, S, C, e):
    s = E[SET, e]
    i = E[LOC, e]
    j = S[s, FIRST] + S[s, MARKED]
    E[ELEMS, i] = E[ELEMS, j]
    E[LOC, E[ELEMS, i]] = i
    E[ELEMS, j] = e
    E[LOC, e] = j
    if S[s, MARKED] == 0:
        S[C[TOUCHED_SETS], TOUCHED] = s
        C[TOUCHED_SETS] += 1
    S[s, MARKED] += 1


@njit(cache=True, inline="always")
def _split(E, S, C):
    """Split every touched set into its marked and unmarked parts; the smaller part gets a new id
    (S needs rows for C[N_SETS] + C[TOUCHED_SETS] sets)."""
    while C[TOUCHED_SETS] > 0:
        C[TOUCHED_SETS] -= 1
        s = S[C[TOUCHED_SETS], TOUCHED]
        j = S[s, FIRST] + S[s, MARKED]
        if j == S[s, PAST]:
            S[s, MARKED] = 0
            continue
        z = C[N_SETS]
        if S[s, MARKED] <= S[s, PAST] - j:
            S[z, FIRST] = S[s, FIRST]
            S[z, PAST] = j
            S[s, FIRST] = j
        else:
            S[z, PAST] = S[s, PAST]
            S[z, FIRST] = j
            S[s, PAST] = j
        for i in range(S[z, FIRST], S[z, PAST]):
            E[SET, E[ELEMS, i]] = z
        S[s, MARKED] = 0
        S[z, MARKED] = 0
        C[N_SETS] = z + 1


@njit(cache=True)
def minimal_blocks(n, accepting, tail, head, letter_ptr):
    """Blocks of language-equivalent states of a partial DFA on states 0..n-1: edge e goes from
    tail[e] to head[e], the edges of letter a are letter_ptr[a]:letter_ptr[a + 1], and
    accepting[q] marks the final states.  Blocks split by the sources of each "cord" (the edges
    of one letter into one block), cords split by the block of their target.

    Returns (block of each state, number of blocks)."""
    m = tail.shape[0]
    in_ptr = np.zeros(n + 1, np.int64)
    for e in range(m):
        in_ptr[head[e] + 1] += 1
    for q in range(n):
        in_ptr[q + 1] += in_ptr[q]
    incoming = np.empty(m, np.int32)
    in_fill = in_ptr[:-1].copy()
    for e in range(m):
        incoming[in_fill[head[e]]] = e
        in_fill[head[e]] += 1

    blocks, block_sets, block_counts = _partition(n, n)  # never more blocks than states
    for q in range(n):
        if accepting[q]:
            _mark(blocks, block_sets, block_counts, q)
    _split(blocks, block_sets, block_counts)

    n_letters = letter_ptr.shape[0] - 1
    cords, cord_sets, cord_counts = _partition(m, 2 * n_letters + 16)  # grown before each split
    n_cords = 0
    for a in range(n_letters):
        if letter_ptr[a + 1] > letter_ptr[a]:
            cord_sets[n_cords, FIRST] = letter_ptr[a]
            cord_sets[n_cords, PAST] = letter_ptr[a + 1]
            for e in range(letter_ptr[a], letter_ptr[a + 1]):
                cords[SET, e] = n_cords
            n_cords += 1
    cord_counts[N_SETS] = n_cords

    b = 1  # one block of the initial split need not split the cords (Hopcroft's "all but one")
    c = 0
    while c < cord_counts[N_SETS]:
        for i in range(cord_sets[c, FIRST], cord_sets[c, PAST]):
            _mark(blocks, block_sets, block_counts, tail[cords[ELEMS, i]])
        _split(blocks, block_sets, block_counts)
        c += 1
        while b < block_counts[N_SETS]:
            for i in range(block_sets[b, FIRST], block_sets[b, PAST]):
                q = blocks[ELEMS, i]
                for k in range(in_ptr[q], in_ptr[q + 1]):
                    _mark(cords, cord_sets, cord_counts, incoming[k])
            if cord_counts[N_SETS] + cord_counts[TOUCHED_SETS] > cord_sets.shape[0]:
                cord_sets = grown(cord_sets, cord_counts[N_SETS] + cord_counts[TOUCHED_SETS])
            _split(cords, cord_sets, cord_counts)
            b += 1
    return blocks[SET].copy(), block_counts[N_SETS]
