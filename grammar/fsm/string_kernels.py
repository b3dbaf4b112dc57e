"""numba kernels for the code-point automata of `codepoint_dfa` (decoded strings and numbers):
the JSON text encoder (`encode`), `trim`, `minimize` and the boolean `product`s -- the "any key but these names"
automata of every object schema go through all four.

Automata here are flat arrays: state s owns edges start[s] .. start[s] + count[s] - 1 of the
parallel arrays (lo, hi, target), sorted by lo, and final[s] says whether it accepts.  The
results are exactly those of the Python code they replaced (tests/json_strings_reference.py).

`encode` and `product` return a status first: OK; STATES or EDGES when the state or edge budget
ran out (the caller raises `codepoint_dfa.StateLimitExceeded`); FULL when the encoder's arrays were too small
(the caller retries with a larger capacity).
"""

from __future__ import annotations

import numpy as np

from ...core.jit import njit
from .graph_kernels import grouped, grown, mark_reaching
from .partition_kernels import minimal_blocks

OK = 0
STATES = 1
EDGES = 2
FULL = 3

# the encoder's counters, in one array its helpers update
_N_STATES = 0
_N_EDGES = 1
_N_NODES = 2
_STATUS = 3
# columns of a hex state in `nodes`: its level, its 16 children (-1: no edge), its state id
_LEVEL = 0
_STATE = 17
# columns of a frame of `_tree` after the 16 children
_BASE = 16
_DIGIT = 17
_SEG_FROM = 18
_SEG_TO = 19
# entries of the cursor of `_code_unit_segments`: segments written, the high surrogate whose
# residual is being collected (-1: none), pieces in it
_SEGS = 0
_BLOCK = 1
_PIECES = 2
# columns of `memo`: the state reading `level` hex digits that all lead to this state, for
# level 1..4 (plus one; 0 is unknown), and the state after a high surrogate whose low half
# is read by this state (plus one)
_PAIR = 4

_BACKSLASH = 0x5C
_U = 0x75
_HIGH = 0xD800  # first high surrogate
_LOW = 0xDC00  # first low surrogate
_BMP_REST = 0xE000  # first code point after the surrogates
_ASTRAL = 0x10000

# Helpers that allocate nothing are compiled without numba's reference counting (its own
# `_nrt=False` option, as numba's sorts do): with it, every call that passes arrays costs two
# atomic operations per array, which took 60% of the encoder's time.
_helper = njit(cache=True, _nrt=False)

# Code points JSON allows unescaped inside a string (all but '"', '\\', controls, surrogates).
_RAW_OK = np.array([[0x20, 0x21], [0x23, 0x5B], [0x5D, 0xD7FF], [0xE000, 0x10FFFF]], dtype=np.int64)
# The short escapes, by escape character: \" \/ \\ \b \f \n \r \t and the code points they stand for.
_ESCAPE_CHARS = np.array([0x22, 0x2F, 0x5C, 0x62, 0x66, 0x6E, 0x72, 0x74], dtype=np.int64)
_ESCAPED = np.array([0x22, 0x2F, 0x5C, 0x08, 0x0C, 0x0A, 0x0D, 0x09], dtype=np.int64)
# The hex digits as runs of consecutive characters: first digit, end digit, character of the first.
_HEX_RUNS = np.array([[0, 10, 0x30], [10, 16, 0x41], [10, 16, 0x61]], dtype=np.int64)


@_helper
def _new_state(counts, budget, st):
    """A fresh state id, or -1 with status STATES past `budget` states (FULL past the arrays)."""
    n = counts[_N_STATES]
    if n >= budget:
        counts[_STATUS] = STATES
        return -1
    if n >= st.shape[0]:
        counts[_STATUS] = FULL
        return -1
    counts[_N_STATES] = n + 1
    return n


@_helper
def _begin(counts, st, state):
    """Start writing the edges of `state` (each state's edges are written in one go)."""
    st[state, 0] = counts[_N_EDGES]


