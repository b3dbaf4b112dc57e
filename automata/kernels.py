"""numba kernels that run the pushdown automaton over bytes.

A *stack* is a pair (top_state, frame): top_state is a global DFA state and frame indexes an
immutable frame (return_state, parent_frame) in a frame pool, or is ROOT (the stack below the
root rule is empty), BOTTOM (offline mask computation: below lies an unknown caller) or CONT
(offline: a caller's continuation, entered where the rule under BOTTOM ended).
Frames are hash-consed, so equal stacks are equal pairs and sets of stacks dedupe as pairs,
and a set of stacks is two parallel int64 arrays.  Byte steps never create frames; only entering
a rule (a reference edge) does.

Closure (epsilon moves): a reference edge (rule, return_state) pushes
frame(return_state, frame) and moves the top to rule_start[rule]; an accepting top pops to its
frame.  Popping ROOT sets FLAG_END (the input may end here); popping BOTTOM or CONT sets
FLAG_RULE_END (the rule may end here, so what follows depends on the caller).

The kernels take the three blobs whole -- the PDA (int32), the frame pool (int32) and the
workspace (int64), layouts below -- and index them through the offsets in their headers: numba
reference-counts every array a call passes, which costs more than the work of a closure step
when a call takes twenty views.

Every kernel returns a status: >= 0 is a count, ERR_* asks the caller to grow a buffer and retry
(kernels are idempotent: frames they added are valid and reused) or to report a budget error.
"""

from __future__ import annotations

import numpy as np

from ..core.jit import njit

ROOT = -1
BOTTOM = -2
CONT = -3

FLAG_END = 1
FLAG_RULE_END = 2

ERR_POOL_FULL = -1
ERR_TOO_MANY_TOPS = -2
ERR_BUFFER_FULL = -3

# PDA blob (int32): PDA_HEADER section offsets; section k spans [blob[k], blob[k+1]).
PDA_ACCEPT = 0
PDA_BYTE_PTR = 1
PDA_BYTE_LO = 2
PDA_BYTE_HI = 3
PDA_BYTE_DST = 4
PDA_REF_PTR = 5
PDA_REF_RULE = 6
PDA_REF_DST = 7
PDA_RULE_START = 8
PDA_FOLLOW = 9  # n_rules * 256, row-major
PDA_STATE_RULE = 10
PDA_RETURNS_PTR = 11  # n_rules + 1: CSR into PDA_RETURNS
PDA_RETURNS = 12  # each rule's callers' distinct return states
PDA_ROOT = 13  # one entry: the root rule
PDA_SECTIONS = 14
PDA_HEADER = PDA_SECTIONS + 1
#
# Frame pool blob (int32): [count, capacity, table_size, 0], frame_state[capacity],
# frame_parent[capacity], table[table_size] (frame id + 1, 0 = empty slot).
POOL_HEADER = 4
#
# Workspace blob (int64): [epoch, buffer, levels, seen_size, memo_slots, memo_pool, memo_used, 0],
# buf_s[buffer], buf_p[buffer], WS_LEVEL_ARRAYS arrays of [levels] (the trie walks' per-depth
# stack sets, see masks/walk.py), seen_state[seen_size], seen_parent[seen_size],
# seen_epoch[seen_size], then the closure memo (`closure_memo`): memo_entry[memo_slots, 4] (offset
# into the memo pool (-1 = empty), raw count, closure count, flags), memo_s[memo_pool],
# memo_p[memo_pool] (each entry's raw stacks, then its closure).
WS_HEADER = 8
WS_LEVEL_ARRAYS = 4
WS_MEMO_SLOTS = 2048
WS_MEMO_POOL = 1 << 15
WS_MEMO_RAW = 4  # raw sets of up to this many stacks are memoised


@njit(cache=True, inline="always")
def _pair_hash(state, parent):
    return (np.int64(state) * np.int64(0x9E3779B1)) ^ (np.int64(parent) * np.int64(0x85EBCA77) + np.int64(0x632BE5AB))


