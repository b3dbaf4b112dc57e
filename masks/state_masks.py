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
from numba import carray, types

from ..automata.kernels import ERR_BUFFER_FULL, PDA_BYTE_DST, PDA_BYTE_HI, PDA_BYTE_LO, PDA_BYTE_PTR
from ..automata.stack import clear_closure_memo
from ..grammar.core.threads import run_parts, threads_for_states
from ..jit import njit
from .batch_fill import address, pointer_intrinsic
from .trie import BUCKET_BOUNDS, OTHER
from .walk import (
    KIND_ACCEPTED_BITSET,
    KIND_ACCEPTED_LIST,
    KIND_REJECTED_LIST,
    KIND_SLICE,
    MASK_FIELDS,
    PAIR_WIDTH,
    SLICE_ROWS,
    bitset_ids,
    candidate_lcp,
    run_follow_pairs,
    run_slice_bounds,
    run_state_walk,
)

if TYPE_CHECKING:
    from .compiler import CompiledGrammar, MaskRun

STORE_FULL = 3
"""run_store_masks: the mask pool lacks room for the next state (need[0] words); grow it, call again."""

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
    )


_u8_pointer = pointer_intrinsic(types.uint8)
_i32_pointer = pointer_intrinsic(types.int32)
_i64_pointer = pointer_intrinsic(types.int64)


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
    (walk._walk's `loop`).  Returns how many.  O(256 log edges)."""
    kept = np.full(256, -1, dtype=np.int64)  # per byte: its target t, when t keeps itself on it
    byte_ptr = pda[PDA_BYTE_PTR]
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
def _add_range(spans, n, start, end):
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
        if k_f < 0 and g > max_chars[s]:  # nothing known: the plain order walks faster
            n_main = _add_range(main, n_main, region_start[s], region_start[s + 1])
        else:
            # buckets between f (accepted) and g (whose smallest count is at least g: rejected)
            end = above[s, k_f] if k_f >= 0 else region_start[s + 1]
            k_g = np.searchsorted(bounds, g - 1, side="left")
            start = above[s, k_g] if k_g < n_buckets else region_start[s]
            n_bucketed = _add_range(bucketed, n_bucketed, start, max(start, end))
    n_main = _add_range(main, n_main, region_start[OTHER], region_start[OTHER + 1])
    accepted = np.empty(n_words + 3, dtype=np.int32)  # past this a list is never the smallest form
    counts = np.zeros(3, dtype=np.int64)
    loop = np.zeros(256, dtype=np.uint8)
    if not use_slices or loop_bytes(pda, state, loop) < MIN_LOOP_BYTES:
        loop = loop[:0]  # the reference walk steps every token
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
def run_store_masks(
    pda,
    pool,
    ws,
    max_tops,
    states,
    pairs_at,
    use_slices,
    tables,
    scratch,
    mask_index,
    mask_pool,
    used,
    kinds,
    num_accepted,
    words,
    out,
):
    """Compute the masks of `states` (pairs_at[i]: the address of state i's follow pairs) and
    append each to the mask store from used[0] on, writing its mask_index fields but the kind,
    which goes to kinds[i] for the caller to publish (a concurrent reader sees "not computed"
    until then).  States with kinds[i] >= 0 are done already and skipped, so a call after a
    status resumes.  Returns 0, ERR_* (make room, call again) or STORE_FULL (need[used[1]] more
    words in mask_pool).  use_slices=False walks the whole trie (the reference for tests)."""
    n_words = words.shape[0]
    grammar_words = mask_pool[:n_words]
    info = np.zeros(4, dtype=np.int64)
    for i in range(states.shape[0]):
        if kinds[i] >= 0:
            continue
        pairs = carray(_u8_pointer(pairs_at[i]), 256 * PAIR_WIDTH)
        status = _state_mask(
            pda, pool, ws, max_tops, states[i], pairs, use_slices, tables, scratch, grammar_words, words, out, info
        )
        if status != 0:
            return status
        size = info[1]
        n_uncertain = info[2]
        total = size + 3 * n_uncertain
        at = used[0]
        if at + total > mask_pool.shape[0]:
            used[1] = at + total
            return STORE_FULL
        mask_pool[at : at + total] = out[:total]
        base = states[i] * MASK_FIELDS
        mask_index[base + 1] = at
        mask_index[base + 2] = size
        mask_index[base + 3] = at + size
        mask_index[base + 4] = n_uncertain
        used[0] = at + total
        kinds[i] = info[0]
        num_accepted[i] = info[3]
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


# Columns of run_store_masks_rows' table: one row per grammar, the address and length of each
# array run_store_masks takes for it (the caller keeps them alive for the call).
(
    SR_PDA,
    SR_N_PDA,
    SR_POOL,
    SR_N_POOL,
    SR_MAX_TOPS,
    SR_STATES,
    SR_N_STATES,
    SR_PAIRS_AT,
    SR_MASK_INDEX,
    SR_N_MASK_INDEX,
    SR_MASK_POOL,
    SR_N_MASK_POOL,
    SR_USED,
    SR_KINDS,
    SR_NUM_ACCEPTED,
) = range(15)
SR_FIELDS = 15


@njit(cache=True, nogil=True)
def run_store_masks_rows(table, rows, ws, tables, scratch, words, out, status):
    """run_store_masks for each grammar row k of `table` listed in `rows` (the first visits of a
    batch step, one call per thread, in the thread's workspace `ws`, its closure memo emptied
    before each grammar); its status goes to status[k]."""
    for k in rows:
        d = table[k]
        n = d[SR_N_STATES]
        clear_closure_memo(ws)  # the memo names the previous grammar's frames
        status[k] = run_store_masks(
            carray(_i32_pointer(d[SR_PDA]), d[SR_N_PDA]),
            carray(_i32_pointer(d[SR_POOL]), d[SR_N_POOL]),
            ws,
            d[SR_MAX_TOPS],
            carray(_i64_pointer(d[SR_STATES]), n),
            carray(_i64_pointer(d[SR_PAIRS_AT]), n),
            True,
            tables,
            scratch,
            carray(_i32_pointer(d[SR_MASK_INDEX]), d[SR_N_MASK_INDEX]),
            carray(_i32_pointer(d[SR_MASK_POOL]), d[SR_N_MASK_POOL]),
            carray(_i64_pointer(d[SR_USED]), 2),
            carray(_i64_pointer(d[SR_KINDS]), n),
            carray(_i64_pointer(d[SR_NUM_ACCEPTED]), n),
            words,
            out,
        )
    return 0


class _Visit:
    """One grammar's first visits in a batch step: its mask_lock held, and the run of states to
    compute (its arrays, which the kernel writes, kept alive here for the call)."""

    def __init__(self, grammar: CompiledGrammar, run: MaskRun):
        self.grammar = grammar
        self.run = run

    def describe(self, row: np.ndarray) -> None:
        """Write this grammar's table row (again after its frame pool or store grew)."""
        grammar, run = self.grammar, self.run
        pda, pool, max_tops = grammar.frame_arrays()
        for field, array in (
            (SR_PDA, pda),
            (SR_POOL, pool),
            (SR_STATES, run.states),
            (SR_MASK_INDEX, grammar.mask_index),
            (SR_MASK_POOL, grammar.mask_pool),
        ):
            row[field] = address(array)
            row[field + 1] = len(array)
        row[SR_MAX_TOPS] = max_tops
        row[SR_PAIRS_AT] = address(run.pairs_at)
        row[SR_USED] = address(run.used)
        row[SR_KINDS] = address(run.kinds)
        row[SR_NUM_ACCEPTED] = address(run.num_accepted)


def ensure_batch_masks(groups: list[tuple[CompiledGrammar, np.ndarray]], threads: int) -> None:
    """The first visits of a batch step: for each (grammar, kernel states) the masks its store
    lacks, from the shared caches or computed; all grammars' new states in one nogil kernel call
    per thread (up to `threads`, grammar/core/threads.py), the threads sharing the work only when
    there is enough of it (threads_for_states).  A grammar whose lock another thread holds is finished
    by its own ensure_masks afterwards."""
    visits: list[_Visit] = []
    later = []
    try:
        for grammar, states in groups:
            lock = grammar.mask_lock
            if not lock.acquire(blocking=False):
                later.append((grammar, states))
                continue
            try:  # (states of a row that found masks missing: mostly some lack one still)
                lacking = grammar.lacking_masks(states)
                run = grammar.masks_to_compute(lacking) if len(lacking) else None
            except BaseException:
                lock.release()
                raise
            if run is not None:
                visits.append(_Visit(grammar, run))
            else:
                lock.release()
        by_compiler: dict[int, list[_Visit]] = {}
        for visit in visits:
            by_compiler.setdefault(id(visit.grammar.compiler), []).append(visit)
        for same in by_compiler.values():
            _compute_visits(same, threads)
        for visit in visits:
            visit.grammar.publish_masks(visit.run)
    finally:
        for visit in visits:
            visit.grammar.mask_lock.release()
    for grammar, states in later:
        grammar.ensure_masks(states)


def _compute_visits(visits: list[_Visit], threads: int) -> None:
    """Run the visits' kernels (one compiler's grammars) until every one is done: the rows are
    dealt, largest first, into parts the threads take in turn, each part in a workspace the
    thread borrows from the compiler; a row that had to grow its frame pool or store runs again,
    one whose stack sets outgrew the workspace is finished by its grammar (store_masks)."""
    compiler = visits[0].grammar.compiler
    table = np.empty((len(visits), SR_FIELDS), dtype=np.int64)
    for k, visit in enumerate(visits):
        visit.describe(table[k])
    status = np.zeros(len(visits), dtype=np.int64)
    tables = compiler.trie_tables

    def work(part):
        scratch = compiler.walk_scratch()  # this thread's
        ws = compiler.lend_workspace()
        try:
            run_store_masks_rows(
                table, part, ws.blob, tables, scratch.kernel_args, scratch.words, scratch.parts, status
            )
            if (status[part] == ERR_BUFFER_FULL).any():
                ws.grow_buffers()  # for the next rows whose stack sets are as large
        finally:
            compiler.give_back_workspace(ws)

    pending = sorted(range(len(visits)), key=lambda k: -len(visits[k].run.states))
    while pending:
        n_states = sum(len(visits[k].run.states) for k in pending)
        split = threads_for_states(threads, n_states)
        n_parts = min(len(pending), 4 * split) if split > 1 else 1  # (parts only balance threads)
        parts = [np.array(pending[i::n_parts], dtype=np.int64) for i in range(n_parts)]
        run_parts(parts, work, split)
        again = []
        for k, done in zip(pending, status[pending].tolist()):
            grammar, run = visits[k].grammar, visits[k].run
            if grammar.after_store_masks(run, done):
                continue
            if done == ERR_BUFFER_FULL:  # its own workspace, grown by after_store_masks, finishes it
                grammar.store_masks(run)
            else:
                visits[k].describe(table[k])
                again.append(k)
        pending = again
