"""numba kernels that run the pushdown automaton over bytes.

A *stack* is a pair (top_state, frame): top_state is a global DFA state and frame indexes an
immutable frame (return_state, parent_frame) in a frame pool, or is ROOT (the stack below the
root rule is empty), BOTTOM (offline mask computation: below lies an unknown caller) or CONT
(offline: a caller's continuation, entered where the rule under BOTTOM ended).
Frames are hash-consed, so equal stacks are equal pairs and sets of stacks dedupe as pairs,
and a set of stacks is two parallel int32 arrays.  Byte steps never create frames; only entering
a rule (a reference edge) does.

Closure (epsilon moves): a reference edge (rule, return_state) pushes
frame(return_state, frame) and moves the top to rule_start[rule]; an accepting top pops to its
frame.  Popping ROOT sets FLAG_END (the input may end here); popping BOTTOM or CONT sets
FLAG_RULE_END (the rule may end here, so what follows depends on the caller).

Every kernel returns a status: >= 0 is a count, ERR_* asks the caller to grow a buffer and retry
(kernels are idempotent: frames they added are valid and reused) or to report a budget error.
"""

from __future__ import annotations

import numpy as np
from numba import njit

ROOT = -1
BOTTOM = -2
CONT = -3

FLAG_END = 1
FLAG_RULE_END = 2

ERR_POOL_FULL = -1
ERR_TOO_MANY_TOPS = -2
ERR_BUFFER_FULL = -3



@njit(cache=True, inline="always")
def _pair_hash(state, parent):
    return (np.int64(state) * np.int64(0x9E3779B1)) ^ (np.int64(parent) * np.int64(0x85EBCA77) + np.int64(0x632BE5AB))


@njit(cache=True)
def intern_frame(frame_state, frame_parent, frame_count, frame_table, state, parent):
    """Id of frame (state, parent), creating it if new; ERR_POOL_FULL when the pool must grow."""
    mask = frame_table.shape[0] - 1
    i = _pair_hash(state, parent) & mask
    while True:
        slot = frame_table[i]
        if slot == 0:
            n = frame_count[0]
            if n >= frame_state.shape[0] or 2 * (n + 1) > frame_table.shape[0]:
                return ERR_POOL_FULL
            frame_state[n] = state
            frame_parent[n] = parent
            frame_count[0] = n + 1
            frame_table[i] = n + 1
            return n
        node = slot - 1
        if frame_state[node] == state and frame_parent[node] == parent:
            return node
        i = (i + 1) & mask


@njit(cache=True, inline="always")
def find_byte_target(byte_ptr, byte_lo, byte_hi, byte_dst, state, b):
    for e in range(byte_ptr[state], byte_ptr[state + 1]):
        if b < byte_lo[e]:
            return -1
        if b <= byte_hi[e]:
            return byte_dst[e]
    return -1


@njit(cache=True, inline="always")
def _seen_insert(seen_state, seen_parent, seen_epoch, epoch, state, parent):
    """True when (state, parent) was not yet in the set of this epoch (and inserts it)."""
    mask = seen_state.shape[0] - 1
    i = _pair_hash(state, parent) & mask
    while True:
        if seen_epoch[i] != epoch:
            seen_epoch[i] = epoch
            seen_state[i] = state
            seen_parent[i] = parent
            return True
        if seen_state[i] == state and seen_parent[i] == parent:
            return False
        i = (i + 1) & mask


@njit(cache=True, inline="always")
def _append_unseen(buf_s, buf_p, start, n, state, parent, seen_state, seen_parent, seen_epoch, epoch, max_tops):
    """Append (state, parent) at buf[start + n] unless already in this epoch's set.

    Returns the new count, or ERR_TOO_MANY_TOPS / ERR_BUFFER_FULL.
    """
    if not _seen_insert(seen_state, seen_parent, seen_epoch, epoch, state, parent):
        return n
    if n >= max_tops:
        return ERR_TOO_MANY_TOPS
    if start + n >= buf_s.shape[0]:
        return ERR_BUFFER_FULL
    buf_s[start + n] = state
    buf_p[start + n] = parent
    return n + 1


