"""What value checks (uniqueItems, overlapping oneOf) cost per mask: each schema's instance is fed
token by token (Llama-3) with a full mask before every token, once with the checks and once on the
same grammar without them (value_checks=False, lenient=True: the unchecked superset).

    .venv/bin/python benchmarks/value_check_cost.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support import grammar_compiler, hf_tokenizer  # noqa: E402

import pushmask as pm  # noqa: E402
from pushmask.grammar.json_schema import json_schema_to_grammar  # noqa: E402

CASES = {
    "unique strings": (
        {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        [f"item number {i} of the list" for i in range(30)],
    ),
    "unique numbers": (
        {"type": "array", "items": {"type": "number"}, "uniqueItems": True},
        [i * 1.5 for i in range(60)],
    ),
    "unique objects": (
        {
            "type": "array",
            "uniqueItems": True,
            "items": {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}},
        },
        [{"id": i, "name": f"n{i}"} for i in range(20)],
    ),
    "oneOf objects": (
        {
            "type": "object",
            "oneOf": [{"required": ["a"], "dependentSchemas": {"a": {"required": ["c"]}}}, {"required": ["b"]}],
        },
        {"b": "some text here", "c": [1, 2, 3], "d": {"x": "nested value"}},
    ),
}


def mask_times(compiled, ids, repeats: int = 3) -> list[float]:
    """Seconds per fill_next_token_bitmask along the token sequence (best of `repeats` runs)."""
    best = None
    for _ in range(repeats):
        matcher = pm.GrammarMatcher(compiled)
        bitmask = pm.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
        times = []
        for t in ids:
            start = time.perf_counter()
            matcher.fill_next_token_bitmask(bitmask)
            times.append(time.perf_counter() - start)
            assert matcher.accept_token(t)
        best = times if best is None else [min(a, b) for a, b in zip(best, times)]
    return best


def main() -> None:
    compiler, tokenizer = grammar_compiler("llama3"), hf_tokenizer("llama3")
    print("| schema | tokens | mask p50 / mean / max, checked (µs) | unchecked superset (µs) |")
    print("|---|---|---|---|")
    for name, (schema, instance) in CASES.items():
        ids = tokenizer.encode(json.dumps(instance), add_special_tokens=False)
        checked = compiler.compile_ir(json_schema_to_grammar(schema, property_order="any"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plain = compiler.compile_ir(
                json_schema_to_grammar(schema, property_order="any", value_checks=False, lenient=True)
            )
        mask_times(plain, ids, 1)  # warm the mask cache for both
        mask_times(checked, ids, 1)
        row = []
        for compiled in (checked, plain):
            us = [t * 1e6 for t in mask_times(compiled, ids)]
            row.append(f"{statistics.median(us):.0f} / {statistics.mean(us):.0f} / {max(us):.0f}")
        print(f"| {name} | {len(ids)} | {row[0]} | {row[1]} |")


if __name__ == "__main__":
    main()
