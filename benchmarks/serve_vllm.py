"""A server's batch step through vLLM's structured-output code: B rows of B different schemas,
pushmask's vLLM backend, vLLM's XgrammarBackend and vLLM's GuidanceBackend side by side.

    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/serve_vllm.py [--rows ../shared/bench/rows-dev64.json]
        [--batch 64] [--steps 48] [--threads 2] [--backends pushmask,xgrammar,guidance] [--out results.json]

The protocol of serve_batch.py (each row teacher-forced along the stored token ids of a valid
instance of its schema, every forced token must be allowed), but every call is vLLM's own: a real
VllmConfig (a tiny random Llama config with the llama3 tokenizer; no weights are loaded), real
``Request`` objects, and vLLM's ``StructuredOutputManager``: ``grammar_init`` compiles each request
on the manager's compile pool, ``grammar_bitmask`` fills the batch's bitmask (timed), and
``accept_tokens`` advances each row (timed separately: a server pays it every step too).
pushmask's backend is registered as ``PUSHMASK_VLLM=1`` registers it (its wrappers of the manager
included); the three backends are built directly on the manager, so the original xgrammar
backend stays reachable.

vLLM fills rows one ``fill_bitmask`` call at a time, in the engine's thread, up to 128 requests
(``fill_bitmask_parallel_threshold``); above that, in chunks of 16 rows on a pool of
max(1, min(cpus // 2, 8)) threads.  The fills timed:

- ``serial``: vLLM's own choice at B <= 128 (row by row, one thread);
- ``pool``: the thread-pool path forced at this B (the manager's threshold set to 0), with the
  pool vLLM builds (its worker count);
- ``poolN``: the same with a pool of --threads workers.

Per backend and fill: first pass (a fresh backend, pushmask's caches cleared, the schemas never
seen; its compile of all rows through ``grammar_init`` timed apart) and steady (new requests with
the same schemas on the same backend: compiled grammars from its caches, new matchers).  XGrammar,
whose compile precomputes every mask and costs seconds, is compiled once per run, as in
serve_batch.py.  Per-step fill and accept times p50 / p99 / max in ms.

The rows are serve_batch.py's, but for four: vLLM asks XGrammar for strict JSON objects (only the
members a schema declares; pushmask's backend does the same under XGrammar's name), and those four
instances write undeclared members (one only inside a bare ``{"type": "object"}``, which XGrammar
closes and pushmask leaves open), so they are swapped for MaskBench-dev files whose first valid
instance all three backends accept (VLLM_SWAPS; ``--check`` walks every row row by row and names
the ones a backend refuses).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"

# rows-dev64.json rows refused under vLLM's strict JSON -> MaskBench-dev files accepted by all three
# backends (the first four such files of the dev set shuffled by random.Random(0), not already rows).
VLLM_SWAPS = {
    "Github_medium---o9371.json": "Github_medium---o45216.json",
    "Kubernetes---kb_657_Normalized.json": "Kubernetes---kb_797_Normalized.json",
    "Github_easy---o44286.json": "Github_hard---o41318.json",
    "Kubernetes---kb_758_Normalized.json": "Github_medium---o5235.json",
}
STEPS = 48

TINY_LLAMA = {  # only the config is read: vLLM's structured outputs need no weights
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "tie_word_embeddings": True,
}


def load_rows(path: Path, batch: int, tokenizer: Path, swaps: dict[str, str] = VLLM_SWAPS) -> list[dict]:
    """The first `batch` rows of the rows file, with the rows named in `swaps` replaced by their
    MaskBench-dev file: its schema and the first STEPS llama3 ids of its first valid instance
    (as ../shared/bench/serve_overhead.py makes a row)."""
    from tokenizers import Tokenizer

    encoder = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    rows = json.loads(path.read_text())[:batch]
    for i, row in enumerate(rows):
        if row["id"] in swaps:
            doc = json.loads((SHARED / "data" / "maskbench-dev" / swaps[row["id"]]).read_text())
            instance = next(test["data"] for test in doc["tests"] if test["valid"])
            ids = encoder.encode(json.dumps(instance, ensure_ascii=False), add_special_tokens=False).ids
            rows[i] = {"id": swaps[row["id"]], "schema": doc["schema"], "tokens": ids[:STEPS]}
    return rows


def make_model(folder: Path, tokenizer: Path) -> Path:
    """A tiny Llama folder with `tokenizer`'s files and a vocabulary that holds all its ids."""
    from tokenizers import Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    for item in tokenizer.iterdir():
        shutil.copy(item, folder / item.name)
    size = Tokenizer.from_file(str(tokenizer / "tokenizer.json")).get_vocab_size()
    (folder / "config.json").write_text(json.dumps({**TINY_LLAMA, "vocab_size": size}))
    return folder


