"""Memory of one process running the MaskBench protocol over many schemas, and what it holds.

One process, a default `GrammarCompiler` (the corpus runner's pushmask engine) and the Llama-3
tokenizer run the protocol (compile, then fill a mask before every token of each test
instance) over a seeded sample of the MaskBench dev schemas, as a long-running server would see
them.  It prints the resident memory (RSS) every `--every` schemas and the peak, then a
breakdown of what the process holds: the compiler's caches (its compiled grammars, weighed
whole, and the shared token masks), every process-wide cache of `pushmask.clear_caches()`'s
registry (entries and bytes), the numba/LLVM share (RSS once the kernels are warm), the numpy
arrays and Python objects still alive; then the RSS after `pushmask.clear_caches()` and the
compiler's `clear_cache()` against the baseline taken after warm-up.

    python benchmarks/memory_protocol.py [--schemas 300] [--seed 0] [--every 25] [--cache-limit-mb N] [--tracemalloc]

The sample is read in a child process (parsing the whole corpus would leave its fragments in
this one).  `--tracemalloc` also traces Python's allocations (several times slower) and prints the top
allocation sites of what is still held.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import pickle
import resource
import signal
import subprocess
import sys
import time
import tracemalloc
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
MiB = 2**20


def rss_mb() -> float:
    """Current resident set size (VmRSS) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    """Peak resident set size of this process so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def malloc_trim() -> None:
    """Hand glibc's free heap pages back to the kernel, so RSS shows what is still in use."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc: RSS then also counts freed pages malloc keeps
        pass


_OPAQUE = (type, type(sys), type(rss_mb), type(len), type(print.__call__))


def deep_bytes(roots, stop: set[int] = frozenset(), seen: set[int] | None = None) -> int:
    """Bytes reachable from `roots` (sys.getsizeof of each object, a numpy array's buffer once
    through its owner), not through modules, classes, functions or the ids in `stop`; `seen`
    (shared between calls) keeps an object from being counted twice."""
    seen = set() if seen is None else seen
    total = 0
    todo = list(roots)
    while todo:
        obj = todo.pop()
        if id(obj) in seen or id(obj) in stop or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)  # an array that owns its buffer: header and buffer
        if isinstance(obj, np.ndarray):
            if obj.base is not None:  # a view: its owner holds the buffer
                todo.append(obj.base)
        else:
            todo.extend(gc.get_referents(obj))
    return total


def load_tasks(corpus: str, schemas: int, seed: int) -> list[dict]:
    """The seeded sample's tasks, read in a child process: parsing the whole corpus (81 MB of
    JSON, 5,724 schemas) leaves about 140 MiB of fragmented heap in the process that parses it,
    which is the benchmark's data, not what the engine holds."""
    script = (
        "import pickle, sys\n"
        "from pushmask.jsonschemabench.corpus import load_corpus, sample_items\n"
        "items = sample_items(load_corpus([sys.argv[1]]), int(sys.argv[2]), int(sys.argv[3]))\n"
        "sys.stdout.buffer.write(pickle.dumps([item.to_task() for item in items]))\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", script, corpus, str(schemas), str(seed)], capture_output=True, check=True
    )
    return pickle.loads(child.stdout)


class _TimeUp(Exception):
    pass


def _time_up(signum, frame):
    raise _TimeUp


def grammar_breakdown(compiler) -> dict[str, int]:
    """What the compiled grammars in the compiler's cache hold, by part, in bytes."""
    parts: Counter[str] = Counter()
    pairs_seen: set[int] = set()  # follow pairs may be one array shared by many rules and grammars
    for compiled in compiler.compiled_cache.values():
        parts["automaton (pda arrays)"] += compiled.pda.nbytes()
        parts["mask index"] += compiled.mask_index.nbytes
        parts["mask pool, used"] += compiled._pool_used * 4
        parts["mask pool, allocated"] += compiled.mask_pool.nbytes
        frames = getattr(compiled, "_frames", None)  # the offline runner's frame pool
        runner = compiled._offline
        if frames is None and runner is not None:
            frames = runner.pool
        if frames is not None:
            parts["offline runner: frame pool"] += frames.blob.nbytes
        if runner is not None:
            parts["offline runner: workspace held"] += runner.ws.blob.nbytes
        for pairs, _ in compiled._pairs.values():
            if id(pairs) not in pairs_seen:
                pairs_seen.add(id(pairs))
                parts["follow pairs (distinct arrays)"] += pairs.nbytes
        parts["value-check memo (deep)"] += deep_bytes([compiled.value_check_cache])
        parts["weighed (memory_size_bytes)"] += compiled.memory_size_bytes
    return dict(parts)


