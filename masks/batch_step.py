"""A batch step's fill: the rows of many matchers (of any grammars) in one numba call per thread.

masks/matcher.py's `batch_fill_next_token_bitmask` checks that it was given GrammarMatchers and
hands them here; draft masks (masks/draft.py) fill their rows here too.  This module reads the
matchers through their attributes only, so it sits below the matcher's module (which imports
it), and the matcher's draft walk (matcher -> draft -> batch_step) closes no circle.
"""

from __future__ import annotations

import operator
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import IndexOutOfRangeError, InvalidArgumentError, check_integers
from ..core.threads import (
    default_max_threads,
    resolve_max_threads,
    run_parts,
    run_shared,
    threads_for_rows,
    threads_for_work,
)
from . import batch_fill, walk
from .bitmask import clear_rows, writable_row
from .kernel_memory import address
from .state_masks import FirstVisits, ensure_batch_masks

if TYPE_CHECKING:
    from .compiler import CompiledGrammar
    from .matcher import GrammarMatcher

FIRST_SLICE = 16
"""A batch step not known to be light times its first 1/FIRST_SLICE of the rows on the calling
thread (_run_kernel)."""

_RUNNER, _STATE, _WORDS, _PLAIN_FILL, _COMPILER_THREADS = map(
    operator.attrgetter, ("_runner", "_state", "_words", "_plain_fill", "compiled_grammar.compiler.max_threads")
)


def fill_batch(
    matchers: Sequence[GrammarMatcher],
    bitmask,
    indices: Sequence[int] | None = None,
    max_threads: int | str | None = None,
    num_threads: int | None = None,
) -> None:
    """batch_fill_next_token_bitmask (masks/matcher.py, which says what it does) once the
    matchers are known to be GrammarMatchers: the rest of its checks, then the fill; on an
    exception every given row is left all zero."""
    indices = (
        range(len(matchers)) if indices is None else check_integers(indices, "indices", "batch_fill_next_token_bitmask")
    )
    if len(indices) != len(matchers):
        raise InvalidArgumentError(
            f"batch_fill_next_token_bitmask: indices must give one row per matcher: {len(matchers)} matchers "
            f"but {len(indices)} row indices"
        )
    rows = bitmask.shape[0] if len(getattr(bitmask, "shape", ())) == 2 else 1
    if indices and not 0 <= min(indices) <= max(indices) < rows:  # the kernel writes at these rows
        raise IndexOutOfRangeError(
            f"batch_fill_next_token_bitmask: indices must be rows of the bitmask, in [0, {rows}), got {indices}"
        )
    step_threads = _step_max_threads(matchers, max_threads, num_threads)  # checked even for an empty step
    if not matchers:
        return  # an empty batch step: no row to fill
    if len(set(map(id, matchers))) != len(matchers):
        raise InvalidArgumentError(
            "batch_fill_next_token_bitmask: a matcher appears twice in matchers; each row needs its own "
            "matcher (fork() one)"
        )
    writable_row(bitmask, indices[0], matchers[0]._words)  # type, dtype and shape, as a single fill checks them
    threads = min(step_threads, len(matchers))
    if len(set(map(id, map(_RUNNER, matchers)))) != len(matchers):
        threads = 1  # forks share one workspace (see fork): their rows run one after the other

    try:
        _batch_fill(matchers, bitmask, indices, threads)
    except BaseException:  # a cleanup path (interrupts too): no half-filled row stays, re-raised
        clear_rows(bitmask, indices)
        raise


def _step_max_threads(matchers: Sequence[GrammarMatcher], max_threads, num_threads) -> int:
    """The `max_threads` of a batch step: the argument, else its deprecated name `num_threads`,
    else the largest of the matchers' compilers' (the policy default when there are none)."""
    where = "batch_fill_next_token_bitmask"
    if num_threads is not None:
        warnings.warn(f"{where}: num_threads is deprecated, pass max_threads", DeprecationWarning, stacklevel=4)
        if max_threads is None:
            max_threads = num_threads
    if max_threads is not None:
        return resolve_max_threads(max_threads, where)
    return max(map(_COMPILER_THREADS, matchers), default=default_max_threads())