def make_config(model: Path, max_num_seqs: int):
    from vllm.config import ModelConfig, VllmConfig

    model_config = ModelConfig(model=str(model), tokenizer=str(model), dtype="float32", max_model_len=4096)
    config = VllmConfig(model_config=model_config)
    # the bitmask's rows; above 128 the manager also builds its fill pool, as a default server does
    config.scheduler_config.max_num_seqs = max_num_seqs
    return config


def backend_classes(names: list[str]) -> dict:
    """name -> backend class; pushmask registered as PUSHMASK_VLLM=1 does (after taking vLLM's own
    XgrammarBackend, which registering reroutes)."""
    from vllm.v1.structured_output.backend_guidance import GuidanceBackend
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    classes = {"xgrammar": XgrammarBackend, "guidance": GuidanceBackend}
    if "pushmask" in names:
        os.environ["PUSHMASK_VLLM"] = "1"
        from pushmask.integrations import vllm as pushmask_vllm

        pushmask_vllm.register()
        classes["pushmask"] = pushmask_vllm.PushmaskBackend
    return {name: classes[name] for name in names}


def fresh_backend(manager, cls):
    """A new backend on `manager` (new compiler, empty caches; pushmask's process caches cleared)."""
    if cls.__name__ == "PushmaskBackend":
        import pushmask

        pushmask.clear_caches(tables=False)
    manager.backend = cls(manager.vllm_config, tokenizer=manager.tokenizer, vocab_size=manager.vocab_size)


def make_requests(rows, tag: str, max_tokens: int) -> dict:
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.request import Request

    requests = {}
    for i, row in enumerate(rows):
        params = SamplingParams(
            max_tokens=max_tokens or 1024, structured_outputs=StructuredOutputsParams(json=row["schema"])
        )
        rid = f"{tag}-{i}"
        requests[rid] = Request(rid, prompt_token_ids=[1, 2, 3], sampling_params=params, pooling_params=None)
        if not max_tokens:  # a Request needs max_tokens; without it pushmask's backend sets no budget
            params.max_tokens = None
    return requests


def compile_all(manager, requests: dict) -> float:
    """grammar_init for every request (vLLM's compile pool), waited for; ms."""
    t0 = time.perf_counter()
    for request in requests.values():
        manager.grammar_init(request)
    for rid, request in requests.items():
        grammar = request.structured_output_request._grammar
        grammar = grammar.result() if hasattr(grammar, "result") else grammar
        if isinstance(grammar, Exception):
            raise SystemExit(f"{rid}: grammar compile failed: {grammar}")
    return (time.perf_counter() - t0) * 1e3


