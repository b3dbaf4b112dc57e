"""The one thread policy: how many threads pushmask may use (`max_threads`, XGrammar's name, the
same default everywhere), the one pool they come from, and how many of them a batch step's work
actually gets (threads pay only when the work outweighs waking them).

Every layer reads it from here: the compiler (`GrammarCompiler(max_threads=...)`, the default of
its matchers' batch fills), the batch fill, BatchGrammarMatcher and the integrations.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .errors import InvalidArgumentError, check_integer

MAX_DEFAULT_THREADS = 8
"""Cap of the default: vLLM sizes its own mask-fill pool the same way (half the CPUs, at most 8)."""

MIN_WORK_PER_THREAD_S = 50e-6
"""Kernel work (estimated) below which a step adds no thread: waking one costs tens of
microseconds, and on a busy machine often more than the rows it would take."""

MIN_STATES_PER_SPLIT = 8
"""First visits of fewer new states than this run on one thread: each is one mask walk, often
shorter than waking a thread."""


def default_max_threads() -> int:
    """The PUSHMASK_MAX_THREADS environment variable (for servers, whose backends pushmask does
    not construct), else half the CPU cores, at least 1 and at most MAX_DEFAULT_THREADS:
    XGrammar's advice for `max_threads` (half the virtual cores), leaving the rest to the engine."""
    setting = os.environ.get("PUSHMASK_MAX_THREADS", "").strip()
    if setting:
        if not setting.isdigit() or int(setting) < 1:
            raise InvalidArgumentError(f"PUSHMASK_MAX_THREADS must be an integer >= 1, got {setting!r}")
        return int(setting)
    return max(1, min((os.cpu_count() or 1) // 2, MAX_DEFAULT_THREADS))


def resolve_max_threads(max_threads: Any, where: str) -> int:
    """`max_threads` as a thread count: "auto" (or None) is default_max_threads(), else an int >= 1
    (ArgumentTypeError / InvalidArgumentError naming `where` otherwise)."""
    if max_threads is None or (isinstance(max_threads, str) and max_threads == "auto"):
        return default_max_threads()
    return check_integer(max_threads, "max_threads", where, minimum=1)


def threads_for_work(max_threads: int, work_s: float) -> int:
    """Threads a step's kernel work of about `work_s` seconds pays for: one per
    MIN_WORK_PER_THREAD_S of it, between 1 and max_threads."""
    return max(1, min(max_threads, int(work_s / MIN_WORK_PER_THREAD_S)))


def threads_for_states(max_threads: int, n_states: int) -> int:
    """Threads for the first visits of `n_states` new states: max_threads from
    MIN_STATES_PER_SPLIT states up, else 1."""
    return max_threads if n_states >= MIN_STATES_PER_SPLIT else 1


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    """The one pool, made on first use with `workers` threads and grown (replaced) when a call
    needs more; under a lock, so fills on several threads never make two at once."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < workers:
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pushmask-fill")
        return _POOL


def run_parts(parts: Sequence[Any], work: Callable[[Any], None], threads: int) -> None:
    """work(part) for each non-empty part, taken in turn by the calling thread and up to threads - 1
    pool threads.  Returns once every part is done, without waiting for pool threads that took
    none (a busy machine may start them late: the caller then did the work alone).  The first
    error a part raised is re-raised here."""
    parts = [p for p in parts if len(p)]
    if threads <= 1 or len(parts) <= 1:
        for part in parts:
            work(part)
        return
    pool = _pool(threads - 1)
    lock, done = threading.Lock(), threading.Event()
    queue = list(reversed(parts))
    left = [len(parts)]
    errors: list[BaseException] = []

    def drain():
        while True:
            with lock:
                if not queue:
                    return
                part = queue.pop()
            try:
                work(part)
            except BaseException as error:  # noqa: BLE001 -- re-raised on the calling thread
                errors.append(error)
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()

    for _ in range(min(threads, len(parts)) - 1):
        pool.submit(drain)
    drain()
    done.wait()
    if errors:
        raise errors[0]
