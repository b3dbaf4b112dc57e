"""A server's batch step on the CPU: B rows of B different schemas, pushmask, XGrammar and
llguidance side by side in one run.

    python benchmarks/serve_batch.py [--rows ../shared/bench/rows-dev64.json] [--batch 64]
        [--threads 2] [--engines pushmask,xgrammar,llguidance] [--out results.json]

Each row is teacher-forced along a valid instance of its schema (the token ids stored in the rows
file, made by ../shared/bench/serve_overhead.py select); every forced token must be allowed by the
engine's mask.  No model: a step is the mask fill of all B rows (timed), then the check and the
accepts (not timed).  Per engine:

- compile: the B schemas compiled by a fresh compiler (caches cleared), all rows, in ms;
- first pass: schemas never seen (fresh compiler, caches cleared, the rows compiled again untimed;
  XGrammar, whose compile precomputes everything and costs seconds, compiles once per run);
- steady: the same compiled grammars again, new matchers;

each filled row by row in one thread ("seq") and through the engine's batch API with 1 and with
--threads threads.  Per-step fill time p50 / p99 / max in ms, and a control that says whether the
machine had free cores for the threads (a pure nogil spin split the same way).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def make_engines(hf, names):
    """name -> engine adaptor with fresh / compile / matcher / alloc / fill(ms, bm, threads) / accept."""
    engines = {}
    if "pushmask" in names:
        import pushmask as pm

        class PushMask:
            recompile = True

            def __init__(self):
                self.info = pm.TokenizerInfo.from_huggingface(hf)
                self.V = self.info.vocab_size

            def fresh(self):
                pm.clear_caches(tables=False)
                self.comp = pm.GrammarCompiler(self.info)

            def compile(self, schema):
                return self.comp.compile_json_schema(schema, property_order="any", strict_mode=False)

            def matcher(self, g):
                return pm.GrammarMatcher(g)

            def alloc(self, b):
                return pm.allocate_token_bitmask(b, self.V)

            def fill(self, ms, bm, threads):
                if threads == 0:
                    for i, m in enumerate(ms):
                        m.fill_next_token_bitmask(bm, i)
                else:
                    pm.batch_fill_next_token_bitmask(ms, bm, max_threads=threads)

            def accept(self, m, t):
                return m.accept_token(t)

        engines["pushmask"] = PushMask()
    if "xgrammar" in names:
        import xgrammar as xgr

        class XGrammar:
            recompile = False  # compile precomputes every mask (seconds per schema set)

            def __init__(self):
                self.info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=len(hf))
                self.V = self.info.vocab_size
                self.batches = {}

            def fresh(self):
                self.comp = xgr.GrammarCompiler(self.info, max_threads=os.cpu_count() or 1, cache_enabled=False)

            def compile(self, schema):
                return self.comp.compile_json_schema(json.dumps(schema), any_whitespace=True, strict_mode=False)

            def matcher(self, g):
                return xgr.GrammarMatcher(g)

            def alloc(self, b):
                return xgr.allocate_token_bitmask(b, self.V)

            def fill(self, ms, bm, threads):
                if threads == 0:
                    for i, m in enumerate(ms):
                        m.fill_next_token_bitmask(bm, i)
                else:
                    if threads not in self.batches:
                        self.batches[threads] = xgr.BatchGrammarMatcher(max_threads=threads)
                    self.batches[threads].batch_fill_next_token_bitmask(ms, bm)

            def accept(self, m, t):
                return m.accept_token(t)

        engines["xgrammar"] = XGrammar()
    if "llguidance" in names:
        import llguidance as llg
        import llguidance.hf
        import llguidance.numpy as lgn

        class LLGuidance:
            recompile = True

            def __init__(self):
                self.tok = llguidance.hf.from_tokenizer(hf)
                self.V = self.tok.vocab_size
                self.executors = {}

            def fresh(self):
                pass  # a matcher built from the schema text shares nothing with earlier ones

            def compile(self, schema):
                m = llg.LLMatcher(self.tok, json.dumps({"grammars": [{"json_schema": schema}]}))
                if m.is_error():
                    raise ValueError(m.get_error())
                return m

            def matcher(self, g):
                return g.deep_copy()

            def alloc(self, b):
                return lgn.allocate_token_bitmask(b, self.V)

            def fill(self, ms, bm, threads):
                if threads == 0:
                    for i, m in enumerate(ms):
                        lgn.fill_next_token_bitmask(m, bm, i)
                else:
                    if threads not in self.executors:
                        self.executors[threads] = llg.LLExecutor(threads)
                    lgn.fill_next_token_bitmask_par(self.executors[threads], [(m, i) for i, m in enumerate(ms)], bm)

            def accept(self, m, t):
                return m.consume_token(t)

        engines["llguidance"] = LLGuidance()
    return engines


def allowed(bm, row, t):
    return (int(bm[row, t // 32]) >> (t % 32)) & 1 == 1


def one_pass(engine, rows, grammars, threads, steps):
    """Per-step fill times (ms) of one teacher-forced pass; threads 0 = row by row."""
    matchers = [engine.matcher(g) for g in grammars]
    bm = engine.alloc(len(rows))
    times, cpu = [], []
    for s in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        engine.fill(matchers, bm, threads)
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
        for i, (m, r) in enumerate(zip(matchers, rows)):
            t = r["tokens"][s]
            if not allowed(bm, i, t):
                raise SystemExit(f"{type(engine).__name__}: row {i} ({r['id']}) step {s}: forced token {t} not allowed")
            if not engine.accept(m, t):
                raise SystemExit(f"{type(engine).__name__}: row {i} step {s}: accept refused an allowed token")
    return times, cpu


def stats(times_cpu):
    """(p50, p99, max) of the per-step wall times and the p50 of the process CPU time (all threads)."""
    times, cpu = times_cpu
    return (
        round(statistics.median(times), 3),
        round(pct(times, 0.99), 3),
        round(max(times), 3),
        round(statistics.median(cpu), 3),
    )


def free_cores(threads: int) -> tuple[float, float]:
    """Control: per-call ms (p50) of a pure nogil numba spin over 64 rows, in one part and in
    `threads` parts on as many pool threads.  On a machine with free cores the second is
    about 1/threads of the first; when it is not, no batch API can scale here."""
    from concurrent.futures import ThreadPoolExecutor

    from numba import njit

    @njit(nogil=True)
    def spin(part, out):
        total = 0.0
        for _ in part:
            for i in range(20000):
                total += i * 1e-9
        out[0] = total

    out, order = np.zeros(1), np.arange(64)
    spin(order[:1], out)
    result = []
    with ThreadPoolExecutor(threads) as pool:
        for n in (1, threads):
            times = []
            for _ in range(100):
                t0 = time.perf_counter()
                for future in [pool.submit(spin, part, out) for part in np.array_split(order, n)]:
                    future.result()
                times.append((time.perf_counter() - t0) * 1e3)
            result.append(round(statistics.median(times), 3))
    return result[0], result[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=str(REPO.parent / "shared" / "bench" / "rows-dev64.json"))
    p.add_argument("--tokenizer", default=str(REPO.parent / "shared" / "tokenizers" / "llama3"))
    p.add_argument("--engines", default="pushmask,xgrammar,llguidance")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--modes", default="seq,batch1,batchN", help="which fills to time (batchN: --threads)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args()

    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(args.tokenizer)
    rows = json.load(open(args.rows))[: args.batch]
    steps = min(args.steps, min(len(r["tokens"]) for r in rows))
    engines = make_engines(hf, args.engines.split(","))
    modes = {"seq": 0, "batch1": 1, "batchN": args.threads}
    modes = {("batch%d" % v if k == "batchN" else k): v for k, v in modes.items() if k in args.modes.split(",")}
    if "pushmask" in engines:  # numba JIT (loaded from its disk cache) over all rows, not part of any number
        e = engines["pushmask"]
        e.fresh()
        one_pass(e, rows, [e.compile(r["schema"]) for r in rows], 2, steps)
    out = {
        "batch": len(rows),
        "steps": steps,
        "threads": args.threads,
        "cpus": os.cpu_count(),
        "load_avg_before": os.getloadavg()[0],
        "results": {},
    }
    print(f"B = {len(rows)} rows, {steps} steps, load average {os.getloadavg()[0]:.2f}", flush=True)
    for name, e in engines.items():
        e.fresh()
        t0 = time.perf_counter()
        grammars = [e.compile(r["schema"]) for r in rows]
        compile_ms = (time.perf_counter() - t0) * 1e3
        res = out["results"][name] = {"compile_ms": round(compile_ms, 1)}
        print(f"{name}: compile {compile_ms:.1f} ms", flush=True)
        for mode, threads in modes.items():
            if e.recompile:
                e.fresh()
                grammars = [e.compile(r["schema"]) for r in rows]
            res[f"first {mode}"] = stats(one_pass(e, rows, grammars, threads, steps))
            res[f"steady {mode}"] = stats(one_pass(e, rows, grammars, threads, steps))
            print(f"  {mode}: first {res[f'first {mode}']}  steady {res[f'steady {mode}']}", flush=True)
    out["load_avg_after"] = os.getloadavg()[0]
    if "pushmask" in engines:
        out["control_spin_ms_1_vs_N_threads"] = free_cores(args.threads)
        print(
            f"control: a nogil spin of the same split, 1 vs {args.threads} threads: "
            f"{out['control_spin_ms_1_vs_N_threads']} ms (free cores?), load average {os.getloadavg()[0]:.2f}"
        )
    print()
    print(
        f"per-step fill, ms, wall p50 / p99 / max (process CPU p50) (B = {len(rows)}; seq = row by row; "
        "batchK = batch API, K threads)"
    )
    names = list(engines)
    print("| pass, fill | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for pas in ("first", "steady"):
        for mode in modes:
            cells = ["%.2f / %.2f / %.2f (%.2f)" % tuple(out["results"][n][f"{pas} {mode}"]) for n in names]
            print(f"| {pas}, {mode} | " + " | ".join(cells) + " |")
    print("| compile, all rows | " + " | ".join("%.0f ms" % out["results"][n]["compile_ms"] for n in names) + " |")
    if args.out:
        json.dump(out, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