def one_pass(manager, rows, requests: dict, steps: int, name: str) -> tuple[list[float], list[float]]:
    """Per-step fill and accept times (ms) of one teacher-forced pass through the manager."""
    ids = list(requests)
    fills, accepts = [], []
    for s in range(steps):
        t0 = time.perf_counter()
        bitmask = manager.grammar_bitmask(requests, ids, {})
        fills.append((time.perf_counter() - t0) * 1e3)
        for i, row in enumerate(rows):
            t = row["tokens"][s]
            if not (int(bitmask[i, t // 32]) >> (t % 32)) & 1:
                raise SystemExit(f"{name}: row {i} ({row['id']}) step {s}: forced token {t} not allowed")
        t0 = time.perf_counter()
        for rid, row in zip(ids, rows):
            if not manager.accept_tokens(requests[rid], [row["tokens"][s]]):
                raise SystemExit(f"{name}: {rid} step {s}: accept_tokens refused an allowed token")
        accepts.append((time.perf_counter() - t0) * 1e3)
    return fills, accepts


def refused_rows(manager, rows, steps: int) -> dict[str, str]:
    """Row id -> why the manager's backend refuses it (compile error, or the first forced token
    its mask does not allow), each row compiled and walked alone, row by row."""
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    bitmask = manager.backend.allocate_token_bitmask(1)
    refused = {}
    for row in rows:
        try:
            grammar = manager.backend.compile_grammar(StructuredOutputOptions.JSON, json.dumps(row["schema"]))
        except Exception as exc:
            refused[row["id"]] = f"compile: {str(exc)[:200]}"
            continue
        for s, t in enumerate(row["tokens"][:steps]):
            grammar.fill_bitmask(bitmask, 0)
            if not (int(bitmask[0, t // 32]) >> (t % 32)) & 1 or not grammar.accept_tokens(row["id"], [t]):
                refused[row["id"]] = f"step {s}: token {t} not allowed"
                break
    return refused


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def stats(times: list[float]) -> list[float]:
    """[p50, p99, max] of per-step times, ms."""
    return [round(statistics.median(times), 3), round(pct(times, 0.99), 3), round(max(times), 3)]


def set_fill(manager, mode: str, threads: int) -> None:
    """Make grammar_bitmask take vLLM's serial path, or its thread-pool path (vLLM's pool or one
    of `threads` workers), at any batch size."""
    if mode == "serial":
        manager.fill_bitmask_parallel_threshold = 128  # vLLM's value: B <= 128 fills serially
        return
    manager.fill_bitmask_parallel_threshold = 0
    workers = max(1, min(multiprocessing.cpu_count() // 2, 8)) if mode == "pool" else threads
    old = getattr(manager, "executor_for_fillmask", None)
    if old is None or old._max_workers != workers:
        if old is not None:
            old.shutdown()
        manager.executor_for_fillmask = ThreadPoolExecutor(max_workers=workers)
    manager.fill_bitmask_parallel_batch_size = 16


def run(
    rows: list[dict],
    steps: int,
    backends: list[str],
    modes: list[str],
    threads: int = 2,
    max_tokens: int = 1024,
    tokenizer: Path = SHARED / "tokenizers" / "llama3",
    log=print,
    check: bool = False,
) -> dict:
    """Time every backend and fill mode on `rows`; raises SystemExit on a forced token refused.
    With `check`, only list the rows each backend refuses (nothing timed)."""
    from vllm.v1.structured_output import StructuredOutputManager

    classes = backend_classes(backends)
    workdir = Path(tempfile.mkdtemp(prefix="serve-vllm-"))
    try:
        config = make_config(make_model(workdir / "model", tokenizer), max_num_seqs=max(256, len(rows)))
        out: dict = {"results": {}}
        for name, cls in classes.items():
            manager = StructuredOutputManager(config)
            manager.vocab_size = config.model_config.get_vocab_size()
            res = out["results"][name] = {}
            if check:
                fresh_backend(manager, cls)
                res["refused"] = refused_rows(manager, rows, steps)
                log(f"{name}: {len(res['refused'])} rows refused {res['refused']}")
                manager.clear_backend()
                continue
            if name == "pushmask":  # numba JIT (from its disk cache) on every row, not part of any number
                fresh_backend(manager, cls)
                warm = make_requests(rows, "warm", max_tokens)
                compile_all(manager, warm)
                one_pass(manager, rows, warm, steps, name)
            recompile = name != "xgrammar"
            for k, mode in enumerate(modes):
                set_fill(manager, mode, threads)
                if recompile or k == 0:
                    fresh_backend(manager, cls)
                    first = make_requests(rows, f"first-{mode}", max_tokens)
                    res[f"compile ms, {mode}"] = round(compile_all(manager, first), 1)
                else:
                    first = make_requests(rows, f"first-{mode}", max_tokens)
                    compile_all(manager, first)
                fills, accepts = one_pass(manager, rows, first, steps, name)
                res["forced tokens allowed"] = res.get("forced tokens allowed", 0) + len(rows) * len(fills)
                res[f"first {mode}"], res[f"first {mode} accept"] = stats(fills), stats(accepts)
                steady = make_requests(rows, f"steady-{mode}", max_tokens)
                res[f"compile again ms, {mode}"] = round(compile_all(manager, steady), 1)
                fills, accepts = one_pass(manager, rows, steady, steps, name)
                res["forced tokens allowed"] += len(rows) * len(fills)
                res[f"steady {mode}"], res[f"steady {mode} accept"] = stats(fills), stats(accepts)
                log(f"{name} {mode}: " + ", ".join(f"{key} {value}" for key, value in res.items() if mode in key))
            manager.clear_backend()
        return out
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=str(SHARED / "bench" / "rows-dev64.json"))
    p.add_argument("--tokenizer", default=str(SHARED / "tokenizers" / "llama3"))
    p.add_argument("--backends", default="pushmask,xgrammar,guidance")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--threads", type=int, default=2, help="workers of the poolN fill")
    p.add_argument("--modes", default="serial,pool,poolN", help="serial, pool (vLLM's pool), poolN (--threads)")
    p.add_argument(
        "--max-tokens",
        type=int,
        default=1024,
        help="each request's max_tokens, which pushmask's backend budgets (0: none; vLLM always sets one)",
    )
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--no-swaps", action="store_true", help="the rows file as it is (VLLM_SWAPS not applied)")
    p.add_argument("--check", action="store_true", help="only list the rows each backend refuses, row by row")
    args = p.parse_args()

    rows = load_rows(Path(args.rows), args.batch, Path(args.tokenizer), {} if args.no_swaps else VLLM_SWAPS)
    steps = min(args.steps, min(len(r["tokens"]) for r in rows))
    modes = [f"pool{args.threads}" if m == "poolN" else m for m in args.modes.split(",")]
    import vllm

    load = os.getloadavg()[0]
    print(f"vLLM {vllm.__version__}, B = {len(rows)} rows, {steps} steps, load average {load:.2f}", flush=True)
    out = run(
        rows,
        steps,
        args.backends.split(","),
        modes,
        threads=args.threads,
        max_tokens=args.max_tokens,
        tokenizer=Path(args.tokenizer),
        log=lambda line: print(line, flush=True),
        check=args.check,
    )
    if args.check:
        return
    out.update(
        vllm=vllm.__version__,
        rows=[row["id"] for row in rows],
        batch=len(rows),
        steps=steps,
        threads=args.threads,
        vllm_pool_workers=max(1, min(multiprocessing.cpu_count() // 2, 8)),
        cpus=os.cpu_count(),
        load_avg_before=load,
        load_avg_after=os.getloadavg()[0],
    )
    names = list(out["results"])
    print()
    print(
        f"per-step ms, p50 / p99 / max (B = {len(rows)}; serial = vLLM's row-by-row fill; pool = its thread-pool "
        f"fill, {out['vllm_pool_workers']} workers; poolK = K workers)"
    )
    print("| pass, fill | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for pas in ("first", "steady"):
        for mode in modes:
            for what in ("", " accept"):
                cells = ["%.2f / %.2f / %.2f" % tuple(out["results"][n][f"{pas} {mode}{what}"]) for n in names]
                print(f"| {pas}, {mode}{what or ' fill'} | " + " | ".join(cells) + " |")
    for key in ("compile ms", "compile again ms"):
        cells = []
        for n in names:
            values = [v for k, v in out["results"][n].items() if k.startswith(key + ",")]
            cells.append(" / ".join("%.0f" % v for v in values))
        print(f"| {key} (all rows, grammar_init; per fill mode) | " + " | ".join(cells) + " |")
    if args.out:
        json.dump(out, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
