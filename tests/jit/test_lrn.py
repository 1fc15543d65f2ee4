"""The lrn library (`rvm.kernels.lrn`) against the NumPy reference, and the kernels
calling it."""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import Jit, check, prim, rand, var

from rvm import op
from rvm.jit import jit_kernel
from rvm.kernels import lrn as native
from rvm.op import numpy_ref

CASES = [  # shape, size, alpha, beta, bias: odd and even windows, c below the window, every
    # power branch (0.75, 0.5, other), and a tensor large enough to split over threads
    ((1, 6, 5, 7), 3, 0.01, 0.75, 2.0),
    ((2, 7, 3, 4), 4, 1e-4, 0.5, 1.0),
    ((1, 3, 2, 5), 5, 0.1, 0.6, 0.5),
    ((2, 1, 3, 3), 2, 0.2, 1.3, 1.0),
    ((1, 96, 54, 54), 5, 1e-4, 0.75, 1.0),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("shape", "size", "alpha", "beta", "bias"), CASES)
def test_lrn_matches_reference(shape, size, alpha, beta, bias, dtype) -> None:
    x = rand(shape, dtype) * 4
    want = numpy_ref.lrn(x, size=size, axis=1, alpha=alpha, beta=beta, bias=bias)
    out = np.full(shape, np.nan, dtype=dtype)
    bits = [native.float_bits(v) for v in (alpha, beta, bias)]
    native.lrn(x, out, size, *bits)
    np.testing.assert_allclose(out, want, rtol=3e-6 if dtype == "float32" else 1e-12)


def test_lrn_shape_disagreement_raises() -> None:
    x, out = rand((1, 3, 4, 4)), np.zeros((1, 3, 4, 5), dtype="float32")
    with pytest.raises(ValueError, match="differs from the input's"):
        native.lrn(x, out, 3, *[native.float_bits(v) for v in (1e-4, 0.75, 1.0)])
    assert not out.any()


def test_lrn_kernels_call_the_library_and_others_fall_back() -> None:
    x = var("x", ("n", 5, 6, 7))
    func = prim([x], op.relu(op.lrn(x, size=3, alpha=0.02, beta=0.75, bias=1.5)))
    kernel = Jit(func)
    assert kernel.record.backend == "jit" and kernel.record.requires == (("lrn", "float32"),)
    check(func, rand((2, 5, 6, 7)), kernel=kernel)
    y = var("y", (2, 5, 6))
    record = jit_kernel("k", prim([y], op.lrn(y, size=3)))
    assert record.backend == "numpy" and "NCHW" in record.meta["jit_fallback"]
