"""First visits inside the batch fill (masks/state_masks.py, masks/batch_fill.py): the lock word
kernels and Python share, rows shared out by an atomic counter, the numba shared mask cache and
its byte limit, and rows whose grammar is busy going back to Python.  Every mask is compared with
a grammar compiled apart, filled alone."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from support import dev_instances, tokenizer_info  # noqa: E402

import pushmask as pm  # noqa: E402
from pushmask.core import threads  # noqa: E402
from pushmask.core.jit import njit  # noqa: E402
from pushmask.masks.kernel_memory import KernelLock, take_next, try_lock, unlock  # noqa: E402


@njit(nogil=True)
def _take_all(counter, taken):
    """Count each item i this call takes from the shared counter in taken[i]."""
    while True:
        i = take_next(counter)
        if i >= taken.shape[0]:
            return
        taken[i] += 1


def test_threads_sharing_a_counter_take_every_item_once():
    """run_shared's calls take items from one atomic counter: every item is taken exactly once
    (a plain read-then-increment would hand some to two threads)."""
    taken = np.zeros(2_000_000, dtype=np.int64)
    counter = np.zeros(1, dtype=np.int64)
    threads.run_shared(lambda: _take_all(counter, taken), 4)
    assert (taken == 1).all()
    assert counter[0] >= len(taken)  # each call's last take went past the end


def test_run_shared_reraises_and_waits_for_calls_that_began():
    """An error in a pool thread's call reaches the caller, after the calls that began ended."""
    ended = []

    def work():
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.05)
            ended.append(1)
            raise ValueError("from a pool thread")
        time.sleep(0.2)  # the pool thread begins meanwhile

    with pytest.raises(ValueError, match="pool thread"):
        threads.run_shared(work, 2)
    assert ended == [1]


def test_the_kernel_lock_is_one_lock_for_python_and_kernels():
    released = []
    lock = KernelLock(on_release=lambda: released.append(lock.locked()))
    assert lock.acquire(blocking=False) and lock.locked()
    assert not try_lock(lock.address)  # a kernel cannot take it while Python holds it
    assert not lock.acquire(blocking=False)
    lock.release()
    assert released == [True] and not lock.locked()  # on_release runs while it is still held
    assert try_lock(lock.address) and not lock.acquire(blocking=False)  # a kernel took it
    unlock(lock.address)
    with lock:
        assert lock.locked()
    assert not lock.locked()


