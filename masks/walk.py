"""numba kernels over the token trie: a state's mask (offline), uncertain-token checks and the
whole next-token bitmask (online), and the slice depth that lets a mask skip most of the trie.

A walk visits trie positions in order, keeping one stack set per depth ("levels") so that a
token reuses the sets of the prefix it shares with the previous one, and skips the subtree of a
dead prefix with the trie's next_lower jumps.  Level arrays (rows of the workspace's levels,
automata/kernels.py), for depth d:

    LVL_START   buffer offset of the level's stacks
    LVL_N       their number
    LVL_FLAG    their closure flags (FLAG_END: the input may end; FLAG_RULE_END: the rule under
                BOTTOM may end here)
    LVL_UNSURE  1 when the rule ended before depth d with bytes left that some caller may take:
                a token that dies later is uncertain, not rejected

Offline a state's stacks sit on BOTTOM, so what follows its rule's end is the callers' business.
The walk judges it by the rule's *follow pairs* (`follow_pairs`): which two bytes may come right
after the rule ends (the second one or the token's end), in any caller.  A token whose bytes
after an end of the rule are no such pair is rejected; one whose are stays uncertain and the
matcher checks it against the real stacks.

Mask store of a grammar (read by `run_fill`): mask_index (int32, MASK_FIELDS per state: kind
(-1 = not computed), data offset, data length, uncertain offset, uncertain count) into mask_pool
(int32), whose first ceil(V/32) words are the bitset of all grammar tokens.  Data by kind:
accepted ids; rejected ids (accepted = the grammar's tokens but these and the uncertain ones); an
accepted bitset; or SLICE: [row, row, row, accepted ids...], the rows (-1 = none) naming
cumulative slice bitsets (trie.cumulative) to OR first.  The uncertain part is trie positions,
then the same tokens' ids, then each one's common prefix length with the previous one.
"""

from __future__ import annotations

import numpy as np

from ..automata.kernels import (
    BOTTOM,
    CONT,
    ERR_BUFFER_FULL,
    ERR_TOO_MANY_TOPS,
    FLAG_END,
    FLAG_RULE_END,
    PDA_ACCEPT,
    PDA_BYTE_DST,
    PDA_BYTE_HI,
    PDA_BYTE_LO,
    PDA_BYTE_PTR,
    PDA_FOLLOW,
    PDA_REF_PTR,
    PDA_RETURNS,
    PDA_RETURNS_PTR,
    WS_HEADER,
    closure,
    closure_memo,
    has_epsilon,
    pda_views,
    step_byte,
    ws_buffer_p,
    ws_levels,
)
from ..automata.pda import MAX_CONTINUATIONS
from ..automata.stack import Workspace
from ..core.jit import njit
from .trie import NO_SECOND_BYTE, TRIE_HEADER

LVL_START, LVL_N, LVL_FLAG, LVL_UNSURE = range(4)
PAIR_END = 256  # second index of a follow pair: the token ends after the first byte
PAIR_MIXED = 257  # 1 when the row's verdict depends on the second byte (not all 0, not all 1)
PAIR_WIDTH = 258

RESULT_REJECT = 0
RESULT_ACCEPT = 1
RESULT_UNCERTAIN = 2

MASK_FIELDS = 5
KIND_ACCEPTED_LIST = 0
KIND_REJECTED_LIST = 1
KIND_ACCEPTED_BITSET = 2
KIND_SLICE = 3
SLICE_ROWS = 3  # a SLICE mask's data starts with one cumulative row per slice

# run_fill's requests (positive: nothing was written; the caller acts and calls again)
FILL_MASKS_MISSING = 1  # a kernel state's mask is not computed yet
FILL_UNCERTAIN = 2  # uncertain tokens need walks and the caller did not allow them yet

MAX_CONTINUATION_STACKS = 4096
"""States a follow-pair search keeps after a rule's end; past it any pair is assumed possible."""

SECOND_BYTE_MAX_LIVE = 16
"""Live first bytes up to which a state walk also leaves out dead second bytes (finding them
steps each large live group's first byte once more: worth it only where few groups are live)."""

SECOND_BYTE_MIN_GROUP = 64
"""Positions of a live first-byte group below which its second bytes are not looked at."""

SLICE_PAIRS = 65536
"""(slice state, PDA state) pairs a slice-bounds search may visit before it gives up."""


@njit(cache=True, inline="always")
def _trie_bytes(trie):
    """Offset of tok_bytes in a trie blob (offsets start at TRIE_HEADER, lcp at + n + 1)."""
    return TRIE_HEADER + 2 * trie[0] + 1


@njit(cache=True)
def _init_levels(pda, pool, ws, init_s, init_p, max_tops):
    """Level 0: the closure of the stacks (init_s, init_p).  0 or ERR_*."""
    n_init = init_s.shape[0]
    if n_init > ws[1]:
        return ERR_BUFFER_FULL
    bp = ws_buffer_p(ws)
    for i in range(n_init):
        ws[WS_HEADER + i] = init_s[i]
        ws[bp + i] = init_p[i]
    res = closure(pda, pool, ws, 0, n_init, max_tops, 0)
    if res[0] < 0:
        return res[0]
    lv = ws_levels(ws)
    n_levels = ws[2]
    ws[lv + LVL_START * n_levels] = 0
    ws[lv + LVL_N * n_levels] = res[0]
    ws[lv + LVL_FLAG * n_levels] = res[1]
    ws[lv + LVL_UNSURE * n_levels] = 0
    return 0


