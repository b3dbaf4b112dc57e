"""Token bitmasks: one bit per token id, packed into int32 words.

Layout (shared with the matcher and with xgrammar): bit ``t % 32`` of word ``t // 32`` is 1 when
token ``t`` is allowed. Words are int32, so bit 31 is the sign bit: a word with token 31 allowed
is negative, and "all allowed" is -1.

Works on numpy arrays and on torch tensors (CPU or CUDA). `allocate_token_bitmask` returns a
torch tensor when torch is installed (as xgrammar does) and a numpy array otherwise; everything
else imports torch only when a torch tensor is passed in, so pushmask does not need torch.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Iterable

import numpy as np

from ..core.caches import memoized
from ..core.errors import ArgumentTypeError, IndexOutOfRangeError, InvalidArgumentError, check_integer

__all__ = [
    "allocate_token_bitmask",
    "allocate_numpy_bitmask",
    "get_bitmask_shape",
    "reset_token_bitmask",
    "apply_token_bitmask_inplace",
    "bitmask_to_bool",
    "bool_to_bitmask",
    "bitmask_width",
]


def bitmask_width(vocab_size: int) -> int:
    """Number of int32 words needed for ``vocab_size`` bits."""
    return (check_integer(vocab_size, "vocab_size", "bitmask_width", minimum=0) + 31) // 32


def get_bitmask_shape(batch_size: int, vocab_size: int) -> tuple[int, int]:
    """(batch_size, ceil(vocab_size / 32)): the shape allocate_token_bitmask returns."""
    batch_size = check_integer(batch_size, "batch_size", "get_bitmask_shape", minimum=0)
    return (batch_size, bitmask_width(check_integer(vocab_size, "vocab_size", "get_bitmask_shape", minimum=0)))


def allocate_token_bitmask(batch_size: int, vocab_size: int):
    """int32 [batch_size, ceil(vocab_size / 32)] with every bit set (all allowed): a CPU torch
    tensor when torch is installed, as xgrammar returns, else a numpy array."""
    if _torch_installed():
        import torch

        return torch.from_numpy(allocate_numpy_bitmask(batch_size, vocab_size))
    return allocate_numpy_bitmask(batch_size, vocab_size)


def allocate_numpy_bitmask(batch_size: int, vocab_size: int) -> np.ndarray:
    """allocate_token_bitmask as a numpy array whether or not torch is installed."""
    check_integer(batch_size, "batch_size", "allocate_token_bitmask", minimum=1)
    check_integer(vocab_size, "vocab_size", "allocate_token_bitmask", minimum=0)
    return np.full(get_bitmask_shape(batch_size, vocab_size), -1, dtype=np.int32)


_TORCH_INSTALLED: bool | None = None


def _torch_installed() -> bool:
    global _TORCH_INSTALLED
    if _TORCH_INSTALLED is None:
        _TORCH_INSTALLED = "torch" in sys.modules or importlib.util.find_spec("torch") is not None
    return _TORCH_INSTALLED


def reset_token_bitmask(bitmask) -> None:
    """Set every bit again (numpy array or torch tensor), in place."""
    if not (_is_torch(bitmask) or isinstance(bitmask, np.ndarray)) or str(bitmask.dtype).rsplit(".")[-1] != "int32":
        raise ArgumentTypeError(
            "reset_token_bitmask: bitmask must be an int32 numpy array or torch tensor, got "
            + (f"dtype {bitmask.dtype}" if hasattr(bitmask, "dtype") else type(bitmask).__name__)
        )
    if _is_torch(bitmask):
        bitmask.fill_(-1)
    else:
        bitmask.fill(-1)


def bitmask_to_bool(bitmask_row, vocab_size: int) -> np.ndarray:
    """Unpack one bitmask row (or a [batch, words] array) into bools of length ``vocab_size``."""
    row = _to_numpy(bitmask_row)
    if row.dtype != np.int32:
        raise ArgumentTypeError(f"bitmask_to_bool: bitmask must be int32, got {row.dtype}")
    if vocab_size > row.shape[-1] * 32:
        raise InvalidArgumentError(
            f"bitmask_to_bool: vocab_size={vocab_size} needs {bitmask_width(vocab_size)} words, the bitmask "
            f"has {row.shape[-1]}; pass the vocab_size the bitmask was allocated for"
        )
    # Viewed as little-endian bytes, word w's bit b is byte 4w + b//8, bit b%8 (LSB first).
    as_bytes = np.ascontiguousarray(row, dtype="<i4").view(np.uint8)
    bits = np.unpackbits(as_bytes, axis=-1, bitorder="little")
    return bits[..., :vocab_size].astype(bool)


def bool_to_bitmask(bool_array) -> np.ndarray:
    """Pack bools (length V, or [batch, V]) into int32 words; bits past V are 0 (disallowed)."""
    allowed = np.asarray(bool_array, dtype=bool)
    if allowed.ndim not in (1, 2):
        raise InvalidArgumentError(
            f"bool_to_bitmask: bool_array must be [vocab] or [batch, vocab], got shape {allowed.shape}"
        )
    n_words = bitmask_width(allowed.shape[-1])
    padded = np.zeros(allowed.shape[:-1] + (n_words * 32,), dtype=bool)
    padded[..., : allowed.shape[-1]] = allowed
    packed = np.packbits(padded, axis=-1, bitorder="little")
    return packed.view("<i4").astype(np.int32)


def apply_token_bitmask_inplace(logits, bitmask, vocab_size: int | None = None, indices=None):
    """Set disallowed logits to -inf, in place (torch tensor on any device, or numpy array).

    logits: [V] or [batch, V]. bitmask: [words] or [batch, words] (numpy or torch).
    Row ``i`` of the bitmask masks row ``i`` of the logits; with ``indices`` only those rows are
    touched (bitmask row ``indices[k]`` masks logits row ``indices[k]``), as in xgrammar.
    Columns past ``vocab_size`` or past the bitmask's 32 * words bits are model padding and are
    set to -inf. Returns ``logits``.

    CUDA logits go through one fused Triton kernel when triton is installed, CPU logits (torch or
    numpy) through one numba pass; other devices and layouts through torch (or numpy) operations.
    ``PUSHMASK_APPLY_KERNEL=torch`` in the environment forces the torch/numpy operations.
    """
    if _is_torch(logits):
        _apply_torch(logits, bitmask, vocab_size, indices)
    elif isinstance(logits, np.ndarray):
        _apply_numpy(logits, bitmask, vocab_size, indices)
    else:
        kind = type(logits).__name__
        raise ArgumentTypeError(
            f"apply_token_bitmask_inplace: logits must be a torch tensor or numpy array, got {kind}"
        )
    return logits


# ---------------------------------------------------------------------- implementations

# -inf as the raw bits of each float type, keyed by dtype name (numpy's or torch's);
# the CPU kernel writes them through an integer view of the same width.
NEG_INF_BITS = {
    "float16": np.int16(np.array(-np.inf, np.float16).view(np.int16)),
    "bfloat16": np.int16(np.array(-np.inf, np.float32).view(np.int32) >> 16),
    "float32": np.int32(np.array(-np.inf, np.float32).view(np.int32)),
    "float64": np.int64(np.array(-np.inf, np.float64).view(np.int64)),
}
BITS_TYPES = {2: np.int16, 4: np.int32, 8: np.int64}


KERNEL_SWITCH = "PUSHMASK_APPLY_KERNEL"  # "auto" (default) or "torch": torch/numpy operations only


def _kernels_enabled() -> bool:
    choice = os.environ.get(KERNEL_SWITCH, "auto")
    if choice not in ("auto", "torch"):
        raise InvalidArgumentError(
            f"the environment variable {KERNEL_SWITCH} must be 'auto' or 'torch', got {choice!r}"
        )
    return choice == "auto"


def _is_torch(x) -> bool:
    torch = sys.modules.get("torch")  # a tensor exists only if torch was imported already
    return torch is not None and isinstance(x, torch.Tensor)


def _to_numpy(x) -> np.ndarray:
    if _is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _check_shapes(logits_shape, bitmask_shape, indices):
    """Validate ranks and batch sizes; return the number of logits rows (1 for 1-D logits)."""
    where = "apply_token_bitmask_inplace"
    if len(logits_shape) not in (1, 2):
        raise InvalidArgumentError(
            f"{where}: logits must be [vocab] or [batch, vocab], got shape {tuple(logits_shape)}"
        )
    if len(bitmask_shape) not in (1, 2):
        raise InvalidArgumentError(
            f"{where}: bitmask must be [words] or [batch, words] (from allocate_token_bitmask), "
            f"got shape {tuple(bitmask_shape)}"
        )
    rows = 1 if len(logits_shape) == 1 else logits_shape[0]
    mask_rows = 1 if len(bitmask_shape) == 1 else bitmask_shape[0]
    if indices is None and mask_rows != rows:
        raise InvalidArgumentError(
            f"{where}: bitmask has {mask_rows} rows but logits have {rows}; pass indices to mask a subset"
        )
    if indices is not None and len(logits_shape) == 1:
        raise InvalidArgumentError(f"{where}: indices need 2-D logits [batch, vocab], got 1-D logits")
    return rows


def _usable_width(logits_width: int, bitmask_words: int, vocab_size: int | None) -> int:
    """Columns whose bits are read; every column from here to the logits' end is masked."""
    width = min(logits_width, bitmask_words * 32)
    if vocab_size is not None:
        width = min(width, check_integer(vocab_size, "vocab_size", "apply_token_bitmask_inplace", minimum=0))
    return width


