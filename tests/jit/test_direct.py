"""The direct convolution vectorized along output channels (`rvm.kernels.direct`) against the
NumPy reference: packing, the kernel on odd shapes (channels that fill no vector, strides,
pads, groups, dilations, batches, panels of other widths), the rule that picks it, and models
that take it through `rvm.kernels.conv` in every exec mode."""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import rand, var

import rvm
from rvm import op
from rvm.ir import expr as E
from rvm.ir.builder import Builder
from rvm.kernels import conv, direct
from rvm.op import numpy_ref

# (batch, channels, height, width, out channels, kernel (h, w), strides, dilation, groups,
#  pads (top, left, bottom, right))
CASES = [
    (1, 16, 9, 9, 32, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),
    (2, 6, 10, 7, 48, (3, 3), (2, 1), (1, 1), 2, (1, 0, 2, 1)),  # groups, asymmetric pads
    (1, 5, 8, 8, 20, (3, 3), (1, 1), (2, 2), 1, (2, 2, 2, 2)),  # dilated, 20 channels
    (1, 3, 11, 9, 17, (2, 3), (1, 1), (1, 1), 1, (0, 1, 0, 1)),  # 17: a lane of a vector
    (1, 64, 7, 7, 512, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # resnet50's last stage
    (1, 8, 6, 6, 8, (3, 3), (1, 1), (1, 1), 8, (1, 1, 1, 1)),  # depthwise
    (1, 7, 13, 11, 50, (5, 5), (3, 2), (1, 2), 1, (2, 1, 0, 3)),  # stride 3, 50 channels
    (3, 12, 5, 5, 99, (1, 1), (1, 1), (1, 1), 3, (0, 0, 0, 0)),  # 1x1, 3 groups of 33
    (1, 4, 2, 3, 16, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # fewer positions than a tile
    (0, 4, 5, 5, 16, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # an empty batch
    (1, 0, 5, 5, 16, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # no input channels
]


def _operands(case):
    n, c, h, w, o, (kh, kw), _, _, groups, _ = case
    return rand((n, c, h, w)), rand((o, c // groups, kh, kw), seed=1)


def _reference(case, x, w):
    return numpy_ref.conv2d(x, w, case[6], case[9], case[7], case[8])


@pytest.mark.parametrize("panel", [direct.NB, 16, 2 * direct.NB])
@pytest.mark.parametrize("case", CASES)
def test_packed_convolution_matches_reference(case, panel) -> None:
    """Panels of the kernel's tile and of other widths (a weight packed on another CPU)."""
    x, w = _operands(case)
    want = _reference(case, x, w)
    packed = direct.pack(w, case[8], panel)
    np.testing.assert_array_equal(direct.unpack(packed, w.shape[0]), w)
    out = np.full(want.shape, np.nan, np.float32)
    (sh, sw), (dh, dw), pads = case[6], case[7], case[9]
    direct.conv2d_packed(x, packed, out, sh, sw, dh, dw, pads[0], pads[1])
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("case", CASES[:4])
def test_pack_in_jitted_code_is_pack(case) -> None:
    x, w = _operands(case)
    want = direct.pack(w, case[8])
    got = np.full(want.shape, np.nan, np.float32)
    direct.pack_into(w, case[8], got)
    np.testing.assert_array_equal(got, want)


def test_pack_refuses_channels_that_do_not_divide() -> None:
    with pytest.raises(ValueError, match="10 output channels, 3 groups"):
        direct.pack(rand((10, 2, 3, 3)), 3)


def test_the_rule_follows_the_shape_and_the_cpu() -> None:
    """Where the direct method runs (see `direct.prefers`): deep, stride-1, ungrouped
    convolutions with many output channels or an input plane larger than L2."""
    lanes = direct.LANES
    deep = max(64, 36 * lanes // 9)  # channels enough for the depth
    assert direct.prefers(deep, 8 * lanes, 1, 3, 3, 1, 1, 56, 56, 56, 56)
    assert not direct.prefers(deep, 8 * lanes, 1, 3, 3, 2, 2, 28, 28, 56, 56)  # strided
    assert not direct.prefers(deep, 8 * lanes, 2, 3, 3, 1, 1, 56, 56, 56, 56)  # grouped
    assert not direct.prefers(16, 8 * lanes, 1, 3, 3, 1, 1, 55, 55, 55, 55)  # shallow
    assert not direct.prefers(deep, 8 * lanes + 1, 1, 3, 3, 1, 1, 56, 56, 56, 56)  # ragged
    # Few output channels: only when the input plane outgrows L2 (vgg19's first layers).
    side = 1 + int((direct.L2 / (4 * deep)) ** 0.5)
    assert direct.prefers(deep, lanes, 1, 3, 3, 1, 1, side, side, side, side)
    assert not direct.prefers(deep, lanes, 1, 3, 3, 1, 1, 8, 8, 8, 8)


# Convolutions `rvm.kernels.conv` runs by the direct method, its weight packed at the call:
# padded, dilated, odd sizes, a batch of 2.
CHANNELS_CASES = [
    (1, 64, 32, 33, 128, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),
    (2, 72, 35, 31, 144, (3, 3), (1, 1), (2, 2), 1, (2, 1, 2, 3)),
]


@pytest.mark.parametrize("case", CHANNELS_CASES)
def test_library_convolution_takes_the_direct_method(case) -> None:
    x, w = _operands(case)
    want = _reference(case, x, w)
    out = np.full(want.shape, np.nan, np.float32)
    assert conv._channels_pay(x, w, out, case[8], *case[6])  # the case tests what it means to
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = case[6], case[7], case[9]
    conv.conv2d(x, w, out, case[8], sh, sw, dh, dw, pt, pl, pb, pr)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


def test_a_model_on_the_direct_method_in_every_exec_mode(exec_mode) -> None:
    """conv2d + bias + relu whose convolution takes the direct method, with weights as
    constants (the way models bring them), against the interpreter."""
    case = CHANNELS_CASES[0]
    x_np, w_np = _operands(case)
    bias = rand((case[4], 1, 1), seed=2)
    x = var("x", x_np.shape)
    b = Builder()
    with b.function("main", [x]):
        y = b.emit(op.conv2d(x, E.Constant(w_np), padding=1))
        b.emit_output(b.emit(op.relu(op.add(y, E.Constant(bias)))))
    mod = b.get()
    want = rvm.interpret(mod, "main", x_np)
    vm = rvm.VirtualMachine(rvm.compile(mod), exec_mode=exec_mode)
    np.testing.assert_allclose(vm["main"](x_np), want, rtol=1e-4, atol=2e-3)
