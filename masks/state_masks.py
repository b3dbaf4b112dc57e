"""First visits in numba: a state's mask computed, put in its smallest form, and appended to the
grammar's mask store, in one nogil kernel call for any number of states (run_store_masks), or
for the new states of all grammars of a batch step, one call per thread (ensure_batch_masks).

A state's mask is the slice tokens it accepts whole (one OR of a cumulative bitset per slice,
walk.run_slice_bounds), then a walk of the rest of the trie (walk.run_state_walk, which accepts
a token made of the state's loop bytes without a step: loop_bytes), stored as
whichever form is smallest (mask_cache.StateMask; layouts in masks/walk.py).  Python keeps only
what is per grammar or shared across grammars: follow pairs per rule, the shared cache's keys.

`trie_tables(trie)` packs what the kernels read of a TokenTrie into one tuple; `scratch` is a
thread's WalkScratch as a tuple (slice-search arrays, uncertain positions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numba import carray

from ..automata.kernels import (
    ERR_BUFFER_FULL,
    PDA_BYTE_DST,
    PDA_BYTE_HI,
    PDA_BYTE_LO,
    PDA_BYTE_PTR,
    PDA_STATE_RULE,
    blob_section,
)
from ..automata.pda import state_hash
from ..automata.stack import clear_closure_memo
from ..core.jit import njit
from ..core.threads import run_parts, threads_for_states
from .kernel_memory import Array, Record, i32_array, i64_array, i64_pointer, release_fence, try_lock, u8_pointer, unlock
from .shared_masks import (
    E_ACCEPTED,
    E_AT,
    E_KIND,
    E_SIZE,
    E_UNCERTAIN,
    ENTRY_FIELDS,
    SharedMasks,
    find_shared,
    has_room,
    insert_mask,
)
from .trie import BUCKET_BOUNDS, OTHER
from .walk import (
    KIND_ACCEPTED_BITSET,
    KIND_ACCEPTED_LIST,
    KIND_REJECTED_LIST,
    KIND_SLICE,
    MASK_FIELDS,
    PAIR_WIDTH,
    SLICE_ROWS,
    add_range,
    bitset_ids,
    candidate_lcp,
    run_follow_pairs,
    run_slice_bounds,
    run_state_walk,
)

if TYPE_CHECKING:
    from .compiler import CompiledGrammar, GrammarCompiler

NO_SHARED = (np.zeros(0, dtype=np.int64), np.zeros((0, ENTRY_FIELDS), dtype=np.int64), np.zeros(0, dtype=np.int32))
"""A shared cache that holds nothing (slots of length 0: store_masks looks nothing up)."""

STORE_FULL = 3
"""store_masks: the mask pool lacks room for the next state (it needs used[1] words); grow it, call again."""

_BOUNDS = np.array(BUCKET_BOUNDS, dtype=np.int64)


def trie_tables(trie) -> tuple:
    """What the kernels read of a TokenTrie, as one tuple (numba takes it as one argument)."""
    b = trie.bucketed
    ptrs, los, his, dsts, caps = trie.slice_automata
    return (
        trie.blob,
        trie.token_ids,
        trie.all_positions,
        b.blob,
        b.token_ids,
        trie.bucketed_position,
        trie.region_start,
        trie.above,
        trie.cumulative,
        trie.cumulative_counts,
        trie.max_chars,
        _BOUNDS,
        ptrs,
        los,
        his,
        dsts,
        caps,
        (trie.group_start, trie.group_byte, trie.group_branches, trie.branch_start, trie.branch_byte),
        (b.group_start, b.group_byte, b.group_branches, b.branch_start, b.branch_byte),
    )


@njit(cache=True, inline="always")
def _accepted_bucket(bounds, max_chars, s, f):
    """The largest bucket of slice s whose tokens all have at most f characters, or -1."""
    if f >= max_chars[s]:
        return bounds.shape[0] - 1
    return np.searchsorted(bounds, f, side="right") - 1


MIN_LOOP_BYTES = 2
"""Loop bytes (loop_bytes) below which a state's walk checks none."""


