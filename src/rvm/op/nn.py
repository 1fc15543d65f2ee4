"""Neural-network ops: matmul, dense, softmax, normalizations and lrn.

``matmul`` follows NumPy: 1-d operands gain and lose a dimension, leading (batch) dims
broadcast. ``dense(x, w)`` is ``x @ w.T`` with ``w`` of shape (units, in_features), as TVM's
dense and ONNX Gemm(transB=1). ``batch_norm`` is the inference form (given mean and variance)
and returns one tensor. ``layer_norm``'s gamma and beta have the shape of the normalized axes.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir.expr import Call
from rvm.ir.op import OpPattern
from rvm.ir.types import FLOAT_DTYPES, Dim, Shape, TensorType, Type, promote_dtypes
from rvm.op import ops
from rvm.op.core import (
    ExprLike,
    as_expr,
    call,
    check_axes,
    check_axis,
    check_float,
    check_int,
    define_op,
)
from rvm.op.shapes import broadcast_shapes, fmt, normalize_axes, normalize_axis, rule

__all__ = ["batch_norm", "dense", "layer_norm", "log_softmax", "lrn", "matmul", "softmax"]

# The ops of this module (`rvm.op.core.define_op`).
# Neural-network ops.
define_op("softmax", OpPattern.OPAQUE, 1)
define_op("log_softmax", OpPattern.OPAQUE, 1)
define_op("layer_norm", OpPattern.OPAQUE, 3)
define_op("batch_norm", OpPattern.BROADCAST, 5)
define_op("lrn", OpPattern.OPAQUE, 1)
define_op("matmul", OpPattern.OUT_ELEMWISE_FUSABLE, 2)
define_op("dense", OpPattern.OUT_ELEMWISE_FUSABLE, 2)


def _float_input(op: str, x: TensorType) -> None:
    if x.dtype is not None and x.dtype not in FLOAT_DTYPES:
        raise IRError(f"{op}: expects a float tensor, got {x.dtype} {fmt(x.shape)}")


def _check_same_dim(op: str, a: Dim, b: Dim, what: str) -> None:
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise IRError(f"{op}: {what}")


# ---------------------------------------------------------------------------------------------
# matmul and dense


def matmul_shape(op: str, a: Shape | None, b: Shape | None) -> Shape | None:
    """NumPy's matmul shape with symbolic dims; IRError when the shapes provably clash."""
    if a is None or b is None:
        return None
    if len(a) == 0 or len(b) == 0:
        raise IRError(f"{op}: operands must have rank >= 1, got {fmt(a)} and {fmt(b)}")
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    _check_same_dim(
        op, a2[-1], b2[-2], f"inner dimensions differ: {fmt(a)} @ {fmt(b)} ({a2[-1]} != {b2[-2]})"
    )
    batch = broadcast_shapes(op, a2[:-2], b2[:-2])
    assert batch is not None
    out = [*batch, a2[-2], b2[-1]]
    if len(b) == 1:
        out.pop(-1)
    if len(a) == 1:
        out.pop(-2 if len(b) > 1 else -1)
    return tuple(out)


@rule(ops.matmul)
def _infer_matmul(call_: Call, args: list[TensorType]) -> Type:
    a, b = args
    return TensorType(matmul_shape("matmul", a.shape, b.shape), promote_dtypes(a.dtype, b.dtype))


@rule(ops.dense)
def _infer_dense(call_: Call, args: list[TensorType]) -> Type:
    x, w = args
    dtype = promote_dtypes(x.dtype, w.dtype)
    if w.shape is not None and len(w.shape) != 2:
        raise IRError(f"dense: the weight must be 2-d (units, in_features), got {fmt(w.shape)}")
    if x.shape is not None and len(x.shape) == 0:
        raise IRError("dense: the input must have rank >= 1, got ()")
    if x.shape is None:
        return TensorType(None, dtype)
    units: Dim = None if w.shape is None else w.shape[0]
    if w.shape is not None:
        _check_same_dim(
            "dense",
            x.shape[-1],
            w.shape[1],
            f"input {fmt(x.shape)} has {x.shape[-1]} features, weight {fmt(w.shape)} expects "
            f"{w.shape[1]}",
        )
    return TensorType((*x.shape[:-1], units), dtype)


def matmul(a: ExprLike, b: ExprLike) -> Call:
    """The matrix product, batched and broadcast as ``numpy.matmul``."""
    return call(ops.matmul, as_expr(a), as_expr(b))


def dense(x: ExprLike, w: ExprLike) -> Call:
    """``x @ w.T``: x is (..., in_features), w is (units, in_features)."""
    return call(ops.dense, as_expr(x), as_expr(w))


# ---------------------------------------------------------------------------------------------
# softmax, log_softmax


