"""Cold compile time of JSON Schemas to grammar IR (`json_schema_to_grammar`), per schema.

    python benchmarks/compile_time.py [--every 28] [--order any] [--closed] [--profile out.prof]

Takes every N-th schema of the MaskBench dev set (sorted file names), clears the leaf and rule-DFA
caches before each one, and prints the total, p50, p99 and max seconds over the schemas that
compile, in wall-clock and process CPU seconds (schemas that raise are counted by error type).  With --profile the whole run
is recorded with cProfile into the given file.  --closed compiles with
additional_properties_default=False (no "any other key" members where the schema does not ask for
them), to see what those members cost.
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
    args = parser.parse_args(argv)

    files = sample(args.every)
    schemas = [(f.name, json.loads(f.read_text())["schema"]) for f in files]
    json_schema_to_grammar({"type": "string"})  # import-time work out of the timings
    times: list[tuple[float, str]] = []
    errors: Counter = Counter()
    profiler = cProfile.Profile() if args.profile else None
    for name, schema in schemas:
        clear_caches()
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


if __name__ == "__main__":
    raise SystemExit(main())
