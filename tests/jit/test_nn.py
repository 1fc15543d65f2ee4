"""Anchors with epilogues (matmul, dense, conv), normalizations and pools."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from jit_helpers import Jit, check, numpy_run, prim, rand, var

from rvm import op

x = var("x", ("n", 8))
w = var("w", (8, 5))
bias = var("bias", (5,))
X, W, BIAS = rand((4, 8)), rand((8, 5), seed=1), rand((5,), seed=2)


def test_matmul_bias_relu() -> None:
    check(prim([x, w, bias], op.relu(op.matmul(x, w) + bias)), X, W, BIAS, rtol=1e-5)


def test_batched_matmul_broadcast() -> None:
    a, c = var("a", (2, "n", 8)), var("c", (1, 8, 5))
    check(
        prim([a, c, bias], op.relu(op.matmul(a, c) + bias)),
        rand((2, 3, 8)),
        rand((1, 8, 5)),
        BIAS,
        rtol=1e-5,
    )
    check(prim([a, c], op.matmul(a, c) * 2.0), rand((2, 3, 8)), rand((1, 8, 5)), rtol=1e-5)


@pytest.mark.parametrize("shapes", [((8,), (8, 5)), (("n", 8), (8,)), ((8,), (8,))])
def test_matmul_vectors(shapes) -> None:
    a, c = var("a", shapes[0]), var("c", shapes[1])
    arrays = [rand(tuple(4 if d == "n" else d for d in s), seed=i) for i, s in enumerate(shapes)]
    check(prim([a, c], op.matmul(a, c)), *arrays, rtol=1e-5, atol=1e-5)


def test_dense_and_int_matmul() -> None:
    wd = var("wd", (5, 8))
    check(prim([x, wd, bias], op.sigmoid(op.dense(x, wd) + bias)), X, rand((5, 8)), BIAS)
    xi, wi = var("xi", (3, 4), "int32"), var("wi", (4, 2), "int32")
    check(prim([xi, wi], op.matmul(xi, wi)), rand((3, 4), "int32"), rand((4, 2), "int32"))


CONVS = [
    dict(strides=1, padding=1, dilation=1, groups=1),
    dict(strides=2, padding=(1, 0, 2, 1), dilation=(1, 2), groups=2),
    dict(strides=(1, 2), padding=0, dilation=2, groups=4),
]


@pytest.mark.parametrize("attrs", CONVS)
def test_conv2d_relu(attrs) -> None:
    img = var("img", ("b", 4, 9, 7))
    k = var("k", (8, 4 // attrs["groups"], 3, 3))
    cb = var("cb", (8, 1, 1))
    func = prim([img, k, cb], op.relu(op.conv2d(img, k, **attrs) + cb))
    check(
        func,
        rand((2, 4, 9, 7)),
        rand((8, 4 // attrs["groups"], 3, 3), seed=1),
        rand((8, 1, 1), seed=2),
        rtol=1e-4,
        atol=1e-5,
    )


DEEP_CONVS = [
    dict(strides=1, padding=1, dilation=1, groups=1),
    dict(strides=1, padding=(2, 0, 1, 3), dilation=(2, 1), groups=1),
    dict(strides=1, padding=0, dilation=1, groups=2),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("attrs", DEEP_CONVS)
def test_conv2d_deep_gemms(attrs, dtype) -> None:
    """Stride-1 convolutions with 16 channels per group, padded, dilated and grouped."""
    cin = 16 * attrs["groups"]
    img = var("img", ("b", cin, 9, 7), dtype)
    k = var("k", (6, 16, 3, 2), dtype)
    cb = var("cb", (6, 1, 1), dtype)
    func = prim([img, k, cb], op.relu(op.conv2d(img, k, **attrs) + cb))
    for batch in (2, 1, 0):
        check(
            func,
            rand((batch, cin, 9, 7), dtype),
            rand((6, 16, 3, 2), dtype, seed=1),
            rand((6, 1, 1), dtype, seed=2),
            rtol=1e-4,
            atol=1e-4,
        )


def test_conv2d_gemms_from_threads() -> None:
    """Kernels release the GIL around BLAS: concurrent calls stay correct."""
    img, k = var("img", (1, 16, 12, 12)), var("k", (16, 16, 3, 3))
    func = prim([img, k], op.relu(op.conv2d(img, k, padding=1)))
    kernel = Jit(func)
    weights = rand((16, 16, 3, 3), seed=1)
    images = [rand((1, 16, 12, 12), seed=10 + i) for i in range(4)]
    wants = [numpy_run(func, x, weights) for x in images]
    errors: list[float] = []

    def run(i: int) -> None:
        for _ in range(50):
            got = kernel(images[i], weights)
            errors.append(float(np.max(np.abs(got - wants[i]))))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 200 and max(errors) < 1e-3


@pytest.mark.parametrize("strides", [1, 2])
def test_conv2d_without_numpy_blas_uses_np_dot(strides, monkeypatch) -> None:
    """Where NumPy's BLAS has no ILP64 CBLAS, convolutions fall back to im2col and np.dot."""
    from rvm.kernels import cblas

    monkeypatch.setattr(cblas, "AVAILABLE", False)  # what the lowering reads
    img, k = var("img", ("b", 16, 9, 7)), var("k", (8, 16, 3, 3))
    func = prim([img, k], op.relu(op.conv2d(img, k, strides=strides, padding=1)))
    kernel = Jit(func, name=f"conv_dot_{strides}")
    # The generator's facts: no library GEMM entry point, conv's im2col + np.dot instead; its
    # ReLU still runs as the library's epilogue pass (`rvm.kernels.epipass`).
    requires = [name for name, _ in kernel.record.requires]
    assert requires == ["conv_epilogue"] and "rvm.kernels.conv" in kernel.record.imports
    check(
        func, rand((2, 16, 9, 7)), rand((8, 16, 3, 3), seed=1), rtol=1e-4, atol=1e-4, kernel=kernel
    )


