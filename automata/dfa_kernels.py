"""numba kernels of rule-DFA construction: subset construction (grammar/fsm/subset_kernels.py),
trimming, minimisation and breadth-first numbering of a Thompson NFA given as flat edge lists
(automata/thompson_kernels.py builds it).

Letters: the rule's byte classes (a partition of 0..255 into intervals, induced by every NFA
byte-range boundary, so no edge splits a class) numbered in byte order, then one letter per
referenced rule.  An NFA edge covers an inclusive letter range (a reference edge one letter).
The subset automaton is a dense [state, letter] table, -1 where there is no edge.
"""

from __future__ import annotations

import numpy as np

from ..core.jit import njit
from ..grammar.fsm.graph_kernels import mark_reaching
from ..grammar.fsm.partition_kernels import minimal_blocks as minimal_blocks_of_edges
from ..grammar.fsm.subset_kernels import ERR_TOO_MANY_STATES, by_source, subset_automaton  # noqa: F401 -- ERR_* for dfa.py

ERR_TOO_MANY_NFA_STATES = -4


# -- code points -> UTF-8 byte-range paths ------------------------------------------------------

_SURROGATE_LO = 0xD800
_SURROGATE_HI = 0xDFFF
MAX_SEQUENCES = 32  # per code-point range: at most 1 + 3 + 2 * 5 + 7 (surrogates split the 3-byte band)


@njit(cache=True, inline="always")
def _utf8_length(cp):
    return 1 if cp < 0x80 else 2 if cp < 0x800 else 3 if cp < 0x10000 else 4


@njit(cache=True, inline="always")
def _utf8_byte(cp, length, k):
    """Byte k of the UTF-8 encoding of cp (length bytes)."""
    if k == 0:
        lead = (0, 0, 0xC0, 0xE0, 0xF0)[length]
        return lead | (cp >> (6 * (length - 1)))
    return 0x80 | ((cp >> (6 * (length - 1 - k))) & 0x3F)


@njit(cache=True)
def utf8_sequences(lo, hi, seqs, stack):
    """Split code points lo..hi (surrogates skipped: UTF-8 cannot encode them) into sequences of
    byte ranges, each matching exactly the encodings of one slice of the range: sequence k has
    seqs[k, 0] byte ranges, byte j from seqs[k, 1 + j] to seqs[k, 5 + j].  Returns the number
    of sequences (at most MAX_SEQUENCES; stack is scratch room for as many code-point ranges).
    The same splitting as utf8.utf8_byte_ranges: a slice is split where its ends differ above a
    continuation byte whose range would not be full."""
    top = 0
    for band_lo, band_hi in (
        (0x10000, 0x10FFFF),
        (_SURROGATE_HI + 1, 0xFFFF),
        (0x800, _SURROGATE_LO - 1),
        (0x80, 0x7FF),
        (0x0, 0x7F),
    ):  # taken from the top: lowest first
        a, b = max(lo, band_lo), min(hi, band_hi)
        if a <= b:
            stack[top, 0] = a
            stack[top, 1] = b
            top += 1
    n = 0
    while top > 0:
        top -= 1
        a, b = stack[top, 0], stack[top, 1]
        length = _utf8_length(a)
        split = False
        for i in range(1, length):
            low_bits = (1 << (6 * i)) - 1
            if a & ~low_bits != b & ~low_bits:
                if a & low_bits != 0:
                    mid = a | low_bits
                elif b & low_bits != low_bits:
                    mid = (b & ~low_bits) - 1
                else:
                    continue
                stack[top, 0] = mid + 1  # the upper part, taken after the lower one
                stack[top, 1] = b
                stack[top + 1, 0] = a
                stack[top + 1, 1] = mid
                top += 2
                split = True
                break
        if not split:
            seqs[n, 0] = length
            for k in range(length):
                seqs[n, 1 + k] = _utf8_byte(a, length, k)
                seqs[n, 5 + k] = _utf8_byte(b, length, k)
            n += 1
    return n


