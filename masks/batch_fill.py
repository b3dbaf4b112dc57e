"""One numba call fills many rows of a batch step, without the GIL; and the per-matcher memo of
fills that needed uncertain-token walks, which the single-row path shares.

Rows belong to different grammars, so each has its own PDA, frame pool, workspace and mask store;
a numba call cannot take a list of arrays cheaply (a typed List costs microseconds per element
to build), so each row is described by one row of an int64 table (`ROW_*` columns below) that
names the arrays `walk.run_fill` reads or writes by address and length, and the kernel views
them in place.  What a step changes (the stacks, the bitmask row) is in the table; the rest is in
a per-matcher template the row points to, rebuilt only when an array is replaced.  The caller
keeps every described array alive until the call returns (the matcher's state and template
hold them; ROW and TEMPLATE below say who holds what).  A row whose fill needs Python (a first visit's masks, a
memo to allocate, a buffer to grow) gets a positive or ERR_* status and nothing else happens to
it; the caller makes what is missing and runs it again.

A fill that checks uncertain tokens against the stacks (walks) is memoised per matcher, keyed by
its kernel stacks and can_end: the result depends on nothing else (frames are hash-consed and
never renumbered), and inside a JSON string consecutive tokens leave the stacks identical, so
those fills become a copy.  The memo is three arrays (see new_memo) the fill kernel reads and
writes, so a steady row needs no Python to look it up.
"""

from __future__ import annotations

import numpy as np
from numba import carray

from ..core.jit import njit
from .kernel_memory import Array, Record, i32_array, i32_pointer, i32_rows, i64_array, i64_pointer, take_next
from .state_masks import first_visit_in_fill
from .walk import FILL_MASKS_MISSING, FILL_UNCERTAIN, run_fill

# A row of a step's table, one per matcher: the fields a step changes, and its template's address.
# Built by matcher._batch_fill for each round of a step (GrammarMatcher._batch_row); the call's
# arguments keep alive what it names until run_fill_rows returns: the batch bitmask (`words`),
# the matcher's current state (`stacks`: never changed in place) and its template (below).
ROW = Record(
    "ROW_",
    "template",  # the address of the matcher's TEMPLATE
    "words",  # the address of its int32 bitmask row (TEMPLATE's n_words words)
    Array("stacks"),  # its state's packed stacks, int64 (walk.run_fill's `stacks`)
    "n_kernel",  # its kernel stacks, the first of `stacks`
    "can_end",  # 1 when the state can end
)
ROW_TEMPLATE, ROW_WORDS, ROW_STACKS, ROW_N_KERNEL, ROW_CAN_END = ROW
ROW_FIELDS = ROW.size
ROW.check(globals())

