"""Run a real vLLM engine (CPU, tiny random-weight Llama) with structured outputs and print the
results as one JSON line.  Started by test_vllm_engine.py in a fresh interpreter so vLLM loads its
general plugins (pushmask's entry point) under the environment the test chose.

usage: python engine_run.py MODEL_DIR SPEC_JSON
SPEC_JSON: {"requests": [{"json"|"regex"|"choice"|"grammar"|"structural_tag": ...,
                           "sampling": {SamplingParams overrides}}], "seed": int, "max_tokens": int,
            "disable_any_whitespace": bool, "reasoning_parser": str, "prompt_suffix": str}
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    model_dir, spec = sys.argv[1], json.loads(sys.argv[2])
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

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
    )
    params = [
        SamplingParams(**{
            "max_tokens": spec.get("max_tokens", 160),
            "temperature": 1.0,
            "seed": spec.get("seed", 0) + i,
            "structured_outputs": StructuredOutputsParams(**{k: v for k, v in request.items() if k != "sampling"}),
            **request.get("sampling", {}),
        })
        for i, request in enumerate(spec["requests"])
    ]
    prompts = [f"Answer {i}:" + spec.get("prompt_suffix", "") for i in range(len(params))]
    outputs = llm.generate(prompts, params)
    manager = llm.llm_engine.engine_core.engine_core.scheduler.structured_output_manager
    backend = manager.backend
    result = {
        "backend": f"{type(backend).__module__}.{type(backend).__qualname__}",
        "outputs": [
            {"text": o.outputs[0].text, "finish_reason": o.outputs[0].finish_reason,
             "token_ids": list(o.outputs[0].token_ids)}
            for o in outputs
        ],
    }
    print("ENGINE_RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
