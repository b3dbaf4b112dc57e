"""One numba call fills many rows of a batch step, without the GIL.

Rows belong to different grammars, so each has its own PDA, frame pool, workspace and mask store;
a numba call cannot take a list of arrays cheaply (a typed List costs microseconds per element
to build), so each row is described by one row of an int64 table holding the address and length
of every array `walk.run_fill` reads or writes (`ROW_*` columns below), and the kernel views them
in place.  The caller keeps every described array alive until the call returns (the matcher's
state, runner and grammar hold them).  A row whose fill needs Python (a first visit's masks, an
uncertain-token walk to memoise, a buffer to grow) gets a positive or ERR_* status and nothing
else happens to it; the caller finishes it with the single-row path.
"""

from __future__ import annotations

from numba import carray, types
from numba.extending import intrinsic

from ..jit import njit
from .walk import run_fill

(
    ROW_WORDS,
    ROW_N_WORDS,
    ROW_STACKS,
    ROW_N_STACKS,
    ROW_N_KERNEL,
    ROW_CAN_END,
    ROW_STOPS,
    ROW_N_STOPS,
    ROW_PDA,
    ROW_N_PDA,
    ROW_POOL,
    ROW_N_POOL,
    ROW_WS,
    ROW_N_WS,
    ROW_TRIE,
    ROW_N_TRIE,
    ROW_MASK_INDEX,
    ROW_N_MASK_INDEX,
    ROW_MASK_POOL,
    ROW_N_MASK_POOL,
    ROW_SLICE_ROWS,
    ROW_N_SLICE_ROWS,
    ROW_MAX_TOPS,
    ROW_UNCERTAIN_OK,
    ROW_COPY_FROM,
) = range(25)
ROW_FIELDS = 25
"""ROW_COPY_FROM: nonzero = the address of a memoised bitmask (ROW_N_WORDS words) to copy instead."""


def pointer_intrinsic(dtype):
    """An intrinsic that views an int64 address as a pointer to `dtype` (carray's argument)."""

    @intrinsic
    def as_pointer(typingctx, address):
        sig = types.CPointer(dtype)(types.int64)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(types.CPointer(dtype)))

        return sig, codegen

    return as_pointer


_i32 = pointer_intrinsic(types.int32)
_i64 = pointer_intrinsic(types.int64)


@njit(cache=True)
def address(array):
    """Where an array's data lies: one numba call costs a fifth of `array.ctypes.data`."""
    return array.ctypes.data


@njit(cache=True, nogil=True)
def run_fill_rows(table, rows, status):
    """walk.run_fill for each row k of `table` listed in `rows`; its status goes to status[k]."""
    for k in rows:
        d = table[k]
        n_words = d[ROW_N_WORDS]
        words = carray(_i32(d[ROW_WORDS]), n_words)
        if d[ROW_COPY_FROM] != 0:
            words[:] = carray(_i32(d[ROW_COPY_FROM]), n_words)
            status[k] = 0
            continue
        status[k] = run_fill(
            words,
            carray(_i64(d[ROW_STACKS]), d[ROW_N_STACKS]),
            d[ROW_N_KERNEL],
            d[ROW_CAN_END] != 0,
            carray(_i64(d[ROW_STOPS]), d[ROW_N_STOPS]),
            carray(_i32(d[ROW_PDA]), d[ROW_N_PDA]),
            carray(_i32(d[ROW_POOL]), d[ROW_N_POOL]),
            carray(_i64(d[ROW_WS]), d[ROW_N_WS]),
            carray(_i32(d[ROW_TRIE]), d[ROW_N_TRIE]),
            carray(_i32(d[ROW_MASK_INDEX]), d[ROW_N_MASK_INDEX]),
            carray(_i32(d[ROW_MASK_POOL]), d[ROW_N_MASK_POOL]),
            carray(_i32(d[ROW_SLICE_ROWS]), (d[ROW_N_SLICE_ROWS], n_words)),
            d[ROW_MAX_TOPS],
            d[ROW_UNCERTAIN_OK] != 0,
        )
    return 0
