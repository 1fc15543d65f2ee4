"""The norms library (`rvm.kernels.norms`) against the NumPy reference, and the kernels
calling it: layer and RMS norms over trailing axes, float32 and float64, rows split over the
pool, and the norms it leaves to generated loops."""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import Jit, check, prim, rand, var

import rvm
from rvm import op
from rvm.kernels import norms
from rvm.kernels.lrn import float_bits
from rvm.kernels.reference.nn import layer_norm as layer_ref
from rvm.kernels.reference.transformer import rms_norm as rms_ref

SHAPES = [(1, 5), (3, 7), (128, 768), (700, 96)]  # the last two split over two threads


def _norm(x, g, b, eps, rms):  # type: ignore[no-untyped-def]
    out = np.full_like(x, np.nan)
    norms.norm_rows(x, g, b, out, float_bits(eps), int(rms))
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rows_match_the_reference(shape, dtype) -> None:
    x = rand(shape, dtype, seed=1) * 3 + 0.5
    g, b = rand(shape[1:], dtype, seed=2), rand(shape[1:], dtype, seed=3)
    tol = 2e-5 if dtype == "float32" else 1e-12
    want = layer_ref(x, g, b, axes=(-1,), epsilon=1e-5)
    np.testing.assert_allclose(_norm(x, g, b, 1e-5, False), want, rtol=tol, atol=tol)
    want = rms_ref(x, g, axes=(-1,), epsilon=1e-6)
    np.testing.assert_allclose(_norm(x, g, g, 1e-6, True), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("rms", [False, True], ids=["layer", "rms"])
def test_the_pools_cut_changes_no_answer(rms) -> None:
    """Rows are independent: two threads' result is one thread's, bit for bit."""
    x = rand((700, 96), seed=4)
    g, b = rand((96,), seed=5), rand((96,), seed=6)
    outs, before = [], rvm.get_num_threads()
    try:
        for threads in (1, 2):
            rvm.set_num_threads(threads)
            outs.append(_norm(x, g, b, 1e-5, rms))
    finally:
        rvm.set_num_threads(before)
    assert outs[0].tobytes() == outs[1].tobytes()


def test_shapes_that_disagree_are_refused() -> None:
    x, g = rand((4, 6)), rand((6,))
    out = np.zeros((4, 6), np.float32)
    for bad in ((x, rand((5,)), g, out), (x, g, rand((5,)), out), (x, g, g, out[:, :5].copy())):
        with pytest.raises(ValueError, match="do not match the input's rows"):
            norms.norm_rows(*bad, float_bits(1e-5), 0)
    norms.norm_rows(x, g, rand((5,)), out, float_bits(1e-5), 1)  # RMS reads no beta


def test_kernels_call_the_library_over_trailing_axes() -> None:
    x, g, b = var("x", ("n", 3, 8)), var("g", (3, 8)), var("b", (3, 8))
    func = prim([x, g, b], op.relu(op.layer_norm(x, g, b, axes=(-2, -1), epsilon=1e-3)))
    kernel = Jit(func)
    assert kernel.record.requires == (("norm_rows", "float32_float32_float32_float32"),)
    check(func, rand((5, 3, 8)), rand((3, 8), seed=2), rand((3, 8), seed=3), kernel=kernel,
          rtol=1e-5, atol=1e-5)  # fmt: skip
    y, gy = var("y", (4, 300), "float64"), var("gy", (300,), "float64")
    func = prim([y, gy], op.rms_norm(y, gy, epsilon=1e-6))
    kernel = Jit(func)
    assert kernel.record.requires == (("norm_rows", "float64_float64_float64_float64"),)
    check(func, rand((4, 300), "float64"), rand((300,), "float64", seed=2), kernel=kernel)


def test_other_axes_stay_generated_loops() -> None:
    x, g, b = var("x", (2, 8, 3)), var("g", (8,)), var("b", (8,))
    func = prim([x, g, b], op.layer_norm(x, g, b, axes=(1,)))
    kernel = Jit(func)
    assert kernel.record.backend == "jit" and not kernel.record.requires
    check(func, rand((2, 8, 3)), rand((8,), seed=2), rand((8,), seed=3), kernel=kernel,
          rtol=1e-5, atol=1e-5)  # fmt: skip
