"""Fills from several threads at once (issue 41): matchers sharing compiled grammars with value
checks and token budgets, single-row and batch fills, first visits, compiles and clear_cache() at
the same time, every row compared bit for bit with a single-threaded reference; and a fill that
raises leaves its row all zero, never the wider mask it had written before the checks ran."""

from __future__ import annotations

import random
import sys
import threading
import time

import numpy as np
import pytest

import pushmask as pm
from pushmask.masks import budget, value_checks
from pushmask.masks.bitmask import allocate_numpy_bitmask

VOCAB = [
    "[",
    "]",
    ",",
    '"',
    "a",
    "b",
    "c",
    "ab",
    " ",
    '"a"',
    '"b"',
    '"c"',
    'a"',
    'b"',
    '",',
    '"]',
    "{",
    "}",
    ":",
    "0",
    "1",
    "2",
    '"a":',
    '"b":',
    '"c":',
    "}]",
    ",{",
    "</s>",
]
STOP = len(VOCAB) - 1
WORDS = (len(VOCAB) + 31) // 32

UNIQUE_STRINGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
# a oneOf whose branches overlap (an object with both a and b matches both): a value check
ONE_OF_REQUIRED = {
    "type": "object",
    "oneOf": [{"required": ["a"], "dependentSchemas": {"a": {"required": ["c"]}}}, {"required": ["b"]}],
}
ONE_OF_IN_ITEMS = {
    "type": "array",
    "items": {"oneOf": [{"type": "array", "uniqueItems": True}, {"type": "array", "maxItems": 2}]},
}
PLAIN_ARRAY = {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 4}
# (schema, max_tokens) of the walks
CONFIGS = [
    (UNIQUE_STRINGS, None),
    (UNIQUE_STRINGS, 9),
    (ONE_OF_REQUIRED, None),
    (ONE_OF_IN_ITEMS, None),
    (PLAIN_ARRAY, 7),
]
WALKS_PER_CONFIG = 3
# walked as well, by every config of its schema: many items, so the states between items (and
# their value-check memo keys) repeat within a walk and across threads
MANY_ITEMS = [
    "[",
    '"a"',
    ",",
    " ",
    '"b"',
    ",",
    '"c"',
    ",",
    '"',
    "ab",
    '"',
    ",",
    " ",
    '"',
    "b",
    "a",
    '",',
    '"',
    "c",
    "a",
    '"',
    "]",
]
STEPS = 14
SWITCH_INTERVAL_S = 1e-6
STRESS_SECONDS = 2.0


def _compile(compiler, schema):
    """Members in any order and extra members allowed, so the oneOf branches truly overlap."""
    return compiler.compile_json_schema(schema, property_order="any", additional_properties_default=True)