@njit(cache=True)
def closure(
    state_accept, byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, ref_rule, ref_dst, rule_start,
    frame_state, frame_parent, frame_count, frame_table,
    buf_s, buf_p, start, n_raw, seen_state, seen_parent, seen_epoch, epoch_box, max_tops, callers,
):
    """Dedupe buf[start:start+n_raw] and append everything reachable by epsilon moves.

    callers = (state_rule, returns_ptr, returns, root_rule, limit): with limit > 0, stacks on CONT
    are continuations without frames: a rule entered from one starts on CONT too, and a rule that
    ends on CONT goes on in each return state of its callers (on CONT again), or sets
    FLAG_RULE_END when it has more than `limit` of them; the root rule ending sets FLAG_END.
    Returns (count, flags, n_distinct_raw); count < 0 is an ERR_* status.  The distinct raw pairs
    stay first, in their original order.
    """
    if n_raw == 1:
        # Fast path (most steps inside a rule): one stack whose top has no epsilon moves.
        s = buf_s[start]
        if ref_ptr[s] == ref_ptr[s + 1] and state_accept[s] == 0:
            return 1, 0, 1
    epoch_box[0] += 1
    epoch = epoch_box[0]
    n = 0
    for i in range(n_raw):
        s = buf_s[start + i]
        p = buf_p[start + i]
        if _seen_insert(seen_state, seen_parent, seen_epoch, epoch, s, p):
            buf_s[start + n] = s
            buf_p[start + n] = p
            n += 1
    n_distinct_raw = n
    flags = 0
    i = 0
    while i < n:
        s = buf_s[start + i]
        p = buf_p[start + i]
        i += 1
        for e in range(ref_ptr[s], ref_ptr[s + 1]):
            if p == CONT and callers[4] > 0:
                # Continuations keep no frames: the callee ends into every return state of its
                # callers (ref_dst[e] among them), a superset of what the frame would return to.
                frame = CONT
            else:
                frame = intern_frame(frame_state, frame_parent, frame_count, frame_table, ref_dst[e], p)
                if frame < 0:
                    return frame, 0, 0
            n = _append_unseen(buf_s, buf_p, start, n, rule_start[ref_rule[e]], frame,
                               seen_state, seen_parent, seen_epoch, epoch, max_tops)
            if n < 0:
                return n, 0, 0
        if state_accept[s]:
            if p >= 0:
                n = _append_unseen(buf_s, buf_p, start, n, frame_state[p], frame_parent[p],
                                   seen_state, seen_parent, seen_epoch, epoch, max_tops)
                if n < 0:
                    return n, 0, 0
            elif p == ROOT:
                flags |= FLAG_END
            elif p == CONT and callers[4] > 0:
                state_rule, returns_ptr, returns, root_rule, limit = callers
                r = state_rule[s]
                if r == root_rule:
                    flags |= FLAG_END
                if returns_ptr[r + 1] - returns_ptr[r] > limit:
                    flags |= FLAG_RULE_END
                    continue
                for k in range(returns_ptr[r], returns_ptr[r + 1]):
                    n = _append_unseen(buf_s, buf_p, start, n, returns[k], CONT,
                                       seen_state, seen_parent, seen_epoch, epoch, max_tops)
                    if n < 0:
                        return n, 0, 0
            else:
                flags |= FLAG_RULE_END
    return n, flags, n_distinct_raw


@njit(cache=True)
def step_byte(byte_ptr, byte_lo, byte_hi, byte_dst, buf_s, buf_p, src, n_src, b, dst):
    """Move every stack of buf[src:src+n_src] over byte b into buf[dst:]; returns the count.

    The caller guarantees room for n_src pairs at dst.  Duplicates are removed by the closure.
    """
    n = 0
    for i in range(n_src):
        t = find_byte_target(byte_ptr, byte_lo, byte_hi, byte_dst, buf_s[src + i], b)
        if t >= 0:
            buf_s[dst + n] = t
            buf_p[dst + n] = buf_p[src + i]
            n += 1
    return n


@njit(cache=True)
def advance(
    state_accept, byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, ref_rule, ref_dst, rule_start,
    frame_state, frame_parent, frame_count, frame_table,
    cur_s, cur_p, data, buf_s, buf_p, seen_state, seen_parent, seen_epoch, epoch_box, max_tops, callers,
):
    """Run the closed stack set cur over the bytes `data`.

    Returns (status, offset, n_kernel, n_closure, flags): the new set is buf[offset:offset+n_closure]
    with the kernel (stacks straight after the last byte) first.  status 0 means ok, 1 means the
    bytes were rejected, < 0 an ERR_* code.
    """
    half = buf_s.shape[0] // 2
    n = cur_s.shape[0]
    if n > half:
        return ERR_BUFFER_FULL, 0, 0, 0, 0
    for i in range(n):
        buf_s[i] = cur_s[i]
        buf_p[i] = cur_p[i]
    src = 0
    flags = 0
    n_kernel = 0
    for k in range(data.shape[0]):
        dst = half - src  # ping-pong between the two halves
        m = step_byte(byte_ptr, byte_lo, byte_hi, byte_dst, buf_s, buf_p, src, n, data[k], dst)
        if m == 0:
            return 1, 0, 0, 0, 0
        res = closure(
            state_accept, byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, ref_rule, ref_dst, rule_start,
            frame_state, frame_parent, frame_count, frame_table,
            buf_s, buf_p, dst, m, seen_state, seen_parent, seen_epoch, epoch_box, min(max_tops, half), callers,
        )
        if res[0] < 0:
            if res[0] == ERR_TOO_MANY_TOPS and half < max_tops:
                return ERR_BUFFER_FULL, 0, 0, 0, 0
            return res[0], 0, 0, 0, 0
        n = res[0]
        flags = res[1]
        n_kernel = res[2]
        src = dst
    return 0, src, n_kernel, n, flags