@njit(cache=True)
def _expand_code_points(n_nfa, code_point_edges, max_states):
    """Byte-range paths for code-point edges (src, lo, hi, dst), through fresh NFA states
    numbered from n_nfa.  Returns (number of NFA states, byte edges (src, lo, hi, dst)), or
    ERR_TOO_MANY_NFA_STATES first."""
    seqs = np.empty((MAX_SEQUENCES, 9), np.int32)
    stack = np.empty((MAX_SEQUENCES, 2), np.int64)
    n_states = n_nfa
    n_edges = 0
    for e in range(code_point_edges.shape[0]):
        for k in range(utf8_sequences(code_point_edges[e, 1], code_point_edges[e, 2], seqs, stack)):
            n_states += seqs[k, 0] - 1
            n_edges += seqs[k, 0]
    out = np.empty((n_edges, 4), np.int32)
    if n_states > max_states:
        return ERR_TOO_MANY_NFA_STATES, out
    n_states = n_nfa
    n_edges = 0
    for e in range(code_point_edges.shape[0]):
        for k in range(utf8_sequences(code_point_edges[e, 1], code_point_edges[e, 2], seqs, stack)):
            here = code_point_edges[e, 0]
            for j in range(seqs[k, 0]):
                if j == seqs[k, 0] - 1:
                    there = code_point_edges[e, 3]
                else:
                    there = n_states
                    n_states += 1
                out[n_edges, 0] = here
                out[n_edges, 1] = seqs[k, 1 + j]
                out[n_edges, 2] = seqs[k, 5 + j]
                out[n_edges, 3] = there
                n_edges += 1
                here = there
    return n_states, out


# -- literal sets ----------------------------------------------------------------------------


@njit(cache=True)
def literal_trie(data, offsets, root, first_state):
    """The trie of sorted, distinct literals (literal i is data[offsets[i]:offsets[i + 1]]) below
    NFA state `root`, new states numbered from first_state: each literal shares the path of its
    longest common prefix with the one before.  Returns (next free state, byte edges as rows
    (src, byte, byte, dst), the state each literal ends in)."""
    m = offsets.shape[0] - 1
    edges = np.empty((offsets[m], 4), np.int32)
    ends = np.empty(m, np.int32)
    longest = 0
    for i in range(m):
        longest = max(longest, offsets[i + 1] - offsets[i])
    path = np.empty(longest + 1, np.int64)  # path[k]: the state after k bytes of the previous literal
    path[0] = root
    n_edges = 0
    state = first_state
    previous, previous_length = 0, 0
    for i in range(m):
        start, length = offsets[i], offsets[i + 1] - offsets[i]
        shared = 0
        while shared < min(previous_length, length) and data[previous + shared] == data[start + shared]:
            shared += 1
        for j in range(shared, length):
            edges[n_edges, 0] = path[j]
            edges[n_edges, 1] = data[start + j]
            edges[n_edges, 2] = data[start + j]
            edges[n_edges, 3] = state
            path[j + 1] = state
            state += 1
            n_edges += 1
        ends[i] = path[length]
        previous, previous_length = start, length
    return state, edges[:n_edges], ends


@njit(cache=True)
def live_states(trans, accepting):
    """live[s]: an accepting state is reachable from s (trimming keeps exactly these).  Each
    state's predecessors are counted first and listed as int32 (CSR by target), so the work
    arrays are sized to the table's edges, not to its n x letters entries."""
    n, n_letters = trans.shape
    ptr = np.zeros(n + 1, np.int64)
    for s in range(n):
        for a in range(n_letters):
            if trans[s, a] >= 0:
                ptr[trans[s, a] + 1] += 1
    for s in range(n):
        ptr[s + 1] += ptr[s]
    preds = np.empty(ptr[n], np.int32)
    fill = ptr[:n].copy()
    for s in range(n):
        for a in range(n_letters):
            t = trans[s, a]
            if t >= 0:
                preds[fill[t]] = s
                fill[t] += 1
    return mark_reaching(accepting.copy(), ptr, preds)


