"""Disk mask cache throughput: rows (mask files) written in a fixed time by one and by two
processes sharing one folder, without a cap and with a small one, so the cost of eviction shows.

The rows are real masks: those the cache stored while valid instances of every `--every`-th
MaskBench dev schema were filled under the llama3 tokenizer, cycled under fresh keys.  Each run
starts from a folder already holding `--cap` bytes of them (a cache at its cap), so every capped
write past the start pays for eviction.  "No cap" is the default cap (1 GiB), which these runs
never reach.  Besides rows and writes a second (wall clock), writes per CPU second of the writers
(user and system time), which a machine shared with other work disturbs less.

    python benchmarks/disk_cache.py [--seconds 3] [--cap 2000000] [--repeats 3] [--every 200]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

import pushmask as pm
from pushmask.masks import disk_cache
from pushmask.masks.mask_cache import StateMask

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


def real_masks(every: int) -> list[StateMask]:
    """The masks a disk cache stores while valid instances of every `every`-th dev schema are filled."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / "llama3"))
    with tempfile.TemporaryDirectory() as directory:
        compiler = pm.GrammarCompiler(pm.TokenizerInfo.from_huggingface(tokenizer), mask_cache_dir=directory)
        for path in sorted((SHARED / "data" / "maskbench-dev").glob("*.json"))[::every]:
            item = json.loads(path.read_text())
            try:
                compiled = compiler.compile_json_schema(item["schema"])
            except pm.PushmaskError:
                continue
            for test in [t for t in item["tests"] if t["valid"]][:3]:
                matcher = pm.GrammarMatcher(compiled)
                bitmask = pm.allocate_token_bitmask(1, matcher.vocab_size)
                for token in tokenizer.encode(json.dumps(test["data"]), add_special_tokens=False):
                    matcher.fill_next_token_bitmask(bitmask)
                    if not matcher.accept_token(token):
                        break
        masks = [disk_cache._decode(p.read_bytes()) for p in sorted(Path(directory).rglob("*.mask"))]
    return [m for m in masks if m is not None]


def _writer(directory, cap, masks, worker, seconds, start, results) -> None:
    """Write masks under fresh keys for `seconds` once `start` is set; report (rows, evicted,
    CPU seconds)."""
    cache = disk_cache.DiskMaskCache(directory, "bench", cap)
    start.wait()
    rows, cpu, deadline = 0, time.process_time(), time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        cache.put((f"{worker}-{rows}", "bench"), masks[rows % len(masks)])
        rows += 1
    results.put((rows, cache.evicted, time.process_time() - cpu))


def run(processes: int, cap: int, masks: list[StateMask], seconds: float, prefill: int) -> dict:
    """One run in a fresh folder holding `prefill` bytes of masks: rows written by all processes,
    and the folder at the end."""
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    with tempfile.TemporaryDirectory() as directory:
        filler, filled, k = disk_cache.DiskMaskCache(directory, "bench", cap), 0, 0
        while filled < prefill:
            filler.put((f"fill-{k}", "bench"), masks[k % len(masks)])
            filled += len(disk_cache._encode(masks[k % len(masks)]))
            k += 1
        workers = [
            context.Process(target=_writer, args=(directory, cap, masks, w, seconds, start, results))
            for w in range(processes)
        ]
        for w in workers:
            w.start()
        time.sleep(0.5)  # every worker constructed and waiting
        start.set()
        counts = [results.get(timeout=seconds + 120) for _ in workers]
        for w in workers:
            w.join()
        files = list(Path(directory).rglob("*.mask"))
        folder = sum(p.stat().st_size for p in files)
    rows = sum(c for c, _, _ in counts)
    cpu = sum(t for _, _, t in counts)
    return {
        "rows": rows,
        "cpu_rate": rows / cpu,
        "evicted": sum(e for _, e, _ in counts),
        "files": len(files),
        "folder": folder,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="writing time of each run")
    parser.add_argument("--cap", type=int, default=2_000_000, help="the small cap, bytes")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each setting (medians printed)")
    parser.add_argument("--every", type=int, default=200, help="every n-th dev schema gives the masks")
    args = parser.parse_args()

    masks = real_masks(args.every)
    sizes = sorted(len(disk_cache._encode(m)) for m in masks)
    print(
        f"{len(masks)} real masks (llama3): file bytes median {sizes[len(sizes) // 2]}, "
        f"mean {sum(sizes) // len(sizes)}, max {sizes[-1]}; {args.seconds:g} s a run from a folder holding "
        f"{args.cap / 1e6:g} MB, medians of {args.repeats}"
    )
    print(
        f"{'processes':>9} {'cap':>10} {'rows':>8} {'writes/s':>9} {'writes/CPU s':>12} {'evicted':>8} {'files':>6} "
        f"{'folder MB':>9}"
    )
    for cap, cap_name in ((disk_cache.DEFAULT_MAX_BYTES, "none"), (args.cap, f"{args.cap / 1e6:g} MB")):
        for processes in (1, 2):
            runs = [run(processes, cap, masks, args.seconds, args.cap) for _ in range(args.repeats)]
            rows = statistics.median(r["rows"] for r in runs)
            median = next(r for r in sorted(runs, key=lambda r: r["rows"]) if r["rows"] >= rows)
            print(
                f"{processes:>9} {cap_name:>10} {rows:>8.0f} {rows / args.seconds:>9.0f} "
                f"{statistics.median(r['cpu_rate'] for r in runs):>12.0f} {median['evicted']:>8} "
                f"{median['files']:>6} {median['folder'] / 1e6:>9.2f}"
            )


if __name__ == "__main__":
    main()