# -- workspace offsets -------------------------------------------------------------------------


@njit(cache=True, inline="always")
def ws_buffer_p(ws):
    """Offset of buf_p (buf_s starts at WS_HEADER); both hold ws[1] entries."""
    return WS_HEADER + ws[1]


@njit(cache=True, inline="always")
def ws_levels(ws):
    """Offset of the level arrays: row r, depth d is ws[ws_levels(ws) + r * ws[2] + d]."""
    return WS_HEADER + 2 * ws[1]


@njit(cache=True, inline="always")
def ws_seen(ws):
    """Offset of seen_state (seen_parent and seen_epoch follow, ws[3] entries each)."""
    return WS_HEADER + 2 * ws[1] + WS_LEVEL_ARRAYS * ws[2]


@njit(cache=True, inline="always")
def ws_memo(ws):
    """Offset of the memo entries (4 per slot; memo_s then memo_p follow)."""
    return ws_seen(ws) + 3 * ws[3]


# -- single steps ------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def find_byte_target(byte_ptr, byte_lo, byte_hi, byte_dst, state, b):
    """Target of byte b from `state` over section views (-1: none)."""
    for e in range(byte_ptr[state], byte_ptr[state + 1]):
        if b < byte_lo[e]:
            return -1
        if b <= byte_hi[e]:
            return byte_dst[e]
    return -1


@njit(cache=True, inline="always")
def byte_target(pda, state, b):
    """Target of byte b from `state` in the PDA blob (-1: none); edges are sorted by lo."""
    ptr = pda[PDA_BYTE_PTR]
    lo = pda[PDA_BYTE_LO]
    hi = pda[PDA_BYTE_HI]
    for e in range(pda[ptr + state], pda[ptr + state + 1]):
        if b < pda[lo + e]:
            return -1
        if b <= pda[hi + e]:
            return pda[pda[PDA_BYTE_DST] + e]
    return -1


@njit(cache=True, inline="always")
def has_epsilon(pda, state):
    """True when the state has reference edges or may end its rule (a closure has work)."""
    ref_ptr = pda[PDA_REF_PTR]
    return pda[ref_ptr + state] != pda[ref_ptr + state + 1] or pda[pda[PDA_ACCEPT] + state] != 0


@njit(cache=True, inline="always")
def step_byte(pda, ws, src, n_src, b, dst):
    """Move every stack of buf[src:src+n_src] over byte b into buf[dst:]; returns the count.

    The caller guarantees room for n_src pairs at dst.  Duplicates are removed by the closure.
    """
    bs = WS_HEADER
    bp = ws_buffer_p(ws)
    n = 0
    for i in range(n_src):
        t = byte_target(pda, ws[bs + src + i], b)
        if t >= 0:
            ws[bs + dst + n] = t
            ws[bp + dst + n] = ws[bp + src + i]
            n += 1
    return n


@njit(cache=True, inline="always")
def intern_frame(pool, state, parent):
    """Id of frame (state, parent), creating it if new; ERR_POOL_FULL when the pool must grow."""
    cap = pool[1]
    size = pool[2]
    table = POOL_HEADER + 2 * cap
    mask = size - 1
    i = _pair_hash(state, parent) & mask
    while True:
        slot = pool[table + i]
        if slot == 0:
            n = pool[0]
            if n >= cap or 2 * (n + 1) > size:
                return ERR_POOL_FULL
            pool[POOL_HEADER + n] = state
            pool[POOL_HEADER + cap + n] = parent
            pool[0] = n + 1
            pool[table + i] = n + 1
            return n
        node = slot - 1
        if pool[POOL_HEADER + node] == state and pool[POOL_HEADER + cap + node] == parent:
            return node
        i = (i + 1) & mask


@njit(cache=True, inline="always")
def _seen_insert(ws, seen, size, epoch, state, parent):
    """True when (state, parent) was not yet in the set of this epoch (and inserts it)."""
    mask = size - 1
    i = _pair_hash(state, parent) & mask
    while True:
        if ws[seen + 2 * size + i] != epoch:
            ws[seen + 2 * size + i] = epoch
            ws[seen + i] = state
            ws[seen + size + i] = parent
            return True
        if ws[seen + i] == state and ws[seen + size + i] == parent:
            return False
        i = (i + 1) & mask


