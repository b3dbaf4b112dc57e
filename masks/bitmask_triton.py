"""apply_token_bitmask_inplace on a GPU as one fused Triton kernel (imported only when used).

One launch masks the whole batch: program (k, j) reads the int32 words of logits row k's
columns [j * BLOCK_COLS, (j + 1) * BLOCK_COLS) and writes -inf where a bit is 0, where a column is
at or past ``width`` (model padding), in place. A block whose words are all -1 is left alone and
one whose words are all 0 is written without being read, so typical masks (mostly "nothing" or
mostly "everything") move little memory; mixed blocks are read, selected and written back in
full vectors. Columns must be contiguous (stride 1) within a row; rows may have any stride.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import triton
import triton.language as tl

BITS = tl.constexpr(32)  # bits per bitmask word (a constexpr: kernels read only those globals)


@triton.jit
def _add(a, b):
    # tl.reduce's combine function. Not tl.sum: the library's own jit functions are decorated once
    # per process, so a kernel that uses only builtins also runs under the interpreter beside
    # compiled kernels (the tests do both in one process).
    return a + b


@triton.jit
def _apply_bitmask_kernel(
    logits_ptr,
    bitmask_ptr,
    rows_ptr,
    logits_row_stride,
    bitmask_row_stride,
    n_cols,
    width,
    HAS_ROWS: tl.constexpr,
    BLOCK_WORDS: tl.constexpr,
):
    k = tl.program_id(0)
    block = tl.program_id(1)
    row = tl.load(rows_ptr + k).to(tl.int64) if HAS_ROWS else k.to(tl.int64)
    word = block * BLOCK_WORDS + tl.arange(0, BLOCK_WORDS)
    bit = tl.arange(0, BITS)
    col = word[:, None] * BITS + bit[None, :]  # [BLOCK_WORDS, 32]: column of each bit
    # Words past the usable width read as 0: their columns are masked like any padding.
    words = tl.load(bitmask_ptr + row * bitmask_row_stride + word, mask=word * BITS < width, other=0)
    in_row = col < n_cols
    ptrs = logits_ptr + row * logits_row_stride + col
    # One reduction counts both kinds of uniform word: all ones in the low 16 bits, zeros above.
    counts = tl.reduce((words == -1).to(tl.int32) + (words == 0).to(tl.int32) * 65536, 0, _add)
    n_set = counts & 0xFFFF
    n_clear = counts >> 16
    past_width = (block + 1) * BLOCK_WORDS * BITS > width  # the block holds padding columns
    if n_clear == BLOCK_WORDS:  # nothing allowed: write without reading
        tl.store(ptrs, tl.full([BLOCK_WORDS, BITS], float("-inf"), logits_ptr.dtype.element_ty), mask=in_row)
    elif (n_set < BLOCK_WORDS) | past_width:  # mixed (all-allowed blocks are skipped)
        allowed = (((words[:, None] >> bit[None, :]) & 1) != 0) & (col < width)
        values = tl.load(ptrs, mask=in_row)
        tl.store(ptrs, tl.where(allowed, values, float("-inf")), mask=in_row)


def apply_bitmask_triton(logits2d: torch.Tensor, bitmask2d: torch.Tensor, rows, width: int) -> None:
    """Mask logits2d [R, n_cols] (columns contiguous) in place with the int32 words of bitmask2d
    (words contiguous, on the logits' device); rows: None for every row, else an int32 device
    tensor of the rows to mask (already bounds-checked). A bitmask of one row is shared by all
    rows. Columns from ``width`` on are set to -inf."""
    n_rows = logits2d.shape[0] if rows is None else rows.shape[0]
    n_cols = logits2d.shape[1]
    if n_rows == 0 or n_cols == 0:
        return
    # Few rows: smaller blocks so that enough programs run side by side.
    block_words = 16 if n_rows < 8 else 64
    grid = (n_rows, triton.cdiv(n_cols, block_words * 32))
    device = logits2d.device.index
    # Triton launches on the current device: make it the logits' one when it is not.
    switch = device is not None and device != torch.cuda.current_device()
    on_device = torch.cuda.device(device) if switch else nullcontext()
    with on_device:
        _apply_bitmask_kernel[grid](
            logits2d,
            bitmask2d,
            rows,
            logits2d.stride(0),
            bitmask2d.stride(0) if bitmask2d.shape[0] > 1 else 0,
            n_cols,
            width,
            HAS_ROWS=rows is not None,
            BLOCK_WORDS=block_words,
            num_warps=4,
        )