@njit(cache=True)
def loop_bytes(pda, state, loop):
    """loop[b] = 1 for the bytes b that take `state` to one state t that goes to itself on b
    (t: the target with the most such bytes, the state itself if it loops): any string of them
    keeps the path state, t, t, ... alive, so a token made of them only is accepted
    (walk._walk's `loop`).  Returns how many, or 0 when the state's edges hold fewer than
    MIN_LOOP_BYTES bytes (none set).  O(256 log edges)."""
    byte_ptr = pda[PDA_BYTE_PTR]
    n_bytes = 0
    for e in range(pda[byte_ptr + state], pda[byte_ptr + state + 1]):
        n_bytes += pda[pda[PDA_BYTE_HI] + e] - pda[pda[PDA_BYTE_LO] + e] + 1
    if n_bytes < MIN_LOOP_BYTES:  # (most states of literals: not worth the search)
        loop[:] = 0
        return 0
    kept = np.full(256, -1, dtype=np.int64)  # per byte: its target t, when t keeps itself on it
    for e in range(pda[byte_ptr + state], pda[byte_ptr + state + 1]):
        t = pda[pda[PDA_BYTE_DST] + e]
        for b in range(pda[pda[PDA_BYTE_LO] + e], pda[pda[PDA_BYTE_HI] + e] + 1):
            if _byte_target(pda, t, b) == t:
                kept[b] = t
    order = np.sort(kept)
    best, best_count, run = -1, 0, 0
    for i in range(256):
        run = run + 1 if i > 0 and order[i] == order[i - 1] else 1
        if order[i] >= 0 and (run > best_count or (run == best_count and order[i] == state)):
            best, best_count = order[i], run
    for b in range(256):
        loop[b] = 1 if best >= 0 and kept[b] == best else 0
    return best_count


@njit(cache=True)
def _byte_target(pda, s, b):
    """The state that byte b takes s to, or -1 (binary search of its byte edges)."""
    lo_at = pda[PDA_BYTE_LO]
    hi_at = pda[PDA_BYTE_HI]
    first = pda[pda[PDA_BYTE_PTR] + s]
    low, high = first, pda[pda[PDA_BYTE_PTR] + s + 1]
    while low < high:  # the first edge whose hi >= b
        mid = (low + high) // 2
        if pda[hi_at + mid] < b:
            low = mid + 1
        else:
            high = mid
    if low < pda[pda[PDA_BYTE_PTR] + s + 1] and pda[lo_at + low] <= b:
        return pda[pda[PDA_BYTE_DST] + low]
    return -1


