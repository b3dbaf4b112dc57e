"""Run a real vLLM engine (CPU, tiny random-weight Llama) with structured outputs and print the
results as one JSON line.  Started by test_vllm_engine.py in a fresh interpreter so vLLM loads its
general plugins (pushmask's entry point) under the environment the test chose.

usage: python engine_run.py MODEL_DIR SPEC_JSON
SPEC_JSON: {"requests": [{"json"|"regex"|"choice"|"grammar"|"structural_tag": ...,
                           "sampling": {SamplingParams overrides}}], "seed": int, "max_tokens": int,
            "disable_any_whitespace": bool, "reasoning_parser": str, "prompt_suffix": str,
            "speculative": {vLLM speculative_config} (optional), "prompts": [str] (optional)}
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    model_dir, spec = sys.argv[1], json.loads(sys.argv[2])
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    extra = {"speculative_config": spec["speculative"]} if spec.get("speculative") else {}
    drafts = _count_planned_drafts() if spec.get("speculative") else None
    llm = LLM(
        model=model_dir,
        load_format="dummy",
        enforce_eager=True,
        max_model_len=256,
        max_num_seqs=4,
        dtype="float32",
        **({"reasoning_parser": spec["reasoning_parser"]} if spec.get("reasoning_parser") else {}),
        seed=spec.get("seed", 0),
        structured_outputs_config={
            "backend": "xgrammar",
            "disable_any_whitespace": spec.get("disable_any_whitespace", False),
        },
        **extra,
    )
    params = [
        SamplingParams(
            **{
                "max_tokens": spec.get("max_tokens", 160),
                "temperature": 1.0,
                "seed": spec.get("seed", 0) + i,
                "structured_outputs": StructuredOutputsParams(**{k: v for k, v in request.items() if k != "sampling"}),
                **request.get("sampling", {}),
            }
        )
        for i, request in enumerate(spec["requests"])
    ]
    prompts = spec.get("prompts") or [f"Answer {i}:" + spec.get("prompt_suffix", "") for i in range(len(params))]
    outputs = llm.generate(prompts, params)
    manager = llm.llm_engine.engine_core.engine_core.scheduler.structured_output_manager
    backend = manager.backend
    result = {
        "backend": f"{type(backend).__module__}.{type(backend).__qualname__}",
        "outputs": [
            {
                "text": o.outputs[0].text,
                "finish_reason": o.outputs[0].finish_reason,
                "token_ids": list(o.outputs[0].token_ids),
            }
            for o in outputs
        ],
    }
    if drafts is not None:
        result["drafts"] = drafts
    print("ENGINE_RESULT " + json.dumps(result), flush=True)


def _count_planned_drafts() -> dict:
    """Count the draft tokens pushmask planned masks for in one call (the engine runs in this
    process: VLLM_ENABLE_V1_MULTIPROCESSING=0), and the planned rows vLLM's walk then used."""
    counts = {"calls": 0, "tokens": 0, "rows_used": 0}
    try:
        import pushmask.integrations.vllm as pmv
        import pushmask.integrations.vllm_drafts as drafts
    except ImportError:
        return counts
    plan = drafts.plan_drafts

    def counting_plan(*args):
        planned = plan(*args)
        counts["calls"] += bool(planned)
        counts["tokens"] += sum(len(g.drafts.tokens) for g in planned)
        return planned

    copy_row = pmv._copy_row

    def counting_copy(*args):
        counts["rows_used"] += 1
        copy_row(*args)

    drafts.plan_drafts = counting_plan
    pmv._copy_row = counting_copy
    return counts


if __name__ == "__main__":
    main()
