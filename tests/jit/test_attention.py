"""rvm.kernels.attention against the NumPy reference: masks added and selected, broadcast
mask axes, rows that keep no key, decode steps, bands of rows on one and two threads; its bf16
products (``precision="bf16"``) against the reference's bf16 rounding and within bf16's
tolerance of float32."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest

import rvm
from rvm.kernels import attention as lib
from rvm.kernels import parfor
from rvm.kernels.reference.transformer import attention as reference

RNG = np.random.default_rng(0)


# bf16 keeps 8 bits of mantissa: q.k^T and p.v differ from float32's by about 2**-8 of their
# scale (the bound for a model's outputs is 3e-2 of their largest value)
BF16_VS_F32 = 3e-2


def _run(q, k, v, mask, scale=0.125, select=False, fill=-1e4, masked_row=0.0, bf16=False):
    out = np.full(q.shape[:3] + v.shape[3:], 7.0, q.dtype)
    lib.attention(q, k, v, mask, out, scale, fill, masked_row, select, bf16)
    kind = "select" if select else "add"
    want = reference(q, k, v, mask, scale, kind, fill, masked_row)
    if bf16 and q.dtype == np.float32:
        bound = BF16_VS_F32 * np.nanmax(np.abs(want), initial=1.0)
        np.testing.assert_allclose(out, want, rtol=0, atol=bound)
        return out
    tol = 1e-5 if q.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    return out


def _qkv(b, h, s, t, d, dv, dtype="float32"):
    shapes = ((b, h, s, d), (b, h, t, d), (b, h, t, dv))
    return [RNG.standard_normal(x).astype(dtype) for x in shapes]


SHAPES = [
    (1, 12, 128, 128, 64, 64),  # BERT-base's layer
    (2, 2, 5, 7, 8, 4),
    (2, 3, 1, 9, 8, 4),  # a decode step: a dot product per key
    (1, 2, 3, 40, 16, 8),
    (1, 1, 300, 700, 16, 8),  # several bands when threads want pieces
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "bf16"])
def test_additive_masks_of_every_broadcast(blas_threads, shape, dtype) -> None:
    b, h, s, t, d, dv = shape
    bf16 = dtype == "bf16"
    q, k, v = _qkv(*shape, "float32" if bf16 else dtype)
    for mshape in [(b, 1, s, t), (1, 1, 1, t), (b, h, s, t), (1, 1, 1, 1), (b, 1, s, 1)]:
        mask = np.where(RNG.random(mshape) < 0.3, -np.inf, 0.0).astype(q.dtype)
        _run(q, k, v, mask, bf16=bf16)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16"])
def test_select_masks(blas_threads, shape, bf16) -> None:
    b, h, s, t, d, dv = shape
    q, k, v = _qkv(*shape)
    mask = RNG.random((b, 1, s, t)) < 0.7
    _run(q, k, v, mask, select=True, bf16=bf16)  # a real fill: every key is read
    _run(q, k, v, mask, select=True, fill=-np.inf, masked_row=np.nan, bf16=bf16)  # skipped


@pytest.mark.parametrize("shape", [SHAPES[0], (2, 3, 37, 41, 33, 17)], ids=str)
def test_bf16_products_round_as_the_reference(blas_threads, shape) -> None:
    """Every row a GEMM's (no decode step): the bf16 GEMMs' sums are the reference's of q, k,
    p and v rounded to bf16 (`rvm.kernels.reference`), and not float32's own (odd depths and
    key counts pad their last pair) -- up to float32's summation order and the rare
    probability that a last-bit difference of its exponential rounds to the neighbouring bf16
    value (2**-8 of p at most)."""
    b, h, s, t, d, dv = shape
    q, k, v = _qkv(*shape)
    mask = np.where(RNG.random((b, 1, s, t)) < 0.3, -np.inf, 0.0).astype(np.float32)
    out = _run(q, k, v, mask, bf16=True)
    want = reference(q, k, v, mask, 0.125, "add", -1e4, 0.0, precision="bf16")
    near = np.abs(out - want) <= 1e-5 * np.abs(want).max()
    assert near.mean() > 0.99 and np.abs(out - want).max() <= 2**-8 * np.abs(v).max()
    full = reference(q, k, v, mask, 0.125, "add", -1e4, 0.0)
    assert np.abs(out - full).max() > 1e-3 * np.abs(full).max()


def test_rows_that_keep_no_key_give_masked_row(blas_threads) -> None:
    q, k, v = _qkv(2, 2, 6, 9, 8, 4)
    mask = np.zeros((2, 1, 6, 9), np.float32)
    mask[0, :, 2] = -np.inf  # one row of batch 0
    mask[1] = -np.inf  # all of batch 1
    for masked_row in (0.0, np.nan):
        _run(q, k, v, mask, masked_row=masked_row)


@pytest.mark.parametrize("live", [6, 5, 1])
@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16"])
def test_keys_hidden_at_the_end_are_not_read(blas_threads, live, bf16) -> None:
    """A decode step over a preallocated cache: slots after the last one any row keeps may
    hold anything (here NaN) and change nothing (in bf16 too, where an odd count of live
    keys leaves the last one's pair half hidden)."""
    q, k, v = _qkv(1, 2, 4, 10, 8, 4)
    mask = np.zeros((1, 1, 4, 10), np.float32)
    mask[..., live:] = np.finfo(np.float32).min
    k_clean, v_clean = k.copy(), v.copy()
    k[:, :, live:], v[:, :, live:] = np.nan, np.nan
    out = np.empty((1, 2, 4, 4), np.float32)
    lib.attention(q, k, v, mask, out, 0.5, 0.0, 0.0, False, bf16)
    want = reference(q, k_clean, v_clean, mask, 0.5, "add", 0.0, 0.0)
    tol = BF16_VS_F32 if bf16 else 1e-5
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.abs(want).max())


