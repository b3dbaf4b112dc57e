"""The persistent stack: a growable pool of hash-consed frames, the scratch workspace of the
kernels, and the Python side of the kernels' grow-and-retry protocol.

Both live in single flat blobs (layouts in kernels.py) so a kernel call takes few arguments.
Stack sets handed to and from the kernels are int64 arrays (the workspace's element type).
"""

from __future__ import annotations

import numpy as np

from ..core.errors import LimitExceededError
from ..core.jit import njit
from ..core.limits import Limits
from . import kernels
from .pda import Pda


def _next_pow2(n: int) -> int:
    return 1 << max(4, (int(n) - 1).bit_length())


def _pool_blob(capacity: int) -> np.ndarray:
    table = _next_pow2(2 * capacity)
    blob = np.zeros(kernels.POOL_HEADER + 2 * capacity + table, dtype=np.int32)
    blob[1] = capacity
    blob[2] = table
    return blob


class FramePool:
    """Immutable frames (return_state, parent_frame), interned so equal stacks are equal ids.

    Frames are never freed while the pool lives: a set of stacks from any earlier step stays
    valid, which is what makes rollback O(1).
    """

    def __init__(self, capacity: int = 1 << 10, max_frames: int = 1 << 24):
        self.max_frames = max_frames
        self.blob = _pool_blob(min(capacity, max_frames))

    def __len__(self) -> int:
        return int(self.blob[0])

    @property
    def capacity(self) -> int:
        return int(self.blob[1])

    def frame(self, frame_id: int) -> tuple[int, int]:
        """(return_state, parent_frame) of a frame."""
        h = kernels.POOL_HEADER
        return int(self.blob[h + frame_id]), int(self.blob[h + self.capacity + frame_id])

    def grow(self) -> None:
        old, capacity = self.blob, min(2 * self.capacity, self.max_frames)
        if capacity == self.capacity:  # already max_frames frames: the pool is full for good
            raise LimitExceededError(
                f"more than {self.max_frames} stack frames; the grammar nests rules too deeply for "
                "this input (raise Limits.max_stack_frames or bound the recursion)"
            )
        n, h, old_capacity = len(self), kernels.POOL_HEADER, int(old[1])
        blob = _pool_blob(capacity)
        blob[0] = n
        blob[h : h + n] = old[h : h + n]
        blob[h + capacity : h + capacity + n] = old[h + old_capacity : h + old_capacity + n]
        kernels.rehash_pool(blob)
        self.blob = blob

    def nbytes(self) -> int:
        return self.blob.nbytes


class Workspace:
    """Scratch for one thread of kernel calls: stack-set buffers, trie-walk levels, dedupe table,
    closure memo (valid as long as the frame pool it was filled with: one runner's)."""

    def __init__(self, max_stack_tops: int, max_token_length: int, buffer_size: int = 1 << 12):
        self.max_stack_tops = max_stack_tops
        self.levels = max_token_length + 2
        self.seen_size = _next_pow2(4 * (max_stack_tops + 1))
        self.blob = self._make(buffer_size, epoch=0)

    def _memo_start(self, buffer_size: int) -> int:
        """Offset of the closure memo's entries in a blob with buffers of `buffer_size`."""
        return kernels.WS_HEADER + 2 * buffer_size + kernels.WS_LEVEL_ARRAYS * self.levels + 3 * self.seen_size

    def _make(self, buffer_size: int, epoch: int) -> np.ndarray:
        slots, pool = kernels.WS_MEMO_SLOTS, kernels.WS_MEMO_POOL
        memo_start = self._memo_start(buffer_size)
        blob = np.zeros(memo_start + 4 * slots + 2 * pool, dtype=np.int64)
        blob[:7] = (epoch, buffer_size, self.levels, self.seen_size, slots, pool, 0)
        blob[memo_start : memo_start + 4 * slots : 4] = -1  # empty memo entries
        return blob

    def clear_memo(self) -> None:
        """Forget the closure memo: it holds stacks of the automaton and frame pool it was filled
        with, so a workspace that goes to another runner must start without it."""
        clear_closure_memo(self.blob)

    @property
    def buffer_size(self) -> int:
        return int(self.blob[1])

    def buffers(self) -> tuple[np.ndarray, np.ndarray]:
        b, o = self.buffer_size, kernels.WS_HEADER
        return self.blob[o : o + b], self.blob[o + b : o + 2 * b]

    def grow_buffers(self) -> None:
        # Dedupe tables are epoch-stamped, so a fresh blob only needs the epoch carried over (the
        # closure memo starts empty).
        self.blob = self._make(2 * self.buffer_size, epoch=int(self.blob[0]))