@njit(cache=True, inline="always")
def _append_unseen(ws, start, n, state, parent, seen, size, epoch, max_tops):
    """Append (state, parent) at buf[start + n] unless already in this epoch's set.

    Returns the new count, or ERR_TOO_MANY_TOPS / ERR_BUFFER_FULL.
    """
    if not _seen_insert(ws, seen, size, epoch, state, parent):
        return n
    if n >= max_tops:
        return ERR_TOO_MANY_TOPS
    if start + n >= ws[1]:
        return ERR_BUFFER_FULL
    ws[WS_HEADER + start + n] = state
    ws[ws_buffer_p(ws) + start + n] = parent
    return n + 1


# -- closure -----------------------------------------------------------------------------------


@njit(cache=True)
def closure(pda, pool, ws, start, n_raw, max_tops, limit):
    """Dedupe buf[start:start+n_raw] and append everything reachable by epsilon moves.

    limit > 0 makes stacks on CONT continuations without frames: a rule entered from one starts
    on CONT too, and a rule that ends on CONT goes on in each return state of its callers (on
    CONT again; ref_dst of the edge that entered it is among them, so this is a superset of what
    a frame would return to), or sets FLAG_RULE_END when it has more than `limit` of them; the
    root rule ending sets FLAG_END.
    Returns (count, flags, n_distinct_raw); count < 0 is an ERR_* status.  The distinct raw pairs
    stay first, in their original order.
    """
    bs = WS_HEADER
    bp = ws_buffer_p(ws)
    if n_raw == 1 and not has_epsilon(pda, ws[bs + start]):
        return 1, 0, 1  # most steps inside a rule: one stack, no epsilon moves
    accept = pda[PDA_ACCEPT]
    ref_ptr = pda[PDA_REF_PTR]
    ref_rule = pda[PDA_REF_RULE]
    ref_dst = pda[PDA_REF_DST]
    rule_start = pda[PDA_RULE_START]
    seen = ws_seen(ws)
    size = ws[3]
    ws[0] += 1
    epoch = ws[0]
    byte_ptr = pda[PDA_BYTE_PTR]
    n = 0
    for i in range(n_raw):
        s = ws[bs + start + i]
        p = ws[bp + start + i]
        # A top that can only end its rule (no edge left) stands for its return: the kernel then
        # names a state whose stored mask decides tokens, not one that defers them all to the stack.
        while (
            p >= 0
            and pda[accept + s] != 0
            and pda[byte_ptr + s] == pda[byte_ptr + s + 1]
            and pda[ref_ptr + s] == pda[ref_ptr + s + 1]
        ):
            s, p = pool[POOL_HEADER + p], pool[POOL_HEADER + pool[1] + p]
        if _seen_insert(ws, seen, size, epoch, s, p):
            ws[bs + start + n] = s
            ws[bp + start + n] = p
            n += 1
    n_distinct_raw = n
    flags = 0
    i = 0
    while i < n:
        s = ws[bs + start + i]
        p = ws[bp + start + i]
        i += 1
        for e in range(pda[ref_ptr + s], pda[ref_ptr + s + 1]):
            if p == CONT and limit > 0:
                frame = CONT
            else:
                frame = intern_frame(pool, pda[ref_dst + e], p)
                if frame < 0:
                    return frame, 0, 0
            n = _append_unseen(ws, start, n, pda[rule_start + pda[ref_rule + e]], frame, seen, size, epoch, max_tops)
            if n < 0:
                return n, 0, 0
        if pda[accept + s]:
            if p >= 0:
                n = _append_unseen(
                    ws, start, n, pool[POOL_HEADER + p], pool[POOL_HEADER + pool[1] + p], seen, size, epoch, max_tops
                )
                if n < 0:
                    return n, 0, 0
            elif p == ROOT:
                flags |= FLAG_END
            elif p == CONT and limit > 0:
                rule = pda[pda[PDA_STATE_RULE] + s]
                if rule == pda[pda[PDA_ROOT]]:
                    flags |= FLAG_END
                returns_ptr = pda[PDA_RETURNS_PTR]
                first = pda[returns_ptr + rule]
                last = pda[returns_ptr + rule + 1]
                if last - first > limit:
                    flags |= FLAG_RULE_END
                    continue
                returns = pda[PDA_RETURNS]
                for k in range(first, last):
                    n = _append_unseen(ws, start, n, pda[returns + k], CONT, seen, size, epoch, max_tops)
                    if n < 0:
                        return n, 0, 0
            else:
                flags |= FLAG_RULE_END
    return n, flags, n_distinct_raw


