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


def pool_loop(x, k, s, pad, mode, include_pad=False, ceil_mode=False):
    n, c, h, w = x.shape

    def size(d, kk, ss, lo, hi):
        span = d + lo + hi - kk
        o = (-(-span // ss) if ceil_mode else span // ss) + 1
        return o - 1 if ceil_mode and (o - 1) * ss >= d + lo else o

    oh, ow = size(h, k[0], s[0], pad[0], pad[2]), size(w, k[1], s[1], pad[1], pad[3])
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s[0] - pad[0], j * s[1] - pad[1]
            h1, w1 = min(h0 + k[0], h + pad[2]), min(w0 + k[1], w + pad[3])
            win = x[:, :, max(h0, 0) : min(h1, h), max(w0, 0) : min(w1, w)]
            if mode == "max":
                out[:, :, i, j] = win.max((2, 3))
            else:
                count = (h1 - h0) * (w1 - w0) if include_pad else win.shape[2] * win.shape[3]
                out[:, :, i, j] = win.sum((2, 3)) / count
    return out


@pytest.mark.parametrize(
    "k,s,pad,ceil_mode",
    [((2, 2), (2, 2), (0, 0, 0, 0), False), ((3, 3), (2, 2), (1, 1, 1, 1), False),
     ((3, 2), (1, 2), (1, 0, 0, 1), False), ((3, 3), (2, 2), (0, 0, 0, 0), True),
     ((3, 3), (2, 2), (1, 1, 1, 1), True)],
)  # fmt: skip
def test_pools_match_loops(k, s, pad, ceil_mode):
    x = var("x", (2, 3, 7, 8))
    a = rand((2, 3, 7, 8))
    out = check(op.max_pool2d(x, k, s, pad, ceil_mode=ceil_mode), {x: a})
    np.testing.assert_allclose(out, pool_loop(a, k, s, pad, "max", ceil_mode=ceil_mode))
    for include in (False, True):
        call = op.avg_pool2d(x, k, s, pad, ceil_mode=ceil_mode, count_include_pad=include)
        out = check(call, {x: a})
        ref = pool_loop(a, k, s, pad, "avg", include, ceil_mode)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_pool_shapes_and_global_pools():
    x = var("x", ("n", 8, 32, 32))
    assert infer_type(op.max_pool2d(x, 2, 2)) == tensor(("n", 8, 16, 16), "float32")
    assert infer_type(op.max_pool2d(x, 3, 2, 1)) == tensor(("n", 8, 16, 16), "float32")
    assert infer_type(op.avg_pool2d(x, 3, 2, ceil_mode=True)) == tensor(("n", 8, 16, 16), "float32")
    assert infer_type(op.global_avg_pool2d(x)) == tensor(("n", 8, 1, 1), "float32")
    y = var("y", (2, 3, 4, 5))
    a = rand((2, 3, 4, 5))
    out = check(op.global_avg_pool2d(y), {y: a}, tensor((2, 3, 1, 1), "float32"))
    np.testing.assert_allclose(out, a.mean((2, 3), keepdims=True), rtol=1e-6)
    out = check(op.global_max_pool2d(y), {y: a}, tensor((2, 3, 1, 1), "float32"))
    np.testing.assert_array_equal(out, a.max((2, 3), keepdims=True))
    with pytest.raises(IRError, match="global_max_pool2d: the input .NCHW. must have rank 4"):
        infer_type(op.global_max_pool2d(var("z", (3, 4, 5))))