@njit(cache=True)
def _state_mask(pda, pool, ws, max_tops, state, pairs, use_slices, tables, scratch, grammar_words, words, out, info):
    """A state's mask into `words` (scratch, W words) and `out` (data, then positions, ids and lcp
    of its uncertain tokens); info = (kind, data length, uncertain count, accepted count).
    Returns 0 or ERR_* (nothing usable written).  The same arithmetic as the slice tables'
    docstring in masks/trie.py: bucket k of slice s holds tokens of at most BUCKET_BOUNDS[k]
    characters."""
    (
        trie,
        token_ids,
        all_positions,
        b_trie,
        b_token_ids,
        b_position,
        region_start,
        above,
        cumulative,
        cumulative_counts,
        max_chars,
        bounds,
        ptrs,
        los,
        his,
        dsts,
        caps,
        groups,
        b_groups,
    ) = tables
    slice_scratch, uncertain = scratch
    n_words = words.shape[0]
    n_slices = max_chars.shape[0]
    n_buckets = bounds.shape[0]
    words[:] = 0
    slice_bounds = np.zeros((n_slices, 2), dtype=np.int64)
    for s in range(n_slices):
        slice_bounds[s, 1] = max_chars[s] + 1  # nothing known
    if use_slices:
        status = run_slice_bounds(
            pda, pool, ws, state, ptrs, los, his, dsts, caps, max_tops, slice_scratch, slice_bounds
        )
        if status != 0:
            return status
    rows = np.full(SLICE_ROWS, -1, dtype=np.int32)
    main = np.empty(2 * (n_slices + 1), dtype=np.int64)
    bucketed = np.empty(2 * n_slices, dtype=np.int64)
    n_main = 0
    n_bucketed = 0
    num_sliced = 0
    for s in range(n_slices):
        f = slice_bounds[s, 0]
        g = slice_bounds[s, 1]
        k_f = _accepted_bucket(bounds, max_chars, s, f)
        if k_f >= 0:
            row = s * n_buckets + k_f
            rows[s] = row
            for w in range(n_words):
                words[w] |= cumulative[row, w]
            num_sliced += cumulative_counts[row]
        if k_f < 0:
            # nothing accepted whole: the plain order walks faster, its dead prefixes skipping
            # the long tokens that g would leave out (the bucketed order repeats short prefixes)
            n_main = add_range(main, n_main, region_start[s], region_start[s + 1])
        else:
            # buckets between f (accepted) and g (whose smallest count is at least g: rejected)
            end = above[s, k_f]
            k_g = np.searchsorted(bounds, g - 1, side="left")
            start = above[s, k_g] if k_g < n_buckets else region_start[s]
            n_bucketed = add_range(bucketed, n_bucketed, start, max(start, end))
    n_main = add_range(main, n_main, region_start[OTHER], region_start[OTHER + 1])
    accepted = np.empty(n_words + 3, dtype=np.int32)  # past this a list is never the smallest form
    counts = np.zeros(3, dtype=np.int64)
    loop = np.zeros(256, dtype=np.uint8)
    if not use_slices or loop_bytes(pda, state, loop) < MIN_LOOP_BYTES:
        loop = loop[:0]  # the reference walk steps every token
    if not use_slices:  # nor does it leave out dead first bytes
        groups = (groups[0], groups[1][:0], groups[2], groups[3], groups[4])
        b_groups = (b_groups[0], b_groups[1][:0], b_groups[2], b_groups[3], b_groups[4])
    if n_main > 0:
        status = run_state_walk(
            pda,
            pool,
            ws,
            trie,
            main[: 2 * n_main],
            all_positions,
            state,
            pairs,
            token_ids,
            words,
            accepted,
            uncertain,
            counts,
            max_tops,
            loop,
            *groups,
        )
        if status != 0:
            return status
    if n_bucketed > 0:
        status = run_state_walk(
            pda,
            pool,
            ws,
            b_trie,
            bucketed[: 2 * n_bucketed],
            b_position,
            state,
            pairs,
            b_token_ids,
            words,
            accepted,
            uncertain,
            counts,
            max_tops,
            loop,
            *b_groups,
        )
        if status != 0:
            return status
    walk_accepted = counts[0]
    n_uncertain = counts[1]
    n_listed = counts[2]
    num_accepted = num_sliced + walk_accepted
    positions = np.sort(uncertain[:n_uncertain])
    n_rejected = token_ids.shape[0] - num_accepted - n_uncertain
    sliced = False
    for s in range(SLICE_ROWS):
        if rows[s] >= 0:
            sliced = True
    # the smallest form; ties go to the lower kind number
    size, kind = n_words, KIND_ACCEPTED_BITSET
    if n_rejected < size or (n_rejected == size and KIND_REJECTED_LIST < kind):
        size, kind = n_rejected, KIND_REJECTED_LIST
    if n_listed == walk_accepted:  # the walk listed every id it accepted
        if sliced:
            option, option_kind = SLICE_ROWS + n_listed, KIND_SLICE
        else:
            option, option_kind = num_accepted, KIND_ACCEPTED_LIST
        if option < size or (option == size and option_kind < kind):
            size, kind = option, option_kind
    if kind == KIND_ACCEPTED_LIST:
        out[:size] = np.sort(accepted[:n_listed])
    elif kind == KIND_SLICE:
        out[:SLICE_ROWS] = rows
        out[SLICE_ROWS:size] = np.sort(accepted[:n_listed])
    elif kind == KIND_REJECTED_LIST:
        rejected = grammar_words & ~words
        for i in range(n_uncertain):
            t = token_ids[positions[i]]
            rejected[t >> 5] &= ~(np.int32(1) << np.int32(t & 31))
        out[:size] = bitset_ids(rejected, n_rejected)
    else:
        out[:size] = words
    u = size
    out[u : u + n_uncertain] = positions
    for i in range(n_uncertain):
        out[u + n_uncertain + i] = token_ids[positions[i]]
    out[u + 2 * n_uncertain : u + 3 * n_uncertain] = candidate_lcp(trie, positions)
    info[0] = kind
    info[1] = size
    info[2] = n_uncertain
    info[3] = num_accepted
    return 0


@njit(cache=True, nogil=True)
def run_follow_pairs_rules(pda, pool, ws, rules, max_tops, out, done):
    """walk.run_follow_pairs of each rule i not done[i] yet into out[i] (zeroed), marking it
    done: 0, or the first ERR_* (make room, call again; the failed rule's row is zeroed)."""
    for i in range(rules.shape[0]):
        if done[i]:
            continue
        status = run_follow_pairs(pda, pool, ws, rules[i], max_tops, out[i])
        if status != 0:
            out[i, :] = 0
            return status
        done[i] = 1
    return 0


