"""Compile time and time to the first mask of `multipleOf` schemas: integer and number, k from 7
to past Limits.max_rule_states (refused), with and without a far minimum (123456789).

Each compile is cold: pushmask.clear_caches(tables=False) and a fresh GrammarCompiler (llama3 tokenizer), so
no leaf, rule automaton or mask comes from an earlier compile; the median of `--repeats` runs.

    python benchmarks/multiple_of.py [--repeats 3] [--tokenizer /work/shared/tokenizers/llama3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import pushmask as pm

K_VALUES = (7, 99, 997, 9973, 99991, 100000, 100003, 10**6, 123456789)
FAR_MINIMUM = 123456789


def timed_compile(info: pm.TokenizerInfo, schema: dict) -> tuple[float, float | None, str]:
    """(compile seconds, seconds to the first mask or None when refused, outcome)."""
    pm.clear_caches(tables=False)
    compiler = pm.GrammarCompiler(info)
    begin = time.perf_counter()
    try:
        compiled = compiler.compile_json_schema(schema)
    except pm.PushmaskError as exc:
        return time.perf_counter() - begin, None, f"{type(exc).__name__}: {str(exc)[:80]}"
    compiled_at = time.perf_counter()
    bitmask = pm.allocate_token_bitmask(1, info.vocab_size)
    pm.GrammarMatcher(compiled).fill_next_token_bitmask(bitmask)
    return compiled_at - begin, time.perf_counter() - compiled_at, "ok"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokenizer", default="/work/shared/tokenizers/llama3")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    info = pm.TokenizerInfo.from_huggingface(AutoTokenizer.from_pretrained(args.tokenizer))
    timed_compile(info, {"type": "integer", "multipleOf": 3})  # compile the kernels first
    for kind in ("integer", "number"):
        for k in K_VALUES:
            for minimum in (None, FAR_MINIMUM):
                schema = {"type": kind, "multipleOf": k, **({} if minimum is None else {"minimum": minimum})}
                runs = [timed_compile(info, schema) for _ in range(args.repeats)]
                compile_s = statistics.median(run[0] for run in runs)
                firsts = [run[1] for run in runs if run[1] is not None]
                first = f"{statistics.median(firsts):.3f}s" if firsts else "-"
                print(
                    f"{kind:8s} k={k:<10d} minimum={minimum!s:10s} compile {compile_s:.3f}s"
                    f"  first mask {first:>7s}  {runs[0][2]}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
