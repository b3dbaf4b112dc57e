"""XGrammar's `xgrammar.kernels.apply_token_bitmask_inplace_triton`: CUDA logits, through
pushmask's fused Triton kernel."""

from __future__ import annotations

from . import apply_on_device


def apply_token_bitmask_inplace_triton(logits, bitmask, vocab_size: int | None = None, indices=None) -> None:
    """Set the disallowed logits of a CUDA torch tensor to -inf, in place (see
    pushmask.apply_token_bitmask_inplace)."""
    apply_on_device("apply_token_bitmask_inplace_triton", ("cuda",), logits, bitmask, vocab_size, indices)