# A grammar's first-visit template: the arrays the store kernel reads or writes for a mask store,
# made by CompiledGrammar._make_template for the grammar's own store (kept in its `_template`
# with the frame pool and mask pool it names, and made again by first_visit_template, mask_lock
# held, once either was replaced) or for a scratch store (_compute_mask: kept by that call).  The
# other arrays it names are made with the grammar and never replaced.
# A kernel stores through it only while the grammar's mask_lock is held: by Python for a whole
# run_first_visits call (store_first_visits sets table[k, V_TEMPLATE] again after each
# make_room), or by first_visit_in_fill, which takes the lock itself and only then reads
# template_cell; Python writes that cell as it releases the lock (_publish_template), so whoever
# holds the lock finds the template of the arrays as they are (0: none yet, or a disk cache,
# which first visits must look in from Python).  No pool grows under a store, then: a full one
# stops it (STORE_FULL) for Python to grow.  Fills read the same store without the lock
# (batch_fill.TEMPLATE says what they may see).
FIRST_VISIT = Record(
    "FV_",
    Array("pda"),  # int32: the automaton's blob
    Array("pool"),  # int32: the grammar's own frame pool's blob
    Array("mask_index"),  # int32: the store (masks/walk.py)
    Array("mask_pool"),  # int32
    "used",  # the address of the store's int64 [2]: mask_pool words in use, words a full one needs
    Array("num_accepted"),  # int64: per state
    Array("rule_hashes"),  # int32 (automata/pda.py, state_hash)
    Array("hash_memo"),  # int64: state_hash's memo
    "pairs_at",  # the address of int64 [n_rules]: each rule's follow pairs' address (0: not computed)
    "pairs_key",  # the address of int64 [2 * n_rules]: each rule's follow-pairs digest
    "n_rules",
    "max_tops",  # the stack tops budget
    "use_slices",  # 0 only for the reference walks of tests
)
(
    FV_PDA,
    FV_POOL,
    FV_MASK_INDEX,
    FV_MASK_POOL,
    FV_USED,
    FV_NUM_ACCEPTED,
    FV_RULE_HASHES,
    FV_HASH_MEMO,
    FV_PAIRS_AT,
    FV_PAIRS_KEY,
    FV_N_RULES,
    FV_MAX_TOPS,
    FV_USE_SLICES,
) = FIRST_VISIT
FV_FIELDS = FIRST_VISIT.size
FIRST_VISIT.check(globals())

# A row of a first-visit step's table, one per grammar, made for one kernel call by its caller
# (store_first_visits, FirstVisits.share, store_one), which holds the grammars' locks and keeps
# their templates for the call.
VISIT_ROW = Record(
    "V_",
    "template",  # the address of the grammar's FIRST_VISIT template
    "at",  # where its states start in the step's arrays (states, keys, fresh, sizes)
    "n",  # how many (at and n are adjacent: _share reads them as one slice)
    "clear_memo",  # 1: empty the workspace's closure memo first (it names another grammar's frames)
)
V_TEMPLATE, V_AT, V_N, V_CLEAR_MEMO = VISIT_ROW
V_FIELDS = VISIT_ROW.size
VISIT_ROW.check(globals())

VISITS_PER_ROW = 8
"""Kernel states a batch fill's row stores masks for inside the fill (first_visit_in_fill): a row
has one or a few; past this many the row goes back to Python."""

NEED_PAIRS = 4
"""store_masks: a state's rule has no follow pairs yet; the caller computes them and calls again."""
COMPUTED, FROM_SHARED = 1, 2
"""store_masks' `fresh` of a state it stored (0: stored before, skipped)."""


