"""Time to the first mask in a fresh environment: a new venv from the built wheel, an empty numba cache.

    python benchmarks/first_mask.py [--wheel dist/pushmask-*.whl] [--tokenizer ../shared/tokenizers/llama3]
                                    [--sample 60] [--venv DIR] [--timings out.json]

Builds the wheel (unless --wheel), creates a venv (unless --venv names one already made), installs
the wheel and `tokenizers` there, then runs this file's probe in that venv with NUMBA_CACHE_DIR set
to a new empty folder. The probe times `import pushmask`, loading the tokenizer (reported apart),
`TokenizerInfo`, compiling a small schema and filling the first mask (wall and, less sensitive to
other load on the machine, this process's CPU seconds), then compiles every N-th
MaskBench dev schema and feeds its valid instances token by token, with a full mask before each
token. Every numba compile is timed (Dispatcher._compile_for_args wrapped, nested compiles counted
in their caller) and the probe reports those over 0.1 s, and the dispatchers' cache hits/misses.
`--probe` runs only the probe, in the current interpreter (the cache it sees is the caller's).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("PUSHMASK_SHARED", REPO.parent / "shared"))
SMALL_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def _install_compile_timer(records: list) -> None:
    """Record (qualified name, seconds) of every numba compile started from Python."""
    from numba.core.dispatcher import Dispatcher

    inner = Dispatcher._compile_for_args

    def timed(self, *args, **kws):
        start = time.perf_counter()
        try:
            return inner(self, *args, **kws)
        finally:
            records.append((f"{self.py_func.__module__}.{self.py_func.__qualname__}", time.perf_counter() - start))

    Dispatcher._compile_for_args = timed


def _dispatcher_stats() -> tuple[int, int]:
    """Cache hits and misses summed over pushmask's numba dispatchers."""
    from numba.core.dispatcher import Dispatcher

    hits = misses = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("pushmask") or module is None:
            continue
        for value in vars(module).values():
            if isinstance(value, Dispatcher) and value.py_func.__module__ == name:
                stats = value.stats
                hits += sum(stats.cache_hits.values())
                misses += sum(stats.cache_misses.values())
    return hits, misses


def _feed(matcher, bitmask, token_ids) -> int:
    """Fill a mask before each token and accept it; the number of masks filled."""
    masks = 0
    for token in token_ids:
        matcher.fill_next_token_bitmask(bitmask)
        masks += 1
        word = int(bitmask[0, token // 32]) & 0xFFFFFFFF
        if not (word >> (token % 32)) & 1 or not matcher.accept_token(token):
            break
    return masks


def probe(tokenizer_dir: str, sample: int) -> dict:
    """The measured steps, in this interpreter; a dict of seconds and counts."""
    compiles: list = []
    _install_compile_timer(compiles)
    out: dict = {"numba_cache_dir": os.environ.get("NUMBA_CACHE_DIR")}
    start, start_cpu = time.perf_counter(), time.process_time()
    import pushmask

    out["import_s"] = time.perf_counter() - start
    import tokenizers

    start_tok = time.perf_counter()
    start_tok_cpu = time.process_time()
    tok = tokenizers.Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    out["tokenizer_load_s"] = time.perf_counter() - start_tok
    tokenizer_cpu_s = time.process_time() - start_tok_cpu

    step = time.perf_counter()
    info = pushmask.TokenizerInfo.from_huggingface(tok)
    out["tokenizer_info_s"] = time.perf_counter() - step
    step = time.perf_counter()
    compiled = pushmask.GrammarCompiler(info).compile_json_schema(SMALL_SCHEMA)
    out["compile_s"] = time.perf_counter() - step
    step = time.perf_counter()
    matcher = pushmask.GrammarMatcher(compiled)
    bitmask = pushmask.allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    out["first_mask_s"] = time.perf_counter() - step
    out["first_mask_total_s"] = time.perf_counter() - start - out["tokenizer_load_s"]
    out["first_mask_total_cpu_s"] = time.process_time() - start_cpu - tokenizer_cpu_s  # this process's CPU time
    out["first_mask_jit_s"] = sum(s for _, s in compiles)
    out["first_mask_cache_hits"], out["first_mask_cache_misses"] = _dispatcher_stats()
    out["first_mask_compiles"] = sorted(((round(s, 3), n) for n, s in compiles), reverse=True)[:20]

    if sample:
        files = sorted(glob.glob(str(SHARED / "data" / "maskbench-dev" / "*.json")))
        files = files[:: max(1, len(files) // sample)][:sample]
        del compiles[:]
        step = time.perf_counter()
        compiler = pushmask.GrammarCompiler(info)
        ok = masks = 0
        for path in files:
            entry = json.loads(Path(path).read_text())
            try:
                grammar = compiler.compile_json_schema(entry["schema"])
            except pushmask.PushmaskError:
                continue
            ok += 1
            for test in entry.get("tests", []):
                if test.get("valid"):
                    ids = tok.encode(json.dumps(test["data"], ensure_ascii=False), add_special_tokens=False).ids
                    masks += _feed(pushmask.GrammarMatcher(grammar), bitmask, ids)
        out["dev_sample"] = {
            "schemas": len(files),
            "compiled": ok,
            "masks": masks,
            "seconds": time.perf_counter() - step,
            "jit_s": sum(s for _, s in compiles),
            "compiles_over_0.1s": sorted(((round(s, 3), n) for n, s in compiles if s > 0.1), reverse=True),
        }
        out["cache_hits"], out["cache_misses"] = _dispatcher_stats()
    return out


def _run(cmd: list, **kw) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run(cmd, check=True, **kw)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", default=None, help="the wheel to install (default: build one with pip wheel)")
    parser.add_argument("--venv", default=None, help="venv folder (default: a new temporary one); reused if it exists")
    parser.add_argument("--tokenizer", default=str(SHARED / "tokenizers" / "llama3"))
    parser.add_argument("--sample", type=int, default=60, help="dev schemas to compile and match afterwards (0: none)")
    parser.add_argument("--timings", default=None, help="also write the probe's JSON here")
    parser.add_argument("--probe", action="store_true", help="run the probe here, print its JSON")
    args = parser.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(args.tokenizer, args.sample)))
        return 0

    work = Path(tempfile.mkdtemp(prefix="pushmask-first-mask-"))
    wheel = args.wheel
    if wheel is None:
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "dist"), str(REPO)])
        wheel = next((work / "dist").glob("pushmask-*.whl"))
    venv = Path(args.venv) if args.venv else work / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)])
        _run([str(python), "-m", "pip", "install", "-q", str(wheel), "tokenizers"])
    cache = work / "numba-cache"
    cache.mkdir()
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [str(python), __file__, "--probe", "--tokenizer", args.tokenizer, "--sample", str(args.sample)],
        env=env,
        cwd=str(work),
        check=True,
        capture_output=True,
        text=True,
    )
    timings = json.loads(result.stdout.strip().splitlines()[-1])
    timings["wheel"] = str(wheel)
    timings["new_cache_files"] = len(list(cache.rglob("*.nbc")))
    text = json.dumps(timings, indent=1)
    print(text)
    if args.timings:
        Path(args.timings).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