@njit(cache=True)
def minimal_blocks(trans, accepting, state_ids, n):
    """Blocks of equivalent states of the automaton restricted to the states with
    state_ids[s] >= 0 (numbered 0..n-1; edges to other states are ignored, as for dead ones):
    its edges sorted by letter, minimised by the shared kernel (grammar/fsm/partition_kernels.py).
    Returns (block[compact id], number of blocks)."""
    n_letters = trans.shape[1]
    letter_ptr = np.zeros(n_letters + 1, np.int64)
    final = np.zeros(n, np.bool_)
    for s in range(trans.shape[0]):
        if state_ids[s] >= 0:
            final[state_ids[s]] = accepting[s]
            for a in range(n_letters):
                t = trans[s, a]
                if t >= 0 and state_ids[t] >= 0:
                    letter_ptr[a + 1] += 1
    for a in range(n_letters):
        letter_ptr[a + 1] += letter_ptr[a]
    tail = np.empty(letter_ptr[n_letters], np.int32)
    head = np.empty(letter_ptr[n_letters], np.int32)
    fill = letter_ptr[:-1].copy()
    for s in range(trans.shape[0]):
        if state_ids[s] >= 0:
            for a in range(n_letters):
                t = trans[s, a]
                if t >= 0 and state_ids[t] >= 0:
                    tail[fill[a]] = state_ids[s]
                    head[fill[a]] = state_ids[t]
                    fill[a] += 1
    return minimal_blocks_of_edges(n, final, tail, head, letter_ptr)


@njit(cache=True)
def number_states(trans, accepting, block, n_blocks, class_lo, class_hi):
    """The quotient automaton (states: blocks, read through any member; block[s] < 0 drops s)
    numbered breadth-first from the block of state 0, visiting targets in letter order.

    Returns (accepting[n], byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, ref_index, ref_dst):
    byte edges of adjacent classes with one target merged into one range, reference edges by
    reference index (letter - number of classes)."""
    n_classes = class_lo.shape[0]
    n_letters = trans.shape[1]
    member = np.full(n_blocks, -1, np.int32)
    for s in range(trans.shape[0]):
        if block[s] >= 0 and member[block[s]] < 0:
            member[block[s]] = s
    number = np.full(n_blocks, -1, np.int32)
    order = np.empty(n_blocks, np.int32)
    number[block[0]] = 0
    order[0] = block[0]
    count = 1
    k = 0
    while k < count:
        s = member[order[k]]
        k += 1
        for a in range(n_letters):
            t = trans[s, a]
            if t >= 0 and block[t] >= 0 and number[block[t]] < 0:
                number[block[t]] = count
                order[count] = block[t]
                count += 1

    out_accepting = np.empty(count, np.bool_)
    byte_ptr = np.zeros(count + 1, np.int64)
    ref_ptr = np.zeros(count + 1, np.int64)
    byte_lo = np.empty(count * n_classes, np.int32)
    byte_hi = np.empty(count * n_classes, np.int32)
    byte_dst = np.empty(count * n_classes, np.int32)
    ref_index = np.empty(count * (n_letters - n_classes), np.int32)
    ref_dst = np.empty(count * (n_letters - n_classes), np.int32)
    n_bytes = 0
    n_refs = 0
    for k in range(count):
        s = member[order[k]]
        out_accepting[k] = accepting[s]
        previous = -1
        for a in range(n_letters):
            t = trans[s, a]
            target = number[block[t]] if t >= 0 and block[t] >= 0 else -1
            if a < n_classes:
                if target >= 0 and target == previous:
                    byte_hi[n_bytes - 1] = class_hi[a]
                elif target >= 0:
                    byte_lo[n_bytes] = class_lo[a]
                    byte_hi[n_bytes] = class_hi[a]
                    byte_dst[n_bytes] = target
                    n_bytes += 1
                previous = target
            elif target >= 0:
                ref_index[n_refs] = a - n_classes
                ref_dst[n_refs] = target
                n_refs += 1
        byte_ptr[k + 1] = n_bytes
        ref_ptr[k + 1] = n_refs
    return (
        out_accepting,
        byte_ptr,
        byte_lo[:n_bytes],
        byte_hi[:n_bytes],
        byte_dst[:n_bytes],
        ref_ptr,
        ref_index[:n_refs],
        ref_dst[:n_refs],
    )