@njit(cache=True)
def store_masks(
    pda,
    pool,
    ws,
    max_tops,
    use_slices,
    tables,
    scratch,
    words,
    out,
    shared,
    secret,
    mask_index,
    mask_pool,
    used,
    num_accepted,
    rule_hashes,
    hash_memo,
    pairs_at,
    pairs_key,
    states,
    keys,
    fresh,
    sizes,
):
    """Store the masks of `states` that a grammar's mask store lacks (mask_index, mask_pool from
    used[0] on, num_accepted), each published by its kind, written last: copied from the shared
    cache (`shared`: slots, entries, pool of masks/shared_masks.py; empty slots for none) when
    it holds the state's key (fresh[i] = FROM_SHARED), else computed (COMPUTED: the caller puts
    it in the shared cache); sizes[i]: its words.  keys[i]: the state's hash under `secret` (automata/pda.py,
    state_hash, memoised in hash_memo) and its rule's follow-pairs digest (pairs_key); pairs_at:
    each rule's follow pairs' address (0: not computed).  A state stored already is skipped, so
    a call after a status resumes.  Returns 0, ERR_* (make room), STORE_FULL (mask_pool needs
    used[1] words) or NEED_PAIRS."""
    n_words = words.shape[0]
    grammar_words = mask_pool[:n_words]
    info = np.zeros(4, dtype=np.int64)
    slots, entries, shared_pool = shared
    state_rule = blob_section(pda, PDA_STATE_RULE)
    for i in range(states.shape[0]):
        state = states[i]
        base = state * MASK_FIELDS
        if mask_index[base] >= 0:
            continue
        rule = state_rule[state]
        if pairs_at[rule] == 0:
            return NEED_PAIRS
        keys[i, 2] = pairs_key[2 * rule]
        keys[i, 3] = pairs_key[2 * rule + 1]
        e = -1
        if slots.shape[0] > 0:
            keys[i, 0], keys[i, 1] = state_hash(pda, state, rule_hashes, secret, hash_memo)
            e = find_shared(slots, entries, keys[i])
        if e >= 0:
            kind, size, n_uncertain, accepted = (
                entries[e, E_KIND],
                entries[e, E_SIZE],
                entries[e, E_UNCERTAIN],
                entries[e, E_ACCEPTED],
            )
            source = shared_pool[entries[e, E_AT] :]
        else:
            pairs = carray(u8_pointer(pairs_at[rule]), 256 * PAIR_WIDTH)
            status = _state_mask(
                pda, pool, ws, max_tops, state, pairs, use_slices, tables, scratch, grammar_words, words, out, info
            )
            if status != 0:
                return status
            kind, size, n_uncertain, accepted = info[0], info[1], info[2], info[3]
            source = out
        total = size + 3 * n_uncertain
        at = used[0]
        if at + total > mask_pool.shape[0]:
            used[1] = at + total
            return STORE_FULL
        mask_pool[at : at + total] = source[:total]
        mask_index[base + 1] = at
        mask_index[base + 2] = size
        mask_index[base + 3] = at + size
        mask_index[base + 4] = n_uncertain
        used[0] = at + total
        num_accepted[state] = accepted
        fresh[i] = FROM_SHARED if e >= 0 else COMPUTED
        sizes[i] = total
        release_fence()  # a reader that sees the kind sees the mask whole
        mask_index[base] = kind
    return 0


@njit(cache=True, nogil=True)
def run_first_visits(table, rows, ws, tables, scratch, words, out, shared, secret, states, keys, fresh, sizes, status):
    """store_masks for each grammar row k of `table` (V_*) listed in `rows`, in the workspace
    `ws` (one call per thread); its status goes to status[k]."""
    for k in rows:
        at, n = table[k, V_AT], table[k, V_N]
        if table[k, V_CLEAR_MEMO]:
            clear_closure_memo(ws)
        status[k] = _store_template_masks(
            carray(i64_pointer(table[k, V_TEMPLATE]), FV_FIELDS),
            ws,
            tables,
            scratch,
            words,
            out,
            shared,
            secret,
            states,
            keys,
            fresh,
            sizes,
            at,
            n,
        )
    return 0


@njit(cache=True, inline="always")
def _store_template_masks(d, ws, tables, scratch, words, out, shared, secret, states, keys, fresh, sizes, at, n):
    """store_masks of a grammar named by its template d (FV_*), for states[at : at + n] (the
    step arrays' part of one row)."""
    n_rules = d[FV_N_RULES]
    return store_masks(
        i32_array(d, FV_PDA),
        i32_array(d, FV_POOL),
        ws,
        d[FV_MAX_TOPS],
        d[FV_USE_SLICES] != 0,
        tables,
        scratch,
        words,
        out,
        shared,
        secret,
        i32_array(d, FV_MASK_INDEX),
        i32_array(d, FV_MASK_POOL),
        carray(i64_pointer(d[FV_USED]), 2),
        i64_array(d, FV_NUM_ACCEPTED),
        i32_array(d, FV_RULE_HASHES),
        i64_array(d, FV_HASH_MEMO),
        carray(i64_pointer(d[FV_PAIRS_AT]), n_rules),
        carray(i64_pointer(d[FV_PAIRS_KEY]), 2 * n_rules),
        states[at : at + n],
        keys[at : at + n],
        fresh[at : at + n],
        sizes[at : at + n],
    )