@njit(cache=True)
def closure_memo(pda, pool, ws, start, n_raw, max_tops):
    """closure() of the raw stacks buf[start:start+n_raw] (no continuations), memoised in the
    workspace for small raw sets: a trie walk meets the same few stacks after most bytes of most
    tokens, and frames are immutable, so the closure is copied instead of recomputed.  Returns
    (count, flags)."""
    if n_raw > WS_MEMO_RAW:
        r = closure(pda, pool, ws, start, n_raw, max_tops, 0)
        return r[0], r[1]
    bs = WS_HEADER
    bp = ws_buffer_p(ws)
    slots = ws[4]
    pool_size = ws[5]
    entries = ws_memo(ws)
    memo_s = entries + 4 * slots
    memo_p = memo_s + pool_size
    h = np.int64(n_raw)
    for i in range(n_raw):
        h = h * np.int64(0x100000001B3) ^ _pair_hash(ws[bs + start + i], ws[bp + start + i])
    slot = entries + 4 * (h & (slots - 1))
    offset = ws[slot]
    if offset >= 0 and ws[slot + 1] == n_raw:
        same = True
        for i in range(n_raw):
            if ws[memo_s + offset + i] != ws[bs + start + i] or ws[memo_p + offset + i] != ws[bp + start + i]:
                same = False
                break
        if same:
            count = ws[slot + 2]
            if start + count > ws[1]:
                return ERR_BUFFER_FULL, 0
            for i in range(count):
                ws[bs + start + i] = ws[memo_s + offset + n_raw + i]
                ws[bp + start + i] = ws[memo_p + offset + n_raw + i]
            return count, ws[slot + 3]
    used = ws[6]
    room = used + n_raw <= pool_size
    if room:
        for i in range(n_raw):
            ws[memo_s + used + i] = ws[bs + start + i]
            ws[memo_p + used + i] = ws[bp + start + i]
    r = closure(pda, pool, ws, start, n_raw, max_tops, 0)
    count = r[0]
    if room and count > 0 and used + n_raw + count <= pool_size:
        for i in range(count):
            ws[memo_s + used + n_raw + i] = ws[bs + start + i]
            ws[memo_p + used + n_raw + i] = ws[bp + start + i]
        ws[6] = used + n_raw + count
        ws[slot] = used
        ws[slot + 1] = n_raw
        ws[slot + 2] = count
        ws[slot + 3] = r[1]
    return count, r[1]


@njit(cache=True)
def advance(pda, pool, ws, stacks, data, start, end, max_tops):
    """Run the closed packed stack set `stacks` over the bytes data[start:end].

    Returns (status, offset, n_kernel, n_closure, flags): the new set is buf[offset:offset+n_closure]
    with the kernel (stacks straight after the last byte) first.  status 0 means ok, 1 means the
    bytes were rejected, < 0 an ERR_* code.
    """
    half = ws[1] // 2
    n = stacks.shape[0] // 2
    if n > half:
        return ERR_BUFFER_FULL, 0, 0, 0, 0
    bs = WS_HEADER
    bp = ws_buffer_p(ws)
    for i in range(n):
        ws[bs + i] = stacks[i]
        ws[bp + i] = stacks[n + i]
    src = 0
    flags = 0
    n_kernel = 0
    for k in range(start, end):
        dst = half - src  # ping-pong between the two halves
        m = step_byte(pda, ws, src, n, data[k], dst)
        if m == 0:
            return 1, 0, 0, 0, 0
        res = closure(pda, pool, ws, dst, m, min(max_tops, half), 0)
        if res[0] < 0:
            if res[0] == ERR_TOO_MANY_TOPS and half < max_tops:
                return ERR_BUFFER_FULL, 0, 0, 0, 0
            return res[0], 0, 0, 0, 0
        n = res[0]
        flags = res[1]
        n_kernel = res[2]
        src = dst
    return 0, src, n_kernel, n, flags