@nb.njit
def _reduced(x):  # type: ignore[no-untyped-def]
    at = parfor.address(x)
    return lib._row_sum(at, x.size, x[0]), lib._row_max(at, x.size, x[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_reductions_keep_the_sources_order(dtype) -> None:
    """The softmax's sum adds lane ``i`` of 16 its values ``i, i + 16...`` in turn, then
    halves pairwise: bit for bit that order, whatever LLVM vectorizes. A sum LLVM may
    reassociate once gave BERT another output in a process that compiled the attention task
    than in one that loaded it (the loader binds a call to whichever compiled copy of the
    softmax it met first). The largest value propagates a NaN."""
    for n in (1, 5, 16, 128, 131):
        x = (RNG.standard_normal(n) * 10.0 ** RNG.uniform(-4, 4, n)).astype(dtype)
        lanes = np.concatenate([x, np.full(-n % 16, -0.0, dtype)]).reshape(-1, 16)
        acc = lanes[0].copy()
        for row in lanes[1:]:
            acc += row
        while acc.size > 1:
            acc = acc[: acc.size // 2] + acc[acc.size // 2 :]
        total, top = _reduced(x)
        assert np.asarray(total, dtype).tobytes() == acc[0].tobytes() and top == x.max()
        x[n // 2] = np.nan
        assert np.isnan(_reduced(x)[1])


@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16"])
def test_bands_change_no_answer(bf16) -> None:
    """Two threads cut each head's rows into bands (and the pool's load may cut them
    otherwise): the output is one thread's, bit for bit."""
    q, k, v = _qkv(1, 1, 300, 700, 16, 8)
    mask = np.where(RNG.random((1, 1, 300, 700)) < 0.3, -np.inf, 0.0).astype(np.float32)
    outs, before = [], rvm.get_num_threads()
    try:
        for threads in (1, 2):
            rvm.set_num_threads(threads)
            outs.append(np.full((1, 1, 300, 8), np.nan, np.float32))
            lib.attention(q, k, v, mask, outs[-1], 0.25, 0.0, 0.0, False, bf16)
    finally:
        rvm.set_num_threads(before)
    assert outs[0].tobytes() == outs[1].tobytes()


@pytest.mark.parametrize("shape", [SHAPES[0], SHAPES[2], (1, 2, 37, 37, 5, 7)], ids=str)
@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16"])
def test_heads_read_in_place_equal_split_copies(shape, bf16) -> None:
    """`attention_heads` reads each head's columns of 3-d (batch, seq, columns) arrays (a
    merged QKV product's): the output is that of the heads copied out, bit for bit."""
    b, h, s, t, d, dv = shape
    x = RNG.standard_normal((b, s, 3 + h * d + 2), dtype=np.float32)
    kv = RNG.standard_normal((b, t, 1 + h * d + h * dv), dtype=np.float32)
    mask = np.where(RNG.random((b, 1, s, t)) < 0.3, -np.inf, 0.0).astype(np.float32)

    def heads(a, at, w):  # type: ignore[no-untyped-def]
        cut = a[:, :, at : at + h * w].reshape(a.shape[0], a.shape[1], h, w)
        return np.ascontiguousarray(cut.transpose(0, 2, 1, 3))

    q, k, v = heads(x, 3, d), heads(kv, 1, d), heads(kv, 1 + h * d, dv)
    want = _run(q, k, v, mask, bf16=bf16)
    got = np.full_like(want, np.nan)
    lib.attention_heads(x, kv, kv, mask, got, 0.125, -1e4, 0.0, False, bf16, d,
                        (3, 1, 1 + h * d))  # fmt: skip
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16"])
def test_merged_heads_equal_the_transposed_output(threads, bf16) -> None:
    """``merged``: the output (batch, seq, heads, dv) is the 4-d one transposed, bit for bit,
    from 4-d operands and from heads read in place, rows that keep no key included."""
    b, h, s, t, d, dv = 2, 3, 37, 37, 8, 5
    q, k, v = _qkv(b, h, s, t, d, dv)
    mask = np.where(RNG.random((b, 1, s, t)) < 0.3, -np.inf, 0.0).astype(np.float32)
    mask[0, 0, 3] = -np.inf  # a row that keeps no key: masked_row
    want = np.full((b, h, s, dv), np.nan, np.float32)
    lib.attention(q, k, v, mask, want, 0.125, -1e4, 0.5, False, bf16)
    want = np.ascontiguousarray(want.transpose(0, 2, 1, 3))
    x = np.concatenate([a.transpose(0, 2, 1, 3).reshape(b, s, -1) for a in (q, k, v)], axis=2)
    before = rvm.get_num_threads()
    try:
        rvm.set_num_threads(threads)
        got = np.full((b, s, h, dv), np.nan, np.float32)
        lib.attention(q, k, v, mask, got, 0.125, -1e4, 0.5, False, bf16, True)
        joined = np.full((b, s, h, dv), np.nan, np.float32)
        lib.attention_heads(np.ascontiguousarray(x), x, x, mask, joined, 0.125, -1e4, 0.5,
                            False, bf16, d, (0, h * d, 2 * h * d), True)  # fmt: skip
    finally:
        rvm.set_num_threads(before)
    assert got.tobytes() == want.tobytes() and joined.tobytes() == want.tobytes()


def test_empty_sequences() -> None:
    q, k, v = _qkv(2, 3, 0, 5, 4, 4)
    _run(q, k, v, np.zeros((1, 1, 1, 5), np.float32))
    q, k, v = _qkv(2, 3, 4, 0, 4, 4)
    _run(q, k, v, np.zeros((1, 1, 1, 1), np.float32), masked_row=np.nan)


def test_shapes_that_disagree_are_refused() -> None:
    q, k, v = _qkv(1, 2, 4, 5, 8, 4)
    out = np.empty((1, 2, 4, 4), np.float32)
    # C-contiguous operands and ``bf16`` given, as kernels call it: the build the other tests
    # load (a sliced view is another Numba signature, compiled only to raise)
    for bad in (
        (q, k[:, :1].copy(), v, np.zeros((1, 1, 1, 5), np.float32), out),
        (q, k, v[:, :, :4].copy(), np.zeros((1, 1, 1, 5), np.float32), out),
        (q, k, v, np.zeros((1, 1, 1, 3), np.float32), out),
        (q, k, v, np.zeros((1, 1, 1, 5), np.float32), out[:, :, :3].copy()),
    ):
        with pytest.raises(ValueError, match="q, k, v, the mask and the output do not agree"):
            lib.attention(*bad, 1.0, 0.0, 0.0, False, False)
    x, mask = np.zeros((1, 4, 2 * 8 + 7), np.float32), np.zeros((1, 1, 1, 4), np.float32)
    with pytest.raises(ValueError, match="the heads' columns, the mask and the output"):
        lib.attention_heads(x, x, x, mask, out, 1.0, 0.0, 0.0, False, False, 8, (0, 8, 16))