@njit(cache=True)
def first_visit_in_fill(kernel_states, trie_address, cell_address, lock_address, k, first_visits):
    """Store the masks that row k of a batch fill lacks (its kernel states), inside the fill's
    call, under its grammar's lock, taken only if free.  first_visits: the trie address the
    call's tables are for, those tables, the thread's scratch and workspace (its closure memo
    emptied first: it may name another grammar's frames; the row's own workspace keeps its
    memo for the fills) with its flag asking for larger buffers, the shared cache (its arrays
    and insert_view) and secret, and the step's FirstVisits arrays, where row k records its
    states, and done[k] = 1 when it also put them in the shared cache (_share_in_fill: else
    FirstVisits.share does).  True when stored (fill again); False leaves the row to Python:
    another compiler's, a grammar with no template yet or busy, or store_masks asking for room,
    follow pairs or a larger workspace."""
    (trie_at, tables, scratch, ws, ws_full, words, out, shared, insert_view, secret) = first_visits[:10]
    (states, keys, fresh, sizes, counts, done) = first_visits[10:]
    n = kernel_states.shape[0]
    if cell_address == 0 or trie_address != trie_at or n > VISITS_PER_ROW:
        return False
    cell = carray(i64_pointer(cell_address), 1)
    if cell[0] == 0 or not try_lock(lock_address):
        return False
    at = k * VISITS_PER_ROW
    states[at : at + n] = kernel_states
    counts[k] = n
    clear_closure_memo(ws)
    d = carray(i64_pointer(cell[0]), FV_FIELDS)
    status = _store_template_masks(
        d,
        ws,
        tables,
        scratch,
        words,
        out,
        shared,
        secret,
        states,
        keys,
        fresh,
        sizes,
        at,
        n,
    )
    if status == 0 and _share_in_fill(d, words.shape[0], shared, insert_view, states, keys, fresh, sizes, at, at + n):
        done[k] = 1
    unlock(lock_address)
    if status == ERR_BUFFER_FULL:
        ws_full[0] = 1
    return status == 0


class FirstVisits:
    """What a batch step's fills record of the masks they stored (first_visit_in_fill), per row
    k from k * VISITS_PER_ROW on: states, their shared-cache keys, fresh and sizes (store_masks),
    counts[k], and done[k] = 1 when the fill also shared them; the rest are shared once the
    step's fills are done (share)."""

    def __init__(self, n_rows: int):
        n = n_rows * VISITS_PER_ROW
        self.states = np.zeros(n, dtype=np.int64)
        self.keys = np.zeros((n, 4), dtype=np.int64)
        self.fresh = np.zeros(n, dtype=np.uint8)
        self.sizes = np.zeros(n, dtype=np.int64)
        self.counts = np.zeros(n_rows, dtype=np.int64)
        self.done = np.zeros(n_rows, dtype=np.uint8)

    def kernel_args(self, compiler: GrammarCompiler) -> tuple:
        """run_fill_rows' `first_visits` for this thread (its workspace grown first when a first
        visit of an earlier step found it short: that row went to Python)."""
        scratch = compiler.walk_scratch()
        if scratch.workspace_full[0]:
            scratch.workspace.grow_buffers()
            scratch.workspace_full[0] = 0
        return (
            compiler.trie.blob.ctypes.data,
            compiler.trie_tables,
            scratch.kernel_args,
            scratch.workspace.blob,
            scratch.workspace_full,
            scratch.words,
            scratch.parts,
            compiler.shared_tables(),
            compiler.cache.insert_view(),
            compiler.cache.secret,
            self.states,
            self.keys,
            self.fresh,
            self.sizes,
            self.counts,
            self.done,
        )

    def share(self, compiler: GrammarCompiler, grammars: list[CompiledGrammar]) -> None:
        """Count the step's first visits in the shared cache's statistics; put the masks of the
        rows the fills left (not done) in the shared cache (grammars[k]: row k's), and keep room
        in those grammars' pools for the next step's; each grammar's store is read under its
        lock (taken in one order: two sharers never wait for each other; a first visit holding
        one takes no other grammar's)."""
        if not self.counts.any():
            return
        if compiler.cache_enabled:
            _count_visits(compiler.cache, self.fresh)
        rows = np.flatnonzero(self.counts * (self.done == 0)).tolist()
        if not rows:
            return
        locked = sorted({id(grammars[k]): grammars[k] for k in rows}.values(), key=id)
        for grammar in locked:
            grammar.mask_lock.acquire()
        try:
            if compiler.cache_enabled:
                table = np.array(
                    [(grammars[k].first_visit_template(), k * VISITS_PER_ROW, self.counts[k], 0) for k in rows],
                    dtype=np.int64,
                )
                _share(compiler.cache, table, self.states, self.keys, self.fresh, self.sizes)
            for grammar in locked:
                grammar.keep_room()  # for the next step's fills
        finally:
            for grammar in locked:
                grammar.mask_lock.release()