@_helper
def _end(counts, st, state):
    st[state, 1] = counts[_N_EDGES] - st[state, 0]


@_helper
def _emit(counts, edge_budget, edges, first, lo, hi, t):
    """Append edge (lo, hi, t) to the state whose edges start at `first`, joining it to the
    previous one when adjacent with the same target; False (status EDGES or FULL) when it does
    not fit."""
    n = counts[_N_EDGES]
    if n > first and edges[n - 1, 2] == t and edges[n - 1, 1] + 1 == lo:
        edges[n - 1, 1] = hi
        return True
    if n >= edge_budget:
        counts[_STATUS] = EDGES
        return False
    if n >= edges.shape[0]:
        counts[_STATUS] = FULL
        return False
    edges[n, 0] = lo
    edges[n, 1] = hi
    edges[n, 2] = t
    counts[_N_EDGES] = n + 1
    return True


@_helper
def _find_hex_state(level, frames, row, nodes, table):
    """(table slot, state) of the hex state that reads digit d of a `level`-digit block and goes
    to frames[row, d] (-1: no edge); state -1 and the free slot for it when there is none yet."""
    h = np.int64(level) * np.int64(0x9E3779B1)
    for d in range(16):
        h = (h ^ np.int64(frames[row, d] + 1)) * np.int64(0x100000001B3)
        h ^= h >> 29
    mask = table.shape[0] - 1
    i = h & mask
    while table[i] != 0:
        node = table[i] - 1
        if nodes[node, _LEVEL] == level:
            same = True
            for d in range(16):
                if nodes[node, 1 + d] != frames[row, d]:
                    same = False
                    break
            if same:
                return i, nodes[node, _STATE]
        i = (i + 1) & mask
    return i, -1


@_helper
def _add_hex_state(level, frames, row, slot, counts, budget, st, edges, nodes, table):
    """Make the hex state that `_find_hex_state` did not find (its free table slot given), with
    its edges: each hex digit (both cases) to its child; -1 when it does not fit."""
    state = _new_state(counts, budget, st)
    if state < 0:
        return -1
    node = counts[_N_NODES]
    counts[_N_NODES] = node + 1
    nodes[node, _LEVEL] = level
    for d in range(16):
        nodes[node, 1 + d] = frames[row, d]
    nodes[node, _STATE] = state
    table[slot] = node + 1
    _begin(counts, st, state)
    first = st[state, 0]
    for r in range(_HEX_RUNS.shape[0]):
        d0, d1, char = _HEX_RUNS[r, 0], _HEX_RUNS[r, 1], _HEX_RUNS[r, 2]
        for d in range(d0, d1):
            if frames[row, d] >= 0 and not _emit(
                counts, 2 * budget, edges, first, char + d - d0, char + d - d0, frames[row, d]
            ):
                return -1
    _end(counts, st, state)
    return state


@_helper
def _uniform(level, key, counts, budget, st, edges, nodes, table, memo, frames):
    """The state reading `level` >= 1 hex digits that all lead to state `key`, remembered in
    memo[key, level - 1]; frames[0] is scratch space.  -1 when it does not fit."""
    state = key
    for lv in range(1, level + 1):
        if memo[key, lv - 1] > 0:
            state = memo[key, lv - 1] - 1
            continue
        for d in range(16):
            frames[0, d] = state
        slot, state = _find_hex_state(lv, frames, 0, nodes, table)
        if state < 0:
            state = _add_hex_state(lv, frames, 0, slot, counts, budget, st, edges, nodes, table)
            if state < 0:
                return -1
        memo[key, lv - 1] = state + 1
    return state


