"""numba kernels that run the pushdown automaton over bytes.

A *stack* is a pair (top_state, frame): top_state is a global DFA state and frame indexes an
immutable frame (return_state, parent_frame) in a frame pool, or is ROOT (the stack below the
root rule is empty) or BOTTOM (offline mask computation: below lies an unknown caller).
Frames are hash-consed, so equal stacks are equal pairs and sets of stacks dedupe as pairs,
and a set of stacks is two parallel int32 arrays.  Byte steps never create frames; only entering
a rule (a reference edge) does.

Closure (epsilon moves): a reference edge (rule, return_state) pushes
frame(return_state, frame) and moves the top to rule_start[rule]; an accepting top pops to its
frame.  Popping ROOT sets FLAG_END (the input may end here); popping BOTTOM sets FLAG_RULE_END
(the rule may end here, so what follows depends on the caller).

Every kernel returns a status: >= 0 is a count, ERR_* asks the caller to grow a buffer and retry
(kernels are idempotent: frames they added are valid and reused) or to report a budget error.
"""

from __future__ import annotations

import numpy as np
from numba import njit

ROOT = -1
BOTTOM = -2

FLAG_END = 1
FLAG_RULE_END = 2

ERR_POOL_FULL = -1
ERR_TOO_MANY_TOPS = -2
ERR_BUFFER_FULL = -3
# run_fill's requests (positive: nothing was written; the caller acts and calls again)
FILL_MASKS_MISSING = 1  # a kernel state's mask is not computed yet
FILL_UNCERTAIN = 2  # uncertain tokens need walks and the caller did not allow them yet

