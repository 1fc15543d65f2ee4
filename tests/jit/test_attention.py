"""rvm.kernels.attention against the NumPy reference: masks added and selected, broadcast
mask axes, rows that keep no key, decode steps, bands of rows on one and two threads."""

from __future__ import annotations

import numpy as np
import pytest

from rvm.kernels import attention as lib
from rvm.kernels.reference.transformer import attention as reference

RNG = np.random.default_rng(0)


def _run(q, k, v, mask, scale=0.125, select=False, fill=-1e4, masked_row=0.0) -> None:
    out = np.full(q.shape[:3] + v.shape[3:], 7.0, q.dtype)
    lib.attention(q, k, v, mask, out, scale, fill, masked_row, select)
    kind = "select" if select else "add"
    want = reference(q, k, v, mask, scale, kind, fill, masked_row)
    tol = 1e-5 if q.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


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
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_additive_masks_of_every_broadcast(blas_threads, shape, dtype) -> None:
    b, h, s, t, d, dv = shape
    q, k, v = _qkv(*shape, dtype)
    for mshape in [(b, 1, s, t), (1, 1, 1, t), (b, h, s, t), (1, 1, 1, 1), (b, 1, s, 1)]:
        mask = np.where(RNG.random(mshape) < 0.3, -np.inf, 0.0).astype(dtype)
        _run(q, k, v, mask)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_select_masks(blas_threads, shape) -> None:
    b, h, s, t, d, dv = shape
    q, k, v = _qkv(*shape)
    mask = RNG.random((b, 1, s, t)) < 0.7
    _run(q, k, v, mask, select=True)  # a real fill: every key is read
    _run(q, k, v, mask, select=True, fill=-np.inf, masked_row=np.nan)  # hidden keys skipped


def test_rows_that_keep_no_key_give_masked_row(blas_threads) -> None:
    q, k, v = _qkv(2, 2, 6, 9, 8, 4)
    mask = np.zeros((2, 1, 6, 9), np.float32)
    mask[0, :, 2] = -np.inf  # one row of batch 0
    mask[1] = -np.inf  # all of batch 1
    for masked_row in (0.0, np.nan):
        _run(q, k, v, mask, masked_row=masked_row)


def test_keys_hidden_at_the_end_are_not_read(blas_threads) -> None:
    """A decode step over a preallocated cache: slots after the last one any row keeps may
    hold anything (here NaN) and change nothing."""
    q, k, v = _qkv(1, 2, 4, 10, 8, 4)
    mask = np.zeros((1, 1, 4, 10), np.float32)
    mask[..., 6:] = np.finfo(np.float32).min
    k_clean, v_clean = k.copy(), v.copy()
    k[:, :, 6:], v[:, :, 6:] = np.nan, np.nan
    out = np.empty((1, 2, 4, 4), np.float32)
    lib.attention(q, k, v, mask, out, 0.5, 0.0, 0.0, False)
    want = reference(q, k_clean, v_clean, mask, 0.5, "add", 0.0, 0.0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_empty_sequences() -> None:
    q, k, v = _qkv(2, 3, 0, 5, 4, 4)
    _run(q, k, v, np.zeros((1, 1, 1, 5), np.float32))
    q, k, v = _qkv(2, 3, 4, 0, 4, 4)
    _run(q, k, v, np.zeros((1, 1, 1, 1), np.float32), masked_row=np.nan)


def test_shapes_that_disagree_are_refused() -> None:
    q, k, v = _qkv(1, 2, 4, 5, 8, 4)
    out = np.empty((1, 2, 4, 4), np.float32)
    for bad in (
        (q, k[:, :1], v, np.zeros((1, 1, 1, 5), np.float32), out),
        (q, k, v[:, :, :4], np.zeros((1, 1, 1, 5), np.float32), out),
        (q, k, v, np.zeros((1, 1, 1, 3), np.float32), out),
        (q, k, v, np.zeros((1, 1, 1, 5), np.float32), out[:, :, :3]),
    ):
        with pytest.raises(ValueError, match="q, k, v, the mask and the output do not agree"):
            lib.attention(*bad, 1.0, 0.0, 0.0, False)
