"""The one thread policy (core/threads.py): its default, and every public entry's
`max_threads` reaching the batch fill, checked by the pool threads a step asks for; the rows stay
equal to single-row fills."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from support import dev_instances, tokenizer_info  # noqa: E402

import pushmask as pm  # noqa: E402
from pushmask.core import threads  # noqa: E402

STEPS = 4


@pytest.fixture
def pool_requests(monkeypatch):
    """The worker counts batch steps ask the pool for (a step on N threads asks for N - 1), with
    the work thresholds at zero so every step uses all the threads it may."""
    requests: list[int] = []
    real_pool = threads._pool

    def recording(workers):
        requests.append(workers)
        return real_pool(workers)

    monkeypatch.setattr(threads, "_pool", recording)
    monkeypatch.setattr(threads, "MIN_ROWS_PER_SPLIT", 1)
    monkeypatch.setattr(threads, "MIN_WORK_PER_THREAD_S", 1e-12)
    monkeypatch.setattr(threads, "MIN_STATES_PER_SPLIT", 0)
    return requests


def _rows():
    return dev_instances("llama3", 4, STEPS)


_REFERENCE: dict[str, pm.GrammarCompiler] = {}


def _reference(info) -> pm.GrammarCompiler:
    """The twins' compiler, apart from the batch's (its masks computed on its own), kept between
    tests so each schema compiles once for the twins."""
    if "llama3" not in _REFERENCE:
        _REFERENCE["llama3"] = pm.GrammarCompiler(info)
    return _REFERENCE["llama3"]


def _walk(fill, matchers, rows, info) -> None:
    """`fill(matchers, bitmask)` for each step of the rows' forced tokens; each row must equal a
    twin matcher's single-row fill (twins of a compiler of their own)."""
    twins = [pm.GrammarMatcher(_reference(info).compile_json_schema(s, strict_mode=False)) for s, _ in rows]
    bitmask = np.zeros((len(matchers), (info.vocab_size + 31) // 32), dtype=np.int32)
    for step in range(STEPS):
        fill(matchers, bitmask)
        expected = np.zeros_like(bitmask)
        for row, twin in enumerate(twins):
            twin.fill_next_token_bitmask(expected, row)
        assert (bitmask == expected).all(), step
        for matcher, twin, (_, tokens) in zip(matchers, twins, rows):
            assert matcher.accept_token(tokens[step]) and twin.accept_token(tokens[step])


def _matchers(info, max_threads, rows):
    compiler = pm.GrammarCompiler(info, max_threads=max_threads, cache_enabled=False)  # first visits each step
    return [pm.GrammarMatcher(compiler.compile_json_schema(s, strict_mode=False)) for s, _ in rows]


@pytest.mark.parametrize("max_threads", [1, 2, 3])
def test_the_compilers_max_threads_is_the_batch_fills(pool_requests, max_threads):
    """A batch fill without max_threads uses its matchers' compiler's: one thread never touches
    the pool; N threads ask it for N - 1 workers, never more."""
    info, rows = tokenizer_info("llama3"), _rows()
    _walk(pm.batch_fill_next_token_bitmask, _matchers(info, max_threads, rows), rows, info)
    assert set(pool_requests) == (set() if max_threads == 1 else {max_threads - 1})


@pytest.mark.parametrize("max_threads", [1, 2])
def test_the_calls_max_threads_wins(pool_requests, max_threads):
    """batch_fill_next_token_bitmask(max_threads=) and BatchGrammarMatcher(max_threads=) override
    the compiler's setting (3 here)."""
    info, rows = tokenizer_info("llama3"), _rows()
    batch = pm.BatchGrammarMatcher(max_threads=max_threads)
    _walk(batch.batch_fill_next_token_bitmask, _matchers(info, 3, rows), rows, info)
    _walk(
        lambda ms, bm: pm.batch_fill_next_token_bitmask(ms, bm, max_threads=max_threads),
        _matchers(info, 3, rows),
        rows,
        info,
    )
    assert set(pool_requests) == (set() if max_threads == 1 else {max_threads - 1})


def test_num_threads_is_a_deprecated_alias(pool_requests):
    """The old keyword num_threads still sets the threads, with a DeprecationWarning."""
    info, rows = tokenizer_info("llama3"), _rows()

    def fill(matchers, bitmask):
        with pytest.warns(DeprecationWarning, match="num_threads is deprecated, pass max_threads"):
            pm.batch_fill_next_token_bitmask(matchers, bitmask, num_threads=2)

    _walk(fill, _matchers(info, 1, rows), rows, info)
    assert set(pool_requests) == {1}


@pytest.mark.parametrize("max_threads", [1, 2])
def test_the_transformers_processor_passes_max_threads(pool_requests, max_threads):
    """GrammarLogitsProcessor(max_threads=) reaches its step's batch fill (the compiler says 3)."""
    torch = pytest.importorskip("torch")
    from pushmask.integrations.transformers import GrammarLogitsProcessor

    info, rows = tokenizer_info("llama3"), _rows()
    compiler = pm.GrammarCompiler(info, max_threads=3, cache_enabled=False)
    grammars = [compiler.compile_json_schema(s, strict_mode=False) for s, _ in rows]
    processor = GrammarLogitsProcessor(grammars, max_threads=max_threads)
    scores = processor(torch.zeros((len(rows), 1), dtype=torch.long), torch.zeros((len(rows), info.vocab_size)))
    twins = [pm.GrammarMatcher(g) for g in grammars]
    for row, twin in enumerate(twins):
        allowed = torch.zeros(info.vocab_size, dtype=torch.bool)
        allowed[_allowed(twin, info)] = True
        assert torch.equal(scores[row] == 0, allowed), row
    assert set(pool_requests) == (set() if max_threads == 1 else {max_threads - 1})


def _allowed(matcher, info) -> np.ndarray:
    bitmask = np.zeros((1, (info.vocab_size + 31) // 32), dtype=np.int32)
    matcher.fill_next_token_bitmask(bitmask)
    return np.flatnonzero(np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")[: info.vocab_size])


def test_the_default_and_bad_settings(monkeypatch):
    """ "auto" is PUSHMASK_MAX_THREADS if set, else half the cores within [1, 8]; a bad value is
    an error that names the setting."""
    import os

    monkeypatch.delenv("PUSHMASK_MAX_THREADS", raising=False)
    assert threads.default_max_threads() == max(1, min((os.cpu_count() or 1) // 2, 8))
    assert threads.resolve_max_threads("auto", "x") == threads.resolve_max_threads(None, "x")
    monkeypatch.setenv("PUSHMASK_MAX_THREADS", "5")
    assert pm.GrammarCompiler(tokenizer_info("llama3")).max_threads == 5
    assert pm.BatchGrammarMatcher().max_threads == 5
    monkeypatch.setenv("PUSHMASK_MAX_THREADS", "0")
    with pytest.raises(ValueError, match="PUSHMASK_MAX_THREADS"):
        threads.default_max_threads()
    with pytest.raises(ValueError, match="max_threads"):
        pm.GrammarCompiler(tokenizer_info("llama3"), max_threads=0)
    with pytest.raises(pm.ArgumentTypeError, match="max_threads"):
        pm.batch_fill_next_token_bitmask([], np.zeros((1, 1), dtype=np.int32), max_threads="many")
    assert [threads.threads_for_work(4, s * threads.MIN_WORK_PER_THREAD_S) for s in (0.0, 1.2, 2.4, 99)] == [1, 1, 2, 4]
    assert [threads.threads_for_states(4, n) for n in (1, threads.MIN_STATES_PER_SPLIT)] == [1, 4]
