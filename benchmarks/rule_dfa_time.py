"""Compile time over a sample of MaskBench dev schemas: rule-DFA construction alone, and
`GrammarCompiler.compile_json_schema` end to end with every cache cold (token masks, rule DFAs,
string/number leaf automata), as the corpus protocol compiles them (property_order="any").

With --baseline REV, another revision's automata/dfa.py (read with `git show`) runs in the same
process, interleaved schema by schema, so a loaded machine slows both alike.

    python benchmarks/rule_dfa_time.py [--schemas 200] [--baseline 1ff9dc7] [--tokenizer llama3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import pushmask
import pushmask.automata.dfa as current_dfa
from pushmask.automata import pda
from pushmask.core.errors import PushmaskError
from pushmask.core.limits import DEFAULT_LIMITS
from pushmask.grammar.json_schema import json_schema_to_grammar
from pushmask.grammar.passes import normalize
from pushmask.masks import trie

REPO = Path(__file__).resolve().parent.parent


def sample_schemas(corpus: Path, count: int) -> list[tuple[str, object]]:
    """Every len/count-th schema of the sorted corpus (the sample tests/test_rule_dfa.py uses at 60)."""
    files = sorted(corpus.glob("*.json"))
    out = []
    for path in files[:: max(1, len(files) // count)][:count]:
        doc = json.loads(path.read_text())
        out.append((path.name, doc.get("schema", doc) if isinstance(doc, dict) else doc))
    return out


def load_baseline(rev: str):
    """automata/dfa.py as of `rev`, imported as a sibling module of pushmask.automata.dfa."""
    source = subprocess.run(
        ["git", "show", f"{rev}:automata/dfa.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    spec = importlib.util.spec_from_loader("pushmask.automata._baseline_dfa", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "pushmask.automata"
    sys.modules[spec.name] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:automata/dfa.py", "exec"), module.__dict__)
    return module


def use(dfa_module) -> None:
    """Make the compiler build rule DFAs with dfa_module."""
    pda.build_rule_dfa = dfa_module.build_rule_dfa
    trie.build_rule_dfa = dfa_module.build_rule_dfa


def rule_dfa_seconds(dfa_module, grammars, cold_per_schema: bool) -> float:
    dfa_module.clear_dfa_cache()
    start = time.perf_counter()
    for grammar in grammars:
        if cold_per_schema:
            dfa_module.clear_dfa_cache()
        for body in grammar.rules.values():
            dfa_module.build_rule_dfa(body, DEFAULT_LIMITS.max_rule_states)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schemas", type=int, default=200)
    parser.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "data" / "maskbench-dev")
    parser.add_argument("--tokenizer", default="llama3", help="a folder under ../shared/tokenizers")
    parser.add_argument("--baseline", help="a git revision whose automata/dfa.py to compare with")
    args = parser.parse_args()

    implementations = {"current": current_dfa}
    if args.baseline:
        implementations[f"baseline {args.baseline}"] = load_baseline(args.baseline)

    schemas, grammars = [], []
    for name, schema in sample_schemas(args.corpus, args.schemas):
        try:
            grammars.append(normalize(json_schema_to_grammar(schema, property_order="any")))
            schemas.append((name, schema))
        except PushmaskError:
            pass
    print(f"{len(schemas)} of {args.schemas} sampled schemas compile; {sum(len(g.rules) for g in grammars)} rules")

    print("\nrule-DFA construction (build_rule_dfa over every rule), seconds:")
    rule_dfa_seconds(current_dfa, grammars[:2], True)  # numba JIT warm (cache files loaded)
    for label, module in implementations.items():
        once = rule_dfa_seconds(module, grammars, cold_per_schema=False)
        each = rule_dfa_seconds(module, grammars, cold_per_schema=True)
        print(f"  {label:24s} cache cold once: {once:7.2f}   cache cold for every schema: {each:7.2f}")

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(REPO.parent / "shared" / "tokenizers" / args.tokenizer))
    compiler = pushmask.GrammarCompiler(pushmask.TokenizerInfo.from_huggingface(tokenizer))
    times: dict[str, list[float]] = {label: [] for label in implementations}
    failed = 0
    for k, (_, schema) in enumerate([schemas[0]] + schemas):  # the first one warms up
        labels = list(implementations)
        row = {}
        for label in labels if k % 2 else labels[::-1]:
            module = implementations[label]
            use(module)
            compiler.clear_cache()
            module.clear_dfa_cache()
            pushmask.clear_caches(tables=False)  # leaf automata (numbers, patterns, formats)
            start = time.perf_counter()
            try:
                compiler.compile_json_schema(schema, property_order="any")
            except PushmaskError:  # a budget: not comparable
                continue
            row[label] = time.perf_counter() - start
        if k and len(row) == len(labels):
            for label, seconds in row.items():
                times[label].append(seconds)
        failed += k > 0 and len(row) < len(labels)
    use(current_dfa)
    print(
        f"\ncompile_json_schema with cold caches, {len(schemas) - failed} schemas ({failed} stopped by a budget), ms:"
    )
    for label, seconds in times.items():
        ms = np.array(seconds) * 1e3
        p50, p90, p99 = np.percentile(ms, [50, 90, 99])
        print(
            f"  {label:24s} p50 {p50:8.1f}   p90 {p90:8.1f}   p99 {p99:8.1f}   max {ms.max():8.1f}   total {ms.sum() / 1e3:7.2f} s"
        )


if __name__ == "__main__":
    main()
