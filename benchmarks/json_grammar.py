"""JSON grammar benchmark: compile time, first-mask time and per-token mask time over a real JSON
document, for pushmask next to XGrammar and llguidance when they are installed (pushmask[bench]).

    python benchmarks/json_grammar.py [--tokenizer ../shared/tokenizers/llama3] [--repeat 3]

Each engine gets the same tokenizer and the same token sequence (the document's tokenization
without special tokens); only the full-mask computation is timed per token.  pushmask's one-time
numba start-up (loading the on-disk JIT cache) is reported separately as "runtime warm-up".
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
JSON_GBNF = REPO / "tests" / "grammars" / "json.gbnf"
DATA = REPO.parent / "shared" / "data" / "maskbench-dev"


def real_document() -> str:
    """The longest valid instance among the Kubernetes schemas of maskbench-dev, pretty-printed."""
    best = None
    for path in sorted(DATA.glob("Kubernetes*.json")):
        for test in json.loads(path.read_text()).get("tests", []):
            if test["valid"]:
                text = json.dumps(test["data"], indent=2, ensure_ascii=False)
                if best is None or len(text) > len(best):
                    best = text
    if best is None:
        raise SystemExit(f"no document found under {DATA}")
    return best


def percentile_ms(times: list[float], q: float) -> float:
    return float(np.percentile(np.array(times) * 1e3, q))


def run_pushmask(tokenizer, ids: list[int]) -> dict:
    import pushmask as pm
    from pushmask.grammar.ir import Grammar, lit

    t = time.perf_counter()
    info = pm.TokenizerInfo.from_huggingface(tokenizer)
    setup = time.perf_counter() - t
    # Load the numba kernels (from the on-disk JIT cache) on a throwaway compiler.
    t = time.perf_counter()
    warm = pm.GrammarMatcher(pm.GrammarCompiler(info).compile_ir(Grammar({"root": lit("x")})))
    warm.fill_next_token_bitmask(pm.allocate_token_bitmask(1, info.vocab_size))
    warm.accept_string("x")
    runtime_warmup = time.perf_counter() - t
    compiler = pm.GrammarCompiler(info)
    t = time.perf_counter()
    compiled = compiler.compile_grammar(JSON_GBNF.read_text())
    compile_s = time.perf_counter() - t
    result = {
        "engine": "pushmask",
        "tokenizer_setup_s": setup,
        "runtime_warmup_s": runtime_warmup,
        "compile_s": compile_s,
    }
    passes = [
        timed_pass("pushmask", pm.GrammarMatcher(compiled), pm.allocate_token_bitmask(1, info.vocab_size), ids)
        for _ in range(2)
    ]
    return result | summarize(*passes)


def run_xgrammar(tokenizer, ids: list[int]) -> dict:
    import xgrammar as xgr

    t = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(tokenizer)
    setup = time.perf_counter() - t
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    t = time.perf_counter()
    compiled = compiler.compile_grammar(JSON_GBNF.read_text())
    compile_s = time.perf_counter() - t

    passes = [
        timed_pass("xgrammar", xgr.GrammarMatcher(compiled), xgr.allocate_token_bitmask(1, info.vocab_size), ids)
        for _ in range(2)
    ]
    return {"engine": "xgrammar", "tokenizer_setup_s": setup, "compile_s": compile_s} | summarize(*passes)


def run_llguidance(tokenizer, ids: list[int]) -> dict:
    import llguidance as llg
    import llguidance.hf
    import llguidance.numpy as lnp

    t = time.perf_counter()
    lltok = llguidance.hf.from_tokenizer(tokenizer)
    setup = time.perf_counter() - t
    t = time.perf_counter()
    grammar = llg.LLMatcher.grammar_from_json_schema({})  # any JSON value, like json.gbnf
    matcher = llg.LLMatcher(lltok, grammar, log_level=0)
    compile_s = time.perf_counter() - t

    def one_pass(matcher) -> list[float]:
        bitmask = lnp.allocate_token_bitmask(1, lltok.vocab_size)
        times = []
        for token in ids:
            t0 = time.perf_counter()
            lnp.fill_next_token_bitmask(matcher, bitmask, 0)
            times.append(time.perf_counter() - t0)
            if not matcher.consume_token(token):
                raise SystemExit(f"llguidance rejected token {token}: {matcher.get_error()}")
        return times

    first = one_pass(matcher)
    again = llg.LLMatcher(lltok, grammar, log_level=0)
    return {"engine": "llguidance", "tokenizer_setup_s": setup, "compile_s": compile_s} | summarize(
        first, one_pass(again)
    )


def timed_pass(engine: str, matcher, bitmask, ids: list[int]) -> list[float]:
    """Fill the full mask before every token (timed), then accept the token (XGrammar-style API)."""
    times = []
    for token in ids:
        t0 = time.perf_counter()
        matcher.fill_next_token_bitmask(bitmask)
        times.append(time.perf_counter() - t0)
        if not matcher.accept_token(token):
            raise SystemExit(f"{engine} rejected token {token}")
    return times


def summarize(first_pass: list[float], second_pass: list[float]) -> dict:
    return {
        "first_mask_ms": first_pass[0] * 1e3,
        "p50_ms": percentile_ms(first_pass, 50),
        "p99_ms": percentile_ms(first_pass, 99),
        "max_ms": max(first_pass) * 1e3,
        "warm_p50_ms": percentile_ms(second_pass, 50),
        "warm_p99_ms": percentile_ms(second_pass, 99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", default=str(REPO.parent / "shared" / "tokenizers" / "llama3"))
    parser.add_argument("--engines", default="pushmask,xgrammar,llguidance")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    document = real_document()
    ids = tokenizer.encode(document, add_special_tokens=False)
    print(f"# JSON grammar benchmark: {len(document)} chars, {len(ids)} tokens, tokenizer {Path(args.tokenizer).name}")
    print(f"# {platform.processor() or platform.machine()}, python {platform.python_version()}, single thread")
    runners = {"pushmask": run_pushmask, "xgrammar": run_xgrammar, "llguidance": run_llguidance}
    header = "| engine | compile (ms) | first mask (ms) | mask p50 (ms) | mask p99 (ms) | max (ms) | 2nd pass p50 | 2nd pass p99 |"
    print(header)
    print("|" + "---|" * 8)
    for name in args.engines.split(","):
        try:
            r = runners[name](tokenizer, ids)
        except ImportError as exc:
            print(f"| {name} | not installed ({exc.name}) |")
            continue
        print(
            f"| {name} | {r['compile_s'] * 1e3:.1f} | {r['first_mask_ms']:.2f} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} "
            f"| {r['max_ms']:.2f} | {r['warm_p50_ms']:.3f} | {r['warm_p99_ms']:.3f} |"
        )
        if "runtime_warmup_s" in r:
            print(
                f"#   pushmask runtime warm-up (numba cache load, once per process): {r['runtime_warmup_s'] * 1e3:.0f} ms"
            )


if __name__ == "__main__":
    main()
