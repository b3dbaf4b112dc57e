"""Memory over a long single-process run: N schemas (the MaskBench dev set, cycled) through the
corpus protocol in ONE process with warm cross-schema caches, as a server would see them.
Prints resident memory and the engine's cache bytes every `--every` schemas, so growth past
the cache limits would show.

    python benchmarks/memory_growth.py [--schemas 10000] [--every 500] [--corpus ../shared/data/maskbench-dev]
"""

from __future__ import annotations

import argparse
import resource
import signal
import time
from pathlib import Path

from pushmask.jsonschemabench.corpus import load_corpus
from pushmask.jsonschemabench.engines import resolve_engine
from pushmask.jsonschemabench.protocol import run_item
from pushmask.jsonschemabench.runner import load_tokenizer, resolve_tokenizer_path, warm_up

REPO = Path(__file__).resolve().parent.parent


def rss_mb() -> float:
    """Current resident set size (VmRSS) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class _TimeUp(Exception):
    pass


def _time_up(signum, frame):
    raise _TimeUp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "data" / "maskbench-dev"))
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--time-limit", type=int, default=120, help="seconds per schema (as validate-corpus)")
    args = parser.parse_args()

    tokenizer = load_tokenizer(resolve_tokenizer_path(args.tokenizer))
    engine = resolve_engine("pushmask")(tokenizer)
    warm_up(engine, tokenizer)
    tasks = [item.to_task() for item in load_corpus([args.corpus])]
    start = time.perf_counter()
    statuses: dict[str, int] = {}
    print("| schemas | RSS (MiB) | peak RSS (MiB) | cache bytes (MiB) | minutes |")
    print("|---|---|---|---|---|")
    signal.signal(signal.SIGALRM, _time_up)
    for n in range(1, args.schemas + 1):
        signal.alarm(args.time_limit)
        try:
            status = run_item(engine, tokenizer, tasks[(n - 1) % len(tasks)])["status"]
        except _TimeUp:
            status = "timeout"
        finally:
            signal.alarm(0)
        statuses[status] = statuses.get(status, 0) + 1
        if n % args.every == 0 or n == args.schemas:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"| {n} | {rss_mb():.0f} | {peak:.0f} | {engine.cache_bytes() / 2**20:.0f} | "
                f"{(time.perf_counter() - start) / 60:.1f} |",
                flush=True,
            )
    print("statuses:", statuses)


if __name__ == "__main__":
    main()
