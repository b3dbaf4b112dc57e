"""Batch step time: 64 sequences, each step = accept one token per row + fill the [64, V/32]
bitmask, sequentially and with batch_fill_next_token_bitmask (threads; the fill kernel releases
the GIL).

    python benchmarks/batch.py [--batch 64] [--tokenizer ../shared/tokenizers/llama3]

Rows follow different valid instances of a MaskBench schema (so their parse states differ),
with masks already computed (a first untimed pass), which is the steady state of a server.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

import pushmask as pm

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "examples" / "person.json"


def documents(schema: dict, n: int) -> list[str]:
    """n different valid instances of examples/person.json."""
    out = []
    for i in range(n):
        doc = {"name": f"Cat number {i}", "age": i % 20, "email": f"cat{i}@example.org",
               "hobbies": ["naps", "mice"][: i % 3], "pet": ["cat", "dog", "fish", "none"][i % 4]}
        out.append(json.dumps(doc, indent=(i % 3) or None))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--tokenizer", default=str(REPO.parent / "shared" / "tokenizers" / "llama3"))
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    info = pm.TokenizerInfo.from_huggingface(tokenizer)
    compiler = pm.GrammarCompiler(info)
    schema = json.loads(SCHEMA.read_text())
    compiled = compiler.compile_json_schema(schema)
    token_rows = [tokenizer.encode(d, add_special_tokens=False) for d in documents(schema, args.batch)]
    steps = min(len(r) for r in token_rows)
    bitmask = pm.allocate_token_bitmask(args.batch, info.vocab_size)

    def run(batched: bool) -> list[float]:
        matchers = [pm.GrammarMatcher(compiled) for _ in range(args.batch)]
        times = []
        for step in range(steps):
            t0 = time.perf_counter()
            if batched:
                pm.batch_fill_next_token_bitmask(matchers, bitmask, num_threads=args.threads)
            else:
                for row, matcher in enumerate(matchers):
                    matcher.fill_next_token_bitmask(bitmask, row)
            for row, matcher in enumerate(matchers):
                if not matcher.accept_token(token_rows[row][step]):
                    raise SystemExit(f"row {row} rejected its token at step {step}")
            times.append(time.perf_counter() - t0)
        return times

    run(False)  # computes every visited state's mask once
    for name, batched in (("sequential", False), (f"batch_fill, {args.threads} threads", True)):
        times = np.array(run(batched)) * 1e3
        print(f"{name:>24}: per step (fill {args.batch} rows + accept {args.batch} tokens) "
              f"p50 {np.median(times):.2f} ms, p99 {np.percentile(times, 99):.2f} ms, over {steps} steps")


if __name__ == "__main__":
    main()