@njit(cache=True, inline="always")
def _set_bit(words, t):
    words[t >> 5] |= np.int32(1) << np.int32(t & 31)


@njit(cache=True)
def _walk(
    pda,
    pool,
    ws,
    trie,
    ranges,
    candidates,
    cand_lcp,
    pairs,
    end_flag,
    max_tops,
    token_ids,
    position_of,
    words,
    accepted,
    uncertain,
    result,
    counts,
    loop,
):
    """The trie walk behind every mask, from the level-0 stacks already in the workspace.

    Range mode (candidates empty): every position of `ranges` ([start, end) pairs) of the trie
    blob; accepted tokens get their bit in `words` (and their id in `accepted` while it has
    room), uncertain ones their position (through position_of) in `uncertain`, from counts[1]
    on; counts += (accepted, uncertain, ids appended).  Candidate mode: the positions
    `candidates` (ascending, cand_lcp[i] = common prefix length with candidate i-1) with
    verdicts in `result`.  pairs: the rule's follow pairs (offline; empty online), end_flag the
    flags that accept a token ending where they are set.  Returns 0 or ERR_*.

    loop (range mode; empty: none): loop[b] = 1 for the bytes that keep one path of the level-0
    stacks alive wherever they come (state_masks.loop_bytes): a token made of them only is
    accepted without a step, and leaves the levels as they were.

    The step loop is written out here, not called: numba reference-counts the arrays of every
    call, which costs more than a step.
    """
    bs = WS_HEADER
    bp = ws_buffer_p(ws)
    size = ws[1]
    n_levels = ws[2]
    lv_start = ws_levels(ws) + LVL_START * n_levels
    lv_n = ws_levels(ws) + LVL_N * n_levels
    lv_flag = ws_levels(ws) + LVL_FLAG * n_levels
    lv_unsure = ws_levels(ws) + LVL_UNSURE * n_levels
    byte_ptr = pda[PDA_BYTE_PTR]
    byte_lo = pda[PDA_BYTE_LO]
    byte_hi = pda[PDA_BYTE_HI]
    byte_dst = pda[PDA_BYTE_DST]
    ref_ptr = pda[PDA_REF_PTR]
    accept = pda[PDA_ACCEPT]
    offsets = TRIE_HEADER
    lcp = TRIE_HEADER + trie[0] + 1
    tok_bytes = _trie_bytes(trie)
    next_lower = tok_bytes + trie[1]
    use_pairs = pairs.shape[0] > 0
    by_candidates = candidates.shape[0] > 0
    n_acc = 0
    n_unc = counts[1]
    n_list = counts[2]
    n_runs = 1 if by_candidates else ranges.shape[0] // 2
    use_loop = loop.shape[0] > 0 and not by_candidates
    for r in range(n_runs):
        if by_candidates:
            i = 0
            end = candidates.shape[0]
        else:
            i = ranges[2 * r]
            end = ranges[2 * r + 1]
        built = 0
        looped = 0  # leading bytes of the last token visited that are loop bytes
        while i < end:
            p = candidates[i] if by_candidates else i
            t0 = trie[offsets + p]
            length = trie[offsets + p + 1] - t0
            shared_with_previous = (cand_lcp[i] if i > 0 else 0) if by_candidates else trie[lcp + p]
            if shared_with_previous < built:
                built = shared_with_previous
            if use_loop:
                # the positions skipped since the last visited token all share more with it
                # than this one does, so its shared prefix with that token is lcp[p]
                k = min(looped, shared_with_previous)
                while k < length and loop[trie[tok_bytes + t0 + k]] != 0:
                    k += 1
                looped = k
                if k == length:
                    t = token_ids[p]
                    words[t >> 5] |= np.int32(1) << np.int32(t & 31)
                    n_acc += 1
                    if n_list < accepted.shape[0]:
                        accepted[n_list] = t
                        n_list += 1
                    i += 1
                    continue
            if built > length:
                built = length
            # Level `built` may have been judged by the previous token's byte `built` (a follow
            # pair read past the rule's end): step it again.
            if (
                use_pairs
                and built >= 1
                and (ws[lv_flag + built - 1] & FLAG_RULE_END) != 0
                and pairs[trie[tok_bytes + t0 + built - 1] * PAIR_WIDTH + PAIR_MIXED] != 0
            ):
                built -= 1
            d = built
            while d < length:
                n = ws[lv_n + d]
                if n == 0:
                    break
                src = ws[lv_start + d]
                dst = src + n
                if dst + n > size:
                    return ERR_BUFFER_FULL
                b = trie[tok_bytes + t0 + d]
                flags = 0
                if n == 1:
                    # Fast path: one stack; a plain DFA step needs no closure.
                    s = ws[bs + src]
                    t = -1
                    for e in range(pda[byte_ptr + s], pda[byte_ptr + s + 1]):
                        if b < pda[byte_lo + e]:
                            break
                        if b <= pda[byte_hi + e]:
                            t = pda[byte_dst + e]
                            break
                    m = 0
                    if t >= 0:
                        ws[bs + dst] = t
                        ws[bp + dst] = ws[bp + src]
                        m = 1
                        if pda[ref_ptr + t] != pda[ref_ptr + t + 1] or pda[accept + t] != 0:
                            m, flags = closure_memo(pda, pool, ws, dst, 1, max_tops)
                            if m < 0:
                                return m
                else:
                    m = step_byte(pda, ws, src, n, b, dst)
                    if m > 1 or (m == 1 and has_epsilon(pda, ws[bs + dst])):
                        m, flags = closure_memo(pda, pool, ws, dst, m, max_tops)
                        if m < 0:
                            return m
                unsure = ws[lv_unsure + d]
                if use_pairs and (ws[lv_flag + d] & FLAG_RULE_END) != 0:
                    after = trie[tok_bytes + t0 + d + 1] if d + 1 < length else PAIR_END
                    if pairs[b * PAIR_WIDTH + after] != 0:
                        unsure = 1  # the rule ended with bytes left that a caller may take
                d += 1
                ws[lv_start + d] = dst
                ws[lv_n + d] = m
                ws[lv_flag + d] = flags
                ws[lv_unsure + d] = unsure
            built = d
            # ACCEPT: all bytes consumed (or the token ends where the rule or the input may end);
            # UNCERTAIN: the rule ended earlier with bytes left that a caller may take
            if d == length and (ws[lv_n + d] > 0 or (ws[lv_flag + d] & end_flag) != 0):
                verdict = RESULT_ACCEPT
            elif ws[lv_unsure + d] != 0:
                verdict = RESULT_UNCERTAIN
            else:
                verdict = RESULT_REJECT
            # the bytes that decided a dead prefix's verdict: d, or d + 1 when the rule ended
            # just before and the follow pair read the next byte
            shared = d
            if (
                d < length
                and use_pairs
                and d >= 1
                and (ws[lv_flag + d - 1] & FLAG_RULE_END) != 0
                and pairs[trie[tok_bytes + t0 + d - 1] * PAIR_WIDTH + PAIR_MIXED] != 0
            ):
                shared = d + 1
            if by_candidates:
                result[i] = verdict
                i += 1
                if d < length:  # candidates under the same dead prefix share its verdict
                    while i < end and cand_lcp[i] >= shared:
                        result[i] = verdict
                        i += 1
            elif verdict == RESULT_ACCEPT:
                t = token_ids[p]
                words[t >> 5] |= np.int32(1) << np.int32(t & 31)  # written out: see above
                n_acc += 1
                if n_list < accepted.shape[0]:
                    accepted[n_list] = t
                    n_list += 1
                i += 1
            elif verdict == RESULT_UNCERTAIN:
                uncertain[n_unc] = position_of[p]
                n_unc += 1
                i += 1
                if d < length:  # the dead prefix's whole subtree is uncertain too
                    while i < end and trie[lcp + i] >= shared:
                        uncertain[n_unc] = position_of[i]
                        n_unc += 1
                        i += 1
            else:
                i += 1
                if d < length:  # skip the dead prefix's subtree
                    while i < end and trie[lcp + i] >= shared:
                        i = trie[next_lower + i]
    counts[0] += n_acc
    counts[1] = n_unc
    counts[2] = n_list
    return 0