def _softmax_rule(op_name: str):
    def infer_softmax(call_: Call, args: list[TensorType]) -> Type:
        (x,) = args
        _float_input(op_name, x)
        if x.shape is not None:
            normalize_axis(op_name, call_.attrs["axis"], len(x.shape))
        return x

    return infer_softmax


rule(ops.softmax)(_softmax_rule("softmax"))
rule(ops.log_softmax)(_softmax_rule("log_softmax"))


def softmax(x: ExprLike, axis: int = -1) -> Call:
    """exp(x) / sum(exp(x)) along ``axis`` (computed stably)."""
    return call(ops.softmax, as_expr(x), axis=check_axis("softmax", axis))


def log_softmax(x: ExprLike, axis: int = -1) -> Call:
    """log(softmax(x)) along ``axis`` (computed stably)."""
    return call(ops.log_softmax, as_expr(x), axis=check_axis("log_softmax", axis))


# ---------------------------------------------------------------------------------------------
# Normalizations


def _check_param(op: str, name: str, p: TensorType, expected: Shape, x: TensorType) -> None:
    """A scale/shift/statistic tensor must have shape ``expected`` (int dims compared)."""
    if p.shape is None:
        return
    if len(p.shape) != len(expected) or any(
        isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(p.shape, expected)
    ):
        raise IRError(
            f"{op}: {name} has shape {fmt(p.shape)}, expected {fmt(expected)} for input "
            f"{fmt(x.shape)}"
        )


@rule(ops.layer_norm)
def _infer_layer_norm(call_: Call, args: list[TensorType]) -> Type:
    x, gamma, beta = args
    _float_input("layer_norm", x)
    if x.shape is None:
        return TensorType(None, x.dtype)
    axes = sorted(normalize_axes("layer_norm", call_.attrs["axes"], len(x.shape), what="axes"))
    expected = tuple(x.shape[a] for a in axes)
    _check_param("layer_norm", "gamma", gamma, expected, x)
    _check_param("layer_norm", "beta", beta, expected, x)
    return x


@rule(ops.batch_norm)
def _infer_batch_norm(call_: Call, args: list[TensorType]) -> Type:
    x, *params = args
    _float_input("batch_norm", x)
    if x.shape is None:
        return TensorType(None, x.dtype)
    axis = normalize_axis("batch_norm", call_.attrs["axis"], len(x.shape))
    for name, p in zip(("gamma", "beta", "mean", "var"), params):
        _check_param("batch_norm", name, p, (x.shape[axis],), x)
    return x


@rule(ops.lrn)
def _infer_lrn(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    _float_input("lrn", x)
    if x.shape is not None:
        normalize_axis("lrn", call_.attrs["axis"], len(x.shape))
    return x


def layer_norm(
    x: ExprLike,
    gamma: ExprLike,
    beta: ExprLike,
    axes: int | Sequence[int] = (-1,),
    epsilon: float = 1e-5,
) -> Call:
    """(x - mean) / sqrt(var + epsilon) * gamma + beta, statistics over ``axes``."""
    return call(
        ops.layer_norm,
        as_expr(x),
        as_expr(gamma),
        as_expr(beta),
        axes=check_axes("layer_norm", axes, name="axes", allow_none=False),
        epsilon=check_float("layer_norm", "epsilon", epsilon),
    )


def batch_norm(
    x: ExprLike,
    gamma: ExprLike,
    beta: ExprLike,
    mean: ExprLike,
    var: ExprLike,
    axis: int = 1,
    epsilon: float = 1e-5,
) -> Call:
    """Inference batch norm: (x - mean) / sqrt(var + epsilon) * gamma + beta per channel.

    The four parameters are 1-d of the size of ``x``'s ``axis`` (the channel axis).
    """
    return call(
        ops.batch_norm,
        *(as_expr(t) for t in (x, gamma, beta, mean, var)),
        axis=check_axis("batch_norm", axis),
        epsilon=check_float("batch_norm", "epsilon", epsilon),
    )


def lrn(
    x: ExprLike,
    size: int = 5,
    axis: int = 1,
    alpha: float = 1e-4,
    beta: float = 0.75,
    bias: float = 1.0,
) -> Call:
    """Local response normalization across channels (ONNX LRN; defaults are ONNX's).

    y = x / (bias + alpha / size * sum of x^2 over ``size`` neighbouring channels) ** beta.
    """
    return call(
        ops.lrn,
        as_expr(x),
        size=check_int("lrn", "size", size, minimum=1),
        axis=check_axis("lrn", axis),
        alpha=check_float("lrn", "alpha", alpha),
        beta=check_float("lrn", "beta", beta),
        bias=check_float("lrn", "bias", bias),
    )