def registry_breakdown() -> list[tuple[str, int, int]]:
    """(name, entries, bytes) of each process-wide cache that clear_caches() empties."""
    from pushmask.core import caches

    seen: set[int] = set()
    return [(name, len(cache), deep_bytes([cache._entries], seen=seen)) for name, cache in caches._REGISTRY.items()]


def live_objects() -> tuple[int, list[tuple[str, int]], int]:
    """(numpy bytes reachable from gc-tracked objects, the ten commonest gc-tracked types with
    their counts, the number of gc-tracked objects)."""
    warnings.simplefilter("ignore")  # isinstance on some of torch's deprecated module attributes warns
    objects = gc.get_objects()
    counts = Counter(type(obj).__name__ for obj in objects)
    owners: dict[int, int] = {}
    for obj in objects:
        for ref in gc.get_referents(obj):
            if isinstance(ref, np.ndarray):
                while isinstance(ref.base, np.ndarray):
                    ref = ref.base
                owners[id(ref)] = ref.nbytes if ref.base is None else 0
    return sum(owners.values()), counts.most_common(10), len(objects)


def print_traced(when: str) -> None:
    """What tracemalloc sees allocated since the loop started, and its top allocation sites."""
    current, traced_peak = tracemalloc.get_traced_memory()
    print(f"tracemalloc, {when}: {current / MiB:.1f} MiB, peak {traced_peak / MiB:.1f} MiB; top sites:")
    for stat in tracemalloc.take_snapshot().statistics("lineno")[:15]:
        frame = stat.traceback[0]
        print(f"  {stat.size / MiB:.1f} MiB in {stat.count} blocks: {frame.filename}:{frame.lineno}")