@_helper
def _tree(segs, nseg, counts, budget, st, edges, nodes, table, memo, frames):
    """The state reading the four hex digits of a code unit in 0..0xFFFF, where the sorted,
    disjoint (lo, hi, state) segments segs[:nseg] say where each code unit leads (nseg > 0):
    a depth-first walk of the 16-ary blocks.  frames[level] holds the walk's frame at `level`:
    16 children, then _BASE, _DIGIT and the segments _SEG_FROM .. _SEG_TO that overlap it;
    frames[0] is scratch space."""
    if nseg == 1 and segs[0, 0] == 0 and segs[0, 1] == 0xFFFF:
        return _uniform(4, segs[0, 2], counts, budget, st, edges, nodes, table, memo, frames)
    level = 4
    frames[4, _BASE] = 0
    frames[4, _DIGIT] = 0
    frames[4, _SEG_FROM] = 0
    frames[4, _SEG_TO] = nseg
    while True:
        d = frames[level, _DIGIT]
        if d == 16:
            slot, node = _find_hex_state(level, frames, level, nodes, table)
            if node < 0:
                node = _add_hex_state(level, frames, level, slot, counts, budget, st, edges, nodes, table)
            if node < 0 or level == 4:
                return node
            level += 1
            frames[level, frames[level, _DIGIT]] = node
            frames[level, _DIGIT] += 1
            continue
        size = np.int64(1) << (4 * (level - 1))
        a = frames[level, _BASE] + d * size
        b = a + size - 1
        k = frames[level, _SEG_FROM]
        j = frames[level, _SEG_TO]
        while k < j and segs[k, 1] < a:
            k += 1
        frames[level, _SEG_FROM] = k
        if k == j or segs[k, 0] > b:
            frames[level, d] = -1
            frames[level, _DIGIT] = d + 1
        elif segs[k, 0] <= a and segs[k, 1] >= b:  # one segment covers the child block (always at level 1)
            key = segs[k, 2]
            if level == 1:
                child = key
            elif memo[key, level - 2] > 0:
                child = memo[key, level - 2] - 1
            else:
                child = _uniform(level - 1, key, counts, budget, st, edges, nodes, table, memo, frames)
                if child < 0:
                    return -1
            frames[level, d] = child
            frames[level, _DIGIT] = d + 1
        else:
            m = k + 1
            while m < j and segs[m, 0] <= b:
                m += 1
            level -= 1
            frames[level, _BASE] = a
            frames[level, _DIGIT] = 0
            frames[level, _SEG_FROM] = k
            frames[level, _SEG_TO] = m


@_helper
def _pair_state(residual, nres, counts, budget, st, edges, nodes, table, memo, frames):
    """The state after a high surrogate whose low halves \\uDC00-\\uDFFF the segments
    residual[:nres] send to decoded states: one per distinct low-half tree (-1: does not fit)."""
    root = _tree(residual, nres, counts, budget, st, edges, nodes, table, memo, frames)
    if root < 0:
        return -1
    if memo[root, _PAIR] > 0:
        return memo[root, _PAIR] - 1
    pair = _new_state(counts, budget, st)
    if pair < 0:
        return -1
    u = _new_state(counts, budget, st)
    if u < 0:
        return -1
    memo[root, _PAIR] = pair + 1
    _begin(counts, st, pair)
    if not _emit(counts, 2 * budget, edges, st[pair, 0], _BACKSLASH, _BACKSLASH, u):
        return -1
    _end(counts, st, pair)
    _begin(counts, st, u)
    if not _emit(counts, 2 * budget, edges, st[u, 0], _U, _U, root):
        return -1
    _end(counts, st, u)
    return pair


@_helper
def _push_segment(segs, nseg, lo, hi, key):
    """Append a segment, joined to the previous one when adjacent with the same key; the new count."""
    if nseg > 0 and segs[nseg - 1, 2] == key and segs[nseg - 1, 1] + 1 == lo:
        segs[nseg - 1, 1] = hi
        return nseg
    segs[nseg, 0] = lo
    segs[nseg, 1] = hi
    segs[nseg, 2] = key
    return nseg + 1


