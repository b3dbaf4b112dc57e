"""XGrammar's `xgrammar.kernels.apply_token_bitmask_inplace_cuda`: CUDA logits. pushmask has one
CUDA kernel, the fused Triton one, and this name runs it."""

from __future__ import annotations

from . import apply_on_device


def apply_token_bitmask_inplace_cuda(logits, bitmask, vocab_size: int | None = None, indices=None) -> None:
    """Set the disallowed logits of a CUDA torch tensor to -inf, in place (see
    pushmask.apply_token_bitmask_inplace)."""
    apply_on_device("apply_token_bitmask_inplace_cuda", ("cuda",), logits, bitmask, vocab_size, indices)
