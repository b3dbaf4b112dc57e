"""The persistent stack: a growable pool of hash-consed frames, scratch buffers for the kernels,
and the Python side of the kernels' grow-and-retry protocol."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..grammar.errors import BudgetExceededError
from . import kernels
from .pda import Budgets, Pda


def _next_pow2(n: int) -> int:
    return 1 << max(4, (int(n) - 1).bit_length())


@njit(cache=True)
def _rehash(frame_state, frame_parent, count, table):
    mask = table.shape[0] - 1
    for node in range(count):
        i = kernels._pair_hash(frame_state[node], frame_parent[node]) & mask
        while table[i] != 0:
            i = (i + 1) & mask
        table[i] = node + 1


class FramePool:
    """Immutable frames (return_state, parent_frame), interned so equal stacks are equal ids.

    Frames are never freed while the pool lives: a set of stacks from any earlier step stays
    valid, which is what makes rollback O(1).
    """

    def __init__(self, capacity: int = 1 << 10, max_frames: int = 1 << 24):
        self.max_frames = max_frames
        self.frame_state = np.empty(capacity, dtype=np.int32)
        self.frame_parent = np.empty(capacity, dtype=np.int32)
        self.frame_count = np.zeros(1, dtype=np.int64)
        self.frame_table = np.zeros(_next_pow2(2 * capacity), dtype=np.int32)

    def arrays(self) -> tuple:
        return self.frame_state, self.frame_parent, self.frame_count, self.frame_table

    def __len__(self) -> int:
        return int(self.frame_count[0])

    def grow(self) -> None:
        capacity = 2 * len(self.frame_state)
        if capacity > self.max_frames:
            raise BudgetExceededError(
                f"more than {self.max_frames} stack frames; the grammar nests rules too deeply for "
                "this input (raise Budgets.max_stack_frames or bound the recursion)"
            )
        n = len(self)
        for name in ("frame_state", "frame_parent"):
            grown = np.empty(capacity, dtype=np.int32)
            grown[:n] = getattr(self, name)[:n]
            setattr(self, name, grown)
        self.frame_table = np.zeros(_next_pow2(2 * capacity), dtype=np.int32)
        _rehash(self.frame_state, self.frame_parent, n, self.frame_table)

    def nbytes(self) -> int:
        return self.frame_state.nbytes + self.frame_parent.nbytes + self.frame_table.nbytes


class Workspace:
    """Scratch arrays for one thread of kernel calls: stack-set buffers, trie-walk levels, dedupe table."""

    def __init__(self, max_stack_tops: int, max_token_length: int, buffer_size: int = 1 << 12):
        self.max_stack_tops = max_stack_tops
        self.buf_s = np.empty(buffer_size, dtype=np.int32)
        self.buf_p = np.empty(buffer_size, dtype=np.int32)
        levels = max_token_length + 2
        self.lvl_start = np.zeros(levels, dtype=np.int64)
        self.lvl_n = np.zeros(levels, dtype=np.int64)
        self.lvl_flag = np.zeros(levels, dtype=np.int64)
        self.e_before = np.zeros(levels, dtype=np.uint8)
        table = _next_pow2(4 * (max_stack_tops + 1))
        self.seen_state = np.empty(table, dtype=np.int32)
        self.seen_parent = np.empty(table, dtype=np.int32)
        self.seen_epoch = np.zeros(table, dtype=np.int64)
        self.epoch = np.zeros(1, dtype=np.int64)

    def seen_arrays(self) -> tuple:
        return self.seen_state, self.seen_parent, self.seen_epoch, self.epoch

    def grow_buffers(self) -> None:
        size = 2 * len(self.buf_s)
        self.buf_s = np.empty(size, dtype=np.int32)
        self.buf_p = np.empty(size, dtype=np.int32)


def too_many_tops(max_tops: int) -> BudgetExceededError:
    return BudgetExceededError(
        f"more than {max_tops} live stack tops: the grammar is too ambiguous here (the same text "
        "parses in very many ways). Make alternatives disjoint or raise Budgets.max_stack_tops"
    )


class StackRunner:
    """Runs the kernels for one PDA with one frame pool, growing buffers on demand."""

    def __init__(self, pda: Pda, budgets: Budgets, max_token_length: int, pool: FramePool | None = None):
        self.pda = pda
        self.budgets = budgets
        self.pool = pool or FramePool(max_frames=budgets.max_stack_frames)
        self.ws = Workspace(budgets.max_stack_tops, max_token_length)
        self._pda_arrays = pda.kernel_arrays()
        self._no_follow = np.zeros(256, dtype=np.uint8)

    def _handle(self, status: int) -> None:
        if status == kernels.ERR_POOL_FULL:
            self.pool.grow()
        elif status == kernels.ERR_BUFFER_FULL:
            self.ws.grow_buffers()
        elif status == kernels.ERR_TOO_MANY_TOPS:
            raise too_many_tops(self.budgets.max_stack_tops)
        else:
            raise RuntimeError(f"unexpected kernel status {status}")

    def close(self, kernel_s: np.ndarray, kernel_p: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
        """(closure_s, closure_p, n_kernel_distinct, flags) of a raw stack set."""
        while True:
            ws = self.ws
            n = len(kernel_s)
            if n > len(ws.buf_s):
                ws.grow_buffers()
                continue
            ws.buf_s[:n] = kernel_s
            ws.buf_p[:n] = kernel_p
            count, flags, n_kernel = kernels.closure(
                *self._pda_arrays, *self.pool.arrays(), ws.buf_s, ws.buf_p, 0, n, *ws.seen_arrays(),
                self.budgets.max_stack_tops,
            )
            if count >= 0:
                return ws.buf_s[:count].copy(), ws.buf_p[:count].copy(), n_kernel, flags
            self._handle(count)

    def advance(self, closure_s: np.ndarray, closure_p: np.ndarray, data: np.ndarray):
        """None if the bytes are rejected, else (kernel_s, kernel_p, closure_s, closure_p, flags)."""
        while True:
            ws = self.ws
            status, offset, n_kernel, n_closure, flags = kernels.advance(
                *self._pda_arrays, *self.pool.arrays(), closure_s, closure_p, data, ws.buf_s, ws.buf_p,
                *ws.seen_arrays(), self.budgets.max_stack_tops,
            )
            if status == 1:
                return None
            if status == 0:
                new_s = ws.buf_s[offset : offset + n_closure].copy()
                new_p = ws.buf_p[offset : offset + n_closure].copy()
                return new_s[:n_kernel], new_p[:n_kernel], new_s, new_p, flags
            self._handle(status)

    def walk(self, trie, candidates: np.ndarray, init_s: np.ndarray, init_p: np.ndarray, offline: bool) -> np.ndarray:
        """Classify trie positions `candidates` from the stack set init (see kernels.walk_tokens).

        Offline, init must be one stack on BOTTOM; its rule's FOLLOW set filters uncertain exits.
        """
        result = np.empty(len(candidates), dtype=np.int8)
        follow = self.pda.rule_follow[self.pda.state_rule[init_s[0]]] if offline else self._no_follow
        while True:
            ws = self.ws
            status = kernels.walk_tokens(
                *self._pda_arrays, *self.pool.arrays(), trie.tok_offsets, trie.tok_bytes, trie.lcp,
                candidates, init_s, init_p, offline, follow, ws.buf_s, ws.buf_p, ws.lvl_start, ws.lvl_n,
                ws.lvl_flag, ws.e_before, *ws.seen_arrays(), self.budgets.max_stack_tops, result,
            )
            if status == 0:
                return result
            self._handle(status)