@_helper
def _close_block(cursor, residual, segs, counts, budget, st, edges, nodes, table, memo, frames):
    """Append the segment of the high surrogate whose residual is being collected, if any (it leads
    to the pair state of the residual); False when something does not fit."""
    block = cursor[_BLOCK]
    if block >= 0:
        pair = _pair_state(residual, cursor[_PIECES], counts, budget, st, edges, nodes, table, memo, frames)
        if pair < 0:
            return False
        cursor[_SEGS] = _push_segment(segs, cursor[_SEGS], _HIGH + block, _HIGH + block, pair)
        cursor[_BLOCK] = -1
        cursor[_PIECES] = 0
    return True


@_helper
def _add_piece(block, lo, hi, t, cursor, residual, segs, counts, budget, st, edges, nodes, table, memo, frames):
    """Low surrogates lo..hi lead to state t after high surrogate `block`: add the piece to the
    block's residual, closing another block's first; False when something does not fit."""
    if cursor[_BLOCK] != block and not _close_block(
        cursor, residual, segs, counts, budget, st, edges, nodes, table, memo, frames
    ):
        return False
    cursor[_BLOCK] = block
    k = cursor[_PIECES]
    residual[k, 0], residual[k, 1], residual[k, 2] = lo, hi, t
    cursor[_PIECES] = k + 1
    return True


@_helper
def _code_unit_segments(
    lo, hi, target, e0, e1, segs, residual, cursor, counts, budget, st, edges, nodes, table, memo, frames
):
    """Where the code unit of a \\uXXXX escape leads from a state with edges e0..e1 - 1: sorted
    (lo, hi, state) segments in segs (their count is returned; -1 when something does not fit).
    BMP code points lead to their decoded states; a high surrogate leads to the pair state of its
    block of 1024 astral code points: a full block's, or the residual of pieces of edges."""
    cursor[_SEGS], cursor[_BLOCK], cursor[_PIECES] = 0, -1, 0
    for e in range(e0, e1):
        if lo[e] < _HIGH:
            cursor[_SEGS] = _push_segment(segs, cursor[_SEGS], lo[e], min(hi[e], _HIGH - 1), target[e])
    for e in range(e0, e1):
        if hi[e] < _ASTRAL:
            continue
        a = max(lo[e], _ASTRAL) - _ASTRAL
        b = hi[e] - _ASTRAL
        first, last = a >> 10, b >> 10
        full_from, full_to = first, last
        if a & 1023:  # starts inside block `first`
            if not _add_piece(
                first,
                _LOW + (a & 1023),
                _LOW + ((b & 1023) if last == first else 1023),
                target[e],
                cursor,
                residual,
                segs,
                counts,
                budget,
                st,
                edges,
                nodes,
                table,
                memo,
                frames,
            ):
                return -1
            full_from += 1
        ends_inside = (b & 1023) != 1023 and last >= full_from
        if ends_inside:
            full_to -= 1
        if full_from <= full_to:
            if not _close_block(cursor, residual, segs, counts, budget, st, edges, nodes, table, memo, frames):
                return -1
            residual[0, 0], residual[0, 1], residual[0, 2] = _LOW, _LOW + 1023, target[e]
            pair = _pair_state(residual, 1, counts, budget, st, edges, nodes, table, memo, frames)
            if pair < 0:
                return -1
            cursor[_SEGS] = _push_segment(segs, cursor[_SEGS], _HIGH + full_from, _HIGH + full_to, pair)
        if ends_inside and not _add_piece(
            last,
            _LOW,
            _LOW + (b & 1023),
            target[e],
            cursor,
            residual,
            segs,
            counts,
            budget,
            st,
            edges,
            nodes,
            table,
            memo,
            frames,
        ):
            return -1
    if not _close_block(cursor, residual, segs, counts, budget, st, edges, nodes, table, memo, frames):
        return -1
    for e in range(e0, e1):
        if hi[e] >= _BMP_REST and lo[e] < _ASTRAL:
            cursor[_SEGS] = _push_segment(
                segs, cursor[_SEGS], max(lo[e], _BMP_REST), min(hi[e], _ASTRAL - 1), target[e]
            )
    return cursor[_SEGS]