def _selected_rows(indices, n_rows: int, n_mask_rows: int) -> np.ndarray:
    """``indices`` as int64 logits rows (negatives count from the end), each checked to be a row
    of the logits and, unless one bitmask row is shared, of the bitmask."""
    if _is_torch(indices):
        indices = indices.detach().cpu().numpy()
    rows = np.asarray(indices).reshape(-1)
    if rows.size and not np.issubdtype(rows.dtype, np.integer):
        raise ArgumentTypeError(f"apply_token_bitmask_inplace: indices must be integers, got {rows.dtype}")
    rows = rows.astype(np.int64)
    rows = np.where(rows < 0, rows + n_rows, rows)
    limit = n_rows if n_mask_rows == 1 else min(n_rows, n_mask_rows)
    bad = (rows < 0) | (rows >= limit)
    if bad.any():
        raise IndexOutOfRangeError(
            f"apply_token_bitmask_inplace: indices[{int(np.argmax(bad))}] is out of range for {n_rows} logits rows and {n_mask_rows} bitmask rows"
        )
    return rows


_BYTE_BITS = ((np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1).astype(bool)  # [byte, j]: bit j


@memoized(len(NEG_INF_BITS), name="bitmask raw-bit tables, per float type (masks/bitmask.py)", table=True)
def _byte_tables(name: str):
    """(keep, fill) [256, 8] raw-bit tables of a float type for bitmask_cpu.apply_rows: keep is
    all ones where bit j of the byte is set, fill is -inf's bits where it is clear."""
    neg_inf = NEG_INF_BITS[name]
    keep = np.where(_BYTE_BITS, -1, 0).astype(neg_inf.dtype)
    fill = np.where(_BYTE_BITS, 0, neg_inf).astype(neg_inf.dtype)
    return keep, fill


def _apply_cpu_kernel(bits, row_stride: int, shape, mask2d: np.ndarray, rows, width: int, name: str) -> None:
    """Run bitmask_cpu.apply_rows on the raw bits of logits of ``shape`` [rows, columns]: every
    row when ``rows`` is None; one bitmask row, when there is only one, is shared by all."""
    from .bitmask_cpu import apply_rows

    if rows is None:
        rows = np.arange(shape[0], dtype=np.int64)
    mask_rows = rows if mask2d.shape[0] > 1 else np.zeros_like(rows)
    apply_rows(bits, row_stride, shape[1], np.ascontiguousarray(mask2d), rows, mask_rows, width, *_byte_tables(name))


def _flat_span(shape, strides, itemsize: int):
    """(elements spanned, row stride in elements) of 2-D rows whose columns are contiguous and
    which do not overlap, else None (the kernel writes flat[row * row_stride + column])."""
    n_rows, n_cols = shape
    if n_rows == 0 or n_cols == 0 or (n_cols > 1 and strides[1] != itemsize):
        return None  # (nothing to write, or columns apart: the operations path)
    if n_rows <= 1:
        return n_cols, 0
    if strides[0] % itemsize or strides[0] < n_cols * itemsize:
        return None
    row_stride = strides[0] // itemsize
    return (n_rows - 1) * row_stride + n_cols, row_stride


def _apply_numpy(logits: np.ndarray, bitmask, vocab_size, indices) -> None:
    if not np.issubdtype(logits.dtype, np.floating):
        raise ArgumentTypeError(f"apply_token_bitmask_inplace: logits must be floating point, got {logits.dtype}")
    mask = _to_numpy(bitmask)
    if mask.dtype != np.int32:
        raise ArgumentTypeError(f"apply_token_bitmask_inplace: bitmask must be int32, got {mask.dtype}")
    n_rows = _check_shapes(logits.shape, mask.shape, indices)
    width = _usable_width(logits.shape[-1], mask.shape[-1], vocab_size)
    logits2d = logits[None, :] if logits.ndim == 1 else logits  # views: writes go through
    mask2d = mask[None, :] if mask.ndim == 1 else mask
    rows = None if indices is None else _selected_rows(indices, n_rows, mask2d.shape[0])
    span = _flat_span(logits2d.shape, logits2d.strides, logits.itemsize)
    native = logits.dtype.name in NEG_INF_BITS and logits.dtype.isnative  # -inf's bits in this byte order
    if span is not None and native and logits.flags.writeable and _kernels_enabled():
        n, row_stride = span
        flat = np.lib.stride_tricks.as_strided(logits2d, shape=(n,), strides=(logits.itemsize,))
        bits = flat.view(BITS_TYPES[logits.itemsize])
        _apply_cpu_kernel(bits, row_stride, logits2d.shape, mask2d, rows, width, logits.dtype.name)
        return
    allowed2d = bitmask_to_bool(mask2d, width)
    if rows is None:
        region = logits2d[:, :width]
        region[~allowed2d] = -np.inf
        logits2d[:, width:] = -np.inf
        return
    if allowed2d.shape[0] == 1:  # a single bitmask row is shared by every selected row
        allowed_rows = np.broadcast_to(allowed2d, (len(rows), width))
    else:
        allowed_rows = allowed2d[rows]
    selected = logits2d[rows, :width]  # advanced indexing copies; write the rows back
    selected[~allowed_rows] = -np.inf
    logits2d[rows, :width] = selected
    logits2d[rows, width:] = -np.inf


def _apply_torch(logits, bitmask, vocab_size, indices) -> None:
    import torch

    if not logits.is_floating_point():
        raise ArgumentTypeError(f"apply_token_bitmask_inplace: logits must be floating point, got {logits.dtype}")
    if not _is_torch(bitmask):
        bitmask = torch.from_numpy(np.ascontiguousarray(bitmask))
    if bitmask.device != logits.device:
        bitmask = bitmask.to(logits.device, non_blocking=True)
    if bitmask.dtype != torch.int32:
        raise ArgumentTypeError(f"apply_token_bitmask_inplace: bitmask must be int32, got {bitmask.dtype}")
    n_rows = _check_shapes(tuple(logits.shape), tuple(bitmask.shape), indices)
    width = _usable_width(logits.shape[-1], bitmask.shape[-1], vocab_size)
    logits2d = logits.unsqueeze(0) if logits.dim() == 1 else logits  # a view: writes go through
    mask2d = bitmask.unsqueeze(0) if bitmask.dim() == 1 else bitmask
    rows = None if indices is None else _selected_rows(indices, n_rows, mask2d.shape[0])
    if _kernels_enabled():
        if (
            logits.device.type in TRITON_DEVICE_TYPES
            and (logits2d.shape[1] <= 1 or logits2d.stride(1) == 1)
            and _triton_ready()
        ):
            from .bitmask_triton import apply_bitmask_triton

            device_rows = None if rows is None else torch.from_numpy(rows.astype(np.int32)).to(logits.device)
            apply_bitmask_triton(logits2d, mask2d.contiguous(), device_rows, width)
            return
        name = str(logits.dtype).rsplit(".")[-1]
        span = _flat_span(tuple(logits2d.shape), tuple(logits2d.stride()), 1) if logits.device.type == "cpu" else None
        if span is not None and name in NEG_INF_BITS and not logits.requires_grad:
            n, row_stride = span
            bits_type = getattr(torch, np.dtype(BITS_TYPES[logits.element_size()]).name)
            bits = torch.as_strided(logits2d, (n,), (1,)).view(bits_type).numpy()
            _apply_cpu_kernel(bits, row_stride, tuple(logits2d.shape), mask2d.numpy(), rows, width, name)
            return
    _apply_torch_ops(logits2d, mask2d, rows, width)


def _apply_torch_ops(logits2d, mask2d, rows, width: int) -> None:
    """The torch-operations path (any device and layout): unpack to bools, then masked_fill_."""
    import torch

    disallowed = _torch_disallowed(mask2d, width)  # the same code on every device: the CPU tests it
    if rows is None:
        logits2d[:, :width].masked_fill_(disallowed, float("-inf"))
        logits2d[:, width:] = float("-inf")
        return
    index = torch.from_numpy(rows).to(logits2d.device, non_blocking=True)
    # A single bitmask row is shared by every selected row.
    selected_masks = disallowed[index] if disallowed.shape[0] > 1 else disallowed
    selected = logits2d[index]  # advanced indexing copies; write the rows back afterwards
    selected[:, :width].masked_fill_(selected_masks, float("-inf"))
    selected[:, width:] = float("-inf")
    logits2d[index] = selected


DEVICES_KEPT = 16
"""Devices whose bit-value tensor is kept (_bit_values)."""


@memoized(DEVICES_KEPT, name="bitmask bit-value tensors, per device (masks/bitmask.py)", table=True)
def _bit_values(device):
    """The uint8 tensor [1, 2, 4, ..., 128] on `device`."""
    import torch

    return torch.tensor([1 << b for b in range(8)], dtype=torch.uint8, device=device)


def _torch_disallowed(mask2d, width: int):
    """Bool tensor [rows, width], True where the bit is 0, computed on the bitmask's device."""
    import torch

    bit_values = _bit_values(mask2d.device)
    n_words = (width + 31) // 32
    # Each int32 word as 4 little-endian bytes (as on every CUDA device): bit b of byte k is
    # token 8k + b of the word.
    as_bytes = mask2d[:, :n_words].contiguous().view(torch.uint8)
    return (as_bytes.unsqueeze(-1) & bit_values).eq(0).view(mask2d.shape[0], n_words * 32)[:, :width]


_TRITON: bool | None = None
TRITON_DEVICE_TYPES = ("cuda",)  # where the Triton kernel runs (tests add "cpu" under its interpreter)


def _triton_ready() -> bool:
    """Whether the Triton kernel can be used (triton installed and its module importable); a
    failed import is logged once and the torch operations are used instead."""
    global _TRITON
    if _TRITON is None:
        _TRITON = False
        if importlib.util.find_spec("triton") is not None:
            try:
                from . import bitmask_triton  # noqa: F401
            except Exception as exc:  # a triton that does not fit this torch: keep the torch path
                logging.getLogger("pushmask").warning(
                    "pushmask: triton is installed but unusable (%s); bitmasks are applied with torch operations", exc
                )
            else:
                _TRITON = True
    return _TRITON


def clear_rows(bitmask, rows: Iterable[int]) -> None:
    """Set every word of these rows of a numpy or torch bitmask (a 1-D one is one row) to zero."""
    if len(bitmask.shape) == 1:
        bitmask[:] = 0
    else:
        bitmask[sorted(set(rows))] = 0


def writable_row(bitmask, index: int, words: int):
    """Row `index` of a numpy or torch bitmask, checked for type, shape and dtype.  A 1-D bitmask
    is one row, taken at index 0 only (as XGrammar takes it)."""
    where = "fill_next_token_bitmask"
    index = check_integer(index, "index", where)
    if not isinstance(bitmask, np.ndarray) and type(bitmask).__name__ != "Tensor":
        raise ArgumentTypeError(
            f"{where}: bitmask must be a numpy array or torch tensor (int32, "
            f"from allocate_token_bitmask), got {type(bitmask).__name__}"
        )
    if str(bitmask.dtype).rsplit(".")[-1] != "int32":
        raise ArgumentTypeError(
            f"{where}: bitmask must be int32 (allocate_token_bitmask makes one), got {bitmask.dtype}"
        )
    shape = tuple(bitmask.shape)
    if len(shape) not in (1, 2):
        raise InvalidArgumentError(
            f"{where}: bitmask must be [batch, {words}] or one row [{words}], got shape {shape}; "
            "use allocate_token_bitmask(batch, vocab_size)"
        )
    rows = 1 if len(shape) == 1 else shape[0]
    if not 0 <= index < rows:
        raise IndexOutOfRangeError(
            f"{where}: index must be a row of the bitmask, in [0, {rows}), got {index}"
            + ("; a 1-D bitmask is one row, index 0" if len(shape) == 1 else "")
        )
    if shape[-1] < words:
        raise InvalidArgumentError(
            f"{where}: bitmask rows have {shape[-1]} words, the vocabulary needs {words} (32 tokens a word); "
            "allocate it with allocate_token_bitmask(batch, tokenizer_info.vocab_size)"
        )
    row = bitmask if len(shape) == 1 else bitmask[index]
    if isinstance(row, np.ndarray):
        return row[:words]
    if row.device.type == "cpu" and row.is_contiguous():
        return row[:words].numpy()
    return row[:words]


def torch_from_numpy(words: np.ndarray, like):
    """A numpy row of words as a torch tensor on `like`'s device."""
    import torch

    return torch.from_numpy(words).to(like.device)