RESULT_REJECT = 0
RESULT_ACCEPT = 1
RESULT_UNCERTAIN = 2


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
    buf_s, buf_p, start, n_raw, seen_state, seen_parent, seen_epoch, epoch_box, max_tops,
):
    """Dedupe buf[start:start+n_raw] and append everything reachable by epsilon moves.

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
    cur_s, cur_p, data, buf_s, buf_p, seen_state, seen_parent, seen_epoch, epoch_box, max_tops,
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
            buf_s, buf_p, dst, m, seen_state, seen_parent, seen_epoch, epoch_box, min(max_tops, half),
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


@njit(cache=True)
def walk_tokens(
    state_accept, byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, ref_rule, ref_dst, rule_start,
    frame_state, frame_parent, frame_count, frame_table,
    tok_offsets, tok_bytes, lcp, candidates, init_s, init_p, offline, follow,
    buf_s, buf_p, lvl_start, lvl_n, lvl_flag, e_before, seen_state, seen_parent, seen_epoch, epoch_box,
    max_tops, result,
):
    """Classify the trie positions `candidates` (ascending) from the stack set init.

    Walks the sorted vocabulary depth-first, reusing the stack set of the longest prefix shared with
    the previous candidate; when the candidates are consecutive positions, a dead prefix's whole
    subtree is skipped with a scan of lcp.
    offline: init stacks sit on BOTTOM; a token is ACCEPT when some path consumes all of it inside
    the rule (or ends the rule exactly at its end), UNCERTAIN when a path reaches the rule's end
    with bytes left whose next byte is in `follow` (the rule's FOLLOW set: the caller decides),
    else REJECT.  Online: ACCEPT or REJECT against the real stacks.
    e_before[d] records whether such an uncertain exit happened before depth d; it depends only on
    the first d bytes, so it is shared by every token with that prefix.
    Returns 0 or an ERR_* status.
    """
    n_init = init_s.shape[0]
    for i in range(n_init):
        buf_s[i] = init_s[i]
        buf_p[i] = init_p[i]
    res = closure(
        state_accept, byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, ref_rule, ref_dst, rule_start,
        frame_state, frame_parent, frame_count, frame_table,
        buf_s, buf_p, 0, n_init, seen_state, seen_parent, seen_epoch, epoch_box, max_tops,
    )
    if res[0] < 0:
        return res[0]
    lvl_start[0] = 0
    lvl_n[0] = res[0]
    lvl_flag[0] = res[1]
    end_flag = (FLAG_RULE_END | FLAG_END) if offline else FLAG_END
    e_before[0] = 0
    built = 0  # levels 0..built are valid for the previous candidate's prefix
    prev = -1
    # dense: candidates are consecutive trie positions, so a dead prefix's subtree can be skipped.
    n_cand = candidates.shape[0]
    dense = n_cand > 0 and candidates[n_cand - 1] - candidates[0] == n_cand - 1
    ci = 0
    while ci < n_cand:
        skip_to = ci + 1
        pos = candidates[ci]
        t0 = tok_offsets[pos]
        length = tok_offsets[pos + 1] - t0
        if prev >= 0:
            shared = lcp[prev + 1]
            for q in range(prev + 2, pos + 1):
                if lcp[q] < shared:
                    shared = lcp[q]
            if shared < built:
                built = shared
        prev = pos
        if built > length:
            built = length
        d = built
        while d < length and lvl_n[d] > 0:
            src = lvl_start[d]
            n_src = lvl_n[d]
            dst = src + n_src
            if dst + n_src > buf_s.shape[0]:
                return ERR_BUFFER_FULL
            b = tok_bytes[t0 + d]
            flags = 0
            if n_src == 1:
                # Fast path: one stack; a plain DFA step needs no closure.
                t = find_byte_target(byte_ptr, byte_lo, byte_hi, byte_dst, buf_s[src], b)
                m = 0
                if t >= 0:
                    buf_s[dst] = t
                    buf_p[dst] = buf_p[src]
                    m = 1
            else:
                m = step_byte(byte_ptr, byte_lo, byte_hi, byte_dst, buf_s, buf_p, src, n_src, b, dst)
            if m > 1 or (m == 1 and (ref_ptr[buf_s[dst]] != ref_ptr[buf_s[dst] + 1] or state_accept[buf_s[dst]] != 0)):
                r = closure(
                    state_accept, byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, ref_rule, ref_dst, rule_start,
                    frame_state, frame_parent, frame_count, frame_table,
                    buf_s, buf_p, dst, m, seen_state, seen_parent, seen_epoch, epoch_box, max_tops,
                )
                if r[0] < 0:
                    return r[0]
                m = r[0]
                flags = r[1]
            exits = (lvl_flag[d] & FLAG_RULE_END) != 0 and follow[b] != 0
            d += 1
            lvl_start[d] = dst
            lvl_n[d] = m
            lvl_flag[d] = flags
            e_before[d] = e_before[d - 1] | (1 if exits else 0)
        built = d
        if d == length and (lvl_n[d] > 0 or (lvl_flag[d] & end_flag) != 0):
            result[ci] = RESULT_ACCEPT
        elif offline and e_before[d] != 0:
            result[ci] = RESULT_UNCERTAIN
        else:
            result[ci] = RESULT_REJECT
        if dense and lvl_n[d] == 0 and d >= 1:
            # Every following token that shares this dead prefix gets the same verdict; with all
            # positions as candidates they are the next ones while lcp stays >= d.
            verdict = result[ci]
            while skip_to < n_cand and lcp[candidates[skip_to]] >= d:
                result[skip_to] = verdict
                skip_to += 1
        ci = skip_to
    return 0


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
PDA_SECTIONS = 11
PDA_HEADER = PDA_SECTIONS + 1
#
# Frame pool blob (int32): [count, capacity, table_size, 0], frame_state[capacity],
# frame_parent[capacity], table[table_size] (frame id + 1, 0 = empty slot).
POOL_HEADER = 4
#
# Workspace blob (int64): [epoch, buffer, levels, seen_size, 0, 0, 0, 0], buf_s[buffer],
# buf_p[buffer], lvl_start[levels], lvl_n[levels], lvl_flag[levels], e_before[levels],
# seen_state[seen_size], seen_parent[seen_size], seen_epoch[seen_size].
WS_HEADER = 8
#
# Trie blob (int32): [n_tokens, n_bytes], tok_offsets[n_tokens + 1], lcp[n_tokens], tok_bytes[n_bytes].
TRIE_HEADER = 2
#
# Mask store of a grammar: mask_index (int32, MASK_FIELDS per state: kind (-1 = not computed),
# data offset, data length, uncertain offset, uncertain count) into mask_pool (int32), whose first
# ceil(V/32) words are the bitset of all grammar tokens; uncertain trie positions are followed by
# the same tokens' ids.
MASK_FIELDS = 5
KIND_ACCEPTED_LIST = 0
KIND_REJECTED_LIST = 1
KIND_ACCEPTED_BITSET = 2


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
    lvl_start = ws[o : o + n_levels]
    lvl_n = ws[o + n_levels : o + 2 * n_levels]
    lvl_flag = ws[o + 2 * n_levels : o + 3 * n_levels]
    e_before = ws[o + 3 * n_levels : o + 4 * n_levels]
    o += 4 * n_levels
    return (
        buf_s, buf_p, lvl_start, lvl_n, lvl_flag, e_before,
        ws[o : o + size], ws[o + size : o + 2 * size], ws[o + 2 * size : o + 3 * size], ws[0:1],
    )


@njit(cache=True, inline="always")
def _trie_views(trie):
    n = trie[0]
    n_bytes = trie[1]
    o = TRIE_HEADER
    return trie[o : o + n + 1], trie[o + n + 1 : o + 2 * n + 1], trie[o + 2 * n + 1 : o + 2 * n + 1 + n_bytes]


@njit(cache=True, nogil=True)
def run_closure(pda, pool, ws, n_raw, max_tops):
    """Closure of the raw set in the workspace buffers [0, n_raw): (count, flags, n_kernel)."""
    a, bp, bl, bh, bd, rp, rr, rd, rs = _pda_views(pda)
    fs, fp, fc, ft = _pool_views(pool)
    buf_s, buf_p, _, _, _, _, ss, sp, se, ep = _ws_views(ws)
    return closure(a, bp, bl, bh, bd, rp, rr, rd, rs, fs, fp, fc, ft, buf_s, buf_p, 0, n_raw, ss, sp, se, ep, max_tops)


@njit(cache=True, nogil=True)
def run_advance(pda, pool, ws, stacks, data, start, end, max_tops):
    """advance() of a packed stack set over data[start:end]: (status, new stacks, n_kernel,
    flags).  A packed set of n stacks is one int64 array, states [0, n) then parents [n, 2n),
    the kernel first; the new set is empty unless status is 0."""
    a, bp, bl, bh, bd, rp, rr, rd, rs = _pda_views(pda)
    fs, fp, fc, ft = _pool_views(pool)
    buf_s, buf_p, _, _, _, _, ss, sp, se, ep = _ws_views(ws)
    half = stacks.shape[0] // 2
    status, offset, n_kernel, n, flags = advance(
        a, bp, bl, bh, bd, rp, rr, rd, rs, fs, fp, fc, ft, stacks[:half], stacks[half:], data[start:end], buf_s,
        buf_p, ss, sp, se, ep, max_tops,
    )
    if status != 0:
        n = 0
    out = np.empty(2 * n, dtype=np.int64)
    out[:n] = buf_s[offset : offset + n]
    out[n:] = buf_p[offset : offset + n]
    return status, out, n_kernel, flags


@njit(cache=True)
def _walk_packed(pda, pool, ws, trie, candidates, init_s, init_p, offline, max_tops, result):
    a, bp, bl, bh, bd, rp, rr, rd, rs = _pda_views(pda)
    fs, fp, fc, ft = _pool_views(pool)
    buf_s, buf_p, lvl_start, lvl_n, lvl_flag, e_before, ss, sp, se, ep = _ws_views(ws)
    offsets, lcp, tok_bytes = _trie_views(trie)
    if offline:
        rule = _section(pda, PDA_STATE_RULE)[init_s[0]]
        follow = _section(pda, PDA_FOLLOW)[rule * 256 : rule * 256 + 256]
    else:
        follow = _section(pda, PDA_FOLLOW)[0:0]  # never read online
    return walk_tokens(
        a, bp, bl, bh, bd, rp, rr, rd, rs, fs, fp, fc, ft, offsets, tok_bytes, lcp, candidates, init_s, init_p,
        offline, follow, buf_s, buf_p, lvl_start, lvl_n, lvl_flag, e_before, ss, sp, se, ep, max_tops, result,
    )


@njit(cache=True, nogil=True)
def run_walk(pda, pool, ws, trie, candidates, init_s, init_p, offline, max_tops, result):
    """walk_tokens() on packed arguments (offline: init is one stack on BOTTOM)."""
    return _walk_packed(pda, pool, ws, trie, candidates, init_s, init_p, offline, max_tops, result)


@njit(cache=True, inline="always")
def _set_bit(words, t):
    words[t >> 5] |= np.int32(1) << np.int32(t & 31)


@njit(cache=True, nogil=True)
def run_fill(words, stacks, n_kernel, can_end, stop_ids, pda, pool, ws, trie, mask_index, mask_pool, max_tops,
             uncertain_ok):
    """The whole next-token bitmask in one call: OR the stored masks of the kernel stacks (the
    first n_kernel of the packed set, see run_advance), then check each stack's uncertain
    tokens against the real stack.  Returns 0 (written), an ERR_*
    status (make room, call again), FILL_MASKS_MISSING (compute the kernel states' masks) or,
    unless uncertain_ok, FILL_UNCERTAIN (walks are needed: the caller may have the bitmask
    memoised).  The last two write nothing."""
    n_words = words.shape[0]
    grammar_words = mask_pool[0:n_words]
    half = stacks.shape[0] // 2
    kernel_s = stacks[:n_kernel]
    kernel_p = stacks[half : half + n_kernel]
    n = n_kernel
    uncertain = False
    for i in range(n):
        base = kernel_s[i] * MASK_FIELDS
        if mask_index[base] < 0:
            return FILL_MASKS_MISSING
        if mask_index[base + 4] > 0:
            uncertain = True
    if uncertain and not uncertain_ok:
        return FILL_UNCERTAIN
    if n == 0:
        for w in range(n_words):
            words[w] = 0
    for i in range(n):
        s = kernel_s[i]
        base = s * MASK_FIELDS
        kind = mask_index[base]
        data = mask_pool[mask_index[base + 1] : mask_index[base + 1] + mask_index[base + 2]]
        u_off = mask_index[base + 3]
        u_n = mask_index[base + 4]
        # The first stack writes `words` outright (no zeroing pass); later ones OR into it.
        if kind == KIND_ACCEPTED_LIST:
            if i == 0:
                for w in range(n_words):
                    words[w] = 0
            for t in data:
                _set_bit(words, t)
        elif kind == KIND_ACCEPTED_BITSET:
            if i == 0:
                words[:] = data
            else:
                for w in range(n_words):
                    words[w] |= data[w]
        else:
            # All grammar tokens but the rejected and uncertain ones.
            if i == 0:
                words[:] = grammar_words
                target = words
            else:
                target = grammar_words.copy()
            for t in data:
                target[t >> 5] &= ~(np.int32(1) << np.int32(t & 31))
            for t in mask_pool[u_off + u_n : u_off + 2 * u_n]:
                target[t >> 5] &= ~(np.int32(1) << np.int32(t & 31))
            if i > 0:
                for w in range(n_words):
                    words[w] |= target[w]
        if u_n > 0:
            result = np.empty(u_n, dtype=np.int8)
            status = _walk_packed(
                pda, pool, ws, trie, mask_pool[u_off : u_off + u_n], kernel_s[i : i + 1], kernel_p[i : i + 1],
                False, max_tops, result,
            )
            if status != 0:
                return status
            ids = mask_pool[u_off + u_n : u_off + 2 * u_n]
            for j in range(u_n):
                if result[j] == RESULT_ACCEPT:
                    _set_bit(words, ids[j])
    # Stop tokens are allowed exactly when the grammar can end, even when one is also a text
    # token (a caller may name "\n" a stop token): accept_token treats them as stops first.
    for t in stop_ids:
        if can_end:
            _set_bit(words, t)
        else:
            words[t >> 5] &= ~(np.int32(1) << np.int32(t & 31))
    return 0


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