# ---------------------------------------------------------------------------------------------
# Packed entry points.  numba's dispatcher costs about a microsecond per array argument, so the
# functions Python calls take a few flat blobs and slice them into the views the kernels above
# use (njit-to-njit calls are native and cheap).
#
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
# Workspace blob (int64): [epoch, buffer, levels, seen_size, 0, 0, 0, 0], buf_s[buffer],
# buf_p[buffer], WS_LEVEL_ARRAYS arrays of [levels] (the trie walks' per-depth stack sets, see
# masks/walk.py), seen_state[seen_size], seen_parent[seen_size], seen_epoch[seen_size].
WS_HEADER = 8
WS_LEVEL_ARRAYS = 4


@njit(cache=True, inline="always")
def _section(blob, k):
    return blob[blob[k] : blob[k + 1]]


@njit(cache=True, inline="always")
def _pda_views(pda):
    return (
        _section(pda, PDA_ACCEPT), _section(pda, PDA_BYTE_PTR), _section(pda, PDA_BYTE_LO),
        _section(pda, PDA_BYTE_HI), _section(pda, PDA_BYTE_DST), _section(pda, PDA_REF_PTR),
        _section(pda, PDA_REF_RULE), _section(pda, PDA_REF_DST), _section(pda, PDA_RULE_START),
    )


@njit(cache=True, inline="always")
def _callers(pda, limit):
    """closure()'s `callers` argument: continuations after CONT up to `limit` return states
    (0: none, a rule ending on CONT only sets FLAG_RULE_END)."""
    return (
        _section(pda, PDA_STATE_RULE), _section(pda, PDA_RETURNS_PTR), _section(pda, PDA_RETURNS),
        _section(pda, PDA_ROOT)[0], limit,
    )


@njit(cache=True, inline="always")
def _pool_views(pool):
    cap = pool[1]
    size = pool[2]
    h = POOL_HEADER
    return pool[h : h + cap], pool[h + cap : h + 2 * cap], pool[0:1], pool[h + 2 * cap : h + 2 * cap + size]


@njit(cache=True, inline="always")
def _ws_views(ws):
    b = ws[1]
    n_levels = ws[2]
    size = ws[3]
    o = WS_HEADER
    buf_s = ws[o : o + b]
    buf_p = ws[o + b : o + 2 * b]
    o += 2 * b
    levels = ws[o : o + WS_LEVEL_ARRAYS * n_levels].reshape((WS_LEVEL_ARRAYS, n_levels))
    o += WS_LEVEL_ARRAYS * n_levels
    return (
        buf_s, buf_p, levels,
        ws[o : o + size], ws[o + size : o + 2 * size], ws[o + 2 * size : o + 3 * size], ws[0:1],
    )


@njit(cache=True, nogil=True)
def run_closure(pda, pool, ws, n_raw, max_tops):
    """Closure of the raw set in the workspace buffers [0, n_raw): (count, flags, n_kernel)."""
    a, bp, bl, bh, bd, rp, rr, rd, rs = _pda_views(pda)
    fs, fp, fc, ft = _pool_views(pool)
    buf_s, buf_p, _, ss, sp, se, ep = _ws_views(ws)
    return closure(a, bp, bl, bh, bd, rp, rr, rd, rs, fs, fp, fc, ft, buf_s, buf_p, 0, n_raw, ss, sp, se, ep, max_tops,
                   _callers(pda, 0))


@njit(cache=True, nogil=True)
def run_advance(pda, pool, ws, stacks, data, start, end, max_tops):
    """advance() of a packed stack set over data[start:end]: (status, new stacks, n_kernel,
    flags).  A packed set of n stacks is one int64 array, states [0, n) then parents [n, 2n),
    the kernel first; the new set is empty unless status is 0."""
    a, bp, bl, bh, bd, rp, rr, rd, rs = _pda_views(pda)
    fs, fp, fc, ft = _pool_views(pool)
    buf_s, buf_p, _, ss, sp, se, ep = _ws_views(ws)
    half = stacks.shape[0] // 2
    status, offset, n_kernel, n, flags = advance(
        a, bp, bl, bh, bd, rp, rr, rd, rs, fs, fp, fc, ft, stacks[:half], stacks[half:], data[start:end], buf_s,
        buf_p, ss, sp, se, ep, max_tops, _callers(pda, 0),
    )
    if status != 0:
        n = 0
    out = np.empty(2 * n, dtype=np.int64)
    out[:n] = buf_s[offset : offset + n]
    out[n:] = buf_p[offset : offset + n]
    return status, out, n_kernel, flags


@njit(cache=True, nogil=True)
def run_allowed_first_bytes(pda, set_s, out):
    """out[b] = 1 for every byte some stack of the closed set can consume next."""
    for i in range(256):
        out[i] = 0
    byte_ptr = _section(pda, PDA_BYTE_PTR)
    byte_lo = _section(pda, PDA_BYTE_LO)
    byte_hi = _section(pda, PDA_BYTE_HI)
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
