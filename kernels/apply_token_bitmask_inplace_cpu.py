"""XGrammar's `xgrammar.kernels.apply_token_bitmask_inplace_cpu`: CPU logits, through pushmask's
numba pass."""

from __future__ import annotations

from . import apply_on_device


def apply_token_bitmask_inplace_cpu(logits, bitmask, vocab_size: int | None = None, indices=None) -> None:
    """Set the disallowed logits of a CPU torch tensor to -inf, in place (see
    pushmask.apply_token_bitmask_inplace)."""
    apply_on_device("apply_token_bitmask_inplace_cpu", ("cpu",), logits, bitmask, vocab_size, indices)
