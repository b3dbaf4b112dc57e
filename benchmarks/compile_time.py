"""Cold compile time of JSON Schemas to grammar IR (`json_schema_to_grammar`), per schema.

    python benchmarks/compile_time.py [--every 28] [--order any] [--closed] [--profile out.prof]

Takes every N-th schema of the MaskBench dev set (sorted file names), clears the leaf and rule-DFA
caches before each one, and prints the total, p50, p99 and max seconds over the schemas that
compile, in wall-clock and process CPU seconds (schemas that raise are counted by error type).  With --profile the whole run
is recorded with cProfile into the given file.  --closed compiles with
additional_properties_default=False (no "any other key" members where the schema does not ask for
them), to see what those members cost.

    python benchmarks/compile_time.py --rows ../shared/bench/rows-dev64.json [--repeat 3] [--llguidance]

With --rows, the whole compile instead (GrammarCompiler.compile_json_schema, property_order "any",
strict_mode off, as benchmarks/serve_batch.py's compile column): the schemas of the rows file
compiled by a fresh compiler after clear_caches(tables=False) (the per-input caches; fixed tables stay, as in a server), --repeat times, in process CPU and wall ms;
then the CPU ms of each stage over the same schemas (metaschema check, the rest of the front
end, IR passes, build_pda with its rule-DFA digests and constructions, the first masks) and the
rule-DFA cache's hits; with --llguidance, llguidance's compile of the same schemas in the same run.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from pushmask import clear_caches
from pushmask.grammar.json_schema import json_schema_to_grammar

DEV = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "maskbench-dev"


def sample(every: int) -> list[Path]:
    """Every `every`-th dev schema file, in sorted order."""
    return sorted(DEV.glob("*.json"))[::every]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=28, help="take every N-th dev schema (default 28: ~205)")
    parser.add_argument("--order", default="any", help="property_order (default: any)")
    parser.add_argument("--closed", action="store_true", help="additionalProperties false by default")
    parser.add_argument("--profile", default=None, help="write a cProfile of the run to this file")
    parser.add_argument("--slowest", type=int, default=5, help="list the N slowest schemas")
    parser.add_argument(
        "--rows", default=None, help="a rows file (serve_batch's): time the whole compile of its schemas"
    )
    parser.add_argument("--repeat", type=int, default=3, help="with --rows: compiles of all the schemas (default 3)")
    parser.add_argument("--llguidance", action="store_true", help="with --rows: llguidance's compile too")
    args = parser.parse_args(argv)
    if args.rows:
        return rows_main(args)

    files = sample(args.every)
    schemas = [(f.name, json.loads(f.read_text())["schema"]) for f in files]
    json_schema_to_grammar({"type": "string"})  # import-time work out of the timings
    times: list[tuple[float, str]] = []
    errors: Counter = Counter()
    profiler = cProfile.Profile() if args.profile else None
    for name, schema in schemas:
        clear_caches(tables=False)
        start, start_cpu = time.perf_counter(), time.process_time()
        if profiler:
            profiler.enable()
        try:
            json_schema_to_grammar(schema, property_order=args.order, additional_properties_default=not args.closed)
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors[type(exc).__name__] += 1
            continue
        finally:
            if profiler:
                profiler.disable()
        times.append((time.perf_counter() - start, time.process_time() - start_cpu, name))
    if profiler:
        profiler.dump_stats(args.profile)
    print(f"{len(schemas)} schemas, {len(times)} compiled, errors: {dict(errors) or 'none'}")
    for column, label in ((0, "wall"), (1, "cpu ")):
        secs = np.array([t[column] for t in times])
        print(
            f"{label}: total {secs.sum():.2f} s  p50 {np.percentile(secs, 50) * 1e3:.1f} ms  "
            f"p99 {np.percentile(secs, 99) * 1e3:.1f} ms  max {secs.max() * 1e3:.1f} ms"
        )
    for wall, cpu, name in sorted(times, reverse=True)[: args.slowest]:
        print(f"  {wall * 1e3:9.1f} ms wall {cpu * 1e3:9.1f} ms cpu  {name}")
    return 0


def rows_main(args) -> int:
    """The whole compile of a rows file's schemas, its stage split, and llguidance's (see the module docstring)."""
    from transformers import AutoTokenizer

    import pushmask as pm
    from pushmask.automata import dfa
    from pushmask.automata.pda import build_pda
    from pushmask.core.errors import CompileClock
    from pushmask.core.gc_pause import paused_gc
    from pushmask.grammar.frontends import to_grammar
    from pushmask.grammar.json_options import JsonOptions
    from pushmask.grammar.json_schema.documents import check_metaschema
    from pushmask.grammar.passes import normalize
    from pushmask.masks.compiler import CompiledGrammar

    hf = AutoTokenizer.from_pretrained(str(DEV.parent.parent / "tokenizers" / "llama3"))
    schemas = [row["schema"] for row in json.loads(Path(args.rows).read_text())]
    info = pm.TokenizerInfo.from_huggingface(hf)
    keywords = dict(property_order=args.order, strict_mode=False)

    bitmask = pm.allocate_token_bitmask(1, info.vocab_size)

    def compile_all(first_mask: bool = False) -> tuple[float, float, list[float]]:
        """(CPU ms, wall ms) of compiling every schema, and each schema's CPU ms; with
        `first_mask`, each schema's CPU ms to its first mask (compile, matcher, one fill)."""
        clear_caches(tables=False)
        compiler = pm.GrammarCompiler(info)  # its vocabulary trie is built here, untimed
        each = []
        start, start_cpu = time.perf_counter(), time.process_time()
        for schema in schemas:
            begin = time.process_time()
            compiled = compiler.compile_json_schema(schema, **keywords)
            if first_mask:
                pm.GrammarMatcher(compiled).fill_next_token_bitmask(bitmask, 0)
            each.append((time.process_time() - begin) * 1e3)
        return (time.process_time() - start_cpu) * 1e3, (time.perf_counter() - start) * 1e3, each

    def compiles(schema) -> bool:
        try:
            pm.GrammarCompiler(info).compile_json_schema(schema, **keywords)
            return True
        except pm.PushmaskError:
            return False

    kept = [schema for schema in schemas if compiles(schema)]  # also loads the numba kernels
    if len(kept) < len(schemas):
        print(f"left out: {len(schemas) - len(kept)} schemas that raise with these options")
    schemas = kept
    runs = [compile_all() for _ in range(args.repeat)]
    cpu_ms, wall_ms = [round(run[0]) for run in runs], [round(run[1]) for run in runs]
    print(f"pushmask: {len(schemas)} schemas, process CPU ms {cpu_ms}, wall ms {wall_ms}")
    ttfm = np.array(compile_all(first_mask=True)[2])
    print(
        f"  time to first mask per schema (compile, matcher, one fill), CPU: p50 {np.percentile(ttfm, 50):.1f} ms, "
        f"p90 {np.percentile(ttfm, 90):.1f} ms, max {ttfm.max():.1f} ms"
    )

    stage: Counter = Counter()
    timed = {"_structure_digest": "pda: rule digests", "_construct_rule_dfa": "pda: rule DFA constructions"}
    originals = {name: getattr(dfa, name) for name in timed}

    def timer(name):
        def call(*a, **k):
            start = time.process_time()
            try:
                return originals[name](*a, **k)
            finally:
                stage[timed[name]] += time.process_time() - start

        return call

    options = JsonOptions.of(None, keywords, "compile_time")
    clear_caches(tables=False)
    compiler = pm.GrammarCompiler(info)

    def stage_times(schema) -> None:
        t0 = time.process_time()
        check_metaschema(schema)
        t1 = time.process_time()
        grammar = to_grammar("json_schema", schema, clock=CompileClock(100), json_options=options)
        t2 = time.process_time()
        grammar = normalize(grammar, CompileClock(100))
        t3 = time.process_time()
        pda = build_pda(grammar, compiler.limits, CompileClock(100))
        t4 = time.process_time()
        CompiledGrammar(compiler, grammar, pda).ensure_first_masks()
        t5 = time.process_time()
        stage["metaschema"] += t1 - t0
        stage["front end (less a memoised metaschema check)"] += t2 - t1
        stage["IR passes"] += t3 - t2
        stage["build_pda"] += t4 - t3
        stage["first masks"] += t5 - t4

    hits, misses = dfa._dfa_cache.hits, dfa._dfa_cache.misses
    for name in timed:
        setattr(dfa, name, timer(name))
    try:
        for schema in schemas:
            with paused_gc():  # as in a compile; the collector runs between schemas, untimed
                stage_times(schema)
    finally:
        for name, original in originals.items():
            setattr(dfa, name, original)
    print("stages, process CPU ms (the pda: lines are part of build_pda):")
    for name, secs in stage.items():
        print(f"  {name}: {secs * 1e3:.0f}")
    print(f"  rule DFA cache: {dfa._dfa_cache.hits - hits} hits, {dfa._dfa_cache.misses - misses} misses")

    if args.llguidance:
        import llguidance
        import llguidance.hf

        tokenizer = llguidance.hf.from_tokenizer(hf)
        import llguidance.numpy

        texts = [json.dumps({"grammars": [{"json_schema": schema}]}) for schema in schemas]
        llg_mask = llguidance.numpy.allocate_token_bitmask(1, tokenizer.vocab_size)
        for _ in range(args.repeat):
            each = []
            start, start_cpu = time.perf_counter(), time.process_time()
            for text in texts:
                begin = time.process_time()
                matcher = llguidance.LLMatcher(tokenizer, text)
                llguidance.numpy.fill_next_token_bitmask(matcher, llg_mask, 0)
                each.append((time.process_time() - begin) * 1e3)
            cpu, wall = (time.process_time() - start_cpu) * 1e3, (time.perf_counter() - start) * 1e3
            print(
                f"llguidance: {len(texts)} schemas, compile and first mask: process CPU ms {cpu:.0f}, wall ms {wall:.0f}; "
                f"per schema CPU p50 {np.percentile(each, 50):.2f} ms, p90 {np.percentile(each, 90):.2f} ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
