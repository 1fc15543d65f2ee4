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
# a deep stride-1 convolution with many output channels on a large map). The last two are
# GEMMs whose epilogue runs block by block (`rvm.kernels.blas.gemm_segments`): a 1x1 one on a
# map wider than a column block, taps in place whose output exceeds a block of C.
METHOD_CASES = [CASES[i] for i in (0, 2, 3, 4, 6, 9, 10, 11, 12, 14, 27, 28, 29, 30, 32, 33, 34)]
METHOD_CASES += [
    (1, 8, 96, 100, 32, (1, 1), (1, 1), (1, 1), 1, (0, 0, 0, 0)),
    (1, 8, 100, 100, 32, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),
]
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


def _conv(case, x, w):  # type: ignore[no-untyped-def]
    """NumPy's convolution of ``case`` (float64)."""
    (sh, sw), (dh, dw), pads = case[6], case[7], case[9]
    return numpy_ref.conv2d(x, w, (sh, sw), pads, (dh, dw), case[8]).astype(np.float64)


def _want(y, bias, act, res, mode):  # type: ignore[no-untyped-def]
    """The epilogue on the convolution ``y``."""
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


@pytest.mark.parametrize("case", METHOD_CASES)
def test_conv2d_entry_applies_the_epilogue(blas_threads, case, epilogues=EPILOGUES) -> None:
    """Each epilogue (`EPILOGUES`) in turn on one convolution of each method (on a large map,
    the first two with a residual)."""
    x, w = _operands(case)
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = case[6], case[7], case[9]
    y = _conv(case, x, w)
    oh, ow = y.shape[2], y.shape[3]
    if oh * ow >= 4096:
        epilogues = [e for e in epilogues if e[2]][:2]
    for has_bias, act, mode in epilogues:
        out = np.full((case[0], case[4], oh, ow), np.nan, np.float32)
        bias, res = _epilogue_operands(case, out.shape, has_bias, mode)
        b4 = bias if bias is not None else (res if res is not None else out)
        r = res if res is not None else b4
        params = (case[8], sh, sw, dh, dw, pt, pl, pb, pr, act, int(has_bias), mode)
        assert _conv_entry(x, w, out, b4, r, params) == 0
        want = _want(y, bias, act, res, mode)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("case", [DIRECT_CASE, CASES[0], CASES[28]])
def test_direct_entry_applies_the_epilogue(blas_threads, case, epilogues=EPILOGUES) -> None:
    """Each epilogue in turn, on whole tiles (in registers, stored transposed) and partial
    ones (through a buffer) alike."""
    x, w = _operands(case)
    packed = direct.pack(w, case[8])
    w4 = packed.reshape(packed.shape[0] * packed.shape[1], *packed.shape[2:4], -1)
    oh, ow = case[2], case[3]  # 3x3, stride 1, pad 1
    y = _conv(case, x, w)
    for has_bias, act, mode in epilogues:
        out = np.full((case[0], case[4], oh, ow), np.nan, np.float32)
        bias, res = _epilogue_operands(case, out.shape, has_bias, mode)
        b4 = bias if bias is not None else (res if res is not None else out)
        r = res if res is not None else b4
        params = (case[8], 1, 1, 1, 1, 1, 1, 1, 1, packed.shape[5], act, int(has_bias), mode)
        assert _direct_entry(x, w4, out, b4, r, params) == 0
        want = _want(y, bias, act, res, mode)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


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

# (case, form): each epilogue form on the pointwise, depthwise, taps and im2col methods.
FUSED = [(CASES[0], "bias_relu"), (CASES[2], "resnet"), (CASES[4], "after"),
         (CASES[28], "residual_only"), (CASES[0], "shared")]  # fmt: skip
STEPS = {"bias_relu": "bias+relu", "resnet": "bias+residual+relu", "after": "bias+relu+residual",
         "residual_only": "residual", "shared": "bias"}  # fmt: skip


def _branch(b: Builder, x: E.Var, r: E.Var, case, form: str, seed: int) -> E.Expr:  # type: ignore[no-untyped-def]
    """conv2d of ``case`` (a constant weight, as models bring them) on ``x``, then the
    epilogue ``form`` (``r``: the residual)."""
    o = case[4]
    attrs = dict(strides=case[6], dilation=case[7], groups=case[8], padding=case[9])
    w = E.Constant(rand((o, case[1] // case[8], *case[5]), seed=seed))
    bias = E.Constant(rand((o, 1, 1), seed=seed + 1))
    y = b.emit(op.conv2d(x, w, **attrs))
    if form == "bias_relu":
        return b.emit(op.relu(b.emit(op.add(y, bias))))
    if form == "resnet":  # relu(conv + bias + shortcut)
        return b.emit(op.relu(b.emit(op.add(b.emit(op.add(y, bias)), r))))
    if form == "after":  # relu(conv + bias) + r
        return b.emit(op.add(b.emit(op.relu(b.emit(op.add(bias, y)))), r))
    if form == "residual_only":
        return b.emit(op.add(r, y))
    s = b.emit(op.add(y, bias))  # "shared": conv + bias used twice, only the bias add fused
    return b.emit(op.add(b.emit(op.relu(s)), b.emit(op.multiply(s, r))))


@pytest.fixture(scope="module")
def fused_program():  # type: ignore[no-untyped-def]
    """One module of every `FUSED` branch, compiled once: the executable, its inputs and the
    interpreter's answer."""
    params, inputs, b = [], [], Builder()
    for k, (case, _) in enumerate(FUSED):
        x_np = rand((case[0], case[1], case[2], case[3]), seed=10 * k)
        w_np = rand((case[4], case[1] // case[8], *case[5]))
        y_shape = numpy_ref.conv2d(x_np, w_np, case[6], case[9], case[7], case[8]).shape
        params += [var(f"x{k}", x_np.shape), var(f"r{k}", y_shape)]
        inputs += [x_np, rand(y_shape, seed=10 * k + 5)]
    with b.function("main", params):
        outs = [
            _branch(b, params[2 * k], params[2 * k + 1], case, form, 10 * k + 1)
            for k, (case, form) in enumerate(FUSED)
        ]
        b.emit_output(b.emit(E.Tuple(outs)))
    mod = b.get()
    return rvm.compile(mod), inputs, rvm.interpret(mod, "main", *inputs)


def test_kernels_hand_their_epilogue_to_the_library(exec_mode, fused_program) -> None:
    """Against the interpreter in every exec mode, and the kernel records name the steps the
    library calls apply (pointwise, depthwise, taps and im2col methods)."""
    ex, inputs, want = fused_program
    fused = sorted(
        r.meta["conv_epilogue"] for r in ex.kernels.values() if "conv_epilogue" in r.meta
    )
    assert fused == sorted(STEPS[form] for _, form in FUSED)
    got = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](*inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-3)
