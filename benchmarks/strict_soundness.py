"""The generation defaults only narrow, over whole corpora: every schema of MaskBench-dev and every
Test Suite group (all drafts) compiled as compile_json_schema compiles it by default (strict mode,
definition order, flexible whitespace, Llama-3); no invalid test instance may be accepted, and
random mask-guided outputs (several walks per schema) must validate with jsonschema.  The seeded
sample of the same check runs in tests/test_strict_mode.py.

    python benchmarks/strict_soundness.py suite                 # every Test Suite group
    python benchmarks/strict_soundness.py dev [--limit N]       # MaskBench-dev (first N of a seeded shuffle)

Prints the counts (schemas, compiled, walks, outputs, invalid) and every invalid case.
"""

import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import test_strict_mode as strict  # noqa: E402

WALKS = 3


def main(corpus: str, limit: int | None) -> None:
    cases = list(strict.suite_cases(None) if corpus == "suite" else strict.dev_cases(None))
    random.Random(strict.SAMPLE_SEED).shuffle(cases)
    cases = cases[:limit]
    counts, invalid = strict.new_counts(), []
    rng = np.random.default_rng(strict.SAMPLE_SEED)
    start = time.time()
    for n, case in enumerate(cases, 1):
        bad = strict.check_case(*case, WALKS, rng, counts)
        for line in bad:
            print("INVALID", line, flush=True)
        invalid += bad
        if n % 10 == 0:
            print(f"{n}/{len(cases)}", counts, f"invalid={len(invalid)}", f"{time.time() - start:.0f}s", flush=True)
    print(corpus, counts, f"invalid={len(invalid)}", f"{time.time() - start:.0f}s")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], int(args[args.index("--limit") + 1]) if "--limit" in args else None)
