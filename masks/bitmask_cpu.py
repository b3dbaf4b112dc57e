"""apply_token_bitmask_inplace on the CPU: one numba pass over the words, no temporary arrays.

The logits are handed over as their raw bits (int16/int32/int64 of the same width as the float),
flattened over the memory the rows span, so one kernel serves float16, bfloat16, float32 and
float64 in any row stride, and writes the float's -inf bit pattern. A word of all ones is skipped
and a word of zeros is one 32-wide fill, so typical masks cost little more than reading the words;
mixed words go through byte tables (keep / fill), without a branch per bit.
"""

from __future__ import annotations

from ..core.jit import njit


@njit(cache=True, boundscheck=False)
def apply_rows(flat, row_stride, n_cols, bitmask, rows, mask_rows, width, keep, fill):  # pragma: no cover - numba
    """flat[rows[i] * row_stride + c] = -inf for each column c < n_cols whose bit is 0 in bitmask
    row mask_rows[i] or which is at or past width (width <= n_cols and <= 32 * words).

    keep[byte, j] is all ones where bit j of byte is 1, fill[byte, j] the raw -inf where it is 0:
    a mixed byte's 8 columns become (x & keep) | fill without a branch per bit (random bits
    would mispredict every other one)."""
    neg_inf = fill[0, 0]
    full_words = width >> 5
    for i in range(rows.shape[0]):
        base = rows[i] * row_stride
        m = mask_rows[i]
        for w in range(full_words):
            word = bitmask[m, w]
            if word == -1:
                continue
            at = base + (w << 5)
            if word == 0:
                flat[at : at + 32] = neg_inf
                continue
            for q in range(4):
                byte = (word >> (8 * q)) & 255
                if byte != 255:
                    o = at + 8 * q
                    for j in range(8):
                        flat[o + j] = (flat[o + j] & keep[byte, j]) | fill[byte, j]
        for c in range(full_words << 5, width):
            if (bitmask[m, c >> 5] >> (c & 31)) & 1 == 0:
                flat[base + c] = neg_inf
        flat[base + width : base + n_cols] = neg_inf