# -- views (for code off the per-byte path) ----------------------------------------------------


@njit(cache=True, inline="always")
def blob_section(blob, k):
    return blob[blob[k] : blob[k + 1]]


@njit(cache=True, inline="always")
def pda_views(pda):
    return (
        blob_section(pda, PDA_ACCEPT),
        blob_section(pda, PDA_BYTE_PTR),
        blob_section(pda, PDA_BYTE_LO),
        blob_section(pda, PDA_BYTE_HI),
        blob_section(pda, PDA_BYTE_DST),
        blob_section(pda, PDA_REF_PTR),
        blob_section(pda, PDA_REF_RULE),
        blob_section(pda, PDA_REF_DST),
        blob_section(pda, PDA_RULE_START),
    )


@njit(cache=True, inline="always")
def _pool_views(pool):
    cap = pool[1]
    size = pool[2]
    h = POOL_HEADER
    return pool[h : h + cap], pool[h + cap : h + 2 * cap], pool[0:1], pool[h + 2 * cap : h + 2 * cap + size]


# -- entry points for Python -------------------------------------------------------------------


@njit(cache=True, nogil=True)
def run_closure(pda, pool, ws, n_raw, max_tops):
    """Closure of the raw set in the workspace buffers [0, n_raw): (count, flags, n_kernel)."""
    return closure(pda, pool, ws, 0, n_raw, max_tops, 0)


@njit(cache=True, nogil=True)
def run_advance(pda, pool, ws, stacks, data, start, end, max_tops):
    """advance() of a packed stack set over data[start:end]: (status, new stacks, n_kernel,
    flags).  A packed set of n stacks is one int64 array, states [0, n) then parents [n, 2n),
    the kernel first; the new set is empty unless status is 0."""
    status, offset, n_kernel, n, flags = advance(pda, pool, ws, stacks, data, start, end, max_tops)
    if status != 0:
        n = 0
    out = np.empty(2 * n, dtype=np.int64)
    out[:n] = ws[WS_HEADER + offset : WS_HEADER + offset + n]
    bp = ws_buffer_p(ws)
    out[n:] = ws[bp + offset : bp + offset + n]
    return status, out, n_kernel, flags


@njit(cache=True, nogil=True)
def run_allowed_first_bytes(pda, set_s, out):
    """out[b] = 1 for every byte some stack of the closed set can consume next."""
    for i in range(256):
        out[i] = 0
    byte_ptr = blob_section(pda, PDA_BYTE_PTR)
    byte_lo = blob_section(pda, PDA_BYTE_LO)
    byte_hi = blob_section(pda, PDA_BYTE_HI)
    for i in range(set_s.shape[0]):
        s = set_s[i]
        for e in range(byte_ptr[s], byte_ptr[s + 1]):
            for b in range(byte_lo[e], byte_hi[e] + 1):
                out[b] = 1


@njit(cache=True)
def rehash_pool(pool):
    """Rebuild the hash table of a pool blob (after growing it)."""
    frame_state, frame_parent, count, table = _pool_views(pool)
    mask = table.shape[0] - 1
    for node in range(count[0]):
        i = _pair_hash(frame_state[node], frame_parent[node]) & mask
        while table[i] != 0:
            i = (i + 1) & mask
        table[i] = node + 1