def test_conv1d_gemms() -> None:
    s, k1 = var("s", (2, 32, "t")), var("k1", (8, 32, 3))
    func = prim([s, k1], op.conv1d(s, k1, padding=(2, 0)))
    for t in (10, 1):
        check(func, rand((2, 32, t)), rand((8, 32, 3)), rtol=1e-4, atol=1e-4)


def test_conv_int_and_conv1d() -> None:
    img, k = var("img", (1, 4, 7, 7), "int32"), var("k", (6, 2, 3, 3), "int32")
    check(
        prim([img, k], op.conv2d(img, k, strides=2, padding=1, groups=2)),
        rand((1, 4, 7, 7), "int32"),
        rand((6, 2, 3, 3), "int32"),
    )
    s, k1 = var("s", (2, 3, 10)), var("k1", (4, 3, 3))
    check(
        prim([s, k1], op.conv1d(s, k1, padding=1, strides=2)),
        rand((2, 3, 10)),
        rand((4, 3, 3)),
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("pool", ["max", "avg", "avg_include", "max_ceil"])
def test_pools(pool: str) -> None:
    img = var("img", (2, 3, 7, 8))
    if pool == "max":
        e = op.max_pool2d(img, 3, strides=2, padding=1)
    elif pool == "max_ceil":
        e = op.relu(op.max_pool2d(img, 2, strides=2, ceil_mode=True))
    elif pool == "avg":
        e = op.avg_pool2d(img, 3, strides=2, padding=1)
    else:
        e = op.avg_pool2d(img, 3, strides=2, padding=1, count_include_pad=True, ceil_mode=True)
    check(prim([img], e), rand((2, 3, 7, 8)))


def test_global_pools() -> None:
    img = var("img", (2, 3, 5, 5))
    check(prim([img], op.global_avg_pool2d(img) + op.global_max_pool2d(img)), rand((2, 3, 5, 5)))


@pytest.mark.parametrize("kind", ["sum", "mean", "max", "prod"])
@pytest.mark.parametrize("keepdims", [False, True])
def test_trailing_axes_of_an_array_reduce_as_one_flat_run(kind, keepdims) -> None:
    img = var("img", (2, 3, 5, 7))
    func = prim([img], getattr(op, kind)(img, axis=(2, 3), keepdims=keepdims))
    kernel = Jit(func)
    assert ".reshape((" in kernel.record.source  # one loop over the 5 x 7 elements
    check(func, rand((2, 3, 5, 7)), kernel=kernel, rtol=1e-5)


def test_layer_norm_and_batch_norm() -> None:
    g, be = var("g", (8,)), var("be", (8,))
    check(
        prim([x, g, be], op.layer_norm(x, g, be)),
        X,
        rand((8,), seed=3),
        rand((8,), seed=4),
        rtol=1e-4,
        atol=1e-5,
    )
    t = var("t", (2, 3, 8))
    g2, b2 = var("g2", (3, 8)), var("b2", (3, 8))
    check(
        prim([t, g2, b2], op.layer_norm(t, g2, b2, axes=(-2, -1))),
        rand((2, 3, 8)),
        rand((3, 8)),
        rand((3, 8)),
        rtol=1e-4,
        atol=1e-5,
    )
    img = var("img", (2, 4, 3, 3))
    ps = [var(f"q{i}", (4,)) for i in range(4)]
    check(
        prim([img, *ps], op.relu(op.batch_norm(img, *ps))),
        rand((2, 4, 3, 3)),
        *[abs(rand((4,), seed=i)) for i in range(4)],
        rtol=1e-5,
        atol=1e-6,
    )
