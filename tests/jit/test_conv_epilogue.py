"""A float32 convolution's epilogue (bias, ReLU, residual) inside the library call.

The library (`rvm.kernels.epilogue`) against NumPy through both entry points, every method
(1x1 GEMMs, strided and grouped, depthwise planes, taps in place, im2col blocks, the direct
method's tiles) on one thread and split on the pool; its own checks of the epilogue's
operands; and kernels whose bias, activation and residual ops the lowering hands to the
library (`rvm.jit.epilogue`), against the interpreter in every exec mode, with the kernel
record saying what it fused.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest
from conv_cases import CASES
from jit_helpers import rand, var

import rvm
from rvm import op
from rvm.ir import expr as E
from rvm.ir.builder import Builder
from rvm.kernels import conv, direct
from rvm.kernels.reference.packed import ACTIVATIONS
from rvm.op import numpy_ref

RELU = ACTIVATIONS.index("relu")

# One case of each method (see test_conv.CASES), and the direct method's (packed at the call:
# a deep stride-1 convolution with many output channels on a large map).
METHOD_CASES = [CASES[i] for i in (0, 2, 3, 4, 6, 9, 10, 11, 12, 14, 27, 28, 29, 30, 32, 33, 34)]
DIRECT_CASE = (1, 64, 32, 32, 128, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1))
# (bias, activation, residual: 0 none, 1 before the activation, 2 after it)
EPILOGUES = [(True, RELU, 0), (True, 0, 0), (False, RELU, 0), (True, RELU, 1), (True, RELU, 2),
             (False, 0, 1)]  # fmt: skip


@nb.njit
def _conv_entry(x, w, out, b4, res, params):  # type: ignore[no-untyped-def]
    return conv.entry_call((x, w, out, b4, res), params)


@nb.njit
def _direct_entry(x, w4, out, b4, res, params):  # type: ignore[no-untyped-def]
    return direct.entry_call((x, w4, out, b4, res), params)


def _operands(case):  # type: ignore[no-untyped-def]
    n, c, h, w_, o, (kh, kw) = case[:6]
    return rand((n, c, h, w_)), rand((o, c // case[8], kh, kw), seed=1)


def _want(case, x, w, bias, act, res, mode):  # type: ignore[no-untyped-def]
    (sh, sw), (dh, dw), pads = case[6], case[7], case[9]
    pt, pl, pb, pr = pads
    y = numpy_ref.conv2d(x, w, (sh, sw), (pt, pl, pb, pr), (dh, dw), case[8]).astype(np.float64)
    if bias is not None:
        y = y + bias.reshape(1, -1, 1, 1)
    if mode == 1:
        y = y + res
    if act == RELU:
        y = np.maximum(y, 0)
    if mode == 2:
        y = y + res
    return y


def _epilogue_operands(case, out_shape, has_bias, mode):  # type: ignore[no-untyped-def]
    bias = rand((1, 1, 1, case[4]), seed=3) if has_bias else None
    res = rand(out_shape, seed=4) if mode else None
    return bias, res


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("case", METHOD_CASES)
def test_conv2d_entry_applies_the_epilogue(blas_threads, case, epilogue) -> None:
    has_bias, act, mode = epilogue
    x, w = _operands(case)
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = case[6], case[7], case[9]
    oh = (case[2] + pt + pb - dh * (case[5][0] - 1) - 1) // sh + 1
    ow = (case[3] + pl + pr - dw * (case[5][1] - 1) - 1) // sw + 1
    out = np.full((case[0], case[4], oh, ow), np.nan, np.float32)
    bias, res = _epilogue_operands(case, out.shape, has_bias, mode)
    b4 = bias if bias is not None else (res if res is not None else out)
    r = res if res is not None else b4
    params = (case[8], sh, sw, dh, dw, pt, pl, pb, pr, act, int(has_bias), mode)
    assert _conv_entry(x, w, out, b4, r, params) == 0
    want = _want(case, x, w, bias, act, res, mode)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("case", [DIRECT_CASE, CASES[0], CASES[28]])
def test_direct_entry_applies_the_epilogue(blas_threads, case, epilogue) -> None:
    """Whole tiles (stored transposed) and partial ones (through a buffer) alike."""
    has_bias, act, mode = epilogue
    x, w = _operands(case)
    packed = direct.pack(w, case[8])
    w4 = packed.reshape(packed.shape[0] * packed.shape[1], *packed.shape[2:4], -1)
    oh, ow = case[2], case[3]  # 3x3, stride 1, pad 1
    out = np.full((case[0], case[4], oh, ow), np.nan, np.float32)
    bias, res = _epilogue_operands(case, out.shape, has_bias, mode)
    b4 = bias if bias is not None else (res if res is not None else out)
    r = res if res is not None else b4
    params = (case[8], 1, 1, 1, 1, 1, 1, 1, 1, packed.shape[5], act, int(has_bias), mode)
    assert _direct_entry(x, w4, out, b4, r, params) == 0
    np.testing.assert_allclose(out, _want(case, x, w, bias, act, res, mode), rtol=1e-4, atol=2e-3)


# Each epilogue operand disagrees with a 3x3, pad-1 convolution of (1, 16, 9, 7) into 6
# channels in one way: (bias shape, residual shape, activation, residual code).
BAD = [
    ((1, 1, 1, 5), (1, 6, 9, 7), RELU, 1),
    ((1, 6, 1, 1), (1, 6, 9, 7), RELU, 1),
    ((1, 1, 1, 6), (1, 6, 9, 6), RELU, 1),
    ((1, 1, 1, 6), (2, 6, 9, 7), 0, 2),
    ((1, 1, 1, 6), (1, 6, 9, 7), ACTIVATIONS.index("gelu"), 0),
    ((1, 1, 1, 6), (1, 6, 9, 7), 7, 0),
    ((1, 1, 1, 6), (1, 6, 9, 7), RELU, 3),
]


@pytest.mark.parametrize(("bias_shape", "res_shape", "act", "mode"), BAD)
def test_the_entry_point_refuses_an_epilogue_that_disagrees(bias_shape, res_shape, act, mode):  # type: ignore[no-untyped-def]
    """Nothing read or written, status 1."""
    x, w = rand((1, 16, 9, 7)), rand((6, 16, 3, 3), seed=1)
    out = np.zeros((1, 6, 9, 7), np.float32)
    bias, res = rand(bias_shape, seed=2), rand(res_shape, seed=3)
    assert _conv_entry(x, w, out, bias, res, (1, 1, 1, 1, 1, 1, 1, 1, 1, act, 1, mode)) == 1
    assert not out.any()


def test_float64_has_no_epilogue_in_the_library() -> None:
    x, w = rand((1, 4, 5, 5)).astype(np.float64), rand((3, 4, 3, 3), seed=1).astype(np.float64)
    out = np.zeros((1, 3, 3, 3))
    bias = np.ones((1, 1, 1, 3))
    assert _conv_entry(x, w, out, bias, bias, (1, 1, 1, 1, 1, 0, 0, 0, 0, RELU, 1, 0)) == 1
    assert _conv_entry(x, w, out, bias, bias, (1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0)) == 0


# -- kernels that hand their epilogue to the library --------------------------------------


def _module(case, form: str):  # type: ignore[no-untyped-def]
    """conv2d of ``case`` (a constant weight, as models bring them) and an epilogue ``form``;
    the module, its inputs and the epilogue steps the kernel should fuse."""
    x_np, w_np = _operands(case)
    n, o = case[0], case[4]
    attrs = dict(strides=case[6], dilation=case[7], groups=case[8], padding=case[9])
    bias = E.Constant(rand((o, 1, 1), seed=2))
    x = var("x", x_np.shape)
    y_shape = numpy_ref.conv2d(x_np, w_np, case[6], case[9], case[7], case[8]).shape
    r = var("r", y_shape)
    b = Builder()
    with b.function("main", [x, r]):
        y = b.emit(op.conv2d(x, E.Constant(w_np), **attrs))
        if form == "bias_relu":
            z = b.emit(op.relu(b.emit(op.add(y, bias))))
        elif form == "resnet":  # relu(conv + bias + shortcut)
            z = b.emit(op.relu(b.emit(op.add(b.emit(op.add(y, bias)), r))))
        elif form == "after":  # relu(conv + bias) + r
            z = b.emit(op.add(b.emit(op.relu(b.emit(op.add(bias, y)))), r))
        elif form == "residual_only":
            z = b.emit(op.add(r, y))
        else:  # "shared": conv + bias used twice, so only the bias add is fused
            s = b.emit(op.add(y, bias))
            z = b.emit(op.add(b.emit(op.relu(s)), b.emit(op.multiply(s, r))))
        b.emit_output(z)
    steps = {"bias_relu": "bias+relu", "resnet": "bias+residual+relu",
             "after": "bias+relu+residual", "residual_only": "residual",
             "shared": "bias"}[form]  # fmt: skip
    del n
    return b.get(), (x_np, rand(y_shape, seed=5)), steps


FORMS = ["bias_relu", "resnet", "after", "residual_only", "shared"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[4], CASES[28]])
def test_kernels_hand_their_epilogue_to_the_library(exec_mode, case, form) -> None:
    """Against the interpreter in every exec mode, and the kernel record names the steps the
    library call applies (pointwise, depthwise, taps and im2col methods)."""
    mod, inputs, steps = _module(case, form)
    want = rvm.interpret(mod, "main", *inputs)
    ex = rvm.compile(mod)
    fused = [r.meta.get("conv_epilogue") for r in ex.kernels.values()]
    assert steps in fused, fused
    vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
    np.testing.assert_allclose(vm["main"](*inputs), want, rtol=1e-4, atol=2e-3)