def kernel_signatures() -> int:
    """Machine-code versions of the numba kernels loaded or compiled in this process so far (each
    holds its LLVM module and code, which nothing frees)."""
    from numba.core.dispatcher import Dispatcher

    return sum(len(obj.overloads) for obj in gc.get_objects() if isinstance(obj, Dispatcher))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "data" / "maskbench-dev"))
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--time-limit", type=int, default=120, help="seconds per schema (as validate-corpus)")
    parser.add_argument(
        "--cache-limit-mb", type=int, help="the compiler's cache_limit_bytes in MiB (default: the compiler's default)"
    )
    parser.add_argument("--tracemalloc", action="store_true", help="trace Python allocations (slow)")
    args = parser.parse_args()

    print(f"RSS at start: {rss_mb():.0f} MiB")
    import pushmask
    from pushmask.jsonschemabench.engines import resolve_engine
    from pushmask.jsonschemabench.protocol import run_item
    from pushmask.jsonschemabench.runner import load_tokenizer, resolve_tokenizer_path, warm_up

    print(f"RSS after imports: {rss_mb():.0f} MiB")
    tokenizer = load_tokenizer(resolve_tokenizer_path(args.tokenizer))
    engine = resolve_engine("pushmask")(tokenizer)
    if args.cache_limit_mb is not None:
        engine.compiler = pushmask.GrammarCompiler(engine.info, cache_limit_bytes=args.cache_limit_mb * MiB)
    compiler = engine.compiler
    print(f"RSS with the tokenizer and the compiler (token trie): {rss_mb():.0f} MiB")
    warm_up(engine, tokenizer)
    print(f"RSS after warm-up with one schema (numba kernels loaded): {rss_mb():.0f} MiB")
    engine.clear_cache()
    gc.collect()
    malloc_trim()
    baseline = rss_mb()
    warm_kernels = kernel_signatures()
    print(f"baseline (warm, caches cleared): {baseline:.0f} MiB; {warm_kernels} kernel signatures loaded")
    print(f"compiler: cache_limit_bytes={compiler.cache_limit_bytes}")

    tasks = load_tasks(args.corpus, args.schemas, args.seed)
    print(f"RSS with the {len(tasks)} tasks loaded: {rss_mb():.0f} MiB")
    if args.tracemalloc:
        tracemalloc.start(8)
    statuses: Counter[str] = Counter()
    signal.signal(signal.SIGALRM, _time_up)
    start = time.perf_counter()
    marks: list[tuple[int, float]] = []
    mask_us: list[float] = []
    print(
        "\n| schemas | RSS (MiB) | peak RSS (MiB) | get_cache_size_bytes (MiB) | mask cache (MiB) | grammars | minutes |"
    )
    print("|---|---|---|---|---|---|---|")
    for n, task in enumerate(tasks, 1):
        signal.alarm(args.time_limit)
        try:
            record = run_item(engine, tokenizer, task)
            status = record["status"]
            mask_us.extend(record["mask_us"])
        except _TimeUp:
            status = "timeout"
        finally:
            signal.alarm(0)
        statuses[status] += 1
        if n % args.every == 0 or n == len(tasks):
            rss = rss_mb()
            marks.append((n, rss))
            print(
                f"| {n} | {rss:.0f} | {peak_mb():.0f} | {compiler.get_cache_size_bytes() / MiB:.1f} | "
                f"{compiler.cache.allocated_bytes / MiB:.1f} | {len(compiler.compiled_cache)} | "
                f"{(time.perf_counter() - start) / 60:.1f} |",
                flush=True,
            )
    print("statuses:", dict(statuses))
    if mask_us:
        print(f"mask time (fill + accept, {len(mask_us)} tokens): p50 {np.percentile(mask_us, 50):.1f} µs")
    print(f"peak RSS: {peak_mb():.0f} MiB; final RSS {rss_mb():.0f} MiB; baseline {baseline:.0f} MiB")
    half = [(n, rss) for n, rss in marks if n >= len(tasks) // 2]
    if len(half) >= 2:
        (n0, r0), (n1, r1) = half[0], half[-1]
        print(f"retained per schema over schemas {n0}..{n1}: {(r1 - r0) / (n1 - n0):.2f} MiB")

    print("\n## What the process holds")
    print(f"numba/LLVM kernels, tokenizer, torch, interpreter (baseline): {baseline:.0f} MiB")
    print(f"numba kernel signatures: {kernel_signatures()} (after warm-up: {warm_kernels})")
    print(
        f"compiler: get_cache_size_bytes {compiler.get_cache_size_bytes() / MiB:.1f} MiB "
        f"({len(compiler.compiled_cache)} grammars weighed {compiler.compiled_cache.total_cost / MiB:.1f} MiB, "
        f"mask cache {len(compiler.cache)} masks {compiler.cache.allocated_bytes / MiB:.1f} MiB)"
    )
    for part, size in grammar_breakdown(compiler).items():
        print(f"  grammars' {part}: {size / MiB:.1f} MiB")
    print("process-wide caches (pushmask.clear_caches()):")
    for name, entries, size in registry_breakdown():
        print(f"  {name}: {entries} entries, {size / MiB:.1f} MiB")
    gc.collect()
    numpy_bytes, common, n_objects = live_objects()
    print(f"numpy arrays referenced by live objects: {numpy_bytes / MiB:.1f} MiB; {n_objects} gc-tracked objects")
    print("  commonest:", ", ".join(f"{name} {count}" for name, count in common))
    if args.tracemalloc:
        print_traced("held now")

    rss_before = rss_mb()
    compiler.clear_cache()
    pushmask.clear_caches()
    gc.collect()
    cleared = rss_mb()
    malloc_trim()
    trimmed = rss_mb()
    if args.tracemalloc:
        print_traced("still held after clearing")
    print(
        f"\nafter clear_cache() + pushmask.clear_caches() + gc.collect(): RSS {rss_before:.0f} -> {cleared:.0f} MiB; "
        f"after malloc_trim(0): {trimmed:.0f} MiB; baseline {baseline:.0f} MiB (+{trimmed - baseline:.0f})"
    )


if __name__ == "__main__":
    main()