# A matcher's template: what its fills read or write besides the step's fields, in the arrays
# named as they were when it was made (GrammarMatcher._make_template).  The matcher keeps it, with
# the arrays named here that can be replaced (its frame pool and workspace, its grammar's mask
# pool and index, its memo), and makes it again at its next row (between kernel calls, never
# during one) once one of them was; the others (stop ids, automaton, trie, slice rows, the
# grammar's template cell and lock word) live as long as the matcher and its grammar.
# While a fill reads it, other threads may store masks in the same grammar (first_visit_in_fill
# under its lock, or Python's first visits): a state's mask is whole once its kind is seen
# (state_masks.store_masks publishes the kind last, after a release fence), and a mask pool that
# grows is a larger copy (CompiledGrammar._grow_pool), never changed in place, so the fill keeps
# reading the pool named here (kept alive by the matcher), where the masks stored after the
# growth read as not computed (walk.run_fill: FILL_MASKS_MISSING, and the row goes back to Python).
# The frame pool, workspace and memo are the matcher's own (and its forks': GrammarMatcher.fork),
# grown or replaced by Python between calls only.
TEMPLATE = Record(
    "T_",
    "n_words",  # the bitmask's int32 words
    Array("stops"),  # int64: the stop token ids
    Array("pda"),  # int32: the automaton's blob
    Array("pool"),  # int32: the frame pool's blob
    Array("ws"),  # int64: the workspace's blob
    Array("trie"),  # int32: the token trie's blob
    Array("mask_index"),  # int32: the grammar's mask store (masks/walk.py)
    Array("mask_pool"),  # int32
    Array("slice_rows"),  # int32 [length, n_words]: the trie's cumulative slice bitsets
    "max_tops",  # the stack tops budget
    "memo_words",  # the address of the memo's bitmasks (new_memo), int32 [memo_entries, n_words]
    "memo_keys",  # int64 [memo_entries, memo_key_words]
    "memo_meta",  # int64 [memo_entries, 3]
    "memo_entries",  # 0: no memo yet
    "memo_key_words",  # the int64s of a memo key
    "grammar_cell",  # the address of the int64 that names the grammar's first-visit template
    # (state_masks.FIRST_VISIT; 0: none, first visits go back to Python)
    "lock",  # the address of the grammar's mask lock word (masks/kernel_memory.py)
)
(
    T_N_WORDS,
    T_STOPS,
    T_PDA,
    T_POOL,
    T_WS,
    T_TRIE,
    T_MASK_INDEX,
    T_MASK_POOL,
    T_SLICE_ROWS,
    T_MAX_TOPS,
    T_MEMO_WORDS,
    T_MEMO_KEYS,
    T_MEMO_META,
    T_MEMO_ENTRIES,
    T_MEMO_KEY_WORDS,
    T_GRAMMAR_CELL,
    T_LOCK,
) = TEMPLATE
TEMPLATE_FIELDS = TEMPLATE.size
TEMPLATE.check(globals())

MEMO_ENTRIES = 32
"""Bitmasks a matcher's memo keeps (least recently used dropped first)."""
MEMO_KEY_WORDS = 127
"""int64s a memo key holds (2 * kernel stacks + 1): stack sets with more kernel stacks walk on each
fill, unmemoised."""
META_HASH, META_LENGTH, META_USED = range(3)