@njit(cache=True, nogil=True)
def run_state_walk(
    pda,
    pool,
    ws,
    trie,
    ranges,
    position_of,
    state,
    pairs,
    token_ids,
    words,
    accepted,
    uncertain,
    counts,
    max_tops,
    loop,
    group_start,
    group_byte,
    group_branches,
    branch_start,
    branch_byte,
):
    """A state's offline mask over the positions of `ranges` ([start, end) pairs) of a trie
    blob, its rule's follow pairs deciding what may come after the rule ends (see _walk's range
    mode; loop: its loop bytes, or empty).  group_start / group_byte: the blob's first-byte
    groups and group_branches / branch_start / branch_byte their second-byte branches
    (masks/trie.py), whose dead ones the walk leaves out (rejected: _live_ranges), or group_byte
    empty: every position is walked (the reference walk).  Returns 0 or ERR_*."""
    status = _init_levels(
        pda, pool, ws, np.full(1, state, dtype=np.int64), np.full(1, BOTTOM, dtype=np.int64), max_tops
    )
    if status < 0:
        return status
    if group_byte.shape[0] > 0:
        ranges = _live_ranges(
            pda,
            pool,
            ws,
            pairs,
            loop,
            max_tops,
            ranges,
            group_start,
            group_byte,
            group_branches,
            branch_start,
            branch_byte,
        )
    none = np.empty(0, dtype=np.int32)
    return _walk(
        pda,
        pool,
        ws,
        trie,
        ranges,
        none,
        none,
        pairs,
        FLAG_RULE_END | FLAG_END,
        max_tops,
        token_ids,
        position_of,
        words,
        accepted,
        uncertain,
        np.empty(0, dtype=np.int8),
        counts,
        loop,
    )


