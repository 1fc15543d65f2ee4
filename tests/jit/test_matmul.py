"""Float matmul and dense through `rvm.kernels.blas.matmul`: every shape path (GEMV
for one row or column, the row loop and per-row GEMV for a few rows, GEMM) against NumPy, and its
checks."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest
from jit_helpers import Jit, check, prim, rand, var

from rvm import op
from rvm.kernels import blas, cblas, gemv

pytestmark = pytest.mark.skipif(not blas.AVAILABLE, reason="NumPy's BLAS has no ILP64 CBLAS")

# Row counts on every side of the path switches (0, the single row, below SMALL_ROWS, GEMM).
ROWS = (0, 1, 2, 3, 7, 8, 16, 17, 64)
TOL = {"float32": 1e-4, "float64": 1e-10}


def _layer(dtype: str, k: int | str, n: int, dense: bool, epilogue: bool):
    """``[relu](x @ w [+ b])`` (``dense``: ``x @ w.T``) with a symbolic batch: one kernel
    serves every row count."""
    x = var("x", ("m", k), dtype)
    w = var("w", (n, k) if dense else (k, n), dtype)
    b = var("b", (n,), dtype)
    y = op.dense(x, w) if dense else op.matmul(x, w)
    if epilogue:
        return prim([x, w, b], op.relu(y + b))
    return prim([x, w], y)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("dense", [False, True], ids=["matmul", "dense"])
@pytest.mark.parametrize("epilogue", [False, True], ids=["plain", "bias_relu"])
@pytest.mark.parametrize("k, n", [(13, 7), (3, 33), (64, 1)])
def test_rows_against_numpy(dtype: str, dense: bool, epilogue: bool, k: int, n: int) -> None:
    """Odd depths (a remainder after the row loop's steps of 4, or only a remainder), odd
    widths, and a single output column (GEMV on the left operand)."""
    func = _layer(dtype, k, n, dense, epilogue)
    kernel = Jit(func, name=f"mm_{dtype}_{dense}_{epilogue}_{k}_{n}")
    assert "rvm.kernels.blas" in kernel.record.imports  # the generator's facts: BLAS's matmul
    # through its entry point, the library's code linked by symbol, not compiled in
    assert kernel.record.requires == (("matmul", "_".join([dtype] * 3)),)
    w = rand((n, k) if dense else (k, n), dtype, seed=1)
    extra = [rand((n,), dtype, seed=2)] if epilogue else []
    for m in ROWS:
        x = rand((m, k), dtype, seed=3 + m)
        check(func, x, w, *extra, rtol=TOL[dtype], atol=TOL[dtype], kernel=kernel)


def test_mlp_layer_shapes() -> None:
    """The MLP's first layer (784 -> 128) at the batch sizes the benchmark times."""
    func = _layer("float32", 784, 128, False, True)
    kernel = Jit(func, name="mm_mlp_layer")
    w, b = rand((784, 128), seed=1) * 0.05, rand((128,), seed=2)
    for m in (1, 2, 8, 64):
        check(func, rand((m, 784), seed=m), w, b, rtol=1e-4, atol=1e-4, kernel=kernel)


def test_symbolic_depth_zero_fills_zeros() -> None:
    func = _layer("float64", "k", 5, False, True)
    kernel = Jit(func, name="mm_depth_k")
    for m in (1, 2, 8):
        got = kernel(np.empty((m, 0)), np.empty((0, 5)), np.arange(5.0) - 2)
        np.testing.assert_array_equal(got, np.broadcast_to([0, 0, 0, 1, 2], (m, 5)))
        check(func, rand((m, 6), "float64"), rand((6, 5), "float64", 1), rand((5,), "float64"))


@pytest.mark.parametrize("m", [1, 3, 8])
def test_batched_rows_broadcast(m: int) -> None:
    """One matmul call per batch matrix, each picking its path from its own row count."""
    a, c = var("a", (2, "m", 9)), var("c", (1, 9, 6))
    func = prim([a, c], op.relu(op.matmul(a, c)))
    check(func, rand((2, m, 9)), rand((1, 9, 6), seed=1), rtol=1e-5, atol=1e-5)


def test_without_numpy_blas_uses_np_dot(monkeypatch) -> None:
    monkeypatch.setattr(cblas, "AVAILABLE", False)  # what the lowering reads
    func = _layer("float32", 13, 7, True, True)
    kernel = Jit(func, name="mm_np_dot")
    assert "rvm.kernels.blas" not in kernel.record.imports  # np.dot in the kernel instead
    w, b = rand((7, 13), seed=1), rand((7,), seed=2)
    for m in (1, 3, 8):
        check(func, rand((m, 13), seed=m), w, b, rtol=1e-5, atol=1e-5, kernel=kernel)


# -- the helper on its own -------------------------------------------------------------------


@nb.njit
def _matmul(a, b, out, b_t):  # type: ignore[no-untyped-def]
    blas.matmul(a, b, out, b_t)


@pytest.mark.parametrize("b_t", [False, True])
@pytest.mark.parametrize("m", ROWS)
def test_helper_paths(m: int, b_t: bool) -> None:
    a, b = rand((m, 10), "float64"), rand((6, 10) if b_t else (10, 6), "float64", seed=1)
    out = np.full((m, 6), np.nan)  # every path overwrites the output (no beta * NaN)
    _matmul(a, b, out, b_t)
    np.testing.assert_allclose(out, a @ (b.T if b_t else b), rtol=1e-12, atol=1e-12)


def test_one_row_float32_products_of_every_tile_width() -> None:
    """rvm's own one-row product (`rvm.kernels.gemv`): every count of vectors in a tile,
    whole and partial last vectors, several tiles, depths that leave a remainder after the
    narrow tiles' steps of several rows, strided rows of B, and a B just past
    `blas.ROW_GEMV_BYTES` (OpenBLAS's GEMV) -- against NumPy, the output overwritten."""
    lanes = gemv.LANES
    widths = [1, 3, lanes - 1, lanes, lanes + 1, 2 * lanes + 5, 5 * lanes - 2]
    widths += [gemv.TILE_VECTORS * lanes, gemv.TILE_VECTORS * lanes + 1, 3 * lanes * 8 + 7]
    shapes = [(k, n) for n in widths for k in (1, 2, 3, 5, 13)]
    shapes.append((blas.ROW_GEMV_BYTES // (4 * 64) + 1, 64))
    for k, n in shapes:
        a, b = rand((1, k), seed=k), rand((k, n), seed=n)
        out = np.full((1, n), np.nan, np.float32)
        _matmul(a, b, out, False)
        want = a.astype(np.float64) @ b
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=5e-5 * k)  # elements in [-5, 5)


@pytest.mark.parametrize(
    "shapes",
    [
        ((3, 4), (5, 6), (3, 6), False),  # inner dimensions differ
        ((3, 4), (4, 6), (3, 5), False),  # output too narrow
        ((3, 4), (4, 6), (2, 6), False),  # output too short
        ((1, 4), (6, 5), (1, 6), True),  # b.T's inner dimension differs
        ((2, 4), (4, 6), (2, 6), True),  # b not transposed where it should be
    ],
)
def test_helper_rejects_bad_shapes(shapes) -> None:
    sa, sb, so, b_t = shapes
    out = np.zeros(so, np.float32)
    with pytest.raises(ValueError, match="shapes do not match"):
        _matmul(rand(sa), rand(sb), out, b_t)
    np.testing.assert_array_equal(out, 0)


@nb.njit
def _matmul_entry(a, b, out, b_t):  # type: ignore[no-untyped-def]
    return blas.matmul_call((a, b, out), (b_t,))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("b_t", [0, 1])
def test_the_entry_point_is_the_helper(dtype: str, b_t: int) -> None:
    """`blas.matmul_call` (what kernels call) writes what `blas.matmul` does on every path,
    and on operands that disagree returns 1 and writes nothing."""
    for m in ROWS:
        a, b = rand((m, 10), dtype), rand((6, 10) if b_t else (10, 6), dtype, seed=1)
        got, want = np.full((m, 6), np.nan, dtype), np.full((m, 6), np.nan, dtype)
        assert _matmul_entry(a, b, got, b_t) == 0
        _matmul(a, b, want, bool(b_t))
        np.testing.assert_array_equal(got, want)
    out = np.zeros((3, 6), dtype)
    assert _matmul_entry(rand((3, 4), dtype), rand((5, 6), dtype), out, b_t) == 1
    assert _matmul_entry(rand((3, 10), dtype), rand((10, 6), dtype), out[:2], 0) == 1
    np.testing.assert_array_equal(out, 0)


def test_helper_accepts_only_contiguous_arrays() -> None:
    """A strided view never reaches BLAS as if it were contiguous: it does not type."""
    a = rand((4, 16))
    with pytest.raises(nb.core.errors.TypingError):
        _matmul(a[:, ::2], rand((8, 3)), np.empty((4, 3), np.float32), False)
    with pytest.raises(nb.core.errors.TypingError):
        _matmul(a, rand((16, 3)), np.empty((4, 3), np.float64), False)
