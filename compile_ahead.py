"""A compile worker: `python -m pushmask.compile_ahead PARENT INDEX COUNT` compiles its share
(every COUNT-th from INDEX) of the first mask's kernel signatures, from the last needed back,
into numba's cache, while the parent process compiles from the first on (`jit.CompileAhead`
starts it). It exits as soon as the parent is gone; a signature that does not compile is skipped."""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
import time

from .core import jit


def compile_share(index: int, count: int) -> int:
    """Compile (or find cached) this worker's share; the number of signatures done."""
    done = 0
    for kernel, arg_types in jit.first_mask_signatures()[::-1][index::count]:
        try:
            module, qualname = kernel.split(":")
            dispatcher = functools.reduce(getattr, qualname.split("."), importlib.import_module(module))
            dispatcher.compile(tuple(map(jit.parse_type, arg_types)))
        except Exception as exc:  # noqa: BLE001 - the parent compiles what a worker could not
            jit.log.debug("pushmask: compile worker skipped %s%s: %s", kernel, arg_types, exc)
            continue
        done += 1
    return done


def _exit_when_orphaned(parent: int) -> None:
    """Exit at once when the parent is gone (numba writes cache files whole, by renaming)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


if __name__ == "__main__":
    parent, index, count = map(int, sys.argv[1:4])
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()
    print(compile_share(index, count))
