"""Masks precomputed at compile for the states a grammar's first tokens reach
(masks/first_reach.py, CompiledGrammar.ensure_first_masks): the states found are exactly the
kernel states after each token the start allows (a Python advance over every such token is the
oracle), the fills along a valid instance equal those of the same grammar compiled without the
precompute bit for bit, and the budget bounds the states and the walk."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from support import dev_instances, tokenizer_info  # noqa: E402

import pushmask as pm  # noqa: E402
from pushmask.automata.kernels import ROOT  # noqa: E402
from pushmask.automata.stack import Workspace  # noqa: E402
from pushmask.masks import first_reach  # noqa: E402
from pushmask.masks.walk import MASK_FIELDS  # noqa: E402

# 52 alternatives, each first letter leading to its own state (the two digits after it differ)
MANY_FIRST_STATES = "|".join(
    f"{c}{i:02d}" for i, c in enumerate("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
)


def _stored(compiled) -> set[int]:
    return set(np.flatnonzero(compiled.mask_index[::MASK_FIELDS] >= 0).tolist())


def _start_stacks(compiled) -> np.ndarray:
    runner = compiled._runner()
    pda = compiled.pda
    closure_s, closure_p, _, _ = runner.close(
        np.array([pda.rule_start[pda.root_rule]], dtype=np.int64), np.array([ROOT], dtype=np.int64)
    )
    return np.concatenate([closure_s, closure_p])


def _reached_by_advancing_each_token(compiled) -> set[int]:
    """The oracle: the kernel states after each token the start's fill allows, one Python
    advance per token."""
    matcher = pm.GrammarMatcher(compiled)
    bitmask = np.zeros((1, (matcher.vocab_size + 31) // 32), dtype=np.int32)
    matcher.fill_next_token_bitmask(bitmask, 0)
    allowed = np.flatnonzero(np.unpackbits(bitmask[0].view(np.uint8), bitorder="little"))
    vocab = compiled.tokenizer_info.decoded_vocab
    states: set[int] = set()
    for token in allowed.tolist():
        if token in matcher.stop_token_ids:
            continue
        after = matcher._runner.advance(matcher._state.stacks, np.frombuffer(vocab[token], dtype=np.uint8))
        if after is not None:
            states.update(after[0][: after[1]].tolist())
    return states


def _compile(info, monkeypatch, max_states: int, kind: str, spec, **options):
    """A grammar from a fresh compiler without a cache (every mask computed for it), compiled
    with first_reach.MAX_STATES = max_states."""
    with monkeypatch.context() as patch:
        patch.setattr(first_reach, "MAX_STATES", max_states)
        compiler = pm.GrammarCompiler(info, cache_enabled=False)
        if kind == "regex":
            return compiler.compile_regex(spec)
        return compiler.compile_json_schema(spec, **options)


@pytest.mark.parametrize("name", ["llama3", "qwen", "mistral"])
def test_the_walk_finds_the_states_each_first_token_reaches(name, monkeypatch):
    """reached_states (one trie walk sharing prefixes) == a Python advance over every allowed
    first token, on dev schemas and on a grammar whose start allows every token."""
    info = tokenizer_info(name)
    specs = [("json_schema", schema) for schema, _ in dev_instances(name, 3, 8, every=97)]
    specs += [("regex", MANY_FIRST_STATES), ("regex", "[0-9 ]{0,6}")]
    monkeypatch.setattr(first_reach, "MAX_STEPS", 1 << 24)  # no step budget: the whole trie
    for kind, spec in specs:
        compiled = _compile(info, monkeypatch, 0, kind, spec)
        seen = np.zeros(compiled.num_states, dtype=np.uint8)
        monkeypatch.setattr(first_reach, "MAX_STATES", 10_000)
        found = first_reach.reached_states(compiled._runner(), compiled.compiler.trie, _start_stacks(compiled), seen)
        assert len(set(found.tolist())) == len(found)
        assert set(found.tolist()) == _reached_by_advancing_each_token(compiled), (name, spec)
        assert set(np.flatnonzero(seen).tolist()) == set(found.tolist())
        # again with a workspace too small for the walk: each growth resumes with what was found
        runner = compiled._runner()
        runner.ws = Workspace(runner.limits.max_stack_tops, compiled.compiler.trie.max_token_length, buffer_size=2)
        seen[:] = 0
        again = first_reach.reached_states(runner, compiled.compiler.trie, _start_stacks(compiled), seen)
        assert sorted(again.tolist()) == sorted(found.tolist()), (name, spec)


@pytest.mark.parametrize("name", ["llama3", "smollm2"])
def test_precomputed_masks_equal_masks_computed_on_demand(name, monkeypatch):
    """Each dev schema compiled twice, with the precompute and without it (each grammar's masks
    computed apart, no shared cache): the first has the masks of the states after the first
    tokens at once, each equal to the one the second computes when asked, and the fills along a
    valid instance are equal bit for bit and allow the instance's tokens."""
    info = tokenizer_info(name)
    steps = 12
    rows = dev_instances(name, 4, steps, every=97)
    assert len(rows) == 4
    monkeypatch.setattr(first_reach, "MAX_SECONDS", 60.0)  # every state found, however busy the machine
    options = {"property_order": "any", "strict_mode": False}
    for schema, tokens in rows:
        eager = _compile(info, monkeypatch, first_reach.MAX_STATES, "json_schema", schema, **options)
        lazy = _compile(info, monkeypatch, 0, "json_schema", schema, **options)
        extra = _stored(eager) - _stored(lazy)
        assert extra, "the first tokens reach states beyond the start's"
        assert extra <= _reached_by_advancing_each_token(lazy)
        for state in sorted(extra):
            got, want = eager.state_mask(state), lazy.state_mask(state)
            assert got.kind == want.kind and got.num_accepted == want.num_accepted
            for a, b in zip(got.parts, want.parts):
                assert np.array_equal(a, b), (name, state)
        matchers = [pm.GrammarMatcher(eager), pm.GrammarMatcher(lazy)]
        bitmask = np.zeros((2, (info.vocab_size + 31) // 32), dtype=np.int32)
        for step, token in enumerate(tokens):
            for row, matcher in enumerate(matchers):
                matcher.fill_next_token_bitmask(bitmask, row)
            assert np.array_equal(bitmask[0], bitmask[1]), (name, step)
            assert (bitmask[0, token >> 5] >> (token & 31)) & 1, (name, step)
            assert all(matcher.accept_token(token) for matcher in matchers)


def test_the_budget_bounds_the_states_the_time_and_the_steps(monkeypatch):
    """A grammar whose first tokens reach 52 states or more: the compile computes exactly the cap's
    number beyond the start's (each one of the states reached); with no time left after the
    first chunk, that chunk only; a step budget stops the walk after at most one token past it."""
    info = tokenizer_info("llama3")
    reference = _compile(info, monkeypatch, 0, "regex", MANY_FIRST_STATES)
    start = _stored(reference)
    reachable = _reached_by_advancing_each_token(reference) - start
    assert len(reachable) >= 52
    for cap, seconds, computed in (
        (1, 60.0, 1),
        (5, 60.0, 5),
        (first_reach.MAX_STATES, 60.0, first_reach.MAX_STATES),
        (first_reach.MAX_STATES, 0.0, first_reach.FIRST_CHUNK),
    ):
        monkeypatch.setattr(first_reach, "MAX_SECONDS", seconds)
        compiled = _compile(info, monkeypatch, cap, "regex", MANY_FIRST_STATES)
        extra = _stored(compiled) - start
        assert len(extra) == computed and extra <= reachable, (cap, seconds)
    trie = reference.compiler.trie
    for max_steps in (1, 10, 50):
        seen = np.zeros(reference.num_states, dtype=np.uint8)
        counts = np.zeros(2, dtype=np.int64)
        runner = reference._runner()
        found = np.empty(1000, dtype=np.int64)
        status = first_reach.run_first_reach(
            runner.pda.blob,
            runner.pool.blob,
            runner.ws.blob,
            _start_stacks(reference),
            trie.blob,
            trie.token_ids,
            runner.limits.max_stack_tops,
            max_steps,
            seen,
            found,
            counts,
        )
        assert status == 0
        assert max_steps <= counts[first_reach.FR_STEPS] < max_steps + trie.max_token_length
        assert set(found[: counts[first_reach.FR_FOUND]].tolist()) <= reachable | start
