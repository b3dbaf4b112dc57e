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

MIN_WORK_PER_THREAD_S = 500e-6
"""Kernel work (estimated from a step's first rows, which include the call's own cost) below which
a batch step adds no thread: on 2 cores a step of 64 rows whose masks are known (about 0.45 ms)
was slower on two threads (0.49 vs 0.44 ms at 250 us here): waking one, the GIL hand-offs and the
wait for it cost about what it saves.  A step with first visits (2 ms and more) still splits."""

MIN_ROWS_PER_SPLIT = 8
"""Rows below which a batch step's fill runs on the calling thread alone: each row is a few
microseconds when its masks are known, less than waking a pool thread."""

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


def threads_for_rows(max_threads: int, n_rows: int) -> int:
    """Threads for a batch fill of `n_rows` rows: max_threads from MIN_ROWS_PER_SPLIT rows up, else 1
    (the threads share the rows by a counter: one that starts late finds none and costs nothing)."""
    return max_threads if n_rows >= MIN_ROWS_PER_SPLIT else 1


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


def run_shared(work: Callable[[], object], threads: int) -> None:
    """work() on the calling thread and on up to threads - 1 pool threads, for work its calls share
    out among themselves (a kernel taking rows from an atomic counter, so each thread takes rows
    as long as there are any: no part waits behind a slow one).  Returns when the calling
    thread's call and every pool thread's call that began before it ended are done; a pool
    thread that starts later does nothing (a busy machine may start it late: the caller did
    the work).  The first error a call raised is re-raised here."""
    if threads <= 1:
        work()
        return
    pool = _pool(threads - 1)
    lock, done = threading.Lock(), threading.Event()
    running = [0]
    closed = [False]
    errors: list[BaseException] = []

    def helper():
        with lock:
            if closed[0]:
                return
            running[0] += 1
        try:
            work()
        except BaseException as error:  # noqa: BLE001 -- re-raised on the calling thread
            errors.append(error)
        finally:
            with lock:
                running[0] -= 1
                if closed[0] and running[0] == 0:
                    done.set()

    for _ in range(threads - 1):
        pool.submit(helper)
    try:
        work()
    finally:
        with lock:
            closed[0] = True
            if running[0] == 0:
                done.set()
        done.wait()
    if errors:
        raise errors[0]
