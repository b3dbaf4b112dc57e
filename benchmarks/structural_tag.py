"""Tool calling with structural tags: compile time and per-token mask time on the Llama-3
tokenizer, for a hermes-style request with N tools (what vLLM sends for tool_choice="auto" with
strict tools), over a text with free text and two calls.

usage: python benchmarks/structural_tag.py [--tools 2 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import pushmask as pm

SHARED = Path(__file__).resolve().parents[2] / "shared"


def tools(n: int) -> dict:
    out = {}
    for k in range(n):
        out[f"tool_{k}"] = {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["city", "days"],
        }
    return out


def structural_tag(schemas: dict) -> dict:
    tags = [
        {
            "type": "tag",
            "begin": f'<tool_call>\n{{"name": "{name}", "arguments": ',
            "content": {"type": "json_schema", "json_schema": schema},
            "end": "}\n</tool_call>",
        }
        for name, schema in schemas.items()
    ]
    return {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": tags}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / "llama3"))
    info = pm.TokenizerInfo.from_huggingface(tokenizer)
    bitmask = pm.allocate_token_bitmask(1, info.vocab_size)
    pm.GrammarCompiler(info).compile_grammar('root ::= "x"')  # numba warm-up
    print(
        "| tools | compile ms (cold cache, median) | first mask ms | mask p50 / p99 / max µs, first pass | "
        "same, second pass | tokens |"
    )
    print("|---|---|---|---|---|---|")
    for n in args.tools:
        schemas = tools(n)

        def call(name: str, a: dict) -> str:
            return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(a)}}}\n</tool_call>'

        text = (
            "Let me look that up for you. "
            + call("tool_0", {"city": "Paris", "days": 3, "unit": "celsius"})
            + " and "
            + call(f"tool_{n - 1}", {"city": "Oslo", "days": 14, "tags": ["a", "b"]})
            + " Done."
        )
        ids = tokenizer.encode(text, add_special_tokens=False)
        compiles, firsts, fills, again = [], [], [], []
        for _ in range(args.repeat):
            compiler = pm.GrammarCompiler(info, cache_enabled=False)
            start = time.perf_counter()
            compiled = compiler.compile_structural_tag(structural_tag(schemas))
            compiles.append(time.perf_counter() - start)
            matcher = pm.GrammarMatcher(compiled)
            for i, token in enumerate(ids + [info.stop_token_ids[0]]):
                start = time.perf_counter()
                matcher.fill_next_token_bitmask(bitmask)
                elapsed = time.perf_counter() - start
                (firsts if i == 0 else fills).append(elapsed)
                assert matcher.accept_token(token)
            matcher = pm.GrammarMatcher(compiled)  # the grammar now holds every mask this text visits
            for token in ids + [info.stop_token_ids[0]]:
                start = time.perf_counter()
                matcher.fill_next_token_bitmask(bitmask)
                again.append(time.perf_counter() - start)
                assert matcher.accept_token(token)
        print(
            f"| {n} | {1000 * statistics.median(compiles):.1f} | {1000 * statistics.median(firsts):.2f} | "
            f"{_spread(fills)} | {_spread(again)} | {len(ids)} |"
        )


def _spread(times: list[float]) -> str:
    times = sorted(times)
    return (
        f"{1e6 * times[len(times) // 2]:.1f} / {1e6 * times[int(0.99 * (len(times) - 1))]:.0f} / {1e6 * times[-1]:.0f}"
    )


if __name__ == "__main__":
    main()
