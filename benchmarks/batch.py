"""Batch step time: B rows of DIFFERENT MaskBench schemas; each step accepts one token per row and
fills the [B, V/32] bitmask, sequentially and with batch_fill_next_token_bitmask (threads; the
fill kernel releases the GIL).

    python benchmarks/batch.py [--batch 64 256] [--steps 48] [--tokenizer llama3]

Each row follows a valid test instance of its own schema (compiled with property_order="any" and
strict_mode off, as the corpus engine does), so rows share no parse states.  Two passes: the first meets every
state for the first time (masks computed on the way, as a new batch of requests would), the
second runs with those masks known (the steady state).  Per-step time should grow no faster than
linearly with the batch (the Pre^3 concern); the per-row column shows it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import numpy as np

import pushmask as pm
from pushmask.jsonschemabench.corpus import load_corpus
from pushmask.jsonschemabench.runner import load_tokenizer, resolve_tokenizer_path

REPO = Path(__file__).resolve().parent.parent


def rows(compiler: pm.GrammarCompiler, tokenizer, n: int, steps: int, seed: int) -> list[tuple]:
    """n (compiled schema, token ids) pairs from distinct dev schemas whose first valid instance
    has at least `steps` tokens."""
    items = load_corpus([str(REPO.parent / "shared" / "data" / "maskbench-dev")])
    random.Random(seed).shuffle(items)
    out = []
    for item in items:
        valid = [t["data"] for t in item.tests if t["valid"]]
        if not valid:
            continue
        tokens = tokenizer.encode(json.dumps(valid[0], ensure_ascii=False), add_special_tokens=False)
        if len(tokens) < steps:
            continue
        try:
            compiled = compiler.compile_json_schema(item.schema, property_order="any", strict_mode=False)
        except Exception:  # noqa: BLE001 -- schemas pushmask refuses are simply not used here
            continue
        out.append((compiled, tokens))
        if len(out) == n:
            return out
    raise SystemExit(f"only {len(out)} usable schemas for a batch of {n}")


def run(batch: list[tuple], steps: int, threads: int, batched: bool, vocab_size: int) -> np.ndarray:
    """Per-step times (ms) of one pass over the batch."""
    matchers = [pm.GrammarMatcher(compiled) for compiled, _ in batch]
    bitmask = pm.allocate_token_bitmask(len(batch), vocab_size)
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        if batched:
            pm.batch_fill_next_token_bitmask(matchers, bitmask, max_threads=threads)
        else:
            for row, matcher in enumerate(matchers):
                matcher.fill_next_token_bitmask(bitmask, row)
        for row, (matcher, (_, tokens)) in enumerate(zip(matchers, batch)):
            if not matcher.accept_token(tokens[step]):
                raise SystemExit(f"row {row} rejected its token at step {step}")
        times.append(time.perf_counter() - t0)
    return np.array(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    tokenizer = load_tokenizer(resolve_tokenizer_path(args.tokenizer))
    info = pm.TokenizerInfo.from_huggingface(tokenizer)
    print("| rows | pass | fill | per step p50 | p99 | per row p50 |")
    print("|---|---|---|---|---|---|")
    for size in args.batch:
        compiler = pm.GrammarCompiler(info)  # a fresh mask cache: the first pass meets every state
        batch = rows(compiler, tokenizer, size, args.steps, args.seed)
        for name, batched in (("first", False), ("steady", False), ("steady", True)):
            times = run(batch, args.steps, args.threads, batched, info.vocab_size)
            fill = f"batch_fill, {args.threads} threads" if batched else "sequential"
            print(
                f"| {size} | {name} | {fill} | {np.median(times):.2f} ms | {np.percentile(times, 99):.2f} ms "
                f"| {np.median(times) / size * 1e3:.1f} us |"
            )


if __name__ == "__main__":
    main()
