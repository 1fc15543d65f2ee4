"""Indexing, scatter and search converters against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_helpers import check_ort, run_rvm, single_op  # noqa: E402

RNG = np.random.default_rng(5)
X = RNG.standard_normal((4, 5, 3)).astype(np.float32)


def _i64(*values):
    return np.array(values, np.int64)


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd(batch_dims, kernels):
    idx = np.array([[[0, 1], [3, 2]], [[1, 0], [2, -1]], [[0, 0], [1, 1]], [[2, 2], [0, 2]]])
    inits = {"i": idx.astype(np.int64)}
    model, inputs = single_op("GatherND", {"x": X}, initializers=inits, batch_dims=batch_dims)
    check_ort(model, inputs, kernels=kernels)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(reduction):
    idx = np.array([[[1], [0], [2]], [[3], [3], [0]]], np.int64)  # (2, 3, 1), axis 0
    if reduction == "none":
        idx = np.array([[[1], [0], [2]], [[3], [2], [0]]], np.int64)
    upd = RNG.standard_normal((2, 3, 1)).astype(np.float32)
    inits = {"i": idx, "u": upd}
    model, inputs = single_op(
        "ScatterElements", {"x": X}, initializers=inits, opset=18, reduction=reduction
    )
    check_ort(model, inputs)


def test_scatter_nd_and_scatter(kernels):
    idx, upd = _i64([1, 2], [3, -1]).reshape(2, 2), RNG.standard_normal((2, 3))
    inits = {"i": idx, "u": upd.astype(np.float32)}
    model, inputs = single_op("ScatterND", {"x": X}, initializers=inits, opset=18, reduction="add")
    check_ort(model, inputs, kernels=kernels)
    inits = {"i": _i64([0, 1], [2, 0]), "u": np.ones((2, 2), np.float32)}
    x2 = X[:, :, 0].copy()
    check_ort(*single_op("Scatter", {"x": x2}, initializers=inits, opset=10, axis=1))


@pytest.mark.parametrize("largest, opset", [(1, 11), (0, 11), (1, 10)])
def test_topk(largest, opset, kernels):
    x = np.round(X, 1)
    attrs = {"axis": 1} if opset == 10 else {"axis": 1, "largest": largest}
    model, inputs = single_op(
        "TopK", {"x": x}, initializers={"k": _i64(3)}, opset=opset, n_outputs=2, **attrs
    )
    check_ort(model, inputs, kernels=kernels)


def test_nonzero_compress(kernels):
    x = np.where(X > 0.3, X, 0).astype(np.float32)
    check_ort(*single_op("NonZero", {"x": x}), kernels=kernels)
    cond = np.array([True, False, True, True, False])
    check_ort(*single_op("Compress", {"x": X, "c": cond}, axis=1), kernels=kernels)
    check_ort(*single_op("Compress", {"x": X, "c": cond[:3]}))


@pytest.mark.parametrize("attrs", [{}, {"sorted": 0}, {"axis": 0}, {"axis": -1, "sorted": 1}])
def test_unique(attrs):
    x = np.array([[2, 1, 2], [0, 5, 0], [2, 1, 2], [9, 1, 9]], np.float32)
    check_ort(*single_op("Unique", {"x": x}, n_outputs=4, **attrs))


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2])
def test_trilu(upper, k):
    inits = {} if k is None else {"k": _i64(k)}
    check_ort(*single_op("Trilu", {"x": X}, initializers=inits, upper=upper))


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumprod(exclusive, reverse):
    model, inputs = single_op(
        "CumProd",
        {"x": X},
        initializers={"a": np.array(1, np.int64)},
        opset=26,
        exclusive=exclusive,
        reverse=reverse,
    )
    (expected,) = ReferenceEvaluator(model).run(None, {"x": X})  # ORT lacks CumProd
    for mode in ("bytecode", "compiled"):
        (got,) = run_rvm(model, inputs, exec_mode=mode)
        np.testing.assert_allclose(got, expected, rtol=1e-6)