@njit(cache=True)
def no_automaton(status):
    """construct's result when there is no automaton to number (the empty language, budgets)."""
    ptr = np.zeros(1, np.int64)
    none = np.empty(0, np.int32)
    return status, np.zeros(0, np.bool_), ptr, none, none, none, ptr, none, none


@njit(cache=True)
def construct(n_nfa, start, final, eps_edges, byte_edges, code_point_edges, ref_edges, n_refs, max_states):
    """NFA -> subset construction -> trim -> minimise -> breadth-first numbering.

    The NFA has n_nfa states and edges given as rows: eps_edges (src, dst), byte_edges and
    code_point_edges (src, lo, hi, dst; code-point ranges become UTF-8 byte paths here),
    ref_edges (src, local reference index, dst).  Returns (status, number_states' arrays):
    status is the number of states, 0 for the empty language (nothing accepting is reachable),
    ERR_TOO_MANY_NFA_STATES or ERR_TOO_MANY_STATES (more than max_states NFA / DFA states)."""
    n_nfa, paths = _expand_code_points(n_nfa, code_point_edges, max_states)
    if n_nfa == ERR_TOO_MANY_NFA_STATES:
        return no_automaton(ERR_TOO_MANY_NFA_STATES)
    byte_edges = np.concatenate((byte_edges, paths))
    # byte classes: the intervals between consecutive edge boundaries, numbered in byte order
    boundary = np.zeros(257, np.bool_)
    boundary[0] = True
    for e in range(byte_edges.shape[0]):
        boundary[byte_edges[e, 1]] = True
        boundary[byte_edges[e, 2] + 1] = True
    class_of = np.empty(256, np.int32)
    n_classes = -1
    for b in range(256):
        n_classes += boundary[b]
        class_of[b] = n_classes
    n_classes += 1
    class_lo = np.flatnonzero(boundary[:256]).astype(np.int32)
    class_hi = np.empty(n_classes, np.int32)
    class_hi[:-1] = class_lo[1:] - 1
    class_hi[-1] = 255

    # letter edges (src, first letter, last letter, dst): byte classes, then references
    n_bytes = byte_edges.shape[0]
    edges = np.empty((n_bytes + ref_edges.shape[0], 4), np.int32)
    for e in range(n_bytes):
        edges[e, 0] = byte_edges[e, 0]
        edges[e, 1] = class_of[byte_edges[e, 1]]
        edges[e, 2] = class_of[byte_edges[e, 2]]
        edges[e, 3] = byte_edges[e, 3]
    for e in range(ref_edges.shape[0]):
        edges[n_bytes + e, 0] = ref_edges[e, 0]
        edges[n_bytes + e, 1] = n_classes + ref_edges[e, 1]
        edges[n_bytes + e, 2] = n_classes + ref_edges[e, 1]
        edges[n_bytes + e, 3] = ref_edges[e, 2]
    edge_ptr, edges = by_source(n_nfa, edges)
    eps_ptr, eps_edges = by_source(n_nfa, eps_edges)
    eps_dst = eps_edges[:, 1].copy()

    status, trans, accepting = subset_automaton(
        start, final, eps_ptr, eps_dst, edge_ptr, edges, n_classes + n_refs, max_states
    )
    live = live_states(trans, accepting)
    if status > 0 and not live[0]:
        status = 0
    if status <= 0:
        return no_automaton(status)
    state_ids = np.full(trans.shape[0], -1, np.int32)
    n_live = 0
    for s in range(trans.shape[0]):
        if live[s]:
            state_ids[s] = n_live
            n_live += 1
    blocks, n_blocks = minimal_blocks(trans, accepting, state_ids, n_live)
    block = np.full(trans.shape[0], -1, np.int32)
    for s in range(trans.shape[0]):
        if state_ids[s] >= 0:
            block[s] = blocks[state_ids[s]]
    out = number_states(trans, accepting, block, n_blocks, class_lo, class_hi)
    return (out[0].shape[0],) + out
