"""The fused apply kernels (numba on the CPU, Triton on a GPU) against an independent oracle and
against the torch/numpy operations path, bit for bit.

The oracle reads bit t % 32 of word t // 32 with integer shifts (not numpy's unpackbits, which
the operations path uses). Masks mix random words with words and whole 2048-column blocks of
all zeros and all ones, so every branch of both kernels runs (skip, write-only, read-select-write,
padding). The Triton kernel runs under Triton's interpreter on the CPU (TRITON_INTERPRET=1) and,
where a CUDA device is present, compiled on it.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest

from pushmask.masks import bitmask as bm

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float16", "bfloat16"]
# (logits columns, bitmask words, vocab_size): equal, padding past vocab_size, logits wider than
# the bitmask, narrower, a vocab_size past both, nothing usable.
SHAPES = [
    (5000, 157, None),
    (5000, 157, 4099),
    (5100, 157, None),
    (4096, 157, None),
    (4160, 130, 10**6),
    (3000, 94, 0),
]


def random_words(rng, rows: int, n_words: int) -> np.ndarray:
    """int32 words: random bits, single all-zero/all-one words, and 64-word (2048-column) blocks
    of all zeros and all ones, so each kernel branch is taken."""
    words = rng.integers(-(2**31), 2**31, (rows, n_words), dtype=np.int64).astype(np.int32)
    words[rng.random((rows, n_words)) < 0.2] = 0
    words[rng.random((rows, n_words)) < 0.2] = -1
    for r in range(rows):
        words[r, 64:128] = 0 if r % 2 else -1
        if r % 3 == 0:
            words[r, :64] = -1
    return words


def oracle(logits: np.ndarray, words: np.ndarray, vocab_size, rows=None) -> np.ndarray:
    """-inf where bit t of the row's words is 0 or t is past the bitmask or vocab_size."""
    out = logits.copy()
    n_cols = out.shape[-1]
    cols = np.arange(n_cols)
    limit = min(n_cols, words.shape[-1] * 32, n_cols if vocab_size is None else vocab_size)
    padded = np.zeros((words.shape[0], max(n_cols, words.shape[-1] * 32) // 32 + 1), dtype=np.int64)
    padded[:, : words.shape[-1]] = words.astype(np.int64) & 0xFFFFFFFF
    bits = (padded[:, cols // 32] >> (cols % 32)) & 1
    allowed = (bits == 1) & (cols < limit)
    for r in range(out.shape[0]) if rows is None else rows:
        out[r, ~allowed[r if words.shape[0] > 1 else 0]] = -np.inf
    return out


def as_float_array(tensor) -> np.ndarray:
    return tensor.float().cpu().numpy().astype(np.float64)


def raw_bits(tensor):
    """The tensor's bits as integers of its width (bit-for-bit comparison, -inf and all)."""
    return tensor.cpu().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])


def operations_path(logits, words, **kwargs):
    """The torch/numpy operations path, forced."""
    previous = os.environ.get(bm.KERNEL_SWITCH)
    os.environ[bm.KERNEL_SWITCH] = "torch"
    try:
        bm.apply_token_bitmask_inplace(logits, words, **kwargs)
    finally:
        if previous is None:
            del os.environ[bm.KERNEL_SWITCH]
        else:
            os.environ[bm.KERNEL_SWITCH] = previous
    return logits


def check_torch(device, dtype_name, n_rows, n_cols, n_words, vocab_size, seed, indices=None, shared=False, fill=None):
    """Dispatch on `device` against the oracle and against the forced operations path (words
    random, or all `fill`)."""
    rng = np.random.default_rng(seed)
    words = random_words(rng, 1 if shared else n_rows, n_words)
    if fill is not None:
        words[:] = fill
    base = torch.tensor(rng.standard_normal((n_rows, n_cols)), dtype=getattr(torch, dtype_name))
    expected = oracle(as_float_array(base), words, vocab_size, indices)
    got = base.to(device)
    bm.apply_token_bitmask_inplace(got, torch.from_numpy(words).to(device), vocab_size=vocab_size, indices=indices)
    assert np.array_equal(as_float_array(got), expected)
    reference = operations_path(base.to(device), torch.from_numpy(words), vocab_size=vocab_size, indices=indices)
    assert torch.equal(raw_bits(got), raw_bits(reference))


# ---------------------------------------------------------------------- the numba CPU kernel


@pytest.mark.parametrize("dtype_name", [*DTYPES, "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cpu_kernel_shapes(dtype_name, shape):
    check_torch("cpu", dtype_name, 3, *shape, seed=len(dtype_name) + shape[0])


@pytest.mark.parametrize("fill", [-1, 0])
@pytest.mark.parametrize("shape", [(4160, 130, 4090), (4200, 129, None), (4100, 129, None)], ids=str)
def test_cpu_kernel_uniform_masks_still_mask_padding(fill, shape):
    check_torch("cpu", "float32", 2, *shape, seed=0, fill=fill)


@pytest.mark.parametrize("n_rows", [1, 3, 64, 256])
def test_cpu_kernel_batch_sizes_numpy_and_torch(n_rows):
    rng = np.random.default_rng(n_rows)
    words = random_words(rng, n_rows, 129)
    for dtype in (np.float16, np.float32, np.float64):
        base = rng.standard_normal((n_rows, 4100)).astype(dtype)
        expected = oracle(base.astype(np.float64), words, 4097)
        got = bm.apply_token_bitmask_inplace(base.copy(), words, vocab_size=4097)
        assert np.array_equal(got.astype(np.float64), expected)
        assert np.array_equal(got, operations_path(base.copy(), words, vocab_size=4097))
    check_torch("cpu", "bfloat16", n_rows, 4100, 129, 4097, seed=n_rows)


def test_cpu_kernel_indices_shared_rows_and_layouts():
    rng = np.random.default_rng(1)
    check_torch("cpu", "float32", 8, 3000, 94, None, seed=2, indices=[5, 0, 5, -1])
    check_torch("cpu", "bfloat16", 8, 3000, 94, 2990, seed=3, indices=torch.tensor([2, 3]))
    check_torch("cpu", "float16", 8, 3000, 94, None, seed=4, indices=[1, 6], shared=True)
    check_torch("cpu", "float32", 4, 3000, 94, None, seed=5, shared=False)
    words = random_words(rng, 4, 94)
    # Rows of a wider buffer, every other row, and a transposed copy (columns not contiguous:
    # the operations path), as torch tensors and as numpy arrays; the rest of the buffer stays.
    for make in (lambda t: t[:4, :3000], lambda t: t[::2, :3000], lambda t: t.t().contiguous().t()[:4, :3000]):
        for as_numpy in (False, True):
            wide = torch.tensor(rng.standard_normal((8, 3100)), dtype=torch.float32)
            view = make(wide)
            if as_numpy:
                view = view.numpy()
            before = np.asarray(view).copy(), wide.clone()
            expected = oracle(np.asarray(view).astype(np.float64), words, None)
            bm.apply_token_bitmask_inplace(view, words)
            assert np.array_equal(np.asarray(view).astype(np.float64), expected)
            np.asarray(view)[...] = before[0]  # put the view back: nothing else may have changed
            assert torch.equal(wide, before[1])


def test_big_endian_and_read_only_arrays():
    rng = np.random.default_rng(8)
    words = random_words(rng, 2, 40)
    base = rng.standard_normal((2, 1270))
    for dtype in (">f4", ">f8", "<f4"):
        got = base.astype(dtype)
        expected = oracle(got.astype(np.float64), words, None)
        bm.apply_token_bitmask_inplace(got, words)
        assert np.array_equal(got.astype(np.float64), expected)
    frozen = base.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        bm.apply_token_bitmask_inplace(frozen, words)


def test_indices_out_of_range_are_rejected():
    logits = torch.zeros((4, 64))
    for bad in ([4], [-5], [0, 9]):
        with pytest.raises(IndexError, match="out of range"):
            bm.apply_token_bitmask_inplace(logits, bm.allocate_numpy_bitmask(4, 64), indices=bad)
    with pytest.raises(IndexError, match="2 bitmask rows"):
        bm.apply_token_bitmask_inplace(logits, bm.allocate_numpy_bitmask(2, 64), indices=[3])
    assert bool((logits == 0).all())


def test_kernel_switch_rejects_unknown_values(monkeypatch):
    monkeypatch.setenv(bm.KERNEL_SWITCH, "fast")
    with pytest.raises(ValueError, match="PUSHMASK_APPLY_KERNEL"):
        bm.apply_token_bitmask_inplace(np.zeros(32), bm.allocate_numpy_bitmask(1, 32)[0])


# ---------------------------------------------------------------------- the Triton kernel

TRITON_MISSING = importlib.util.find_spec("triton") is None
CUDA = torch.cuda.is_available()


@pytest.fixture(
    params=["interpreter", pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="needs a CUDA device"))]
)
def triton_device(request, monkeypatch):
    """The device whose tensors dispatch to the Triton kernel: the CPU under Triton's interpreter
    (a copy of the kernel module decorated with TRITON_INTERPRET=1), or CUDA compiled."""
    if TRITON_MISSING:
        pytest.skip("triton is not installed (pip install triton; the dev extra has it on Linux)")
    if request.param == "cuda":
        assert bm._triton_ready()
        return "cuda"
    import triton.language  # noqa: F401 - imported compiled: its library stays usable by compiled kernels

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    spec = importlib.util.spec_from_file_location(
        "pushmask.masks.bitmask_triton", bm.__file__.replace("bitmask.py", "bitmask_triton.py")
    )
    interpreted = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(interpreted)
    monkeypatch.setitem(sys.modules, "pushmask.masks.bitmask_triton", interpreted)
    monkeypatch.setattr(bm, "_TRITON", True)
    monkeypatch.setattr(bm, "TRITON_DEVICE_TYPES", ("cpu",))
    return "cpu"


@pytest.mark.parametrize("dtype_name", [*DTYPES, "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_triton_shapes(triton_device, dtype_name, shape):
    check_torch(triton_device, dtype_name, 3, *shape, seed=len(dtype_name) + shape[0])


@pytest.mark.parametrize("fill", [-1, 0])
@pytest.mark.parametrize("shape", [(4160, 130, 4090), (4200, 129, None), (4100, 129, None)], ids=str)
def test_triton_uniform_masks_still_mask_padding(triton_device, fill, shape):
    check_torch(triton_device, "bfloat16", 2, *shape, seed=0, fill=fill)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("n_rows", [1, 64, 256])
def test_triton_batch_sizes(triton_device, dtype_name, n_rows):
    # B = 256 with a narrower vocabulary: the interpreter runs each of the 256 rows' programs in Python.
    shape = (1100, 35, 1090) if n_rows == 256 and triton_device == "cpu" else (4100, 129, 4097)
    check_torch(triton_device, dtype_name, n_rows, *shape, seed=n_rows)


def test_triton_indices_shared_rows_and_row_strides(triton_device):
    check_torch(triton_device, "float32", 8, 3000, 94, None, seed=2, indices=[5, 0, 5, -1])
    check_torch(triton_device, "bfloat16", 8, 3000, 94, 2990, seed=3, indices=torch.tensor([2, 3]))
    check_torch(triton_device, "float16", 8, 3000, 94, None, seed=4, indices=[1, 6], shared=True)
    check_torch(triton_device, "float32", 8, 3000, 94, None, seed=6, indices=[])  # nothing to mask
    rng = np.random.default_rng(9)
    words = random_words(rng, 4, 94)
    wide = torch.tensor(rng.standard_normal((8, 3100)), dtype=torch.bfloat16, device=triton_device)
    before = wide.clone()
    view = wide[::2, :3000]  # rows 2 * 3100 apart, 3000 of their columns
    expected = oracle(as_float_array(view), words, None)
    bm.apply_token_bitmask_inplace(view, torch.from_numpy(words))
    assert np.array_equal(as_float_array(view), expected)
    assert torch.equal(wide[1::2], before[1::2]) and torch.equal(wide[:, 3000:], before[:, 3000:])
    vector = torch.tensor(rng.standard_normal(3000), dtype=torch.float32, device=triton_device)
    expected = oracle(as_float_array(vector)[None], words[:1], None)[0]
    bm.apply_token_bitmask_inplace(vector, torch.from_numpy(words[0]))
    assert np.array_equal(as_float_array(vector), expected)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_triton_kernel_compiles_for_h100_with_vector_stores(dtype, monkeypatch):
    """Triton's compiler (which the interpreter skips) accepts the kernel for sm_90, and with the
    specialization a launch on [B, 128256] logits gets (16-divisible sizes and strides, aligned
    pointers), masked stores and loads are 128-bit vectors."""
    if TRITON_MISSING:
        pytest.skip("triton is not installed (pip install triton; the dev extra has it on Linux)")
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, said (it warns otherwise)
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from pushmask.masks.bitmask_triton import _apply_bitmask_kernel as kernel

    index = {name: (kernel.arg_names.index(name),) for name in kernel.arg_names}
    signature = {name: "i32" for name in kernel.arg_names}
    signature.update(
        logits_ptr=f"*{dtype}", bitmask_ptr="*i32", rows_ptr="constexpr", HAS_ROWS="constexpr", BLOCK_WORDS="constexpr"
    )
    constexprs = {index["rows_ptr"]: None, index["HAS_ROWS"]: False, index["BLOCK_WORDS"]: 64}
    aligned = {index[name]: [["tt.divisibility", 16]] for name in signature if signature[name] != "constexpr"}
    source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=aligned)
    ptx = compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
    assert "st.global.v4.b32" in ptx and "ld.global.v4.b32" in ptx