def new_memo(
    n_words: int, entries: int = MEMO_ENTRIES, key_words: int = MEMO_KEY_WORDS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An empty memo: (bitmasks [entries, n_words] int32, keys [entries, key_words] int64,
    meta [entries, 3] int64: key hash, key length (0: empty entry), last use)."""
    return (
        np.empty((entries, n_words), dtype=np.int32),
        np.zeros((entries, key_words), dtype=np.int64),
        np.zeros((entries, 3), dtype=np.int64),
    )


NO_MEMO = (np.zeros((0, 1), dtype=np.int32), np.zeros((0, 1), dtype=np.int64), np.zeros((0, 3), dtype=np.int64))
"""The memo of a matcher that has needed none yet (fill_memoised then answers FILL_UNCERTAIN)."""


@njit(cache=True, nogil=True)
def fill_memoised(
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
    memo_words,
    memo_keys,
    memo_meta,
):
    """walk.run_fill, with a fill that needs walks copied from the memo or, walked, stored there.
    Returns run_fill's status; FILL_UNCERTAIN only when walks are needed and there is no memo
    (no entries: the caller makes one with new_memo and calls again)."""
    args = (stop_ids, pda, pool, ws, trie, mask_index, mask_pool, slice_rows, max_tops)
    status = run_fill(words, stacks, n_kernel, can_end, *args, False)
    if status != FILL_UNCERTAIN:
        return status
    if memo_words.shape[0] == 0:
        return FILL_UNCERTAIN
    n_key = 2 * n_kernel + 1
    if n_key > memo_keys.shape[1]:
        return run_fill(words, stacks, n_kernel, can_end, *args, True)
    half = stacks.shape[0] // 2
    key = np.empty(n_key, dtype=np.int64)
    key[:n_kernel] = stacks[:n_kernel]
    key[n_kernel : 2 * n_kernel] = stacks[half : half + n_kernel]
    key[n_key - 1] = 1 if can_end else 0
    h = np.int64(n_key)
    for x in key:
        h = h * np.int64(1000003) ^ x
    clock, oldest = np.int64(0), 0
    hit = -1
    for e in range(memo_meta.shape[0]):
        clock = max(clock, memo_meta[e, META_USED])
        if memo_meta[e, META_USED] < memo_meta[oldest, META_USED]:
            oldest = e
        if hit < 0 and memo_meta[e, META_LENGTH] == n_key and memo_meta[e, META_HASH] == h:
            same = True
            for j in range(n_key):
                if memo_keys[e, j] != key[j]:
                    same = False
                    break
            if same:
                hit = e
    if hit >= 0:
        words[:] = memo_words[hit]
        memo_meta[hit, META_USED] = clock + 1
        return 0
    status = run_fill(words, stacks, n_kernel, can_end, *args, True)
    if status != 0:
        return status
    memo_words[oldest] = words
    memo_keys[oldest, :n_key] = key
    memo_meta[oldest, META_HASH] = h
    memo_meta[oldest, META_LENGTH] = n_key
    memo_meta[oldest, META_USED] = clock + 1
    return 0


@njit(cache=True, nogil=True)
def run_fill_rows(table, counter, limit, stop_after_visit, status, first_visits):
    """fill_memoised for rows of `table` below `limit` until none is left, taking each from
    `counter` (shared with the other threads' calls: take_next); row k's status goes to
    status[k].  Returns 1 when it stopped early, after a row that stored masks, because
    stop_after_visit asked it to (the step has first visits: worth more threads), else 0.  A row whose
    kernel states lack masks stores them first, in this call, when it can take its grammar's
    lock and its compiler's trie is the one `first_visits` names (state_masks'
    first_visit_in_fill); else FILL_MASKS_MISSING sends it back to Python."""
    while True:
        k = take_next(counter)
        if k >= limit:
            counter[0] = limit  # (a row this call took past the limit is left to the next call)
            return 0
        row = table[k]
        d = carray(i64_pointer(row[ROW_TEMPLATE]), TEMPLATE_FIELDS)
        status[k] = _fill_row(row, d)
        if status[k] == FILL_MASKS_MISSING and first_visit_in_fill(
            carray(i64_pointer(row[ROW_STACKS]), row[ROW_N_KERNEL]),
            d[T_TRIE],
            d[T_GRAMMAR_CELL],
            d[T_LOCK],
            k,
            first_visits,
        ):
            status[k] = _fill_row(row, d)
            if stop_after_visit:
                return 1


@njit(cache=True, inline="always")
def _fill_row(row, d):
    """fill_memoised of one row of a step's table (d: its matcher's template)."""
    n_words = d[T_N_WORDS]
    n_memo = d[T_MEMO_ENTRIES]
    return fill_memoised(
        carray(i32_pointer(row[ROW_WORDS]), n_words),
        i64_array(row, ROW_STACKS),
        row[ROW_N_KERNEL],
        row[ROW_CAN_END] != 0,
        i64_array(d, T_STOPS),
        i32_array(d, T_PDA),
        i32_array(d, T_POOL),
        i64_array(d, T_WS),
        i32_array(d, T_TRIE),
        i32_array(d, T_MASK_INDEX),
        i32_array(d, T_MASK_POOL),
        i32_rows(d, T_SLICE_ROWS, n_words),
        d[T_MAX_TOPS],
        carray(i32_pointer(d[T_MEMO_WORDS]), (n_memo, n_words)),
        carray(i64_pointer(d[T_MEMO_KEYS]), (n_memo, d[T_MEMO_KEY_WORDS])),
        carray(i64_pointer(d[T_MEMO_META]), (n_memo, 3)),
    )
