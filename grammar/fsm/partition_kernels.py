"""The one automaton minimiser: Hopcroft's partition refinement in Valmari and Lehtinen's
formulation (O(m log n) for m edges; partial automata allowed), on a letter-sorted edge list.

The rule DFAs (automata/dfa_kernels.py: letters are byte classes and rule references) and the
code-point automata (string_kernels.py: letters are the intervals between the code-point bounds
of their edges) both hand it their edges, so both get the coarsest partition of their states
into language-equivalent blocks from the same kernel.
"""

from __future__ import annotations

import numpy as np

from ...jit import njit

# A refinable partition of 0..n-1 packed in one int32 array P, so that the helpers below pass one
# array (each array argument costs reference counting per call): the elements of set s are
# P[ELEMS, P[FIRST, s]:P[PAST, s]], its marked ones in front (P[MARKED, s] of them); P[LOC] is
# the inverse of P[ELEMS]; P[SET, e] is e's set; the first P[COUNTS, TOUCHED_SETS] entries of
# P[TOUCHED] are the sets with marked elements.
ELEMS, LOC, SET, FIRST, PAST, MARKED, TOUCHED, COUNTS = range(8)
N_SETS, TOUCHED_SETS = 0, 1


@njit(cache=True)
def _partition(n):
    """One set holding 0..n-1 (room for n sets)."""
    P = np.zeros((8, max(n, 2)), np.int32)
    P[ELEMS, :n] = np.arange(n)
    P[LOC, :n] = np.arange(n)
    P[PAST, 0] = n
    P[COUNTS, N_SETS] = 1 if n > 0 else 0
    return P


@njit(cache=True, inline="always")
def _mark(P, e):
    s = P[SET, e]
    i = P[LOC, e]
    j = P[FIRST, s] + P[MARKED, s]
    P[ELEMS, i] = P[ELEMS, j]
    P[LOC, P[ELEMS, i]] = i
    P[ELEMS, j] = e
    P[LOC, e] = j
    if P[MARKED, s] == 0:
        P[TOUCHED, P[COUNTS, TOUCHED_SETS]] = s
        P[COUNTS, TOUCHED_SETS] += 1
    P[MARKED, s] += 1


@njit(cache=True, inline="always")
def _split(P):
    """Split every touched set into its marked and unmarked parts; the smaller part gets a new id."""
    while P[COUNTS, TOUCHED_SETS] > 0:
        P[COUNTS, TOUCHED_SETS] -= 1
        s = P[TOUCHED, P[COUNTS, TOUCHED_SETS]]
        j = P[FIRST, s] + P[MARKED, s]
        if j == P[PAST, s]:
            P[MARKED, s] = 0
            continue
        z = P[COUNTS, N_SETS]
        if P[MARKED, s] <= P[PAST, s] - j:
            P[FIRST, z] = P[FIRST, s]
            P[PAST, z] = j
            P[FIRST, s] = j
        else:
            P[PAST, z] = P[PAST, s]
            P[FIRST, z] = j
            P[PAST, s] = j
        for i in range(P[FIRST, z], P[PAST, z]):
            P[SET, P[ELEMS, i]] = z
        P[MARKED, s] = 0
        P[MARKED, z] = 0
        P[COUNTS, N_SETS] = z + 1


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

    blocks = _partition(n)
    for q in range(n):
        if accepting[q]:
            _mark(blocks, q)
    _split(blocks)

    cords = _partition(m)
    n_cords = 0
    for a in range(letter_ptr.shape[0] - 1):
        if letter_ptr[a + 1] > letter_ptr[a]:
            cords[FIRST, n_cords] = letter_ptr[a]
            cords[PAST, n_cords] = letter_ptr[a + 1]
            for e in range(letter_ptr[a], letter_ptr[a + 1]):
                cords[SET, e] = n_cords
            n_cords += 1
    cords[COUNTS, N_SETS] = n_cords

    b = 1  # one block of the initial split need not split the cords (Hopcroft's "all but one")
    c = 0
    while c < cords[COUNTS, N_SETS]:
        for i in range(cords[FIRST, c], cords[PAST, c]):
            _mark(blocks, tail[cords[ELEMS, i]])
        _split(blocks)
        c += 1
        while b < blocks[COUNTS, N_SETS]:
            for i in range(blocks[FIRST, b], blocks[PAST, b]):
                q = blocks[ELEMS, i]
                for k in range(in_ptr[q], in_ptr[q + 1]):
                    _mark(cords, incoming[k])
            _split(cords)
            b += 1
    return blocks[SET, :n], blocks[COUNTS, N_SETS]