@njit(cache=True)
def encode(start, count, lo, hi, target, budget, capacity):
    """The JSON text automaton (between the quotes) of a decoded-language automaton, with at most
    `budget` states and twice as many edges, in arrays for `capacity` states (see the module doc
    for the status).  Decoded state s keeps its number; the escape and hex-digit states follow in
    the order they were made.  Returns (status, number of states, st, edges) where st[s] is
    (first edge, edge count) and an edge is (lo, hi, target), all used rows when OK.
    """
    n = start.shape[0]
    cap = max(n, min(budget, capacity)) + 1
    st = np.zeros((cap, 2), np.int64)
    edges = np.empty((min(2 * budget, 6 * cap) + 1, 3), np.int64)
    size = 64
    while size < 2 * cap:
        size *= 2
    table = np.zeros(size, np.int32)
    nodes = np.empty((cap, 18), np.int64)
    memo = np.zeros((cap, 5), np.int32)
    counts = np.zeros(4, np.int64)
    counts[_N_STATES] = n
    most = 1
    for s in range(n):
        most = max(most, count[s])
    segs = np.empty((2 * most + 1024, 3), np.int64)  # BMP pieces, one per high surrogate at most
    residual = np.empty((most + 1, 3), np.int64)
    cursor = np.empty(3, np.int64)
    frames = np.empty((5, 20), np.int64)
    for s in range(n):
        e0 = start[s]
        e1 = e0 + count[s]
        if e1 == e0:
            continue
        esc = _new_state(counts, budget, st)
        if esc < 0:
            return counts[_STATUS], 0, st, edges
        nseg = _code_unit_segments(
            lo, hi, target, e0, e1, segs, residual, cursor, counts, budget, st, edges, nodes, table, memo, frames
        )
        if nseg < 0:
            return counts[_STATUS], 0, st, edges
        root = -1
        if nseg > 0:
            root = _tree(segs, nseg, counts, budget, st, edges, nodes, table, memo, frames)
            if root < 0:
                return counts[_STATUS], 0, st, edges
        # the escape state: the short escapes, then "u"
        _begin(counts, st, esc)
        first = st[esc, 0]
        for x in range(_ESCAPE_CHARS.shape[0]):
            cp = _ESCAPED[x]
            for e in range(e0, e1):
                if lo[e] <= cp <= hi[e]:
                    if not _emit(counts, 2 * budget, edges, first, _ESCAPE_CHARS[x], _ESCAPE_CHARS[x], target[e]):
                        return counts[_STATUS], 0, st, edges
                    break
        if root >= 0 and not _emit(counts, 2 * budget, edges, first, _U, _U, root):
            return counts[_STATUS], 0, st, edges
        _end(counts, st, esc)
        # the decoded state: raw characters, and '\\' into the escape state
        _begin(counts, st, s)
        first = st[s, 0]
        backslash = False
        for e in range(e0, e1):
            for r in range(_RAW_OK.shape[0]):
                a = max(lo[e], _RAW_OK[r, 0])
                b = min(hi[e], _RAW_OK[r, 1])
                if a > b:
                    continue
                if not backslash and a > _BACKSLASH:
                    backslash = True
                    if not _emit(counts, 2 * budget, edges, first, _BACKSLASH, _BACKSLASH, esc):
                        return counts[_STATUS], 0, st, edges
                if not _emit(counts, 2 * budget, edges, first, a, b, target[e]):
                    return counts[_STATUS], 0, st, edges
        if not backslash and not _emit(counts, 2 * budget, edges, first, _BACKSLASH, _BACKSLASH, esc):
            return counts[_STATUS], 0, st, edges
        _end(counts, st, s)
    return OK, counts[_N_STATES], st[: counts[_N_STATES]], edges[: counts[_N_EDGES]]


