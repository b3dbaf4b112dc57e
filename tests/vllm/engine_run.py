"""Run a real vLLM engine (CPU, tiny random-weight Llama) with structured outputs and print the
results as one JSON line.  Started by test_vllm_engine.py in a fresh interpreter so vLLM loads its
general plugins (pushmask's entry point) under the environment the test chose.

usage: python engine_run.py MODEL_DIR SPEC_JSON
SPEC_JSON: {"requests": [{"json"|"regex"|"choice"|"grammar"|"structural_tag": ...,
                           "sampling": {SamplingParams overrides}}], "seed": int, "max_tokens": int,
            "disable_any_whitespace": bool, "reasoning_parser": str, "prompt_suffix": str,
            "speculative": {vLLM speculative_config} (optional), "prompts": [str] (optional),
            "count_steps": bool (optional: add the engine steps that ran the model, "steps", and
            the seconds generate took, "seconds")}
With "speculative", each output also says how many steps' drafts the grammar set ("forced_drafts")
and how many draft tokens that gave ("forced_tokens").
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    model_dir, spec = sys.argv[1], json.loads(sys.argv[2])
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    extra = {"speculative_config": spec["speculative"]} if spec.get("speculative") else {}
    drafts = _count_planned_drafts() if spec.get("speculative") else None
    forced = _count_forced_drafts() if spec.get("speculative") else None
    steps = count_steps() if spec.get("count_steps") else None
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
    started = time.perf_counter()
    outputs = llm.generate(prompts, params)
    seconds = time.perf_counter() - started
    manager = llm.llm_engine.engine_core.engine_core.scheduler.structured_output_manager
    backend = manager.backend
    result = {
        "backend": f"{type(backend).__module__}.{type(backend).__qualname__}",
        "outputs": [
            {
                "text": o.outputs[0].text,
                "finish_reason": o.outputs[0].finish_reason,
                "token_ids": list(o.outputs[0].token_ids),
                **(_forced_counts(forced, o.request_id) if forced is not None else {}),
            }
            for o in outputs
        ],
    }
    if drafts is not None:
        result["drafts"] = drafts
    if steps is not None:
        result.update(steps=steps[0], seconds=seconds)
    print("ENGINE_RESULT " + json.dumps(result), flush=True)


def _count_planned_drafts() -> dict:
    """Count the draft tokens pushmask planned masks for in one call (the engine runs in this
    process: VLLM_ENABLE_V1_MULTIPROCESSING=0), and the planned rows vLLM's walk then used."""
    counts = {"calls": 0, "tokens": 0, "rows_used": 0}
    try:
        import pushmask.integrations.vllm_drafts as drafts
        import pushmask.integrations.vllm_grammar as vllm_grammar
    except ImportError:
        return counts
    plan = drafts.plan_drafts

    def counting_plan(*args):
        planned = plan(*args)
        counts["calls"] += bool(planned)
        counts["tokens"] += sum(len(g.drafts.tokens) for g in planned)
        return planned

    copy_row = vllm_grammar._copy_row

    def counting_copy(*args):
        counts["rows_used"] += 1
        copy_row(*args)

    drafts.plan_drafts = counting_plan
    vllm_grammar._copy_row = counting_copy
    return counts


def _count_forced_drafts() -> dict:
    """Per engine request id: [steps whose drafts the grammar set, draft tokens it set]."""
    counts: dict = {}
    try:
        import pushmask.integrations.vllm_grammar_drafts as grammar_drafts
    except ImportError:
        return counts
    draft = grammar_drafts._draft_forced_text

    def counting_draft(scheduler, request_ids):
        before = {r: list(scheduler.requests[r].spec_token_ids) for r in request_ids if r in scheduler.requests}
        draft(scheduler, request_ids)
        for req_id, tokens in before.items():
            after = list(scheduler.requests[req_id].spec_token_ids)
            if after != tokens:
                steps_tokens = counts.setdefault(req_id, [0, 0])
                steps_tokens[0] += 1
                steps_tokens[1] += len(after)

    grammar_drafts._draft_forced_text = counting_draft
    return counts


def _forced_counts(counts: dict, request_id: str) -> dict:
    """The forced-draft counts of one output (engine request ids extend the output's id)."""
    steps, tokens = next((v for k, v in counts.items() if k == request_id or k.startswith(request_id + "-")), (0, 0))
    return {"forced_drafts": steps, "forced_tokens": tokens}


def count_steps() -> list[int]:
    """[scheduler steps that schedule tokens (each one forward pass of the model), request steps
    (a request's part in a step, summed over the requests of each step)]; the engine runs in
    this process: VLLM_ENABLE_V1_MULTIPROCESSING=0."""
    from vllm.v1.core.sched.scheduler import Scheduler

    count = [0, 0]
    schedule = Scheduler.schedule

    def counting_schedule(self, *args, **kwargs):
        output = schedule(self, *args, **kwargs)
        count[0] += output.total_num_scheduled_tokens > 0
        count[1] += len(output.num_scheduled_tokens)
        return output

    Scheduler.schedule = counting_schedule
    return count


if __name__ == "__main__":
    main()