@njit(cache=True, nogil=True)
def clear_closure_memo(ws):
    """Empty a workspace blob's closure memo (every entry, and its pool), for a kernel that takes
    the workspace from one grammar's stacks to another's (Workspace.clear_memo)."""
    entries = kernels.ws_memo(ws)
    for slot in range(ws[4]):
        ws[entries + 4 * slot] = -1
    ws[6] = 0  # memo pool used


def too_many_tops(max_tops: int) -> LimitExceededError:
    return LimitExceededError(
        f"more than {max_tops} live stack tops: the grammar is too ambiguous here (the same text "
        "parses in very many ways). Make alternatives disjoint or raise Limits.max_stack_tops"
    )


class _Slot:
    """A placeholder in StackRunner.run's arguments for one of the runner's own values."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


PDA_BLOB, POOL_BLOB, WS_BLOB, MAX_TOPS = (_Slot(name) for name in ("PDA_BLOB", "POOL_BLOB", "WS_BLOB", "MAX_TOPS"))
"""StackRunner.run's placeholders: the PDA, frame-pool and workspace blobs and the stack-top budget."""


class StackRunner:
    """Runs the kernels for one PDA with one frame pool and one workspace, growing them on demand."""

    def __init__(
        self,
        pda: Pda,
        limits: Limits,
        max_token_length: int,
        pool: FramePool | None = None,
        ws: Workspace | None = None,
    ):
        self.pda = pda
        self.limits = limits
        # `is None`, not `or`: an empty pool is falsy (len 0) and must still be the one given
        self.pool = FramePool(max_frames=limits.max_stack_frames) if pool is None else pool
        self.ws = Workspace(limits.max_stack_tops, max_token_length) if ws is None else ws

    def handle(self, status: int) -> None:
        """Make room after a kernel's ERR_* status (the caller then retries), or raise."""
        if status == kernels.ERR_POOL_FULL:
            self.pool.grow()
        elif status == kernels.ERR_BUFFER_FULL:
            self.ws.grow_buffers()
        elif status == kernels.ERR_TOO_MANY_TOPS:
            raise too_many_tops(self.limits.max_stack_tops)
        else:
            raise RuntimeError(f"unexpected kernel status {status}")

    def run(self, kernel, *args, on_retry=None) -> int:
        """kernel(*args) with this runner's current blobs and budget where `args` hold PDA_BLOB,
        POOL_BLOB, WS_BLOB and MAX_TOPS (a grown pool or workspace is a new blob), called again
        after each ERR_* status once `handle` made room and on_retry() undid any partial output.
        Returns the kernel's first status >= 0 (0: done; positive: a request to the caller)."""
        while True:
            values = {
                PDA_BLOB: self.pda.blob,
                POOL_BLOB: self.pool.blob,
                WS_BLOB: self.ws.blob,
                MAX_TOPS: self.limits.max_stack_tops,
            }
            status = kernel(*[values[a] if isinstance(a, _Slot) else a for a in args])
            if status >= 0:
                return status
            self.handle(status)
            if on_retry is not None:
                on_retry()

    def close(self, kernel_s: np.ndarray, kernel_p: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
        """(closure_s, closure_p, n_kernel_distinct, flags) of a raw stack set."""
        n = len(kernel_s)
        while True:
            if n > self.ws.buffer_size:
                self.ws.grow_buffers()
                continue
            buf_s, buf_p = self.ws.buffers()
            buf_s[:n] = kernel_s
            buf_p[:n] = kernel_p
            count, flags, n_kernel = kernels.run_closure(
                self.pda.blob, self.pool.blob, self.ws.blob, n, self.limits.max_stack_tops
            )
            if count >= 0:
                buf_s, buf_p = self.ws.buffers()
                return buf_s[:count].copy(), buf_p[:count].copy(), n_kernel, flags
            self.handle(count)

    def advance(self, stacks: np.ndarray, data: np.ndarray, start: int = 0, end: int = -1):
        """None if the bytes data[start:end] (end -1: all) are rejected from the packed closed
        stack set, else (new packed set, n_kernel, flags); see kernels.run_advance."""
        if end < 0:
            end = len(data)
        while True:
            status, new_stacks, n_kernel, flags = kernels.run_advance(
                self.pda.blob,
                self.pool.blob,
                self.ws.blob,
                stacks,
                data,
                start,
                end,
                self.limits.max_stack_tops,
            )
            if status == 1:
                return None
            if status == 0:
                return new_stacks, n_kernel, flags
            self.handle(status)