@njit(cache=True)
def _live_first_bytes(pda, ws, pairs):
    """live[b] = 1 for the first bytes b of tokens a walk from the level-0 stacks does not reject
    at once: those some stack's top state has an edge on, and, where the rule may end at level
    0, those some follow pair starts with (a token dying on any other first byte is rejected:
    no step survives it and no caller may take it, _walk's verdicts)."""
    live = np.zeros(256, dtype=np.uint8)
    n_levels = ws[2]
    lv = ws_levels(ws)
    start = ws[lv + LVL_START * n_levels]
    byte_ptr = pda[PDA_BYTE_PTR]
    byte_lo = pda[PDA_BYTE_LO]
    byte_hi = pda[PDA_BYTE_HI]
    for i in range(start, start + ws[lv + LVL_N * n_levels]):
        s = ws[WS_HEADER + i]
        for e in range(pda[byte_ptr + s], pda[byte_ptr + s + 1]):
            for b in range(pda[byte_lo + e], pda[byte_hi + e] + 1):
                live[b] = 1
    if pairs.shape[0] > 0 and (ws[lv + LVL_FLAG * n_levels] & FLAG_RULE_END) != 0:
        for b in range(256):
            # a row with any pair has PAIR_END set or is mixed (run_follow_pairs)
            if pairs[b * PAIR_WIDTH + PAIR_END] != 0 or pairs[b * PAIR_WIDTH + PAIR_MIXED] != 0:
                live[b] = 1
    return live


