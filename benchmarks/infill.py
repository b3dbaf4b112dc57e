"""Infilling benchmark: time per completability check (pushmask.can_complete) against template
size and number of gaps, on the JSON grammar (tests/grammars/json.gbnf) and a small C-like grammar
(tests/grammars/c.gbnf); then token gaps, one gap position's mask (pushmask.allowed_tokens) and the
diffusion / fill-in-the-middle loops on a real vocabulary.

    python benchmarks/infill.py [--tokenizer ../shared/tokenizers/smollm2] [--repeat 5] [--out FILE]

Templates come from generated valid documents of about the given size: k spans of 1-3 bytes at
seeded random places become gaps, either unbounded (Gap()) or bounded (Gap.bytes(span + 2)).  The
"no" column times the same templates with a byte no string of the grammar ends with appended
("," for JSON, ";" for C: the answer is then False, so the saturation runs to the end instead of
stopping at the first completion).  Each cell
is the median over --repeat runs; a cell past the default budget (pushmask.masks.infill.MAX_ITEMS
parse items) says so instead of a time.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
GRAMMARS = REPO / "tests" / "grammars"
SIZES = (100, 1_000, 10_000)
GAP_COUNTS = (1, 4, 16, 64)


def json_document(rng: random.Random, size: int) -> str:
    def value(depth: int):
        r = rng.random()
        if depth > 3 or r < 0.3:
            return rng.choice([1, -2.5, "abc", "x y", True, None, 12345, "caf\u00e9"])
        if r < 0.65:
            return {f"k{i}": value(depth + 1) for i in range(rng.randint(1, 4))}
        return [value(depth + 1) for _ in range(rng.randint(1, 4))]

    items: list = []
    while len(json.dumps(items)) < size:
        items.append(value(0))
    return json.dumps(items)


def c_document(rng: random.Random, size: int) -> str:
    """Functions in the dialect of c.gbnf (no whitespace between statements, `( ws expr ws )`)."""
    names = ["x", "y", "total", "i", "n"]

    def expression(depth: int = 0) -> str:
        r = rng.random()
        if depth > 2 or r < 0.4:
            return rng.choice(names + ["1", "42", "7"])
        if r < 0.6:
            return f"{expression(depth + 1)}{rng.choice('+-*/')}{expression(depth + 1)}"
        if r < 0.8:
            return f"( {expression(depth + 1)} )"
        return f"f({expression(depth + 1)}, {expression(depth + 1)})"

    def statements(depth: int) -> str:
        out = []
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            if depth < 2 and r < 0.2:
                out.append(f"while({expression()}<{expression()}){{{statements(depth + 1)}}}")
            elif depth < 2 and r < 0.35:
                out.append(
                    f"if({expression()}=={expression()}){{{statements(depth + 1)}}}else{{{statements(depth + 1)}}}"
                )
            elif r < 0.6:
                out.append(f"int {rng.choice(names)} = {expression()};")
            elif r < 0.85:
                out.append(f"{rng.choice(names)} = {expression()};")
            else:
                out.append(f"return {expression()};")
        return "".join(out)

    text = ""
    k = 0
    while len(text) < size:
        text += f"int f{k}(int x){{{statements(0)}}}"
        k += 1
    return text


def template(rng: random.Random, text: str, gaps: int, bounded: bool):
    import pushmask as pm

    positions = sorted(rng.sample(range(1, len(text) - 4), gaps))
    segments, kinds, last = [], [], 0
    for p in positions:
        if p < last:  # overlapping spans merge into the previous gap
            continue
        span = rng.randint(1, 3)
        segments.append(text[last:p])
        kinds.append(pm.Gap.bytes(span + 2) if bounded else pm.Gap())
        last = p + span
    segments.append(text[last:])
    return segments, kinds


def median_ms(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, out


def check_table(pm, compiled, make_doc, bad_end: str, repeat: int) -> list[str]:
    rows = [
        "| template bytes | gaps | unbounded: yes | unbounded: no | bounded: yes | bounded: no |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for size in SIZES:
        rng = random.Random(size)
        text = make_doc(rng, size)
        assert pm.can_complete(compiled, [text]), "generated document is not in the grammar"
        for k in GAP_COUNTS:
            if 8 * k > len(text):
                continue
            cells = []
            for bounded in (False, True):
                segments, gaps = template(random.Random(size * 100 + k), text, k, bounded)
                bad = segments[:-1] + [segments[-1] + bad_end]
                for expected, segs in ((True, segments), (False, bad)):
                    try:
                        ms, got = median_ms(lambda: pm.can_complete(compiled, segs, gaps), repeat)
                    except pm.LimitExceededError:
                        cells.append(f"over {pm.masks.infill.MAX_ITEMS:,} items")
                        continue
                    assert got == expected, (size, k, bounded)
                    cells.append(f"{ms:.2f} ms")
            rows.append(f"| {len(text):,} | {len(gaps)} | " + " | ".join(cells) + " |")
    return rows


def token_gap_rows(pm, compiled, repeat: int) -> list[str]:
    text = json_document(random.Random(7), 1_000)
    rows = ["| template | check | time |", "|---|---|---:|"]
    segments, _ = template(random.Random(3), text, 4, False)
    cases = [
        ('`[{"k0": "ab` <= 2 tokens `", "k1": 1}]`', ['[{"k0": "ab', '", "k1": 1}]'], [pm.Gap.tokens(2)]),
        ('`{"k0": 1` <= 2 tokens `"k1": 2}`', ['{"k0": 1', '"k1": 2}'], [pm.Gap.tokens(2)]),
        ("1 KB JSON, 4 gaps of <= 2 tokens", segments, [pm.Gap.tokens(2)] * (len(segments) - 1)),
        ("1 KB JSON, 4 gaps of <= 8 bytes", segments, [pm.Gap.bytes(8)] * (len(segments) - 1)),
    ]
    for label, segments, gaps in cases:
        ms, ok = median_ms(lambda: pm.can_complete(compiled, segments, gaps), repeat)
        rows.append(f"| {label} | can_complete = {ok} | {ms:.1f} ms |")
    masks = [
        ('mask after `{"name": "Bo`, then any bytes', pm.Template(['{"name": "Bo', pm.Gap()]), 1),
        (
            'mask after `{"a": [1, `, then <= 6 bytes, then `], "b": "x"}`',
            pm.Template(['{"a": [1, ', pm.Gap.bytes(6), '], "b": "x"}']),
            1,
        ),
        (
            "mask for the first of <= 2 tokens inside a string",
            pm.Template(['[{"k0": "ab', pm.Gap.tokens(2), '", "k1": 1}]']),
            1,
        ),
    ]
    for label, tpl, position in masks:
        ms, mask = median_ms(lambda: pm.allowed_tokens(compiled, tpl, position), repeat)
        rows.append(f"| {label} | allowed_tokens: {int(mask.sum()):,} tokens | {ms:.1f} ms |")
    return rows


def loop_rows(pm, compiled, tokenizer, repeat: int) -> list[str]:
    info = compiled.tokenizer_info
    target_text = '{"name": "Bob", "age": 7, "tags": ["a", "b"], "ok": true}'
    target = tokenizer.encode(target_text, add_special_tokens=False)
    eos = info.stop_token_ids[0]
    rows = [
        "| loop | setting | decided tokens | time per token | checks | masks | output parses |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for exact_runs in (0, 1, 2):
        length = len(target) + 8
        wanted = target + [eos] * 8

        def model(ids, length=length, wanted=wanted):
            logits = np.random.default_rng(int((ids >= 0).sum())).normal(size=(length, info.vocab_size))
            logits[np.arange(length), wanted] += 8.0
            return logits

        ms, result = median_ms(
            lambda: pm.diffusion_generate(compiled, model, length, exact_runs=exact_runs, tokens_per_step=2), repeat
        )
        rows.append(
            f"| diffusion, {length} positions, 2 per step | exact_runs={exact_runs} | {length} | "
            f"{ms / length:.1f} ms | {result.checks} | {result.masks} | {_parses(result.text)} "
            f"({'target recovered' if result.text == target_text else 'other output'}) |"
        )
    prefix, suffix = '{"name": "Bob", "age": ', ', "ok": true}'
    middle = tokenizer.encode('7, "tags": ["a", "b"]', add_special_tokens=False)

    def fim_model(ids):
        logits = np.random.default_rng(len(ids)).normal(size=info.vocab_size)
        logits[middle[len(ids)] if len(ids) < len(middle) else eos] += 8.0
        return logits

    for exact_runs in (0, 1):
        ms, result = median_ms(
            lambda: pm.fill_in_the_middle(compiled, fim_model, prefix, suffix, max_tokens=32, exact_runs=exact_runs),
            repeat,
        )
        n = len(result.token_ids) + 1
        rows.append(
            f"| fill-in-the-middle, max 32 tokens | exact_runs={exact_runs} | {n} | {ms / n:.1f} ms | "
            f"{result.checks} | {result.masks} | {_parses(result.text)} |"
        )
    return rows


def _parses(text: str) -> str:
    try:
        json.loads(text)
    except ValueError:
        return "no"
    return "yes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", default=str(REPO.parent / "shared" / "tokenizers" / "smollm2"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default=None, help="also write the tables to this markdown file")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    import pushmask as pm

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    compiler = pm.GrammarCompiler(pm.TokenizerInfo.from_huggingface(tokenizer))
    json_grammar = compiler.compile_grammar((GRAMMARS / "json.gbnf").read_text())
    c_grammar = compiler.compile_grammar((GRAMMARS / "c.gbnf").read_text())
    t = time.perf_counter()
    pm.allowed_tokens(json_grammar, pm.Template(["[", pm.Gap.tokens(1)]), 1)  # load the JIT cache
    warmup = time.perf_counter() - t

    lines = [
        f"# Infilling benchmark ({platform.processor() or platform.machine()}, "
        f"tokenizer {Path(args.tokenizer).name}, median of {args.repeat})",
        "",
        f"Runtime warm-up (loading the numba cache, trie automaton): {warmup:.2f} s",
        "",
    ]
    lines += ["## can_complete, JSON grammar (tests/grammars/json.gbnf)", ""]
    lines += check_table(pm, json_grammar, json_document, ",", args.repeat)
    lines += ["", "## can_complete, C-like grammar (tests/grammars/c.gbnf)", ""]
    lines += check_table(pm, c_grammar, c_document, ";", args.repeat)
    lines += ["", "## Token gaps and masks (JSON grammar)", ""]
    lines += token_gap_rows(pm, json_grammar, args.repeat)
    lines += ["", "## Sampling loops (JSON grammar, a toy model that favours one document)", ""]
    lines += loop_rows(pm, json_grammar, tokenizer, max(1, args.repeat // 2))
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)


if __name__ == "__main__":
    main()
