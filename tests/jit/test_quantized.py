"""Quantized kernels: jit `rvm.op.qconv2d` / `rvm.op.qdense` (through `rvm.kernels.qgemm`,
VNNI where the CPU has it) equal their NumPy references exactly, over strides, padding,
dilation, groups, depths that are not multiples of 4, batches, uint8 and int8 inputs, ReLU
clamps and int8 outputs; uint8 max pools (through the float32 pool library) too."""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import check, prim, var

from rvm import op
from rvm.kernels import qgemm
from rvm.op import numpy_ref

RNG = np.random.default_rng(7)


def _ints(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


CONVS = [
    # x shape, weight shape, strides, padding, dilation, groups
    ((1, 3, 9, 9), (8, 3, 3, 3), 1, 1, 1, 1),
    ((2, 6, 11, 7), (6, 3, 3, 3), 2, (1, 0, 2, 1), 1, 2),
    ((1, 5, 10, 10), (40, 5, 1, 1), 1, 0, 1, 1),
    ((1, 4, 13, 13), (7, 4, 3, 3), 1, 2, 2, 1),
    ((1, 3, 20, 20), (16, 3, 7, 7), 2, 3, 1, 1),
    ((1, 8, 6, 6), (8, 1, 3, 3), 1, 1, 1, 8),
]


@pytest.mark.parametrize(("xs", "ws", "strides", "padding", "dilation", "groups"), CONVS)
@pytest.mark.parametrize(("x_dtype", "y_dtype", "relu"), [("uint8", "uint8", True),
                                                          ("int8", "int8", False)])  # fmt: skip
def test_qconv2d_kernel_equals_reference(xs, ws, strides, padding, dilation, groups, x_dtype,
                                         y_dtype, relu):  # fmt: skip
    o = ws[0]
    x, w = var("x", xs, x_dtype), var("w", ws, "int8")
    b, s = var("b", (o,), "int32"), var("s", (o,), "float32")
    y_zero = 9 if y_dtype == "uint8" else -3
    call = op.qconv2d(
        x,
        w,
        b,
        s,
        x_zero=4,
        y_zero=y_zero,
        dtype=y_dtype,
        relu=relu,
        strides=strides,
        padding=padding,
        dilation=dilation,
        groups=groups,
    )
    scale = RNG.uniform(2e-4, 2e-3, o).astype(np.float32)
    bias = RNG.integers(-3000, 3000, o).astype(np.int32)
    check(prim([x, w, b, s], call), _ints(xs, x_dtype), _ints(ws, "int8"), bias, scale)


@pytest.mark.parametrize(("m", "k", "n"), [(1, 2048, 1000), (3, 37, 5), (40, 64, 33)])
def test_qdense_kernel_equals_reference(m, k, n):
    x, w = var("x", (m, k), "uint8"), var("w", (n, k), "int8")
    b, s = var("b", (n,), "int32"), var("s", (n,), "float32")
    call = op.qdense(x, w, b, s, x_zero=128, y_zero=100)
    scale = RNG.uniform(1e-4, 1e-3, n).astype(np.float32)
    bias = RNG.integers(-3000, 3000, n).astype(np.int32)
    check(prim([x, w, b, s], call), _ints((m, k), "uint8"), _ints((n, k), "int8"), bias, scale)


def test_library_without_kernel_matches_reference():
    """The library called directly (as a kernel calls it), output prefilled so a missed
    element fails."""
    x, w = _ints((1, 6, 8, 8), "uint8"), _ints((12, 6, 3, 3), "int8")
    bias, scale = np.arange(12, dtype=np.int32), np.full(12, 1e-3, np.float32)
    want = numpy_ref.qconv2d(x, w, bias, scale, 3, 1, 0, 255, "uint8", (1, 1), (1, 1, 1, 1),
                             (1, 1), 1)  # fmt: skip
    out = np.full(want.shape, 77, np.uint8)
    qgemm.qconv2d(x, w, bias, scale, out, 3, 1, 0, 255, 1, 1, 1, 1, 1, 1, 1)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_integer_max_pool_kernel(dtype):
    x = var("x", (1, 4, 11, 11), dtype)
    call = op.max_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 0, 0),
                         ceil_mode=True)  # fmt: skip
    check(prim([x], call), _ints((1, 4, 11, 11), dtype))
