"""Import to first mask with no prepared kernels and an empty numba cache: what a user of an sdist,
another numba or another CPU waits for once (issue 44's target: a notice within 1 s, the first
mask within 60 s on 2 cores).

A fresh child process (NUMBA_CACHE_DIR at a new empty folder, PUSHMASK_KERNEL_CACHE at one that
holds only the manifests, as an sdist's does) imports pushmask, compiles a small schema on the
built-in small vocabulary and fills two masks. Printed: the wall, the child's CPU seconds to the
first mask and the CPU of all (the child and its compile workers: less sensitive to a shared
machine's load than wall), the load average, when the compile notice appeared, and per kernel the
signatures compiled in the child and their compile seconds (exclusive: a callee's compile is not
counted in its caller's). --no-ahead: no compile workers (PUSHMASK_COMPILE_AHEAD=0).

    .venv/bin/python benchmarks/cold_first_mask.py [--top 25] [--signatures] [--no-ahead]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

CHILD = textwrap.dedent("""
    import json, resource, sys, time
    started = time.perf_counter()
    from numba.core import event

    compiles = {}  # kernel -> [signatures, exclusive seconds, [signature, ...]]
    stack = []  # [kernel, start, seconds of nested compiles, signature]

    class Profile(event.Listener):
        def on_start(self, ev):
            function = ev.data["dispatcher"].py_func
            signature = ", ".join(map(str, ev.data["args"]))
            stack.append([f"{function.__module__}.{function.__qualname__}", time.perf_counter(), 0.0, signature])

        def on_end(self, ev):
            kernel, start, nested, signature = stack.pop()
            took = time.perf_counter() - start
            entry = compiles.setdefault(kernel, [0, 0.0, []])
            entry[0] += 1
            entry[1] += took - nested
            entry[2].append(signature)
            if stack:
                stack[-1][2] += took

    event.register("numba:compile", Profile())
    import pushmask, pushmask.core.jit as jit
    from pushmask.warmup import small_vocabulary

    imported = time.perf_counter() - started
    info = small_vocabulary()
    compiled = pushmask.GrammarCompiler(info).compile_json_schema(
        {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
         "required": ["name", "age"]})
    matcher = pushmask.GrammarMatcher(compiled)
    bitmask = pushmask.allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    first_mask = time.perf_counter() - started
    first_mask_cpu = time.process_time()
    assert matcher.accept_string('{"name": "B')
    matcher.fill_next_token_bitmask(bitmask)
    print(json.dumps({
        "import_s": imported, "first_mask_s": first_mask, "second_mask_s": time.perf_counter() - started,
        "first_mask_cpu_s": first_mask_cpu, "compiled": jit.cache_stats()[1], "kernels": compiles,
    }))
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=25, help="kernels listed, slowest first")
    parser.add_argument(
        "--signatures", action="store_true", help="list the signatures of kernels compiled more than once"
    )
    parser.add_argument("--no-ahead", action="store_true", help="no compile workers")
    args = parser.parse_args()
    import pushmask.core.jit

    with tempfile.TemporaryDirectory() as prepared, tempfile.TemporaryDirectory() as numba_cache:
        for manifest in pushmask.core.jit.PREPARED_DIR.glob("prepared-*.json"):
            shutil.copy(manifest, prepared)
        env = dict(os.environ, PUSHMASK_KERNEL_CACHE=prepared, NUMBA_CACHE_DIR=numba_cache)
        env.pop("NUMBA_CPU_NAME", None)
        if args.no_ahead:
            env[pushmask.core.jit.COMPILE_AHEAD_ENV] = "0"
        load = os.getloadavg()[0]
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        notice_s = None
        stderr_lines = []
        for line in proc.stderr:  # read as it comes, to time the notice
            if notice_s is None and line.startswith("pushmask: compiling"):
                notice_s = time.perf_counter() - started
            stderr_lines.append(line.rstrip("\n"))
        stdout = proc.stdout.read()
        proc.wait()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child and, waited for by it, its workers
        if proc.returncode:
            sys.exit("\n".join(stderr_lines))
    out = json.loads(stdout.strip().splitlines()[-1])
    notice = next((line for line in stderr_lines if line.startswith("pushmask: compiling")), None)
    print(f"load average (1 min) at start {load:.2f}, at end {os.getloadavg()[0]:.2f}")
    print(f"notice after {notice_s:.2f} s of the process: {notice}" if notice else "no compile notice")
    print(
        f"import {out['import_s']:.1f} s; first mask at {out['first_mask_s']:.1f} s wall, "
        f"second at {out['second_mask_s']:.1f} s; CPU to the first mask {out['first_mask_cpu_s']:.1f} s, "
        f"of all processes {usage.ru_utime + usage.ru_stime:.1f} s; {out['compiled']} signatures compiled here"
    )
    print(f"{'kernel':60} {'sigs':>4} {'seconds':>8}")
    kernels = sorted(out["kernels"].items(), key=lambda item: -item[1][1])
    for name, (count, seconds, signatures) in kernels[: args.top]:
        print(f"{name.removeprefix('pushmask.'):60} {count:>4} {seconds:>8.1f}")
        if args.signatures and count > 1:
            for signature in signatures:
                print(f"    ({signature})")
    rest = kernels[args.top :]
    if rest:
        print(f"{'(%d more)' % len(rest):60} {sum(k[1][0] for k in rest):>4} {sum(k[1][1] for k in rest):>8.1f}")
    for line in stderr_lines:
        if line.startswith("pushmask:"):
            print("stderr:", line)


if __name__ == "__main__":
    main()