@njit(cache=True, nogil=True)
def share_first_visits(slots, entries, pool, used, table, states, keys, fresh):
    """Put the masks a step computed (fresh) in the shared cache, each grammar's read from its
    store through its template; the caller holds the cache's lock and made room.  Returns how
    many went in (a key two grammars computed goes in once)."""
    added = 0
    for k in range(table.shape[0]):
        d = carray(i64_pointer(table[k, V_TEMPLATE]), FV_FIELDS)
        at = table[k, V_AT]
        added += _insert_computed(slots, entries, pool, used, d, states, keys, fresh, at, at + table[k, V_N])
    return added


@njit(cache=True)
def _insert_computed(slots, entries, pool, used, d, states, keys, fresh, start, end):
    """insert_mask of the masks computed (fresh) among states[start:end], read from the store of
    the grammar whose template is d; how many went in."""
    mask_index = i32_array(d, FV_MASK_INDEX)
    mask_pool = i32_array(d, FV_MASK_POOL)
    num_accepted = i64_array(d, FV_NUM_ACCEPTED)
    added = 0
    for i in range(start, end):
        if fresh[i] == COMPUTED:
            base = states[i] * MASK_FIELDS
            added += insert_mask(
                slots,
                entries,
                pool,
                used,
                keys[i],
                mask_pool[mask_index[base + 1] : mask_index[base + 3] + 3 * mask_index[base + 4]],
                mask_index[base],
                mask_index[base + 2],
                mask_index[base + 4],
                num_accepted[states[i]],
            )
    return added


@njit(cache=True)
def _share_in_fill(d, n_words, shared, insert_view, states, keys, fresh, sizes, start, end):
    """After a fill's first visit stored states[start:end] through template d (its grammar's
    lock still held): True when nothing is left for Python, its pool keeping keep_room's room
    (a bitset of n_words) and its computed masks put in the shared cache, whose lock it takes
    if free and whose arrays must be the current ones with room."""
    mask_pool_words = i32_array(d, FV_MASK_POOL).shape[0]
    used = carray(i64_pointer(d[FV_USED]), 2)
    if mask_pool_words - used[0] < n_words:
        return False
    n_new = 0
    new_words = 0
    for i in range(start, end):
        if fresh[i] == COMPUTED:
            n_new += 1
            new_words += sizes[i]
    if n_new == 0:
        return True
    slots, entries, pool = shared
    cache_used, current, cache_lock = insert_view
    if slots.shape[0] == 0 or not try_lock(cache_lock):
        return False
    room = has_room(slots, entries, pool, cache_used, current, n_new, new_words)
    if room:
        _insert_computed(slots, entries, pool, cache_used, d, states, keys, fresh, start, end)
    unlock(cache_lock)
    return room


def ensure_batch_masks(groups: list[tuple[CompiledGrammar, np.ndarray]], threads: int) -> None:
    """The first visits of a batch step: for each (grammar, kernel states) the masks its store
    lacks, each compiler's grammars in one store_first_visits.  A grammar whose lock another
    thread holds is finished by its own ensure_masks afterwards."""
    held, later = [], []
    by_compiler: dict[int, list] = {}
    try:
        for grammar, states in groups:
            if not grammar.mask_lock.acquire(blocking=False):
                later.append((grammar, states))
                continue
            held.append(grammar)
            states = grammar.first_visit_states(states)
            if len(states):
                by_compiler.setdefault(id(grammar.compiler), []).append((grammar, states))
        for visits in by_compiler.values():
            store_first_visits(visits, threads)
    finally:
        for grammar in held:
            grammar.mask_lock.release()
    for grammar, states in later:
        grammar.ensure_masks(states)


