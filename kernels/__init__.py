"""XGrammar's `xgrammar.kernels` layout: one module per backend of `apply_token_bitmask_inplace`,
for code that imports a backend's function by its module path.

Each function checks that the logits are on its backend's device and then runs pushmask's one
`apply_token_bitmask_inplace` (masks/bitmask.py), which picks the kernel; there is no second
implementation here.

| module | function | logits | pushmask's kernel |
|---|---|---|---|
| `apply_token_bitmask_inplace_cpu` | `apply_token_bitmask_inplace_cpu` | CPU torch tensor | the numba pass (masks/bitmask_cpu.py) |
| `apply_token_bitmask_inplace_triton` | `apply_token_bitmask_inplace_triton` | CUDA torch tensor | the fused Triton kernel (masks/bitmask_triton.py) |
| `apply_token_bitmask_inplace_cuda` | `apply_token_bitmask_inplace_cuda` | CUDA torch tensor | the same Triton kernel (pushmask has no separate CUDA C++ kernel) |
| `apply_token_bitmask_inplace_torch_compile` | `apply_token_bitmask_inplace_torch_compile` | torch tensor, any device | whichever of the above fits, else torch operations |

XGrammar's MLX kernel (`apply_token_bitmask_mlx`) has no counterpart.
"""

from __future__ import annotations

import sys

from ..core.errors import ArgumentTypeError, InvalidArgumentError
from ..masks.bitmask import apply_token_bitmask_inplace

__all__ = ["apply_on_device"]


def apply_on_device(where: str, device_types: tuple[str, ...], logits, bitmask, vocab_size=None, indices=None) -> None:
    """apply_token_bitmask_inplace for logits on one of `device_types` (any device when empty);
    `where` names the calling kernel function in the error for logits elsewhere."""
    torch = sys.modules.get("torch")  # a tensor exists only if torch was imported already
    if torch is None or not isinstance(logits, torch.Tensor):
        raise ArgumentTypeError(f"{where}: logits must be a torch tensor, got {type(logits).__name__}")
    device = logits.device.type
    if device_types and device not in device_types:
        raise InvalidArgumentError(
            f"{where}: logits are on {device}, this kernel takes {' or '.join(device_types)} tensors; "
            "call pushmask.apply_token_bitmask_inplace, which picks the kernel for any device"
        )
    apply_token_bitmask_inplace(logits, bitmask, vocab_size=vocab_size, indices=indices)
