"""XGrammar's `xgrammar.kernels.apply_token_bitmask_inplace_torch_compile`: torch logits on any
device. pushmask compiles nothing here: its own dispatch picks the kernel for the device (torch
operations where it has none)."""

from __future__ import annotations

from . import apply_on_device


def apply_token_bitmask_inplace_torch_compile(logits, bitmask, vocab_size: int | None = None, indices=None) -> None:
    """Set the disallowed logits of a torch tensor on any device to -inf, in place (see
    pushmask.apply_token_bitmask_inplace)."""
    apply_on_device("apply_token_bitmask_inplace_torch_compile", (), logits, bitmask, vocab_size, indices)