def store_first_visits(
    visits: list[tuple[CompiledGrammar, np.ndarray]], threads: int, own_workspace: bool = False
) -> None:
    """Store the masks the grammars' stores lack for these (grammar, states) of one compiler,
    each grammar's mask_lock held: every grammar's states in one nogil kernel call per thread
    (up to `threads`; they share the work only when there is enough of it, threads_for_states),
    from the shared cache or computed; then the computed ones go in the shared cache, in one
    call.  Python runs per call and for the rare row that must make room (a grown mask pool,
    frame pool or workspace, a rule's first follow pairs), which then runs again.
    own_workspace: a single grammar computes in the workspace it borrows (its closure memo kept)."""
    compiler = visits[0][0].compiler
    counts = [len(states) for _, states in visits]
    states = np.concatenate([s for _, s in visits]) if len(visits) > 1 else visits[0][1]
    n = len(states)
    keys = np.zeros((n, 4), dtype=np.int64)
    fresh = np.zeros(n, dtype=np.uint8)
    sizes = np.zeros(n, dtype=np.int64)
    starts = np.cumsum([0, *counts[:-1]]).tolist()
    table = np.array(
        [
            (g.first_visit_template(), at, count, 0 if own_workspace else 1)
            for (g, _), at, count in zip(visits, starts, counts)
        ],
        dtype=np.int64,
    ).reshape(-1, V_FIELDS)
    status = np.zeros(len(visits), dtype=np.int64)
    tables = compiler.trie_tables
    looked_up = compiler.shared_tables()
    secret = compiler.cache.secret

    def work(part):
        scratch = compiler.walk_scratch()  # this thread's
        if own_workspace:
            ws = visits[0][0].borrowed_workspace()
        else:
            ws = compiler.lend_workspace()
        try:
            run_first_visits(
                table,
                part,
                ws.blob,
                tables,
                scratch.kernel_args,
                scratch.words,
                scratch.parts,
                looked_up,
                secret,
                states,
                keys,
                fresh,
                sizes,
                status,
            )
            if (status[part] == ERR_BUFFER_FULL).any():
                ws.grow_buffers()  # for the next rows whose stack sets are as large
        finally:
            if not own_workspace:
                compiler.give_back_workspace(ws)

    pending = sorted(range(len(visits)), key=lambda k: -counts[k])
    for k in pending:  # make the room the kernel would ask for: a round trip is a round on one thread
        visits[k][0].before_first_visits(states[starts[k] : starts[k] + counts[k]])
        table[k, V_TEMPLATE] = visits[k][0].first_visit_template()
    while pending:
        split = threads_for_states(threads, sum(counts[k] for k in pending))
        n_parts = min(len(pending), 4 * split) if split > 1 else 1  # (parts only balance threads)
        parts = [np.array(pending[i::n_parts], dtype=np.int64) for i in range(n_parts)]
        run_parts(parts, work, split)
        again = [k for k in pending if status[k] != 0]
        for k in again:
            grammar = visits[k][0]
            grammar.make_room(int(status[k]), states=states[starts[k] : starts[k] + counts[k]])
            table[k, V_TEMPLATE] = grammar.first_visit_template()
        pending = again
    if compiler.cache_enabled:
        _count_visits(compiler.cache, fresh)
        _share(compiler.cache, table, states, keys, fresh, sizes)
    for (grammar, _), at, count in zip(visits, starts, counts):
        grammar.after_first_visits(states[at : at + count], fresh[at : at + count])


def store_one(template: int, states: np.ndarray, compiler: GrammarCompiler, ws) -> int:
    """store_masks of one template's states on this thread, in `ws`, looking nothing up in the
    shared cache (a mask computed for a scratch store): its status."""
    n = len(states)
    table = np.array([[template, 0, n, 0]], dtype=np.int64)
    status = np.zeros(1, dtype=np.int64)
    scratch = compiler.walk_scratch()
    run_first_visits(
        table,
        np.zeros(1, dtype=np.int64),
        ws.blob,
        compiler.trie_tables,
        scratch.kernel_args,
        scratch.words,
        scratch.parts,
        NO_SHARED,
        compiler.cache.secret,
        states,
        np.zeros((n, 4), dtype=np.int64),
        np.zeros(n, dtype=np.uint8),
        np.zeros(n, dtype=np.int64),
        status,
    )
    return int(status[0])


def _count_visits(cache: SharedMasks, fresh: np.ndarray) -> None:
    """Count first visits (store_masks' `fresh`) in the cache's statistics."""
    with cache.lock:
        cache.hits += int(np.count_nonzero(fresh == FROM_SHARED))
        cache.computed += int(np.count_nonzero(fresh == COMPUTED))


def _share(cache: SharedMasks, table, states, keys, fresh, sizes) -> None:
    """Put the masks the rows of `table` computed in the shared cache (one kernel call, under
    its lock)."""
    parts = [slice(at, at + n) for at, n in table[:, V_AT : V_N + 1].tolist()]
    computed = [fresh[part] == COMPUTED for part in parts]
    n_new = sum(int(np.count_nonzero(c)) for c in computed)
    if n_new == 0:
        return
    words = sum(int(sizes[part][c].sum()) for part, c in zip(parts, computed))
    with cache.lock:
        room = cache.make_room(n_new, words)
        if room is not None:
            share_first_visits(*room, table, states, keys, fresh)