@njit(cache=True)
def _predecessors(start, count, tgt):
    """(first, preds): the predecessors of state s are preds[first[s]:first[s + 1]]."""
    n = start.shape[0]
    sources = np.empty(count.sum(), np.int64)
    targets = np.empty(count.sum(), np.int64)
    k = 0
    for s in range(n):
        for e in range(start[s], start[s] + count[s]):
            sources[k] = s
            targets[k] = tgt[e]
            k += 1
    return grouped(targets, sources, n)


@njit(cache=True)
def trim(start, count, lo, hi, target, final):
    """Keep the states that are reachable from state 0 and reach a final state, numbered in
    breadth-first order from 0 (edges in order), with edges to dropped states removed and
    adjacent ranges to one target joined: `codepoint_dfa.Dfa.trim` on flat arrays.

    Returns the new (start, count, lo, hi, target, final); no states when state 0 reaches no
    final state.
    """
    n = start.shape[0]
    first_pred, preds = _predecessors(start, count, target)
    live = mark_reaching(final.copy(), first_pred, preds)
    number = np.full(n, -1, np.int64)
    order = np.empty(n, np.int64)
    m = 0
    if n > 0 and live[0]:
        number[0] = 0
        order[0] = 0
        m = 1
        head = 0
        while head < m:
            s = order[head]
            head += 1
            for e in range(start[s], start[s] + count[s]):
                t = target[e]
                if live[t] and number[t] < 0:
                    number[t] = m
                    order[m] = t
                    m += 1
    new_start = np.empty(m, np.int64)
    new_count = np.empty(m, np.int64)
    new_lo = np.empty(lo.shape[0], np.int64)
    new_hi = np.empty(lo.shape[0], np.int64)
    new_tgt = np.empty(lo.shape[0], np.int64)
    k = 0
    for i in range(m):
        s = order[i]
        new_start[i] = k
        for e in range(start[s], start[s] + count[s]):
            t = number[target[e]]
            if t < 0:
                continue
            if k > new_start[i] and new_tgt[k - 1] == t and new_hi[k - 1] + 1 == lo[e]:
                new_hi[k - 1] = hi[e]
            else:
                new_lo[k] = lo[e]
                new_hi[k] = hi[e]
                new_tgt[k] = t
                k += 1
        new_count[i] = k - new_start[i]
    return new_start, new_count, new_lo[:k], new_hi[:k], new_tgt[:k], final[order[:m]]


# ---------------------------------------------------------------------------------------------
# Products and minimisation of decoded-string automata.

AND = 0  # a product state is final when both sides are (intersection)
OR = 1  # when either is (union)
AND_NOT = 2  # when the first is and the second is not (difference)


@_helper
def _find_pair(table, key, pair_key):
    """The slot of `key` in the open-addressing `table` (ids + 1 of pairs, 0 free)."""
    mask = table.shape[0] - 1
    i = (key * np.int64(0x61C8864680B583EB)) >> 17 & mask
    while table[i] != 0 and pair_key[table[i] - 1] != key:
        i = (i + 1) & mask
    return i