def _bitmask(rows: int, info) -> np.ndarray:
    return np.zeros((rows, (info.vocab_size + 31) // 32), dtype=np.int32)


def _reference_fills(schemas, tokens_of, info):
    """Each schema compiled by its own compiler, filled alone along its tokens."""
    fills = []
    for schema, tokens in zip(schemas, tokens_of):
        matcher = pm.GrammarMatcher(
            pm.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
                schema, property_order="any", strict_mode=False
            )
        )
        bitmask = _bitmask(1, info)
        steps = []
        for token in tokens:
            matcher.fill_next_token_bitmask(bitmask)
            steps.append(bitmask[0].copy())
            assert matcher.accept_token(token)
        fills.append(steps)
    return fills


@pytest.mark.parametrize("limit", [-1, 96 << 10])
def test_batch_first_visits_share_masks_and_stay_exact(limit, monkeypatch):
    """Batch steps of dev schemas, each twice, new to the compiler: rows store their new states'
    masks inside the fill and share them; with a shared cache of 96 KiB (it must start again
    empty part way) as without a limit, every row equals the reference fill, and the cache's
    counters say masks were computed, found and (with the limit) evicted."""
    monkeypatch.setattr(threads, "MIN_ROWS_PER_SPLIT", 1)
    monkeypatch.setattr(threads, "MIN_WORK_PER_THREAD_S", 1e-12)
    info = tokenizer_info("llama3")
    steps = 12
    rows = dev_instances("llama3", 5, steps)
    schemas, tokens_of = [schema for schema, _ in rows], [tokens for _, tokens in rows]
    expected = _reference_fills(schemas, tokens_of, info)
    compiler = pm.GrammarCompiler(info, cache_limit_bytes=-1 if limit < 0 else 2 * limit)
    grammars = [compiler.compile_json_schema(schema, property_order="any", strict_mode=False) for schema in schemas]
    order = list(range(len(rows))) * 2
    matchers = [pm.GrammarMatcher(grammars[k]) for k in order]
    bitmask = _bitmask(len(matchers), info)
    for step in range(steps):
        pm.batch_fill_next_token_bitmask(matchers, bitmask, max_threads=2)
        for row, k in enumerate(order):
            assert np.array_equal(bitmask[row], expected[k][step]), (step, k)
            assert matchers[row].accept_token(tokens_of[k][step])
    stats = compiler.cache_stats()
    assert stats["computed"] > 0 and stats["hits"] > 0
    if limit > 0:
        assert stats["evicted"] > 0 and stats["bytes"] <= limit
    else:
        assert stats["evicted"] == 0 and stats["entries"] == stats["computed"]


def test_fills_put_their_masks_in_the_shared_cache_themselves(monkeypatch):
    """A row that stores masks inside the fill also puts them in the shared cache there (holding
    its grammar's lock, the cache's taken in the kernel): the Python sharer inserts fewer than
    half of the masks computed (it makes the cache's first table), yet the cache holds them all;
    grammars of the same schemas compiled again then compute nothing, find them there, and both
    passes fill the bits of each schema compiled apart and filled alone."""
    from pushmask.masks import first_reach, state_masks

    inserted_in_python = []
    python_share = state_masks.share_first_visits

    def counting_share(*args):
        inserted_in_python.append(python_share(*args))
        return inserted_in_python[-1]

    monkeypatch.setattr(state_masks, "share_first_visits", counting_share)
    monkeypatch.setattr(first_reach, "MAX_STATES", 0)  # (a time budget: compiles would differ)
    info = tokenizer_info("llama3")
    steps = 8
    rows = dev_instances("llama3", 4, steps)
    schemas, tokens_of = [schema for schema, _ in rows], [tokens for _, tokens in rows]
    expected = _reference_fills(schemas, tokens_of, info)
    compiler = pm.GrammarCompiler(info)
    passes = []
    for _ in range(2):
        compiler.compiled_cache.clear()  # new grammars; the shared mask cache stays
        grammars = [compiler.compile_json_schema(s, property_order="any", strict_mode=False) for s in schemas]
        matchers = [pm.GrammarMatcher(g) for g in grammars]
        bitmask = _bitmask(len(matchers), info)
        fills = []
        for step in range(steps):
            pm.batch_fill_next_token_bitmask(matchers, bitmask, max_threads=2)
            fills.append(bitmask.copy())
            for row, matcher in enumerate(matchers):
                assert matcher.accept_token(tokens_of[row][step])
        passes.append((fills, compiler.cache_stats()))
    (first_fills, first), (second_fills, second) = passes
    assert first["entries"] == first["computed"] > 0
    assert sum(inserted_in_python) < first["computed"] // 2
    assert second["computed"] == first["computed"] and second["hits"] > first["hits"]
    for fills in (first_fills, second_fills):
        for step, bitmask in enumerate(fills):
            for row in range(len(rows)):
                assert np.array_equal(bitmask[row], expected[row][step]), (step, row)


def test_a_row_whose_grammar_is_busy_waits_for_it_in_python():
    """While another thread holds a grammar's lock, a batch fill's rows of that grammar cannot
    store their masks inside the kernel: they come back to Python, wait for the lock, and are
    filled exactly once it is free."""
    info = tokenizer_info("llama3")
    rows = dev_instances("llama3", 2, 3)
    schemas, tokens_of = [schema for schema, _ in rows], [tokens for _, tokens in rows]
    expected = _reference_fills(schemas, tokens_of, info)
    compiler = pm.GrammarCompiler(info)
    grammars = [compiler.compile_json_schema(schema, property_order="any", strict_mode=False) for schema in schemas]
    matchers = [pm.GrammarMatcher(g) for g in grammars]
    bitmask = _bitmask(len(matchers), info)
    waited = 0
    for step in range(3):
        held = threading.Event()

        def hold(grammar=grammars[0]):
            with grammar.mask_lock:
                held.set()
                time.sleep(0.2)

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait()
        needs = len(grammars[0].lacking_masks(matchers[0]._state.kernel_s)) > 0
        pm.batch_fill_next_token_bitmask(matchers, bitmask, max_threads=2)
        if needs:  # its row stored masks: only after the holder let go
            assert not grammars[0].mask_lock.locked()
            waited += 1
        holder.join()
        for row in range(len(rows)):
            assert np.array_equal(bitmask[row], expected[row][step]), (step, row)
            assert matchers[row].accept_token(tokens_of[row][step])
    assert waited > 0  # some step met new states of the busy grammar
