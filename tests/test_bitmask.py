"""Bitmask packing and masking, checked against a brute-force per-token reference.

The reference reads and writes one bit at a time with Python ints: bit t % 32 of word t // 32,
words stored as int32 (two's complement, so bit 31 is the sign).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pushmask.masks.bitmask import (
    allocate_numpy_bitmask,
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    bitmask_to_bool,
    bitmask_width,
    bool_to_bitmask,
    reset_token_bitmask,
)

SIZES = [1, 5, 31, 32, 33, 63, 64, 65, 100, 1000, 32_000 + 7]


def reference_pack(allowed: list[bool]) -> list[int]:
    words = [0] * ((len(allowed) + 31) // 32)
    for t, ok in enumerate(allowed):
        if ok:
            words[t // 32] |= 1 << (t % 32)
    return [w - (1 << 32) if w >= 1 << 31 else w for w in words]  # as int32


def reference_allowed(words, t: int) -> bool:
    return (int(words[t // 32]) & 0xFFFFFFFF) >> (t % 32) & 1 == 1


def reference_apply(logits: np.ndarray, words, vocab_size=None) -> np.ndarray:
    """Per-token loop: a column survives iff its bit is set and it is below every bound."""
    out = logits.copy()
    limit = len(words) * 32 if vocab_size is None else min(vocab_size, len(words) * 32)
    for t in range(out.shape[-1]):
        if t >= limit or not reference_allowed(words, t):
            out[..., t] = -np.inf
    return out


def random_allowed(rng, size, density):
    return rng.random(size) < density


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("density", [0.0, 0.03, 0.5, 0.97, 1.0])
def test_pack_and_unpack_match_reference(size, density):
    rng = np.random.default_rng(size * 100 + int(density * 100))
    allowed = random_allowed(rng, size, density)
    packed = bool_to_bitmask(allowed)
    assert packed.dtype == np.int32 and packed.shape == (bitmask_width(size),)
    assert packed.tolist() == reference_pack(allowed.tolist())
    unpacked = bitmask_to_bool(packed, size)
    assert unpacked.dtype == bool
    assert np.array_equal(unpacked, allowed)
    for t in rng.integers(0, size, 50):
        assert unpacked[t] == reference_allowed(packed, int(t))


def test_bit_31_is_the_sign_bit():
    only_31 = np.zeros(64, dtype=bool)
    only_31[31] = True
    packed = bool_to_bitmask(only_31)
    assert packed.tolist() == [np.iinfo(np.int32).min, 0]
    assert np.flatnonzero(bitmask_to_bool(packed, 64)).tolist() == [31]
    everything_but_31 = ~only_31
    assert bool_to_bitmask(everything_but_31).tolist() == [0x7FFFFFFF, -1]
    # A word of all ones is -1, and reading it back gives all 32 bits.
    assert bitmask_to_bool(np.array([-1], dtype=np.int32), 32).all()


def test_batched_pack_and_unpack():
    rng = np.random.default_rng(7)
    allowed = rng.random((3, 70)) < 0.4
    packed = bool_to_bitmask(allowed)
    assert packed.shape == (3, 3)
    for row in range(3):
        assert packed[row].tolist() == reference_pack(allowed[row].tolist())
    assert np.array_equal(bitmask_to_bool(packed, 70), allowed)


def test_allocate_and_reset():
    mask = allocate_numpy_bitmask(2, 128_256)
    assert mask.dtype == np.int32 and mask.shape == (2, 4008)
    assert (mask == -1).all()
    assert allocate_numpy_bitmask(1, 33).shape == (1, 2)
    mask[:] = 0
    reset_token_bitmask(mask)
    assert (mask == -1).all()
    with pytest.raises(ValueError):
        allocate_numpy_bitmask(0, 10)
    with pytest.raises(ValueError):
        allocate_token_bitmask(0, 10)


def test_allocate_returns_a_torch_tensor_as_xgrammar_does():
    torch = pytest.importorskip("torch", reason="torch is not installed: allocate_token_bitmask returns numpy")
    mask = allocate_token_bitmask(3, 70)
    assert isinstance(mask, torch.Tensor) and mask.dtype == torch.int32 and mask.device.type == "cpu"
    assert tuple(mask.shape) == (3, 3) and bool((mask == -1).all())
    mask[1] = 0
    reset_token_bitmask(mask)
    assert bool((mask == -1).all())


def test_unpack_rejects_bad_input():
    with pytest.raises(ValueError, match="needs 2 words"):
        bitmask_to_bool(np.zeros(1, dtype=np.int32), 33)
    with pytest.raises(TypeError, match="int32"):
        bitmask_to_bool(np.zeros(1, dtype=np.int64), 3)


@pytest.mark.parametrize(
    "vocab,logits_width,vocab_size",
    [
        (100, 100, None),  # exact
        (100, 128, None),  # logits as wide as the bitmask's 4 words
        (100, 150, None),  # logits wider than the bitmask: columns 128.. masked
        (100, 90, None),  # logits narrower: extra bits ignored
        (100, 128, 100),  # vocab_size masks the model's padding columns 100..127
        (32, 40, None),  # bit 31 then padding
    ],
)
def test_numpy_apply_matches_reference(vocab, logits_width, vocab_size):
    rng = np.random.default_rng(vocab + logits_width)
    allowed = random_allowed(rng, (3, vocab), 0.5)
    allowed[:, min(31, vocab - 1)] = True  # exercise the sign bit
    bitmask = bool_to_bitmask(allowed)
    logits = rng.standard_normal((3, logits_width)).astype(np.float32)
    expected = np.stack([reference_apply(logits[r], bitmask[r], vocab_size) for r in range(3)])
    out = apply_token_bitmask_inplace(logits, bitmask, vocab_size=vocab_size)
    assert out is logits
    assert np.array_equal(logits, expected)


def test_numpy_apply_1d_and_indices():
    rng = np.random.default_rng(3)
    bitmask = bool_to_bitmask(random_allowed(rng, (4, 70), 0.3))
    logits = rng.standard_normal((4, 80))
    original = logits.copy()
    apply_token_bitmask_inplace(logits, bitmask, indices=[2, 0])
    for row in range(4):
        if row in (0, 2):
            assert np.array_equal(logits[row], reference_apply(original[row], bitmask[row]))
        else:
            assert np.array_equal(logits[row], original[row])
    vector = original[1].copy()
    apply_token_bitmask_inplace(vector, bitmask[1])
    assert np.array_equal(vector, reference_apply(original[1], bitmask[1]))


def test_apply_rejects_bad_shapes_and_dtypes():
    bitmask = allocate_numpy_bitmask(2, 64)
    with pytest.raises(ValueError, match="rows"):
        apply_token_bitmask_inplace(np.zeros((3, 64), dtype=np.float32), bitmask)
    with pytest.raises(TypeError, match="floating"):
        apply_token_bitmask_inplace(np.zeros((2, 64), dtype=np.int64), bitmask)
    with pytest.raises(TypeError, match="int32"):
        apply_token_bitmask_inplace(np.zeros((2, 64)), bitmask.astype(np.int64))
    with pytest.raises(TypeError, match="torch tensor or numpy"):
        apply_token_bitmask_inplace([0.0] * 64, bitmask[0])


# ---------------------------------------------------------------------- torch

torch_params = [
    pytest.param("cpu", id="cpu"),
    pytest.param(
        "cuda",
        id="cuda",
        marks=pytest.mark.skipif(
            "not __import__('importlib').util.find_spec('torch') or not __import__('torch').cuda.is_available()",
            reason="needs a CUDA device",
        ),
    ),
]


@pytest.mark.parametrize("device", torch_params)
@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("logits_width,vocab_size", [(100, None), (150, None), (90, None), (128, 100)])
def test_torch_agrees_with_numpy(device, dtype_name, logits_width, vocab_size):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype_name)
    rng = np.random.default_rng(logits_width)
    allowed = random_allowed(rng, (3, 100), 0.5)
    allowed[:, 31] = True
    bitmask = bool_to_bitmask(allowed)
    base = rng.standard_normal((3, logits_width)).astype(np.float32)
    expected = base.copy()
    apply_token_bitmask_inplace(expected, bitmask, vocab_size=vocab_size)

    logits = torch.tensor(base, dtype=dtype, device=device)
    rounded = logits.float().cpu().numpy()  # the same values after float16/bfloat16 rounding
    apply_token_bitmask_inplace(logits, bitmask, vocab_size=vocab_size)
    got = logits.float().cpu().numpy()
    assert np.array_equal(np.isneginf(got), np.isneginf(expected))
    assert np.array_equal(got[~np.isneginf(got)], rounded[~np.isneginf(expected)])

    # The bitmask may also be a torch tensor (on the CPU or on the logits' device).
    logits2 = torch.tensor(base, dtype=dtype, device=device)
    apply_token_bitmask_inplace(logits2, torch.from_numpy(bitmask).to(device), vocab_size=vocab_size)
    assert torch.equal(logits2, logits)


@pytest.mark.parametrize("device", torch_params)
def test_torch_1d_indices_and_shared_row(device):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    bitmask = bool_to_bitmask(random_allowed(rng, (4, 64), 0.5))
    base = rng.standard_normal((4, 64)).astype(np.float32)

    logits = torch.tensor(base, device=device)
    apply_token_bitmask_inplace(logits, bitmask, indices=[3, 1])
    expected = base.copy()
    apply_token_bitmask_inplace(expected, bitmask, indices=[3, 1])
    assert np.array_equal(logits.cpu().numpy(), expected)
    assert np.array_equal(expected[0], base[0]) and np.array_equal(expected[2], base[2])

    vector = torch.tensor(base[2], device=device)
    apply_token_bitmask_inplace(vector, bitmask[2])
    assert np.array_equal(vector.cpu().numpy(), reference_apply(base[2], bitmask[2]))

    # One bitmask row shared by the selected rows.
    logits = torch.tensor(base, device=device)
    apply_token_bitmask_inplace(logits, bitmask[0], indices=[0, 2])
    for row in (0, 2):
        assert np.array_equal(logits[row].cpu().numpy(), reference_apply(base[row], bitmask[0]))


def test_torch_reset_and_unpack_accept_tensors():
    torch = pytest.importorskip("torch")
    mask = torch.zeros((2, 3), dtype=torch.int32)
    reset_token_bitmask(mask)
    assert bool((mask == -1).all())
    assert bitmask_to_bool(torch.tensor([np.iinfo(np.int32).min], dtype=torch.int32), 32)[31]


def test_importing_does_not_import_torch():
    code = (
        "import sys; import pushmask.masks.bitmask as b, pushmask.masks.vocab;"
        "import numpy as np; x = np.zeros(40); b.apply_token_bitmask_inplace(x, b.bool_to_bitmask([1]*33));"
        "assert 'torch' not in sys.modules, 'torch was imported';"
        "assert (x[:33] == 0).all() and np.isneginf(x[33:]).all()"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_device_unpacking_matches_reference():
    # The CUDA path's unpacking (byte view + shifts) is device independent: check it on the CPU.
    torch = pytest.importorskip("torch")
    from pushmask.masks.bitmask import _torch_disallowed

    rng = np.random.default_rng(5)
    allowed = random_allowed(rng, (3, 100), 0.5)
    allowed[:, 31] = True
    allowed[1, 63] = False
    bitmask = bool_to_bitmask(allowed)
    for width in (100, 96, 64, 33, 1):
        got = _torch_disallowed(torch.from_numpy(bitmask), width)
        assert got.dtype == torch.bool  # masked_fill_ takes only bool masks
        assert np.array_equal(got.numpy(), ~allowed[:, :width])
