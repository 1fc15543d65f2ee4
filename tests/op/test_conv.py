"""Convolutions and transposed convolutions against direct loops and hand-computed results."""

from __future__ import annotations

import numpy as np
import pytest
from op_testing import check, rand, var

from rvm import op
from rvm.errors import IRError
from rvm.ir import infer_type, tensor


def conv2d_loop(x, w, stride, pad, dil, groups):
    """A direct 7-loop convolution; pad is (top, left, bottom, right)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x.astype("f8"), [(0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])])
    oh = (h + pad[0] + pad[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pad[1] + pad[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for b in range(n):
        for oc in range(o):
            g = oc // og
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for ci in range(cg):
                        for p in range(kh):
                            for q in range(kw):
                                acc += (
                                    xp[b, g * cg + ci, i * stride[0] + p * dil[0],
                                       j * stride[1] + q * dil[1]] * w[oc, ci, p, q]
                                )  # fmt: skip
                    out[b, oc, i, j] = acc
    return out


@pytest.mark.parametrize(
    "stride,padding,pad4,dil,groups",
    [
        (1, 0, (0, 0, 0, 0), 1, 1),
        (2, 1, (1, 1, 1, 1), 1, 1),
        ((1, 2), (1, 0), (1, 0, 1, 0), (2, 1), 1),
        (1, (0, 1, 2, 0), (0, 1, 2, 0), 1, 2),
        (1, 1, (1, 1, 1, 1), 1, 4),
    ],
)
def test_conv2d_matches_a_direct_loop(stride, padding, pad4, dil, groups):
    x, w = var("x", (2, 4, 6, 7)), var("w", (4, 4 // groups, 3, 3))
    xv, wv = rand((2, 4, 6, 7)), rand((4, 4 // groups, 3, 3))
    call = op.conv2d(x, w, strides=stride, padding=padding, dilation=dil, groups=groups)
    assert call.attrs["padding"] == pad4
    out = check(call, {x: xv, w: wv})
    s2 = (stride, stride) if isinstance(stride, int) else stride
    d2 = (dil, dil) if isinstance(dil, int) else dil
    np.testing.assert_allclose(out, conv2d_loop(xv, wv, s2, pad4, d2, groups), rtol=1e-4, atol=1e-5)


def test_conv2d_shapes():
    x, w = var("x", ("n", 3, 32, 32)), var("w", (16, 3, 5, 5))
    assert infer_type(op.conv2d(x, w, padding=2)) == tensor(("n", 16, 32, 32), "float32")
    assert infer_type(op.conv2d(x, w, strides=2)) == tensor(("n", 16, 14, 14), "float32")
    y = var("y", (1, 3, "h", "w"))
    assert infer_type(op.conv2d(y, w)) == tensor((1, 16, None, None), "float32")
    with pytest.raises(IRError, match=r"conv2d: input \(1, 4, 8, 8\) has 4 channels but weight"):
        infer_type(op.conv2d(var("z", (1, 4, 8, 8)), w))
    with pytest.raises(IRError, match="conv2d: the input .NCHW. must have rank 4"):
        infer_type(op.conv2d(var("z", (4, 8, 8)), w))
    with pytest.raises(IRError, match="conv2d: window of size 5"):
        infer_type(op.conv2d(var("z", (1, 3, 4, 4)), w))
    with pytest.raises(IRError, match="conv2d: padding must have 1, 2 or 4 values"):
        op.conv2d(x, w, padding=(1, 2, 3))
    with pytest.raises(IRError, match="conv2d: strides must be >= 1"):
        op.conv2d(x, w, strides=0)


def test_conv1d():
    x, w = var("x", (2, 4, 9)), var("w", (6, 2, 3))
    xv, wv = rand((2, 4, 9)), rand((6, 2, 3))
    call = op.conv1d(x, w, strides=2, padding=(1, 2), dilation=1, groups=2)
    assert call.attrs == {"strides": (2,), "padding": (1, 2), "dilation": (1,), "groups": 2}
    out = check(call, {x: xv, w: wv}, tensor((2, 6, 5), "float32"))
    ref = conv2d_loop(xv[:, :, None], wv[:, :, None], (1, 2), (0, 1, 0, 2), (1, 1), 2)[:, :, 0]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def conv_nd_loop(x, w, stride, pads, dil, groups):
    """A direct N-d convolution over output positions; ``pads`` is (before..., after...)."""
    nsp = x.ndim - 2
    xp = np.pad(x.astype("f8"), [(0, 0), (0, 0)] + [(pads[i], pads[i + nsp]) for i in range(nsp)])
    o, cg = w.shape[:2]
    kernel = w.shape[2:]
    out_sp = [(xp.shape[2 + i] - dil[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(nsp)]
    out = np.zeros((x.shape[0], o, *out_sp))
    og = o // groups
    for pos in np.ndindex(*out_sp):
        for oc in range(o):
            g = oc // og
            window = tuple(
                slice(p * s, p * s + d * (k - 1) + 1, d)
                for p, s, d, k in zip(pos, stride, dil, kernel)
            )
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg), *window)]
            out[(slice(None), oc, *pos)] = (patch * w[oc]).reshape(len(patch), -1).sum(1)
    return out


@pytest.mark.parametrize(
    "shape, kernel, strides, padding, dilation, groups",
    [
        ((2, 4, 9), (3,), (2,), (1, 2), (1,), 2),
        ((1, 2, 5, 6, 7), (3, 2, 3), (1, 2, 1), (1, 0, 2, 1, 1, 0), (1, 1, 2), 1),
        ((2, 4, 4, 5, 3), (2, 2, 2), (2, 1, 1), (0, 1, 1, 1, 0, 0), (2, 1, 1), 4),
    ],
)
def test_conv_nd_matches_a_direct_loop(shape, kernel, strides, padding, dilation, groups):
    nsp = len(kernel)
    builder = {1: op.conv1d, 3: op.conv3d}[nsp]
    x, w = var("x", shape), var("w", (6 if groups < 4 else 4, shape[1] // groups, *kernel))
    xv, wv = rand(shape), rand(w.type.shape)
    call = builder(x, w, strides, padding, dilation, groups)
    out = check(call, {x: xv, w: wv})
    ref = conv_nd_loop(xv, wv, strides, padding, dilation, groups)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_conv3d_shapes_and_errors():
    x, w = var("x", ("n", 3, 8, 16, 16)), var("w", (4, 3, 3, 3, 3))
    assert op.conv3d(x, w, padding=(1, 0, 2)).attrs["padding"] == (1, 0, 2, 1, 0, 2)
    assert infer_type(op.conv3d(x, w, padding=1)) == tensor(("n", 4, 8, 16, 16), "float32")
    assert infer_type(op.conv3d(x, w, 2)) == tensor(("n", 4, 3, 7, 7), "float32")
    y = var("y", (1, 3, "d", 8, 8))
    assert infer_type(op.conv3d(y, w)) == tensor((1, 4, None, 6, 6), "float32")
    with pytest.raises(IRError, match=r"conv3d: the input \(NCDHW\) must have rank 5"):
        infer_type(op.conv3d(var("z", (1, 3, 8, 8)), w))
    with pytest.raises(IRError, match=r"conv3d: the weight \(OIDHW\) must have rank 5"):
        infer_type(op.conv3d(x, var("k", (4, 3, 3, 3))))
    with pytest.raises(IRError, match="conv3d: padding must have 1, 3 or 6 values"):
        op.conv3d(x, w, padding=(1, 2))


def conv_transpose_loop(x, w, stride, pads, out_pad, dil, groups):
    """A direct transposed convolution: every input element scatters through the kernel."""
    nsp = x.ndim - 2
    n, c = x.shape[:2]
    og, kernel = w.shape[1], w.shape[2:]
    full = [s * (i - 1) + d * (k - 1) + 1 for i, k, s, d in zip(x.shape[2:], kernel, stride, dil)]
    acc = np.zeros((n, groups * og, *(f + e for f, e in zip(full, out_pad))))
    cg = c // groups
    for pos in np.ndindex(*x.shape[2:]):
        for ci in range(c):
            g = ci // cg
            for off in np.ndindex(*kernel):
                at = tuple(p * s + k * d for p, s, k, d in zip(pos, stride, off, dil))
                for o in range(og):
                    acc[(slice(None), g * og + o, *at)] += (
                        x[(slice(None), ci, *pos)] * w[ci, o][off]
                    )
    crop = tuple(slice(pads[i], acc.shape[2 + i] - pads[i + nsp]) for i in range(nsp))
    return acc[(Ellipsis, *crop)]


@pytest.mark.parametrize(
    "shape, wshape, strides, padding, out_pad, dilation, groups",
    [
        ((2, 3, 5), (3, 2, 3), (2,), (1, 0), (1,), (1,), 1),
        ((1, 4, 3, 4), (4, 1, 3, 2), (3, 2), (1, 0, 2, 1), (2, 0), (1, 2), 2),
        ((1, 2, 2, 3, 2), (2, 3, 2, 2, 3), (1, 2, 2), (0, 1, 0, 0, 0, 1), (0, 1, 1), (2, 1, 1), 1),
    ],
)
def test_conv_transpose_matches_a_direct_loop(
    shape, wshape, strides, padding, out_pad, dilation, groups
):
    nsp = len(strides)
    builder = {1: op.conv1d_transpose, 2: op.conv2d_transpose, 3: op.conv3d_transpose}[nsp]
    x, w = var("x", shape), var("w", wshape)
    xv, wv = rand(shape), rand(wshape)
    call = builder(x, w, strides, padding, out_pad, dilation, groups)
    out = check(call, {x: xv, w: wv})
    ref = conv_transpose_loop(xv, wv, strides, padding, out_pad, dilation, groups)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_conv2d_transpose_by_hand_and_as_the_adjoint_of_conv2d():
    x, w = var("x", (1, 1, 2, 2)), var("w", (1, 1, 2, 2))
    xv = np.array([[[[1, 2], [3, 4]]]], np.float32)
    ones = np.ones((1, 1, 2, 2), np.float32)
    # Stride 2 places each input value in its own 2x2 block; padding 1 crops the border.
    out = check(op.conv2d_transpose(x, w, strides=2), {x: xv, w: ones})
    np.testing.assert_array_equal(out[0, 0], np.kron([[1, 2], [3, 4]], np.ones((2, 2))))
    out = check(op.conv2d_transpose(x, w, padding=1, output_padding=1), {x: xv, w: ones})
    np.testing.assert_array_equal(out[0, 0], [[10, 6], [7, 4]])
    # <conv(a, k), b> == <a, conv_transpose(b, k)>: the transposed convolution is the adjoint.
    a, b, k = var("a", (2, 4, 9, 9)), var("b", (2, 6, 5, 3)), var("k", (6, 2, 3, 3))
    av, bv, kv = rand((2, 4, 9, 9)), rand((2, 6, 5, 3)), rand((6, 2, 3, 3))
    attrs = dict(strides=2, padding=(1, 0, 1, 1), dilation=(1, 2), groups=2)
    y = check(op.conv2d(a, k, **attrs), {a: av, k: kv})
    xt = check(op.conv2d_transpose(b, k, output_padding=(0, 1), **attrs), {b: bv, k: kv})
    assert y.shape == bv.shape and xt.shape == av.shape
    np.testing.assert_allclose((y * bv).sum(), (av * xt).sum(), rtol=1e-4)


def test_conv_transpose_shapes_and_errors():
    x, w = var("x", ("n", 4, 7, 7)), var("w", (4, 3, 3, 3))
    call = op.conv2d_transpose(x, w, 2, 1, 1)
    assert call.attrs == {
        "strides": (2, 2), "padding": (1, 1, 1, 1), "output_padding": (1, 1),
        "dilation": (1, 1), "groups": 1,
    }  # fmt: skip
    assert infer_type(call) == tensor(("n", 3, 14, 14), "float32")
    assert infer_type(op.conv2d_transpose(x, var("g", (4, 2, 3, 3)), groups=2)) == tensor(
        ("n", 4, 9, 9), "float32"
    )
    assert infer_type(op.conv1d_transpose(var("s", (1, 4, "w")), var("k", (4, 5, 3)))) == tensor(
        (1, 5, None), "float32"
    )
    with pytest.raises(IRError, match=r"input \('n', 3, 7, 7\) has 3 channels but weight"):
        infer_type(op.conv2d_transpose(var("y", ("n", 3, 7, 7)), w))
    with pytest.raises(IRError, match="conv2d_transpose: 4 input channels do not divide into 3"):
        infer_type(op.conv2d_transpose(var("y", (1, 4, 7, 7)), var("k", (4, 1, 3, 3)), groups=3))
    with pytest.raises(IRError, match=r"conv2d_transpose: the weight \(IOHW\) must have rank 4"):
        infer_type(op.conv2d_transpose(x, var("k", (4, 3, 3))))
    with pytest.raises(IRError, match="padding .3, 3. leaves no output along spatial axis 0"):
        infer_type(op.conv2d_transpose(var("y", (1, 4, 1, 7)), w, padding=(3, 0)))
    with pytest.raises(IRError, match="conv1d_transpose: output_padding must be >= 0"):
        op.conv1d_transpose(var("s", (1, 4, 5)), var("k", (4, 5, 3)), output_padding=-1)