@njit(cache=True)
def _explore_product(a_start, a_count, a_lo, a_hi, a_tgt, b_start, b_count, b_lo, b_hi, b_tgt, keep_dead, budget):
    """The reachable part of the product automaton from pair (0, 0): a pair (s, t) has an edge on
    every interval where s or t has one (both when not `keep_dead`); -1 stands for "no state".

    Returns (status, pair_s, pair_t, start, count, lo, hi, target) with status STATES past
    `budget` pairs; pair i is state i, in the order found (breadth first).
    """
    nb1 = b_start.shape[0] + 1
    pair_s = np.empty(64, np.int64)
    pair_t = np.empty(64, np.int64)
    pair_key = np.empty(64, np.int64)
    table = np.zeros(128, np.int64)
    start = np.empty(64, np.int64)
    count = np.empty(64, np.int64)
    lo = np.empty(256, np.int64)
    hi = np.empty(256, np.int64)
    tgt = np.empty(256, np.int64)
    pair_s[0], pair_t[0], pair_key[0] = 0, 0, nb1 + 1
    table[_find_pair(table, nb1 + 1, pair_key)] = 1
    n = 1
    m = 0
    p = 0
    while p < n:
        s, t = pair_s[p], pair_t[p]
        i, i_end = (a_start[s], a_start[s] + a_count[s]) if s >= 0 else (0, 0)
        j, j_end = (b_start[t], b_start[t] + b_count[t]) if t >= 0 else (0, 0)
        start[p] = m
        cur = -1
        while i < i_end or j < j_end:
            # the elementary interval from `cur`: up to the next edge boundary of either side
            if cur < 0 or (i < i_end and a_hi[i] < cur) or (j < j_end and b_hi[j] < cur):
                while i < i_end and a_hi[i] < cur:
                    i += 1
                while j < j_end and b_hi[j] < cur:
                    j += 1
                if i == i_end and j == j_end:
                    break
            in_a = i < i_end and a_lo[i] <= cur
            in_b = j < j_end and b_lo[j] <= cur
            if not in_a and not in_b:
                cur = min(a_lo[i] if i < i_end else 0x7FFFFFFF, b_lo[j] if j < j_end else 0x7FFFFFFF)
                continue
            end = 0x7FFFFFFF
            if i < i_end:
                end = min(end, a_hi[i] if in_a else a_lo[i] - 1)
            if j < j_end:
                end = min(end, b_hi[j] if in_b else b_lo[j] - 1)
            if keep_dead or (in_a and in_b):
                x = a_tgt[i] if in_a else -1
                y = b_tgt[j] if in_b else -1
                key = (x + 1) * nb1 + (y + 1)
                slot = _find_pair(table, key, pair_key)
                if table[slot] == 0:
                    if n >= budget:
                        return STATES, pair_s, pair_t, start, count, lo, hi, tgt
                    if n >= pair_s.shape[0]:
                        pair_s = grown(pair_s, n + 1)
                        pair_t = grown(pair_t, n + 1)
                        pair_key = grown(pair_key, n + 1)
                        start = grown(start, n + 1)
                        count = grown(count, n + 1)
                    pair_s[n], pair_t[n], pair_key[n] = x, y, key
                    table[slot] = n + 1
                    n += 1
                    if 2 * n > table.shape[0]:  # rehash into a table twice the size
                        table = np.zeros(2 * table.shape[0], np.int64)
                        for q in range(n):
                            table[_find_pair(table, pair_key[q], pair_key)] = q + 1
                        slot = _find_pair(table, key, pair_key)
                if m >= lo.shape[0]:
                    lo = grown(lo, m + 1)
                    hi = grown(hi, m + 1)
                    tgt = grown(tgt, m + 1)
                lo[m], hi[m], tgt[m] = cur, end, table[slot] - 1
                m += 1
            cur = end + 1
        count[p] = m - start[p]
        p += 1
    return OK, pair_s[:n], pair_t[:n], start[:n], count[:n], lo[:m], hi[:m], tgt[:m]