@njit(cache=True)
def _live_ranges(
    pda, pool, ws, pairs, loop, max_tops, ranges, group_start, group_byte, group_branches, branch_start, branch_byte
):
    """The parts of `ranges` ([start, end) pairs) that a walk from the level-0 stacks does not
    reject by their first byte (_live_first_bytes), as [start, end) pairs, adjacent parts joined.
    Where few first bytes are live (SECOND_BYTE_MAX_LIVE), a live group of SECOND_BYTE_MIN_GROUP
    positions or more keeps only its branches whose second byte is live after its first
    (_live_second_bytes), and its one-byte token."""
    live = _live_first_bytes(pda, ws, pairs)
    n_live = 0
    for b in range(256):
        n_live += live[b]
    by_branch = n_live <= SECOND_BYTE_MAX_LIVE
    # parts, at most: one per group, one per range, and where groups may split, their branches
    capacity = ranges.shape[0] // 2 + group_byte.shape[0]
    if by_branch:
        for g in range(group_byte.shape[0]):
            if live[group_byte[g]] != 0:
                capacity += group_branches[g + 1] - group_branches[g]
    out = np.empty(2 * capacity, dtype=np.int64)
    second = np.empty(256, dtype=np.uint8)
    n = 0
    for r in range(ranges.shape[0] // 2):
        start, end = ranges[2 * r], ranges[2 * r + 1]
        g = max(np.searchsorted(group_start, start, side="right") - 1, 0)
        while g < group_byte.shape[0] and group_start[g] < end:
            if live[group_byte[g]] != 0:
                low, high = max(group_start[g], start), min(group_start[g + 1], end)
                if (
                    by_branch
                    and high - low >= SECOND_BYTE_MIN_GROUP
                    and _live_second_bytes(pda, pool, ws, pairs, loop, group_byte[g], max_tops, second)
                ):
                    for k in range(group_branches[g], group_branches[g + 1]):
                        byte = branch_byte[k]
                        if byte == NO_SECOND_BYTE or second[byte] != 0:
                            n = add_range(out, n, max(branch_start[k], low), min(branch_start[k + 1], high))
                else:
                    n = add_range(out, n, low, high)
            g += 1
    return out[: 2 * n]


@njit(cache=True)
def add_range(spans, n, start, end):
    """Append [start, end) to spans (pairs), joining it to the last one when adjacent; new n."""
    if end <= start:
        return n
    if n > 0 and spans[2 * n - 1] == start:
        spans[2 * n - 1] = end
        return n
    spans[2 * n] = start
    spans[2 * n + 1] = end
    return n + 1


@njit(cache=True)
def _live_second_bytes(pda, pool, ws, pairs, loop, first, max_tops, live):
    """live[b] = 1 for the second bytes b of tokens starting with byte `first` that the walk does
    not reject at b: those a stack has an edge on after `first` (stepped and closed here as
    _walk steps it, in the workspace past level 0, which the walk overwrites), and where a rule
    end leaves the verdict to the follow pairs, those a pair allows (_walk's `unsure`: after
    level 0 the pair (first, b); after level 1 a pair starting with b).  Tokens of loop bytes
    only are accepted unstepped: after a loop byte every loop byte is live.  False (nothing
    known, the group is walked whole) when the step needs more room or stack tops."""
    n_levels = ws[2]
    lv = ws_levels(ws)
    start = ws[lv + LVL_START * n_levels]
    n = ws[lv + LVL_N * n_levels]
    dst = start + n
    if dst + n > ws[1]:
        return False
    m = step_byte(pda, ws, start, n, first, dst)
    flags = 0
    if m > 1 or (m == 1 and has_epsilon(pda, ws[WS_HEADER + dst])):
        m, flags = closure_memo(pda, pool, ws, dst, m, max_tops)
        if m < 0:
            return False
    live[:] = 0
    byte_ptr = pda[PDA_BYTE_PTR]
    byte_lo = pda[PDA_BYTE_LO]
    byte_hi = pda[PDA_BYTE_HI]
    for i in range(dst, dst + m):
        s = ws[WS_HEADER + i]
        for e in range(pda[byte_ptr + s], pda[byte_ptr + s + 1]):
            for b in range(pda[byte_lo + e], pda[byte_hi + e] + 1):
                live[b] = 1
    if pairs.shape[0] > 0:
        level_0_ends = (ws[lv + LVL_FLAG * n_levels] & FLAG_RULE_END) != 0
        level_1_ends = (flags & FLAG_RULE_END) != 0
        for b in range(256):
            if level_0_ends and pairs[first * PAIR_WIDTH + b] != 0:
                live[b] = 1
            if level_1_ends and (pairs[b * PAIR_WIDTH + PAIR_END] != 0 or pairs[b * PAIR_WIDTH + PAIR_MIXED] != 0):
                live[b] = 1
    if loop.shape[0] > 0 and loop[first] != 0:
        for b in range(256):
            if loop[b] != 0:
                live[b] = 1
    return True


@njit(cache=True, nogil=True)
def run_walk(pda, pool, ws, trie, candidates, cand_lcp, init_s, init_p, max_tops, result):
    """Online verdicts (accept or reject) of the trie positions `candidates` (ascending;
    cand_lcp[i] is the common prefix length of candidate i with candidate i-1) against the
    real stacks (init_s, init_p)."""
    if candidates.shape[0] == 0:
        return 0
    status = _init_levels(pda, pool, ws, init_s, init_p, max_tops)
    if status < 0:
        return status
    none = np.empty(0, dtype=np.int32)
    return _walk(
        pda,
        pool,
        ws,
        trie,
        np.empty(0, dtype=np.int64),
        candidates,
        cand_lcp,
        np.empty(0, dtype=np.uint8),
        FLAG_END,
        max_tops,
        none,
        none,
        np.empty(0, dtype=np.int32),
        none,
        none,
        result,
        np.zeros(3, dtype=np.int64),
        np.empty(0, dtype=np.uint8),
    )


@njit(cache=True, nogil=True)
def run_follow_pairs(pda, pool, ws, rule, max_tops, out):
    """The follow pairs of `rule` into out (uint8 [256 * PAIR_WIDTH], zeroed): out[b1, b2] = 1
    when some caller may take the byte b1 right after the rule ends and then b2 (PAIR_END: and
    then anything, the token may end there); out[b1, PAIR_MIXED] = 1 when row b1 holds both.
    Found from the return states of the rule's callers as frameless continuations
    (kernels.closure on CONT), a superset of what any real stack takes; where that runs into an
    unknown context (too many return states or stacks), b1 may be followed by any byte.
    Returns 0 or ERR_*."""
    follow = pda[PDA_FOLLOW] + rule * 256
    returns_ptr = pda[PDA_RETURNS_PTR]
    first = pda[returns_ptr + rule]
    n_seeds = pda[returns_ptr + rule + 1] - first
    cap = min(max_tops, MAX_CONTINUATION_STACKS)
    unknown = n_seeds > MAX_CONTINUATIONS
    bs = WS_HEADER
    bp = ws_buffer_p(ws)
    n0 = 0
    if not unknown:
        if 2 * n_seeds + 2 > ws[1]:
            return ERR_BUFFER_FULL
        for i in range(n_seeds):
            ws[bs + i] = pda[pda[PDA_RETURNS] + first + i]
            ws[bp + i] = CONT
        r = closure(pda, pool, ws, 0, n_seeds, cap, MAX_CONTINUATIONS)
        if r[0] == ERR_TOO_MANY_TOPS or (r[0] >= 0 and (r[1] & FLAG_RULE_END) != 0):
            unknown = True
        elif r[0] < 0:
            return r[0]
        else:
            n0 = r[0]
    if unknown:  # the FOLLOW set's bytes, each followed by anything
        for b in range(256):
            if pda[follow + b] != 0:
                for c in range(PAIR_END + 1):
                    out[b * PAIR_WIDTH + c] = 1
        _mark_mixed(out)
        return 0
    byte_ptr = pda[PDA_BYTE_PTR]
    byte_lo = pda[PDA_BYTE_LO]
    byte_hi = pda[PDA_BYTE_HI]
    for b in range(256):
        if pda[follow + b] == 0:  # FOLLOW holds every byte a continuation may take first
            continue
        dst = n0
        if dst + n0 > ws[1]:
            return ERR_BUFFER_FULL
        m = step_byte(pda, ws, 0, n0, b, dst)
        if m == 0:
            continue
        out[b * PAIR_WIDTH + PAIR_END] = 1
        r = closure(pda, pool, ws, dst, m, cap, MAX_CONTINUATIONS)
        if r[0] == ERR_TOO_MANY_TOPS or (r[0] >= 0 and (r[1] & FLAG_RULE_END) != 0):
            for c in range(PAIR_END + 1):
                out[b * PAIR_WIDTH + c] = 1
            continue
        if r[0] < 0:
            return r[0]
        for i in range(dst, dst + r[0]):
            s = ws[bs + i]
            for e in range(pda[byte_ptr + s], pda[byte_ptr + s + 1]):
                for c in range(pda[byte_lo + e], pda[byte_hi + e] + 1):
                    out[b * PAIR_WIDTH + c] = 1
    _mark_mixed(out)
    return 0


@njit(cache=True, inline="always")
def _mark_mixed(out):
    for b in range(256):
        row = out[b * PAIR_WIDTH : b * PAIR_WIDTH + PAIR_END + 1]
        total = 0
        for c in range(PAIR_END + 1):
            total += row[c]
        out[b * PAIR_WIDTH + PAIR_MIXED] = 1 if 0 < total < PAIR_END + 1 else 0


@njit(cache=True)
def candidate_lcp(trie, candidates):
    """Common prefix length of each candidate's token with the previous candidate's (0 first)."""
    offsets = TRIE_HEADER
    tb = _trie_bytes(trie)
    out = np.zeros(candidates.shape[0], dtype=np.int32)
    for i in range(1, candidates.shape[0]):
        a0 = trie[offsets + candidates[i - 1]]
        a1 = trie[offsets + candidates[i - 1] + 1]
        b0 = trie[offsets + candidates[i]]
        b1 = trie[offsets + candidates[i] + 1]
        n = 0
        while a0 + n < a1 and b0 + n < b1 and trie[tb + a0 + n] == trie[tb + b0 + n]:
            n += 1
        out[i] = n
    return out


@njit(cache=True)
def _slice_search(
    pda,
    state,
    ptr,
    lo,
    hi,
    dst,
    cap,
    table,
    slots,
    pair_q,
    pair_p,
    dist,
    bound,
    succ_start,
    succ_end,
    succ_to,
    succ_lead,
    expanded,
    order,
    queue,
    value,
):
    """(f, g) for one slice (its automaton ptr/lo/hi/dst, boundary state 0) from `state` alone:
    every slice token of at most f characters is accepted (its direct byte path stays alive),
    and every one of g or more is rejected; g = cap + 1 says nothing is known.

    A token is a path of the slice automaton from state 0 whose characters are its lead bytes
    (the last one possibly incomplete).  Over the pairs (slice state q, PDA state p) reachable
    through covered bytes:
      F(q, p) = how many more characters every path may start and stay alive (-1: even the
                current character can die): the greatest fixpoint of, over each slice edge, a
                byte without a PDA edge giving 0 (lead) or -1 (continuation), else min over the
                targets of min(cap, F + 1) (lead) or F (continuation);
      G(q, p) = the most characters a surviving path may still start: the least fixpoint of
                max over live edges of G + 1 (lead) or G (continuation), at least 0.
    f = F(0, state); g = G(0, state) + 1 unless a visited PDA state has reference edges or may
    end its rule (other stacks or the caller could then keep a token alive).  Pairs are found by
    a 0-1 breadth-first search on characters started; one more than cap characters away does
    not change either result within cap, so it is not expanded (and counts as unbounded for G).
    Returns (0, cap + 1) when the search would visit more than SLICE_PAIRS pairs.  The scratch
    arrays come from `_slice_scratch`; `table` is all -1 again on return.
    """
    state_accept, byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, _, _, _ = pda_views(pda)
    q_states = ptr.shape[0] - 1
    budget = pair_q.shape[0]
    edge_budget = succ_to.shape[0]
    mask = table.shape[0] - 1
    f, g, n = _slice_search_in(
        state_accept,
        byte_ptr,
        byte_lo,
        byte_hi,
        byte_dst,
        ref_ptr,
        state,
        ptr,
        lo,
        hi,
        dst,
        cap,
        table,
        slots,
        pair_q,
        pair_p,
        dist,
        bound,
        succ_start,
        succ_end,
        succ_to,
        succ_lead,
        expanded,
        order,
        queue,
        value,
        q_states,
        budget,
        edge_budget,
        mask,
    )
    for i in range(n):
        table[slots[i]] = -1
        expanded[i] = 0
    return f, g


@njit(cache=True)
def _slice_search_in(
    state_accept,
    byte_ptr,
    byte_lo,
    byte_hi,
    byte_dst,
    ref_ptr,
    state,
    ptr,
    lo,
    hi,
    dst,
    cap,
    table,
    slots,
    pair_q,
    pair_p,
    dist,
    bound,
    succ_start,
    succ_end,
    succ_to,
    succ_lead,
    expanded,
    order,
    queue,
    value,
    q_states,
    budget,
    edge_budget,
    mask,
):
    """_slice_search's body: (f, g, pairs inserted)."""
    head = edge_budget + 1
    tail = head
    pair_q[0] = 0
    pair_p[0] = state
    dist[0] = 0
    table[(state * q_states) & mask] = 0
    slots[0] = (state * q_states) & mask
    n = 1
    queue[tail] = 0
    tail += 1
    n_order = 0
    n_succ = 0
    closed = True  # no visited state has other stacks or exits to offer
    unbounded = cap + 1
    while head < tail:
        i = queue[head]
        head += 1
        if expanded[i]:
            continue
        expanded[i] = 1
        order[n_order] = i
        n_order += 1
        succ_start[i] = n_succ
        bound[i] = cap
        q = pair_q[i]
        p = pair_p[i]
        if dist[i] > cap:
            bound[i] = unbounded  # a cut-off pair: marked for G
            succ_end[i] = n_succ
            continue
        if ref_ptr[p] != ref_ptr[p + 1] or state_accept[p] != 0:
            closed = False
        lead = q == 0
        step = 1 if lead else 0
        for e in range(ptr[q], ptr[q + 1]):
            e_lo = lo[e]
            e_hi = hi[e]
            q2 = dst[e]
            covered = e_lo - 1
            gap = False
            for f in range(byte_ptr[p], byte_ptr[p + 1]):
                if byte_hi[f] < e_lo:
                    continue
                if byte_lo[f] > e_hi:
                    break
                if byte_lo[f] > covered + 1:
                    gap = True
                p2 = byte_dst[f]
                h = (p2 * q_states + q2) & mask
                j = -1
                while table[h] >= 0:
                    if pair_q[table[h]] == q2 and pair_p[table[h]] == p2:
                        j = table[h]
                        break
                    h = (h + 1) & mask
                if j < 0:
                    if n >= budget:
                        return 0, unbounded, n
                    j = n
                    n += 1
                    pair_q[j] = q2
                    pair_p[j] = p2
                    dist[j] = dist[i] + step + 1  # above any real distance: relaxed just below
                    table[h] = j
                    slots[j] = h
                if not expanded[j] and dist[i] + step < dist[j]:
                    dist[j] = dist[i] + step
                    if lead:
                        queue[tail] = j
                        tail += 1
                    else:
                        head -= 1
                        queue[head] = j
                if n_succ >= edge_budget:
                    return 0, unbounded, n
                succ_to[n_succ] = j
                succ_lead[n_succ] = step
                n_succ += 1
                covered = byte_hi[f]
                if covered >= e_hi:
                    break
            if gap or covered < e_hi:  # some byte of the edge has no byte edge from p
                miss = 0 if lead else -1
                if miss < bound[i]:
                    bound[i] = miss
        succ_end[i] = n_succ
    uncovered = False
    for k in range(n_order):
        if bound[order[k]] < cap:
            uncovered = True
            break
    if not uncovered:  # every slice path of up to cap characters stays alive
        return cap, unbounded, n
    # F: greatest fixpoint from cap downwards (a cut-off pair stays at cap)
    for i in range(n):
        value[i] = cap
    changed = True
    while changed:
        changed = False
        for k in range(n_order - 1, -1, -1):
            i = order[k]
            v = min(bound[i], cap)
            for s in range(succ_start[i], succ_end[i]):
                c = min(cap, value[succ_to[s]] + succ_lead[s])
                if c < v:
                    v = c
            if v < value[i]:
                value[i] = v
                changed = True
    f = value[0]
    if not closed:
        return f, unbounded, n
    # G: least fixpoint from 0 upwards, capped at `unbounded` (a cut-off pair is unbounded)
    for i in range(n):
        value[i] = 0
    for k in range(n_order):
        i = order[k]
        if bound[i] == unbounded:
            value[i] = unbounded
    changed = True
    while changed:
        changed = False
        for k in range(n_order - 1, -1, -1):
            i = order[k]
            v = value[i]
            for s in range(succ_start[i], succ_end[i]):
                c = min(unbounded, value[succ_to[s]] + succ_lead[s])
                if c > v:
                    v = c
            if v > value[i]:
                value[i] = v
                changed = True
    return f, min(unbounded, value[0] + 1), n


class WalkScratch:
    """One thread's reusable buffers for offline mask walks (GrammarCompiler.walk_scratch): the
    slice-bounds search arrays, a state walk's uncertain positions (one per trie position), a
    computed mask's words and parts (masks/state_masks.py), the follow pairs of pair_rules
    rules, and the workspace a batch fill's first visits walk in (`workspace`: the rows' own
    keep their closure memos); fresh arrays would cost a map and page faults on every first
    visit."""

    def __init__(self, trie_positions: int, words: int, pair_rules: int, workspace: Workspace):
        self.workspace = workspace
        self.workspace_full = np.zeros(1, dtype=np.int64)  # 1: a first visit needed larger buffers
        self.slice_bounds = new_slice_scratch()
        self.pairs = np.empty((pair_rules, 256 * PAIR_WIDTH), dtype=np.uint8)  # follow pairs of that many rules
        self.uncertain = np.empty(trie_positions, dtype=np.int32)
        self.kernel_args = (self.slice_bounds, self.uncertain)  # state_masks' `scratch`
        self.words = np.empty(words, dtype=np.int32)
        self.parts = np.empty(words + 3 * trie_positions, dtype=np.int32)  # a mask's data + uncertain parts


def new_slice_scratch() -> tuple[np.ndarray, ...]:
    """Scratch arrays for run_slice_bounds (about 4 MB; one set per thread, reused: a search
    leaves them ready for the next)."""
    budget = SLICE_PAIRS
    edge_budget = 8 * budget
    return (
        np.full(4 * budget, -1, dtype=np.int32),
        np.empty(budget, dtype=np.int32),
        np.empty(budget, dtype=np.int32),
        np.empty(budget, dtype=np.int32),
        np.empty(budget, dtype=np.int32),
        np.empty(budget, dtype=np.int32),
        np.zeros(budget, dtype=np.int32),
        np.zeros(budget, dtype=np.int32),
        np.empty(edge_budget, dtype=np.int32),
        np.empty(edge_budget, dtype=np.int32),
        np.zeros(budget, dtype=np.int32),
        np.empty(budget, dtype=np.int32),
        np.empty(2 * edge_budget + 2, dtype=np.int32),
        np.empty(budget, dtype=np.int32),
    )


@njit(cache=True, nogil=True)
def run_slice_bounds(pda, pool, ws, state, ptrs, los, his, dsts, caps, max_tops, scratch, out):
    """out[s] = (f, g) of every slice s (see _slice_search) for `state` on BOTTOM: when its
    closure holds other stacks (it enters rules or may end its own), f is the best of theirs
    (a token one of them consumes whole is accepted) and g says nothing.  Returns 0 or ERR_*."""
    ws[WS_HEADER] = state
    ws[ws_buffer_p(ws)] = BOTTOM
    r = closure(pda, pool, ws, 0, 1, max_tops, 0)
    if r[0] < 0:
        return r[0]
    tops = ws[WS_HEADER : WS_HEADER + r[0]].copy()
    (
        table,
        slots,
        pair_q,
        pair_p,
        dist,
        bound,
        succ_start,
        succ_end,
        succ_to,
        succ_lead,
        expanded,
        order,
        queue,
        value,
    ) = scratch
    for k in range(len(ptrs)):
        f = 0
        g = caps[k] + 1
        for i in range(tops.shape[0]):
            if not _takes_every_lead(pda, tops[i], ptrs[k], los[k], his[k]):
                continue  # F(0, top) <= 0: it adds nothing to f, and g goes unused when f is 0
            fi, gi = _slice_search(
                pda,
                tops[i],
                ptrs[k],
                los[k],
                his[k],
                dsts[k],
                caps[k],
                table,
                slots,
                pair_q,
                pair_p,
                dist,
                bound,
                succ_start,
                succ_end,
                succ_to,
                succ_lead,
                expanded,
                order,
                queue,
                value,
            )
            if fi > f:
                f = fi
            if tops.shape[0] == 1:
                g = gi
        out[k, 0] = f
        out[k, 1] = g
    return 0


@njit(cache=True)
def _takes_every_lead(pda, state, ptr, lo, hi):
    """Whether `state` has a byte edge on every lead byte of the slice automaton (its edges from
    the boundary state 0, ascending): else the first character of some slice token can die, so
    _slice_search would find F = 0 at most.  A false answer only costs that search."""
    byte_lo = pda[PDA_BYTE_LO]
    byte_hi = pda[PDA_BYTE_HI]
    e, e_end = pda[pda[PDA_BYTE_PTR] + state], pda[pda[PDA_BYTE_PTR] + state + 1]
    for j in range(ptr[0], ptr[1]):
        b = lo[j]
        while b <= hi[j]:
            while e < e_end and pda[byte_hi + e] < b:
                e += 1
            if e == e_end or pda[byte_lo + e] > b:
                return False
            b = pda[byte_hi + e] + 1
    return True


@njit(cache=True)
def bitset_ids(words, limit):
    """The ids whose bit is set, ascending (at most `limit` of them)."""
    out = np.empty(limit, dtype=np.int32)
    n = 0
    for w in range(words.shape[0]):
        x = np.uint32(words[w])
        while x != 0 and n < limit:
            low = x & (~x + np.uint32(1))
            bit = 0
            y = low
            while y > np.uint32(1):
                y >>= np.uint32(1)
                bit += 1
            out[n] = w * 32 + bit
            n += 1
            x ^= low
    return out[:n]


@njit(cache=True, nogil=True)
def run_fill(
    words,
    stacks,
    n_kernel,
    can_end,
    stop_ids,
    pda,
    pool,
    ws,
    trie,
    mask_index,
    mask_pool,
    slice_rows,
    max_tops,
    uncertain_ok,
):
    """The whole next-token bitmask in one call: OR the stored masks of the kernel stacks (the
    first n_kernel of the packed set, see kernels.run_advance), then check each stack's uncertain
    tokens against the real stack.  Returns 0 (written), an ERR_* status (make room, call
    again), FILL_MASKS_MISSING (compute the kernel states' masks) or, unless uncertain_ok,
    FILL_UNCERTAIN (walks are needed: the caller may have the bitmask memoised).  The last two
    write nothing."""
    n_words = words.shape[0]
    grammar_words = mask_pool[0:n_words]
    half = stacks.shape[0] // 2
    kernel_s = stacks[:n_kernel]
    kernel_p = stacks[half : half + n_kernel]
    n = n_kernel
    uncertain = False
    for i in range(n):
        base = kernel_s[i] * MASK_FIELDS
        # An entry ending past this pool was stored, on another thread, into a grown pool that
        # this call does not see: missing here (the caller passes the current pool again).
        if mask_index[base] < 0 or mask_index[base + 3] + 3 * mask_index[base + 4] > mask_pool.shape[0]:
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
        if kind == KIND_ACCEPTED_LIST or kind == KIND_SLICE:
            start = 0
            if kind == KIND_SLICE:
                start = SLICE_ROWS
                first_row = True
                for r in range(SLICE_ROWS):
                    row = data[r]
                    if row < 0:
                        continue
                    if i == 0 and first_row:
                        words[:] = slice_rows[row]
                    else:
                        for w in range(n_words):
                            words[w] |= slice_rows[row, w]
                    first_row = False
                if i == 0 and first_row:
                    for w in range(n_words):
                        words[w] = 0
            elif i == 0:
                for w in range(n_words):
                    words[w] = 0
            for j in range(start, data.shape[0]):
                _set_bit(words, data[j])
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
            status = run_walk(
                pda,
                pool,
                ws,
                trie,
                mask_pool[u_off : u_off + u_n],
                mask_pool[u_off + 2 * u_n : u_off + 3 * u_n],
                kernel_s[i : i + 1],
                kernel_p[i : i + 1],
                max_tops,
                result,
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
