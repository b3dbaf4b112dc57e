"""`pushmask.kernels`: XGrammar's `xgrammar.kernels` module layout, one function per backend, each
running pushmask's one apply_token_bitmask_inplace. Checked against a bool-mask oracle
(torch.where on the unpacked bits)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import pushmask as pm
from pushmask.masks.bitmask import bool_to_bitmask

torch = pytest.importorskip("torch")


def kernel(backend: str):
    """XGrammar's kernel function of a backend, imported by its module path."""
    name = f"apply_token_bitmask_inplace_{backend}"
    return getattr(importlib.import_module(f"pushmask.kernels.{name}"), name)


def random_case(rows: int, vocab: int, dtype, seed: int):
    rng = np.random.default_rng(seed)
    allowed = rng.random((rows, vocab)) < 0.5
    logits = torch.from_numpy(rng.standard_normal((rows, vocab)).astype(np.float32)).to(dtype)
    return logits, torch.from_numpy(bool_to_bitmask(allowed)), torch.from_numpy(allowed)


@pytest.mark.parametrize("backend", ["cpu", "torch_compile"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_cpu_kernels_mask_exactly_the_disallowed_tokens(backend, dtype):
    logits, bitmask, allowed = random_case(5, 1000, getattr(torch, dtype), seed=7)
    expected = torch.where(allowed, logits, float("-inf"))
    kernel(backend)(logits, bitmask)
    torch.testing.assert_close(logits, expected)


def test_cpu_kernel_indices_touch_only_those_rows():
    logits, bitmask, allowed = random_case(4, 300, torch.float32, seed=3)
    expected = logits.clone()
    expected[[0, 2]] = torch.where(allowed[[0, 2]], logits[[0, 2]], float("-inf"))
    kernel("cpu")(logits, bitmask, indices=[0, 2])
    torch.testing.assert_close(logits, expected)


@pytest.mark.parametrize("backend", ["triton", "cuda"])
def test_cuda_kernels_refuse_cpu_logits(backend):
    logits, bitmask, _ = random_case(1, 64, torch.float32, seed=1)
    before = logits.clone()
    with pytest.raises(pm.InvalidArgumentError, match="on cpu"):
        kernel(backend)(logits, bitmask)
    assert torch.equal(logits, before)  # refused before anything was written


def test_kernels_take_torch_tensors_only():
    with pytest.raises(pm.ArgumentTypeError, match="torch tensor"):
        kernel("cpu")(np.zeros(32, np.float32), np.zeros(1, np.int32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("backend", ["triton", "cuda", "torch_compile"])
def test_cuda_kernels_mask_exactly_the_disallowed_tokens(backend):
    logits, bitmask, allowed = random_case(3, 5000, torch.float32, seed=5)
    expected = torch.where(allowed, logits, float("-inf")).cuda()
    logits, bitmask = logits.cuda(), bitmask.cuda()
    kernel(backend)(logits, bitmask)
    torch.testing.assert_close(logits, expected)