def _reference_walks(compiler) -> list[tuple[int, list[int], np.ndarray]]:
    """Mask-guided random walks, and MANY_ITEMS where its schema fits, on one thread: (config
    index, tokens, the row filled before each token)."""
    rng = random.Random(41)
    walks = []
    for c, (schema, max_tokens) in enumerate(CONFIGS):
        compiled = _compile(compiler, schema)
        scripted = [[VOCAB.index(piece) for piece in MANY_ITEMS]] if schema is UNIQUE_STRINGS and not max_tokens else []
        for script in [None] * WALKS_PER_CONFIG + scripted:
            matcher = pm.GrammarMatcher(compiled, max_tokens=max_tokens)
            tokens, rows = [], []
            bitmask = allocate_numpy_bitmask(1, len(VOCAB))
            while not matcher.is_terminated() and len(tokens) < (STEPS if script is None else len(script)):
                matcher.fill_next_token_bitmask(bitmask)
                rows.append(bitmask[0].copy())
                allowed = np.flatnonzero(np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")[: len(VOCAB)])
                assert len(allowed), "an empty mask in the reference walk"
                token = int(rng.choice(allowed)) if script is None else script[len(tokens)]
                assert matcher.accept_token(token)
                tokens.append(token)
            walks.append((c, tokens, np.array(rows)))
    return walks


class _YieldingKey(tuple):
    """A scan structure (Scan.structure) that gives the GIL away whenever it is hashed, as a slow
    key would: a memo look-up and what follows it (an LRU's move_to_end) then run with other
    threads between them, so a shared memo without a lock loses entries under its reader."""

    __slots__ = ()

    def __hash__(self) -> int:
        time.sleep(0)
        return tuple.__hash__(self)


class _Stress:
    """The threads' shared record: the first errors and row mismatches, and when to stop."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.rows_checked = 0

    def running(self) -> bool:
        return time.monotonic() < self.deadline and not self.failures

    def fail(self, what: str) -> None:
        with self.lock:
            self.failures.append(what)

    def checked(self, n: int) -> None:
        with self.lock:
            self.rows_checked += n


def _single_row_thread(stress, grammars, walks, seed):
    """Walks one at a time, one matcher each, a single-row fill before every token: the
    MANY_ITEMS walk (the issue's repro: threads walking the same text) and a random one in turn."""
    rng = random.Random(seed)
    bitmask = allocate_numpy_bitmask(2, len(VOCAB))
    while stress.running():
        for c, tokens, rows in (walks[0], rng.choice(walks)):
            matcher = pm.GrammarMatcher(grammars[c], max_tokens=CONFIGS[c][1])
            for step, token in enumerate(tokens):
                if not stress.running():
                    return
                bitmask[:] = -1
                matcher.fill_next_token_bitmask(bitmask, 1)
                if not np.array_equal(bitmask[1, :WORDS], rows[step]):
                    stress.fail(f"single-row fill differs: config {c}, step {step}")
                    return
                assert matcher.accept_token(token)
            stress.checked(len(tokens))


def _batch_thread(stress, grammars, walks, seed):
    """Batch steps of the MANY_ITEMS walk and 1 to 3 random ones in lock step (a finished walk
    leaves the batch)."""
    rng = random.Random(seed)
    bitmask = allocate_numpy_bitmask(4, len(VOCAB))
    while stress.running():
        chosen = [walks[0], *rng.sample(walks[1:], rng.randint(1, 3))]
        live = [
            (pm.GrammarMatcher(grammars[c], max_tokens=CONFIGS[c][1]), c, tokens, rows) for c, tokens, rows in chosen
        ]
        step = 0
        while live and stress.running():
            bitmask[:] = -1
            pm.batch_fill_next_token_bitmask([m for m, *_ in live], bitmask, max_threads=2)
            for row, (matcher, c, tokens, rows) in enumerate(live):
                if not np.array_equal(bitmask[row, :WORDS], rows[step]):
                    stress.fail(f"batch fill differs: config {c}, step {step}")
                    return
                assert matcher.accept_token(tokens[step])
            stress.checked(len(live))
            step += 1
            live = [entry for entry in live if step < len(entry[2])]


def _compile_thread(stress, compiler):
    """Compiles and clear_cache() meanwhile."""
    n = 0
    while stress.running():
        _compile(compiler, {"type": "array", "items": {"type": "string", "maxLength": n % 5 + 1}, "uniqueItems": True})
        compiler.clear_cache()
        n += 1


def _guarded(stress, work, *args):
    def run():
        try:
            work(stress, *args)
        except BaseException as error:  # noqa: BLE001 -- reported by the test
            stress.fail(f"{threading.current_thread().name}: {type(error).__name__}: {error!r}")

    return run


@pytest.mark.filterwarnings("ignore:pushmask. widened")
def test_concurrent_fills_match_single_threaded_reference(monkeypatch):
    """Eight threads (four single-row, three batch fills of 2 to 4 rows on two threads each, one
    compiling and clearing the compiler's caches) fill the rows of shared grammars' matchers, with
    the value-check and budget memos made tiny so that entries are evicted under other threads'
    feet, and a tiny GIL switch interval; every row equals the single-threaded reference."""
    monkeypatch.setattr(value_checks, "EFFECT_MEMO_ENTRIES", 2)
    monkeypatch.setattr(budget, "BOUNDS_MEMO_ENTRIES", 1)
    structure = value_checks.Scan.structure
    monkeypatch.setattr(value_checks.Scan, "structure", lambda scan: _YieldingKey(structure(scan)))
    compiler = pm.GrammarCompiler(pm.TokenizerInfo.from_vocab(VOCAB, stop_token_ids=[STOP]))
    walks = _reference_walks(compiler)
    compiler.clear_cache()  # fresh grammars: their first visits happen under the threads
    grammars = [_compile(compiler, schema) for schema, _ in CONFIGS]
    stress = _Stress(STRESS_SECONDS)
    walks.sort(key=lambda walk: len(walk[1]) != len(MANY_ITEMS))  # the MANY_ITEMS walk first
    work = [_guarded(stress, _single_row_thread, grammars, walks, seed) for seed in range(4)]
    work += [_guarded(stress, _batch_thread, grammars, walks, 10 + seed) for seed in range(3)]
    work.append(_guarded(stress, _compile_thread, compiler))
    threads = [threading.Thread(target=w, name=f"stress-{i}") for i, w in enumerate(work)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    assert not any(thread.is_alive() for thread in threads), "a stress thread hangs"
    assert not stress.failures, stress.failures[:3]
    assert stress.rows_checked > 200, stress.rows_checked


def _raise_forced(*_args, **_kwargs):
    raise RuntimeError("forced failure mid-fill")


@pytest.mark.filterwarnings("ignore:pushmask. widened")
@pytest.mark.parametrize("stage", ["value_checks", "budget"])
@pytest.mark.parametrize("layout", ["numpy", "torch", "strided"])
def test_a_fill_that_raises_leaves_its_rows_all_zero(monkeypatch, stage, layout):
    """A fill that raises after the grammar's mask was written (here the value checks' or the
    budget's step, forced to raise) clears the rows it was given before the exception reaches
    the caller, single-row and batch, C-ordered numpy or torch (the batch kernel) or strided
    (row by row); rows it was not given keep what they held."""
    compiler = pm.GrammarCompiler(pm.TokenizerInfo.from_vocab(VOCAB, stop_token_ids=[STOP]))
    failing = pm.GrammarMatcher(_compile(compiler, UNIQUE_STRINGS), max_tokens=8 if stage == "budget" else None)
    assert failing.accept_string('["a",')
    plain = pm.GrammarMatcher(_compile(compiler, PLAIN_ARRAY))
    assert failing.get_next_token_mask().any()  # the grammar's mask alone is not empty
    if stage == "value_checks":
        monkeypatch.setattr(value_checks.MaskChecks, "restrict", _raise_forced)
    else:
        monkeypatch.setattr(budget.CheckedBudget, "restrict", _raise_forced)

    def bitmask():
        rows = allocate_numpy_bitmask(3, len(VOCAB))  # every bit set
        if layout == "torch":
            torch = pytest.importorskip("torch")
            return torch.from_numpy(rows)
        return np.asfortranarray(rows) if layout == "strided" else rows

    single = bitmask()
    with pytest.raises(RuntimeError, match="forced"):
        failing.fill_next_token_bitmask(single, 1)
    assert not np.asarray(single[1]).any()
    assert (np.asarray(single[0]) == -1).all() and (np.asarray(single[2]) == -1).all()

    batch = bitmask()
    with pytest.raises(RuntimeError, match="forced"):
        pm.batch_fill_next_token_bitmask([plain, failing], batch, indices=[2, 0], max_threads=2)
    assert not np.asarray(batch[0]).any() and not np.asarray(batch[2]).any()
    assert (np.asarray(batch[1]) == -1).all()


def test_healing_mask_that_raises_is_all_zero_and_leaves_the_matcher(monkeypatch):
    """fill_healing_mask runs each candidate's rest through the matcher and rolls it back: a
    check that raises there leaves the words all zero and the matcher where it was."""
    from pushmask.masks.healing import fill_healing_mask

    compiler = pm.GrammarCompiler(pm.TokenizerInfo.from_vocab(VOCAB, stop_token_ids=[STOP]))
    matcher = pm.GrammarMatcher(_compile(compiler, PLAIN_ARRAY), max_tokens=7)
    assert matcher.accept_string("[")
    monkeypatch.setattr(pm.GrammarMatcher, "min_tokens_to_finish", _raise_forced)
    words = np.full(WORDS, -1, dtype=np.int32)
    with pytest.raises(RuntimeError, match="forced"):
        fill_healing_mask(matcher, b'"', words)  # '"a"' and the others continue past the quote
    assert not words.any()
    assert matcher.num_accepted_tokens == 1 and matcher.accept_string('"a"]') and matcher.can_end()
