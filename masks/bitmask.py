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
import sys

import numpy as np

from ..grammar.core.errors import ArgumentTypeError, check_integer

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
    return (check_integer(vocab_size, "vocab_size", "bitmask", minimum=0) + 31) // 32


def get_bitmask_shape(batch_size: int, vocab_size: int) -> tuple[int, int]:
    """(batch_size, ceil(vocab_size / 32)): the shape allocate_token_bitmask returns."""
    return (check_integer(batch_size, "batch_size", "bitmask", minimum=0), bitmask_width(vocab_size))


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
        raise ArgumentTypeError(f"bitmask must be int32, got {row.dtype}")
    if vocab_size > row.shape[-1] * 32:
        raise ValueError(
            f"vocab_size={vocab_size} needs {bitmask_width(vocab_size)} words, the bitmask has {row.shape[-1]}"
        )
    # Viewed as little-endian bytes, word w's bit b is byte 4w + b//8, bit b%8 (LSB first).
    as_bytes = np.ascontiguousarray(row, dtype="<i4").view(np.uint8)
    bits = np.unpackbits(as_bytes, axis=-1, bitorder="little")
    return bits[..., :vocab_size].astype(bool)


def bool_to_bitmask(bool_array) -> np.ndarray:
    """Pack bools (length V, or [batch, V]) into int32 words; bits past V are 0 (disallowed)."""
    allowed = np.asarray(bool_array, dtype=bool)
    if allowed.ndim not in (1, 2):
        raise ValueError(f"expected a 1-D or 2-D bool array, got shape {allowed.shape}")
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
    """
    if _is_torch(logits):
        _apply_torch(logits, bitmask, vocab_size, indices)
    elif isinstance(logits, np.ndarray):
        _apply_numpy(logits, bitmask, vocab_size, indices)
    else:
        kind = type(logits).__name__
        raise ArgumentTypeError(f"logits must be a torch tensor or numpy array, got {kind}")
    return logits


# ---------------------------------------------------------------------- implementations


def _is_torch(x) -> bool:
    torch = sys.modules.get("torch")  # a tensor exists only if torch was imported already
    return torch is not None and isinstance(x, torch.Tensor)


def _to_numpy(x) -> np.ndarray:
    if _is_torch(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _check_shapes(logits_shape, bitmask_shape, indices):
    """Validate ranks and batch sizes; return the number of logits rows (1 for 1-D logits)."""
    if len(logits_shape) not in (1, 2):
        raise ValueError(f"logits must be 1-D or 2-D, got shape {tuple(logits_shape)}")
    if len(bitmask_shape) not in (1, 2):
        raise ValueError(f"bitmask must be 1-D or 2-D, got shape {tuple(bitmask_shape)}")
    rows = 1 if len(logits_shape) == 1 else logits_shape[0]
    mask_rows = 1 if len(bitmask_shape) == 1 else bitmask_shape[0]
    if indices is None and mask_rows != rows:
        raise ValueError(f"bitmask has {mask_rows} rows but logits have {rows}; pass indices to mask a subset")
    if indices is not None and len(logits_shape) == 1:
        raise ValueError("indices need 2-D logits [batch, vocab]")
    return rows


def _usable_width(logits_width: int, bitmask_words: int, vocab_size: int | None) -> int:
    """Columns whose bits are read; every column from here to the logits' end is masked."""
    width = min(logits_width, bitmask_words * 32)
    if vocab_size is not None:
        if vocab_size < 0:
            raise ValueError(f"vocab_size must be >= 0, got {vocab_size}")
        width = min(width, int(vocab_size))
    return width


def _apply_numpy(logits: np.ndarray, bitmask, vocab_size, indices) -> None:
    if not np.issubdtype(logits.dtype, np.floating):
        raise ArgumentTypeError(f"logits must be floating point, got {logits.dtype}")
    mask = _to_numpy(bitmask)
    if mask.dtype != np.int32:
        raise ArgumentTypeError(f"bitmask must be int32, got {mask.dtype}")
    _check_shapes(logits.shape, mask.shape, indices)
    width = _usable_width(logits.shape[-1], mask.shape[-1], vocab_size)
    allowed = bitmask_to_bool(mask, width)
    logits2d = logits[None, :] if logits.ndim == 1 else logits  # views: writes go through
    allowed2d = allowed[None, :] if allowed.ndim == 1 else allowed
    if indices is None:
        region = logits2d[:, :width]
        region[~allowed2d] = -np.inf
        logits2d[:, width:] = -np.inf
        return
    rows = np.asarray(indices, dtype=np.int64).reshape(-1)
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
        raise ArgumentTypeError(f"logits must be floating point, got {logits.dtype}")
    if not _is_torch(bitmask):
        bitmask = torch.from_numpy(np.ascontiguousarray(bitmask))
    elif logits.device.type == "cpu":
        bitmask = bitmask.detach().cpu()
    if bitmask.dtype != torch.int32:
        raise ArgumentTypeError(f"bitmask must be int32, got {bitmask.dtype}")
    _check_shapes(tuple(logits.shape), tuple(bitmask.shape), indices)
    width = _usable_width(logits.shape[-1], bitmask.shape[-1], vocab_size)
    logits2d = logits.unsqueeze(0) if logits.dim() == 1 else logits  # a view: writes go through
    if logits.device.type == "cpu":
        # numpy's unpackbits is the fastest CPU unpacking; from_numpy shares the memory.
        allowed = bitmask_to_bool(bitmask.numpy(), width)
        disallowed = torch.from_numpy(~allowed.reshape(-1, width))
    else:
        mask2d = bitmask.to(logits.device, non_blocking=True).reshape(-1, bitmask.shape[-1])
        disallowed = _torch_disallowed(mask2d, width)

    if indices is None:
        logits2d[:, :width].masked_fill_(disallowed, float("-inf"))
        logits2d[:, width:] = float("-inf")
        return
    rows = torch.as_tensor(indices, dtype=torch.long, device=logits.device)
    rows = rows.reshape(-1)
    # A single bitmask row is shared by every selected row.
    mask_rows = rows if disallowed.shape[0] > 1 else torch.zeros_like(rows)
    selected = logits2d[rows]  # advanced indexing copies; write the rows back afterwards
    selected[:, :width].masked_fill_(disallowed[mask_rows], float("-inf"))
    selected[:, width:] = float("-inf")
    logits2d[rows] = selected


def _torch_disallowed(mask2d, width: int):
    """Bool tensor [rows, width], True where the bit is 0, computed on the bitmask's device."""
    import torch

    n_words = (width + 31) // 32
    # Each int32 word as 4 little-endian bytes (as on every CUDA device): bit b of byte k is
    # token 8k + b of the word, so shifting each byte by 0..7 unpacks tokens in order.
    as_bytes = mask2d[:, :n_words].contiguous().view(torch.uint8)
    shifts = torch.arange(8, device=mask2d.device, dtype=torch.uint8)
    bits = (as_bytes.unsqueeze(-1) >> shifts) & 1
    return (bits == 0).reshape(mask2d.shape[0], n_words * 32)[:, :width]
