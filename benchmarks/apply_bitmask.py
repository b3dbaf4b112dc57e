"""Applying a token bitmask to logits: pushmask's kernels, its torch-operations path, XGrammar's and
llguidance's `apply_token_bitmask_inplace`, side by side in one run.

    python benchmarks/apply_bitmask.py [--device cuda|cpu] [--batch 1,16,64,256] [--repeats 30]

On CUDA (the default when a device is present) pushmask's default path is its Triton kernel when
triton is installed; on the CPU it is its numba kernel. "pushmask torch-ops" is the fallback,
forced with PUSHMASK_APPLY_KERNEL=torch. Logits [B, 128256] (Llama 3's vocabulary), float32 and
bfloat16; masks of two kinds: "random" (each token allowed with probability 0.3, as
../shared/bench/serve_overhead.py draws them) and "json" (what a JSON grammar allows most steps:
all words zero but a few hundred scattered tokens). Each engine's result is checked against a
reference first. The bitmask lies on the logits' device; each timed call masks a fresh copy of
the logits. CUDA: CUDA events around the call (so the launch's host time counts when it exceeds
the kernel's); CPU: wall time. Prints the p50 over the repeats, in microseconds, and the device.
Engines that are not installed are left out (xgrammar and llguidance: the bench extra).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import torch

from pushmask.masks import bitmask as pm_bitmask

VOCAB = 128256


def engines(device: str) -> dict:
    """name -> apply(logits, bitmask) for every engine importable here."""

    def pushmask_default(logits, words):
        pm_bitmask.apply_token_bitmask_inplace(logits, words)

    def pushmask_torch_ops(logits, words):
        os.environ[pm_bitmask.KERNEL_SWITCH] = "torch"
        try:
            pm_bitmask.apply_token_bitmask_inplace(logits, words)
        finally:
            del os.environ[pm_bitmask.KERNEL_SWITCH]

    if device == "cuda":
        default = "triton" if pm_bitmask._triton_ready() else "torch-ops (triton not installed)"
    else:
        default = "numba"
    found = {f"pushmask {default}": pushmask_default, "pushmask torch-ops": pushmask_torch_ops}
    try:
        import xgrammar

        found["xgrammar"] = lambda logits, words: xgrammar.apply_token_bitmask_inplace(logits, words)
    except ImportError:
        pass
    try:
        import llguidance.torch

        found["llguidance"] = lambda logits, words: llguidance.torch.apply_token_bitmask_inplace(logits, words)
    except ImportError:
        pass
    return found


def masks(kind: str, rows: int, rng) -> np.ndarray:
    """Bool [rows, VOCAB]: which tokens each row allows."""
    if kind == "random":
        return rng.random((rows, VOCAB)) < 0.3
    allowed = np.zeros((rows, VOCAB), dtype=bool)
    for r in range(rows):
        allowed[r, rng.choice(VOCAB, 300, replace=False)] = True
    return allowed


def time_call(apply, logits, base, words, device: str, repeats: int) -> float:
    """p50 microseconds of apply(logits, words), logits reset from base before each call."""
    times = []
    for i in range(repeats + 3):  # the first calls warm up (compiles, caches)
        logits.copy_(base)
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            apply(logits, words)
            end.record()
            torch.cuda.synchronize()
            elapsed = start.elapsed_time(end) * 1000
        else:
            begin = time.perf_counter()
            apply(logits, words)
            elapsed = (time.perf_counter() - begin) * 1e6
        if i >= 3:
            times.append(elapsed)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", default="1,16,64,256", help="batch sizes, comma separated")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--masks", default="random,json", help="mask kinds: random, json")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per cell (30 on CUDA, 10 on CPU)")
    args = parser.parse_args()
    device = args.device
    repeats = args.repeats or (30 if device == "cuda" else 10)
    if device == "cuda":
        where = torch.cuda.get_device_name()
    else:
        where = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()})"
    found = engines(device)
    print(f"device: {device}: {where}; torch {torch.__version__}; vocab {VOCAB}; p50 of {repeats} calls, us")
    names = list(found)
    print("| mask | B | dtype | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    rng = np.random.default_rng(0)
    for kind in args.masks.split(","):
        for rows in (int(b) for b in args.batch.split(",")):
            allowed = masks(kind, rows, rng)
            words = torch.from_numpy(pm_bitmask.bool_to_bitmask(allowed)).to(device)
            allowed_t = torch.from_numpy(allowed).to(device)
            for dtype_name in args.dtypes.split(","):
                dtype = getattr(torch, dtype_name)
                base = torch.randn(rows, VOCAB, device=device, dtype=dtype)
                expected = torch.where(allowed_t, base, torch.full_like(base, float("-inf")))
                logits = base.clone()
                cells = []
                for name in names:
                    logits.copy_(base)
                    found[name](logits, words)
                    if not torch.equal(logits, expected):
                        cells.append("WRONG")
                        continue
                    cells.append(f"{time_call(found[name], logits, base, words, device, repeats):.0f}")
                print(f"| {kind} | {rows} | {dtype_name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