def _batch_fill(matchers: Sequence[GrammarMatcher], bitmask, indices: Sequence[int], threads: int) -> None:
    """batch_fill_next_token_bitmask once its arguments are checked."""

    def row_by_row(rows: list[int]) -> None:
        pairs = [(matchers[k], indices[k]) for k in rows]
        _run_chunks(
            [pairs[t::threads] for t in range(threads)], lambda m, r: m.fill_next_token_bitmask(bitmask, r), threads
        )

    target = _batch_target(bitmask, matchers)
    if target is None:  # not a CPU int32 [batch, words] array: row by row
        row_by_row(list(range(len(matchers))))
        return
    base, stride, rows_view = target
    states = list(map(_STATE, matchers))
    python_rows = [k for k, state in enumerate(states) if state.terminated or state.closed]
    kernel_rows = [k for k, state in enumerate(states) if not (state.terminated or state.closed)]
    status = np.zeros(len(matchers), dtype=np.int64)
    pending = kernel_rows
    compiler = matchers[0].compiled_grammar.compiler  # rows of other compilers' store masks in Python
    while pending:
        # the table of the rows the kernel runs, in `pending` order (row n's status: status[n])
        table = np.array([matchers[k]._batch_row(base + stride * indices[k]) for k in pending], dtype=np.int64)
        visits = FirstVisits(len(pending))
        _run_kernel(table, status, threads, visits, compiler)
        visits.share(compiler, [matchers[k].compiled_grammar for k in pending])
        done = status.tolist()  # (one list: a numpy scalar read costs more than a row's kernel)
        if not any(done[: len(pending)]):
            break  # the steady case: every row written
        redo = [(n, k) for n, k in enumerate(pending) if done[n] != 0]
        for n, k in redo:
            if done[n] == walk.FILL_UNCERTAIN:
                matchers[k]._memo = batch_fill.new_memo(matchers[k]._words)  # its first fill with walks
            elif done[n] < 0:
                python_rows.append(k)  # a buffer to grow: the single-row path does it
        # First visits: the missing masks of all rows, each (grammar, state) once, over the threads
        # (their walks release the GIL); then those rows go round again.
        _compute_missing_masks([matchers[k] for n, k in redo if done[n] == walk.FILL_MASKS_MISSING], threads)
        pending = [k for n, k in redo if done[n] > 0]
    if not all(map(_PLAIN_FILL, matchers)):  # value checks, token terminals, budgets
        skip = set(python_rows)
        for k in kernel_rows:
            if not matchers[k]._plain_fill and k not in skip:
                matchers[k]._finish_words(rows_view(indices[k], matchers[k]._words))
    if python_rows:
        row_by_row(sorted(python_rows))


class _RowTime:
    """Seconds a batch step's row took on the calling thread when it stored no masks, as last
    measured (process-wide: an estimate, written whole by any thread); None until the first
    measure, when a step times its first slice rather than take itself for light."""

    seconds: float | None = None


def _run_kernel(table: np.ndarray, status: np.ndarray, threads: int, visits: FirstVisits, compiler) -> None:
    """batch_fill.run_fill_rows over the table's rows, first visits recorded in `visits` (rows
    of `compiler`'s grammars store their own masks).  The calling thread fills rows alone and
    stops as soon as one stored masks: then the step has first visits, and the rest goes to every
    thread.  Which rows it fills alone: all of them when the last measured row time
    (_RowTime) says one thread does the step whole (threads_for_work: one call, as a steady step
    of known masks is), else the first FIRST_SLICE-th, timed, the rest going to as many threads
    as that rate says pay for.  The threads take rows from one counter, so a slow row holds up
    only its own thread; a step of few rows stays on the calling thread (threads_for_rows)."""
    counter = np.zeros(1, dtype=np.int64)
    n_rows = len(table)

    def fill(limit: int, stop_after_visit: bool = False) -> int:
        return batch_fill.run_fill_rows(table, counter, limit, stop_after_visit, status, visits.kernel_args(compiler))

    threads = threads_for_rows(threads, n_rows)
    if threads == 1:
        fill(n_rows)
        return
    light = _RowTime.seconds is not None and threads_for_work(threads, _RowTime.seconds * n_rows) == 1
    alone = n_rows if light else max(1, n_rows // FIRST_SLICE)
    start = time.perf_counter()
    if not fill(alone, True):
        _RowTime.seconds = (time.perf_counter() - start) / alone
        if alone == n_rows:
            return
        threads = threads_for_work(threads, _RowTime.seconds * (n_rows - alone))
    run_shared(lambda: fill(n_rows), threads)


def _compute_missing_masks(matchers: list[GrammarMatcher], threads: int) -> None:
    """Compute the masks the matchers' kernel stacks lack: all grammars' new states in one nogil
    kernel call per thread (state_masks.ensure_batch_masks)."""
    by_grammar: dict[int, tuple[CompiledGrammar, list]] = {}
    for matcher in matchers:
        compiled = matcher.compiled_grammar
        by_grammar.setdefault(id(compiled), (compiled, []))[1].append(matcher._state.kernel_s)
    groups = [(compiled, np.concatenate(states)) for compiled, states in by_grammar.values()]
    ensure_batch_masks(groups, threads)


def _batch_target(bitmask, matchers):
    """(address of row 0, row stride in bytes, rows_view(row, words) -> numpy view) of a C-ordered
    CPU int32 [batch, words] bitmask wide enough for every matcher, else None."""
    words = max(map(_WORDS, matchers))
    if isinstance(bitmask, np.ndarray):
        if bitmask.ndim != 2 or bitmask.dtype != np.int32 or not bitmask.flags.c_contiguous or bitmask.shape[1] < words:
            return None
        return address(bitmask), bitmask.strides[0], lambda row, n: bitmask[row, :n]
    try:
        import torch
    except ImportError:
        return None
    if (
        not isinstance(bitmask, torch.Tensor)
        or bitmask.dim() != 2
        or bitmask.dtype != torch.int32
        or bitmask.device.type != "cpu"
        or not bitmask.is_contiguous()
        or bitmask.shape[1] < words
    ):
        return None
    array = bitmask.numpy()
    return address(array), array.strides[0], lambda row, n: array[row, :n]


def _run_chunks(chunks, fill, threads: int) -> None:
    """fill(matcher, row) for each pair of each chunk, chunks spread over the threads."""

    def run(chunk):
        for matcher, row in chunk:
            fill(matcher, row)

    run_parts(chunks, run, threads)
