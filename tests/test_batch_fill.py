"""The batch fill (batch_fill_next_token_bitmask: one nogil kernel call per thread, Python only for
first visits and extras) writes exactly what each matcher's own fill_next_token_bitmask writes."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from support import dev_instances, hf_tokenizer, tokenizer_info  # noqa: E402

import pushmask as pm  # noqa: E402

TOKENIZERS = ["llama3", "qwen", "mistral", "smollm2"]


def _single_fills(matchers) -> np.ndarray:
    out = np.zeros((len(matchers), (matchers[0].vocab_size + 31) // 32), dtype=np.int32)
    for row, matcher in enumerate(matchers):
        matcher.fill_next_token_bitmask(out, row)
    return out


def _split_always(monkeypatch) -> None:
    """Make the batch path use every thread it is given, however little the work (its
    thresholds would keep a small test's steps on one thread)."""
    from pushmask.core import threads

    monkeypatch.setattr(threads, "MIN_ROWS_PER_SPLIT", 1)
    monkeypatch.setattr(threads, "MIN_WORK_PER_THREAD_S", 1e-12)
    monkeypatch.setattr(threads, "MIN_STATES_PER_SPLIT", 0)


def _fill_pool(grammar) -> None:
    """Leave one free word in the grammar's mask pool (under its lock, as the engine replaces a
    pool: batch fills then store through the new one), so that its next masks make it grow."""
    with grammar.mask_lock:
        grammar.mask_pool = grammar.mask_pool[: grammar._pool_used + 1].copy()


def _poison_growth(monkeypatch) -> None:
    """Free mask-pool space is poisoned on each growth: a mask left behind reads as garbage."""
    from pushmask.masks.compiler import CompiledGrammar

    grow = CompiledGrammar._grow_pool

    def poisoned_grow(store, need):
        grow(store, need)
        store.mask_pool[store._pool_used :] = -7

    monkeypatch.setattr(CompiledGrammar, "_grow_pool", poisoned_grow)


@pytest.mark.parametrize("name", TOKENIZERS)
def test_batch_equals_single_fills_on_dev_schemas(name, monkeypatch):
    """Rows of dev schemas, two rows per schema (the same states), teacher-forced on a valid
    instance: with a fresh compiler the batch path meets every state first (first visits), then
    runs again with new matchers (known masks, empty memos); with 1, 2 and 3 threads (every step
    split), torch and numpy bitmasks, without and with the shared cache (masks of one schema's
    states found for another's), with mask pools that must grow part way through a batch's first
    visits: every row equals the single-row fill of the same schema compiled apart and allows
    the instance's token."""
    info = tokenizer_info(name)
    steps = 24
    rows = dev_instances(name, 6, steps)
    assert len(rows) == 6
    _poison_growth(monkeypatch)
    # The single-row fills read grammars of their own compiler: their masks are computed apart.
    reference = pm.GrammarCompiler(info, cache_enabled=False)
    references = [reference.compile_json_schema(schema, property_order="any", strict_mode=False) for schema, _ in rows]
    for threads, torch_bitmask, cached in ((1, False, False), (2, False, True), (3, True, True)):
        if threads > 1:
            _split_always(monkeypatch)
        compiler = pm.GrammarCompiler(info, cache_enabled=cached)  # nothing known: first visits in the batch
        grammars = [compiler.compile_json_schema(schema, property_order="any", strict_mode=False) for schema, _ in rows]
        if threads > 1:
            for grammar in grammars:  # pools that must grow in the batch kernel
                _fill_pool(grammar)
        for _ in range(2):
            order = list(range(len(rows))) * 2
            batch = [pm.GrammarMatcher(grammars[k]) for k in order]
            single = [pm.GrammarMatcher(references[k]) for k in order]
            indices = list(reversed(range(len(batch))))
            bitmask = pm.allocate_token_bitmask(len(batch), info.vocab_size)
            if not torch_bitmask:
                bitmask = bitmask.numpy().copy()
            for step in range(steps):
                pm.batch_fill_next_token_bitmask(batch, bitmask, indices=indices, max_threads=threads)
                got = np.asarray(bitmask)[indices]
                expected = _single_fills(single)
                assert (got == expected).all(), (name, threads, step)
                for row, k in enumerate(order):
                    token = rows[k][1][step]
                    assert (got[row, token >> 5] >> (token & 31)) & 1, (name, k, step)
                    assert batch[row].accept_token(token) and single[row].accept_token(token)


def test_batch_first_visits_wait_for_a_grammar_another_thread_holds():
    """A grammar whose store another thread is filling (its lock held) is left out of the batch's
    kernel call and finished after it: the rows still equal their single-row fills."""
    import threading

    info = tokenizer_info("llama3")
    rows = dev_instances("llama3", 3, 4)
    compiler = pm.GrammarCompiler(info, cache_enabled=False)
    reference = pm.GrammarCompiler(info, cache_enabled=False)
    grammars = [compiler.compile_json_schema(schema, property_order="any", strict_mode=False) for schema, _ in rows]
    references = [reference.compile_json_schema(schema, property_order="any", strict_mode=False) for schema, _ in rows]
    matchers = [pm.GrammarMatcher(g) for g in grammars]
    twins = [pm.GrammarMatcher(g) for g in references]
    for matcher, twin, (_, tokens) in zip(matchers, twins, rows):
        assert matcher.accept_tokens(tokens[:3]) and twin.accept_tokens(tokens[:3])  # states not yet visited
    held = grammars[1]._lock
    held.acquire()
    releaser = threading.Timer(0.2, held.release)
    releaser.start()
    bitmask = np.zeros((len(matchers), (info.vocab_size + 31) // 32), dtype=np.int32)
    pm.batch_fill_next_token_bitmask(matchers, bitmask, max_threads=2)
    releaser.join()
    assert (bitmask == _single_fills(twins)).all()


def _mixed_matchers(compiler):
    """Matchers whose fills need Python after the kernel or instead of it: value checks, a token
    budget, token terminals, a terminated matcher, forks; and plain ones."""
    unique = compiler.compile_json_schema({"type": "array", "items": {"type": "string"}, "uniqueItems": True})
    plain = compiler.compile_json_schema(
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
    )
    tagged = compiler.compile_grammar('root ::= [ab ]* <|python_tag|> "{" [ab]* "}"')
    matchers = [
        pm.GrammarMatcher(unique),
        pm.GrammarMatcher(unique, max_tokens=12),
        pm.GrammarMatcher(plain),
        pm.GrammarMatcher(plain, max_tokens=9),
        pm.GrammarMatcher(tagged),
        pm.GrammarMatcher(unique),
    ]
    assert matchers[5].accept_string('["x", "y"]')
    assert matchers[5].accept_token(compiler.tokenizer_info.stop_token_ids[0]) and matchers[5].is_terminated()
    return matchers


@pytest.mark.parametrize("threads", [1, 2])
def test_batch_keeps_value_checks_budgets_and_token_terminals(threads):
    """Random walks (each row takes a random allowed token) of rows with value checks, budgets,
    token terminals and a finished matcher, mixed with plain rows: each step's batch rows equal
    the single-row fills of twin matchers walked the same way."""
    info = tokenizer_info("llama3")
    compiler = pm.GrammarCompiler(info)
    batch, twins = _mixed_matchers(compiler), _mixed_matchers(compiler)
    rng = random.Random(threads)
    bitmask = np.zeros((len(batch), (info.vocab_size + 31) // 32), dtype=np.int32)
    for step in range(30):
        pm.batch_fill_next_token_bitmask(batch, bitmask, max_threads=threads)
        expected = _single_fills(twins)
        assert (bitmask == expected).all(), step
        for row, (matcher, twin) in enumerate(zip(batch, twins)):
            if matcher.is_terminated():
                continue
            allowed = np.flatnonzero(np.unpackbits(bitmask[row].view(np.uint8), bitorder="little")[: info.vocab_size])
            assert len(allowed), (row, step)  # a sound mask never leaves a live row without a token
            token = int(rng.choice(allowed))
            assert matcher.accept_token(token) and twin.accept_token(token)


def test_forks_share_a_workspace_and_still_fill_alike():
    """Forks share one frame pool and workspace, so the batch runs them on one thread; their
    rows still equal their own fills."""
    info = tokenizer_info("llama3")
    compiler = pm.GrammarCompiler(info)
    base = pm.GrammarMatcher(compiler.compile_json_schema({"type": "array", "items": {"type": "number"}}))
    assert base.accept_string("[1, ")
    forks = [base.fork() for _ in range(3)]
    assert forks[1].accept_string("22") and forks[2].accept_string("3]")
    matchers = [base, *forks]
    bitmask = np.zeros((len(matchers), (info.vocab_size + 31) // 32), dtype=np.int32)
    pm.batch_fill_next_token_bitmask(matchers, bitmask, max_threads=4)
    assert (bitmask == _single_fills(matchers)).all()


def test_threads_filling_rows_of_one_grammar_while_its_store_grows():
    """vLLM fills rows one call each from a thread pool: threads fill matchers of the same
    grammars at once (first visits compute masks and grow the mask pool under the others' fills),
    and every row equals the fill of a grammar compiled apart and filled in one thread."""
    import threading

    info = tokenizer_info("llama3")
    rows = dev_instances("llama3", 3, 16)
    compiler = pm.GrammarCompiler(info, cache_enabled=False)
    reference = pm.GrammarCompiler(info, cache_enabled=False)
    grammars = [compiler.compile_json_schema(schema, property_order="any", strict_mode=False) for schema, _ in rows]
    for grammar in grammars:  # a pool that must grow many times
        _fill_pool(grammar)
    references = [reference.compile_json_schema(schema, property_order="any", strict_mode=False) for schema, _ in rows]
    order = [k for k in range(len(rows)) for _ in range(4)]
    matchers = [pm.GrammarMatcher(grammars[k]) for k in order]
    twins = [pm.GrammarMatcher(references[k]) for k in order]
    words = (info.vocab_size + 31) // 32
    bitmask = np.zeros((len(matchers), words), dtype=np.int32)
    threads = 4
    barrier = threading.Barrier(threads)
    errors = []

    def fill(part, step):
        try:
            barrier.wait()
            for row in part:
                matchers[row].fill_next_token_bitmask(bitmask, row)
        except BaseException as error:  # noqa: BLE001 - reported on the main thread
            errors.append(error)

    for step in range(16):
        bitmask[:] = 0
        workers = [threading.Thread(target=fill, args=(range(t, len(matchers), threads), step)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert not errors, errors
        assert (bitmask == _single_fills(twins)).all(), step
        for row, k in enumerate(order):
            token = rows[k][1][step]
            assert matchers[row].accept_token(token) and twins[row].accept_token(token)


def test_masks_stored_in_one_call_survive_the_pool_growing_part_way(monkeypatch):
    """ensure_masks computes many states in one kernel call; when the pool fills part way through,
    the masks that call already stored must move into the grown pool with the rest: every stored
    mask equals the one a grammar compiled apart computes state by state.  Free pool space is
    poisoned on each growth, so a mask left behind reads as garbage, not as chance zeros."""
    from pushmask.masks.compiler import _stored_mask
    from pushmask.masks.walk import MASK_FIELDS

    _poison_growth(monkeypatch)
    info = tokenizer_info("llama3")
    schema = dev_instances("llama3", 1, 8)[0][0]
    grammar = pm.GrammarCompiler(info, cache_enabled=False).compile_json_schema(schema, strict_mode=False)
    reference = pm.GrammarCompiler(info, cache_enabled=False).compile_json_schema(schema, strict_mode=False)
    _fill_pool(grammar)  # full after the first mask
    states = np.arange(grammar.num_states)
    grammar.ensure_masks(states)
    assert (grammar.mask_index[states * MASK_FIELDS] >= 0).all()
    for state in states.tolist():
        got = _stored_mask(grammar.mask_index, grammar.mask_pool, state, 0)
        want = reference.state_mask(state)
        assert got.kind == want.kind, state
        for part, expected in zip(got.parts, want.parts):
            assert np.array_equal(part, expected), state


def _fresh_fill(compiled, tokens) -> np.ndarray:
    """The single-row fill of a new matcher (empty memo) brought to the same point by tokens."""
    matcher = pm.GrammarMatcher(compiled)
    assert matcher.accept_tokens(tokens)
    return _single_fills([matcher])[0]


def test_batch_rows_follow_rollback_fork_and_reset():
    """A matcher whose state moves between batch steps by rollback, fork and reset (not only by
    accept_token) gets the fill of its new point, never one described for the old: each batch
    row equals the single-row fill of a new matcher brought to the same tokens."""
    info = tokenizer_info("llama3")
    compiled = pm.GrammarCompiler(info).compile_json_schema({"type": "array", "items": {"type": "string"}})
    tokens = hf_tokenizer("llama3").encode('["one string", "two strings here", "three"]', add_special_tokens=False)
    walker, other = pm.GrammarMatcher(compiled), pm.GrammarMatcher(compiled)
    bitmask = np.zeros((3, (info.vocab_size + 31) // 32), dtype=np.int32)
    taken: list[int] = []
    for token in tokens:
        matchers = [other, walker]
        pm.batch_fill_next_token_bitmask(matchers, bitmask, indices=[2, 0], max_threads=2)
        assert (bitmask[0] == _fresh_fill(compiled, taken)).all(), taken
        assert walker.accept_token(token)
        taken.append(token)
        if len(taken) % 4 == 0:
            walker.rollback(2)
            del taken[-2:]
            pm.batch_fill_next_token_bitmask([walker, other], bitmask, max_threads=2)
            assert (bitmask[0] == _fresh_fill(compiled, taken)).all(), taken
            assert walker.accept_tokens(tokens[len(taken) : len(taken) + 2])
            taken = list(tokens[: len(taken) + 2])
    fork = walker.fork()
    walker.rollback(3)
    pm.batch_fill_next_token_bitmask([fork, walker, other], bitmask, max_threads=2)
    assert (bitmask[0] == _fresh_fill(compiled, taken)).all()
    assert (bitmask[1] == _fresh_fill(compiled, taken[:-3])).all()
    walker.reset()
    pm.batch_fill_next_token_bitmask([walker, fork], bitmask, max_threads=1)
    assert (bitmask[0] == _fresh_fill(compiled, [])).all()
    assert (bitmask[1] == _fresh_fill(compiled, taken)).all()


@pytest.mark.parametrize("batched", [False, True])
def test_memo_evicts_and_skips_long_keys_alike(batched):
    """The fill memo (batch_fill.fill_memoised) with two entries, so that walks of string-heavy
    text evict entries all the time, and with keys too short for most stack sets (those walk on
    every fill): every fill, batch or single-row, equals a fresh matcher's, and the memo was hit."""
    from pushmask.masks import batch_fill

    info = tokenizer_info("llama3")
    # strings at several depths: the same state with different frames below (different keys),
    # whose walked tokens ('"]]' and the like) differ
    nested = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/$defs/n"}}]}
    compiled = pm.GrammarCompiler(info).compile_json_schema({"$defs": {"n": nested}, "$ref": "#/$defs/n"})
    text = '[["ab", ["cd", "x y"]], "e f", [[["f g"]], "h"], "the end"]'
    tokens = hf_tokenizer("llama3").encode(text, add_special_tokens=False)
    words = (info.vocab_size + 31) // 32
    for key_words in (3, batch_fill.MEMO_KEY_WORDS):
        matcher = pm.GrammarMatcher(compiled)
        matcher._memo = batch_fill.new_memo(words, entries=2, key_words=key_words)
        used = 0
        bitmask = np.zeros((1, words), dtype=np.int32)
        for n, token in enumerate(tokens):
            before = matcher._memo[2][:, batch_fill.META_USED].max()
            if batched:
                pm.batch_fill_next_token_bitmask([matcher], bitmask)
            else:
                matcher.fill_next_token_bitmask(bitmask, 0)
            used += matcher._memo[2][:, batch_fill.META_USED].max() > before
            assert (bitmask[0] == _fresh_fill(compiled, tokens[:n])).all(), (key_words, n)
            assert matcher.accept_token(token)
        assert used > 2, key_words  # entries stored and hit (each use advances the memo's clock)


@pytest.mark.parametrize("small_workspaces", [False, True])
def test_threads_running_batch_steps_over_shared_grammars_with_first_visits_racing(monkeypatch, small_workspaces):
    """Three threads each run batch steps (on one or two threads, every step split) over matchers
    of the same fresh grammars, so their first visits race for each grammar's store (and, with
    the shared cache, for the same masks), and a kernel call computes several grammars' masks in
    one workspace one after the other; mask pools start full, and with small_workspaces every
    workspace the compiler lends starts with tiny stack buffers, so the batch kernel's rows run
    out of them and their grammars finish them.  Every row equals the single-row fill of a
    grammar compiled apart, at every step."""
    import threading

    from pushmask.masks import compiler as compiler_module

    _split_always(monkeypatch)
    _poison_growth(monkeypatch)
    if small_workspaces:
        workspace = compiler_module.Workspace
        monkeypatch.setattr(compiler_module, "Workspace", lambda tops, length: workspace(tops, length, buffer_size=8))
    info = tokenizer_info("llama3")
    steps = 12
    rows = dev_instances("llama3", 6, steps)
    reference = pm.GrammarCompiler(info, cache_enabled=False)
    references = [reference.compile_json_schema(schema, property_order="any", strict_mode=False) for schema, _ in rows]
    expected = []  # per schema, per step: the single-row fill along its instance
    for compiled, (_, tokens) in zip(references, rows):
        matcher = pm.GrammarMatcher(compiled)
        fills = []
        for token in tokens:
            fills.append(_single_fills([matcher])[0])
            assert matcher.accept_token(token)
        expected.append(fills)
    compiler = pm.GrammarCompiler(info)
    compiler.clear_cache()
    grammars = [compiler.compile_json_schema(schema, property_order="any", strict_mode=False) for schema, _ in rows]
    for grammar in grammars:  # pools that must grow under the racing first visits
        _fill_pool(grammar)
    n_threads = 3
    barrier = threading.Barrier(n_threads)
    errors: list[str] = []

    def run(seed: int) -> None:
        order = random.Random(seed).sample(range(len(rows)), len(rows)) * 2
        matchers = [pm.GrammarMatcher(grammars[k]) for k in order]
        bitmask = np.zeros((len(matchers), (info.vocab_size + 31) // 32), dtype=np.int32)
        try:
            for step in range(steps):
                barrier.wait()
                pm.batch_fill_next_token_bitmask(matchers, bitmask, max_threads=1 + seed % 2)
                for row, k in enumerate(order):
                    if not np.array_equal(bitmask[row], expected[k][step]):
                        errors.append(f"thread {seed}, step {step}, schema {k}: the batch row differs")
                    assert matchers[row].accept_token(rows[k][1][step])
        except BaseException as error:  # noqa: BLE001 - reported on the main thread
            errors.append(f"thread {seed}: {type(error).__name__}: {error}")
            barrier.abort()

    workers = [threading.Thread(target=run, args=(seed,)) for seed in range(n_threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not any(worker.is_alive() for worker in workers), "a batch thread hangs"
    assert not errors, errors[:3]


def test_a_batch_kernel_call_computes_several_grammars_in_one_workspace():
    """A batch step's first visits of several grammars run in one kernel call per part, in one
    workspace borrowed for the part: its closure memo names one grammar's frames and must not
    carry over to the next.  Every state's mask of six grammars so computed equals the one a
    grammar compiled apart computes."""
    from pushmask.masks.state_masks import ensure_batch_masks

    info = tokenizer_info("llama3")
    schemas = [schema for schema, _ in dev_instances("llama3", 6, 4)]
    compiler = pm.GrammarCompiler(info, cache_enabled=False)
    grammars = [compiler.compile_json_schema(schema, property_order="any", strict_mode=False) for schema in schemas]
    ensure_batch_masks([(g, np.arange(g.num_states, dtype=np.int64)) for g in grammars], 1)  # one part
    for grammar, schema in zip(grammars, schemas):
        alone = pm.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
            schema, property_order="any", strict_mode=False
        )
        for state in range(grammar.num_states):
            got, want = grammar.state_mask(state), alone.state_mask(state)
            assert got.kind == want.kind and all(map(np.array_equal, got.parts, want.parts)), state