@njit(cache=True)
def _blocks(start, count, lo, hi, tgt, final):
    """The coarsest partition of a trimmed automaton's states into language-equivalent blocks:
    its edges cut at every edge bound into letters (code-point intervals that no edge splits),
    then the shared minimiser (partition_kernels.minimal_blocks).  Returns (block, number)."""
    n = start.shape[0]
    k = lo.shape[0]
    bounds = np.empty(2 * k, np.int64)
    bounds[:k] = lo
    bounds[k:] = hi + 1
    letters = np.unique(bounds)  # letter i: [letters[i], letters[i + 1])
    n_letters = max(letters.shape[0] - 1, 0)
    first = np.searchsorted(letters, lo)
    past = np.searchsorted(letters, hi + 1)
    letter_ptr = np.zeros(n_letters + 1, np.int64)
    for s in range(n):
        for e in range(start[s], start[s] + count[s]):
            for a in range(first[e], past[e]):
                letter_ptr[a + 1] += 1
    for a in range(n_letters):
        letter_ptr[a + 1] += letter_ptr[a]
    tail = np.empty(letter_ptr[n_letters], np.int32)
    head = np.empty(letter_ptr[n_letters], np.int32)
    fill = letter_ptr[:-1].copy()
    for s in range(n):
        for e in range(start[s], start[s] + count[s]):
            for a in range(first[e], past[e]):
                tail[fill[a]] = s
                head[fill[a]] = tgt[e]
                fill[a] += 1
    return minimal_blocks(n, final, tail, head, letter_ptr)


@njit(cache=True)
def minimize(start, count, lo, hi, tgt, final):
    """The minimal automaton of a trimmed one (see `trim` for the returned arrays): its states
    are the blocks of `_blocks`, each with the edges of one member, numbered and joined by
    `trim`."""
    n = start.shape[0]
    block, n_blocks = _blocks(start, count, lo, hi, tgt, final)
    number = np.full(n_blocks, -1, np.int64)
    member = np.empty(n_blocks, np.int64)
    m = 0
    for s in range(n):
        if number[block[s]] < 0:
            number[block[s]] = m
            member[m] = s
            m += 1
    q_start = np.empty(m, np.int64)
    q_count = np.empty(m, np.int64)
    q_final = np.zeros(m, np.bool_)
    k = 0
    for q in range(m):
        s = member[q]
        q_start[q] = k
        q_count[q] = count[s]
        q_final[q] = final[s]
        k += count[s]
    q_lo = np.empty(k, np.int64)
    q_hi = np.empty(k, np.int64)
    q_tgt = np.empty(k, np.int64)
    for q in range(m):
        s = member[q]
        for i in range(count[s]):
            e = start[s] + i
            q_lo[q_start[q] + i] = lo[e]
            q_hi[q_start[q] + i] = hi[e]
            q_tgt[q_start[q] + i] = number[block[tgt[e]]]
    return trim(q_start, q_count, q_lo, q_hi, q_tgt, q_final)


@njit(cache=True)
def product(
    a_start,
    a_count,
    a_lo,
    a_hi,
    a_tgt,
    a_final,
    b_start,
    b_count,
    b_lo,
    b_hi,
    b_tgt,
    b_final,
    rule,
    keep_dead,
    budget,
    minimal,
):
    """The product of two automata (`_explore_product`) with finals by `rule` (AND, OR, AND_NOT),
    trimmed, and minimised when `minimal`.  Returns (status, start, count, lo, hi, target, final)."""
    status, pair_s, pair_t, start, count, lo, hi, tgt = _explore_product(
        a_start, a_count, a_lo, a_hi, a_tgt, b_start, b_count, b_lo, b_hi, b_tgt, keep_dead, budget
    )
    final = np.zeros(pair_s.shape[0], np.bool_)
    if status != OK:
        return status, start, count, lo, hi, tgt, final
    for p in range(pair_s.shape[0]):
        x = pair_s[p] >= 0 and a_final[pair_s[p]]
        y = pair_t[p] >= 0 and b_final[pair_t[p]]
        final[p] = (x and y) if rule == AND else (x or y) if rule == OR else (x and not y)
    start, count, lo, hi, tgt, final = trim(start, count, lo, hi, tgt, final)
    if minimal and start.shape[0] > 0:
        start, count, lo, hi, tgt, final = minimize(start, count, lo, hi, tgt, final)
    return OK, start, count, lo, hi, tgt, final
