"""The op set as a whole: every op has a rule, a reference and a builder that round-trips."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest
from op_testing import var

from rvm import op
from rvm.ir import Call, Op, OpPattern, Tuple, const, get_op, infer_type, list_ops
from rvm.ir.op import infer
from rvm.kernels import reference
from rvm.op import numpy_ref, ops


def op_names() -> set[str]:
    """The ops of the op set (other layers register their own, namespaced: ``vm.*``)."""
    return {name for name in list_ops() if "." not in name}


def sample_calls() -> list[Call]:
    """One call of every op with non-default attributes where it has any."""
    x = var("x", (2, 4, 6, 6))
    m, w = var("m", (3, 4)), var("w", (4, 5))
    v = var("v", (4,))
    i = var("i", (2,), "int64")
    b = var("b", (3, 4), "bool")
    calls = [getattr(op, n)(m, m) for n in (
        "add", "subtract", "multiply", "divide", "floor_divide", "mod", "power", "maximum",
        "minimum", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
        "logical_and", "logical_or", "logaddexp",
    )]  # fmt: skip
    calls += [getattr(op, n)(m) for n in (
        "negative", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "abs", "sign", "sin",
        "cos", "floor", "ceil", "round", "relu", "silu", "softplus", "flatten", "shape_of",
        "asin", "acos", "atan", "asinh", "acosh", "atanh", "log1p", "expm1",
    )]  # fmt: skip
    calls += [op.global_avg_pool2d(x), op.global_max_pool2d(x)]
    calls += [
        op.logical_not(b), op.where(b, m, 0.0), op.leaky_relu(m, 0.3),
        op.gelu(m, approximate="tanh"), op.clip(m, a_min=0), op.cast(m, "float16"),
        op.bitcast(m, "int32"),
        op.sum(m, 1, True), op.mean(m, [0]), op.max(m), op.min(m, -1), op.prod(m, (0, 1)),
        op.argmax(m, 1), op.argmin(m, keepdims=True), op.variance(m, 0), op.cumsum(m, 1, True),
        op.softmax(m, 0), op.log_softmax(m), op.layer_norm(m, v, v, axes=-1, epsilon=1e-3),
        op.batch_norm(x, v, v, v, v, axis=1, epsilon=1e-3), op.lrn(x, size=3, alpha=1e-3),
        op.matmul(m, w), op.dense(m, var("d", (5, 4))), op.einsum("ij,jk->ik", m, w),
        op.conv1d(var("c", (1, 4, 8)), var("k", (2, 4, 3)), strides=2, padding=1),
        op.conv2d(x, var("k2", (8, 2, 3, 3)), strides=(1, 2), padding=(1, 0), groups=2),
        op.max_pool2d(x, 2, 2, ceil_mode=True), op.avg_pool2d(x, 3, 1, 1, count_include_pad=True),
        op.conv3d(var("c3", (1, 4, 5, 6, 7)), var("k3", (2, 2, 3, 1, 3)), padding=(1, 0, 2),
                  groups=2),
        op.conv1d_transpose(var("t1", (1, 4, 5)), var("u1", (4, 3, 2)), 2, 1, 1, groups=1),
        op.conv2d_transpose(x, var("u2", (4, 1, 3, 3)), (2, 1), (1, 0, 0, 1), 1, 2, 2),
        op.conv3d_transpose(var("t3", (1, 2, 3, 3, 3)), var("u3", (2, 2, 2, 2, 2)), 2),
        op.qconv2d(var("qx", (1, 4, 6, 6), "uint8"), var("qw", (8, 2, 3, 3), "int8"),
                   var("qb", (8,), "int32"), var("qs", (8,), "float32"), x_zero=3, y_zero=5,
                   relu=True, strides=2, padding=1, groups=2),
        op.qdense(var("qa", (3, 4), "int8"), var("qv", (5, 4), "int8"), var("qc", (5,), "int32"),
                  var("qt", (5,), "float32"), x_zero=-2, y_zero=-1, dtype="int8", high=100),
        op.qadd(var("qa", (3, 4), "int8"), var("qe", (3, 4), "uint8"), a_scale=0.5, b_scale=0.25,
                y_scale=0.125, a_zero=-2, b_zero=7, y_zero=3, relu=True),
        op.max_pool1d(var("p1", (2, 3, 9)), 3, 2, (1, 0), 2, True),
        op.max_pool3d(var("p3", (2, 3, 5, 6, 7)), (2, 3, 1), 2, 1),
        op.avg_pool1d(var("a1", (2, 3, 9)), 2, count_include_pad=True),
        op.avg_pool3d(var("a3", (2, 3, 5, 6, 7)), 3, 2, 1, ceil_mode=True),
        op.max_pool_indices(x, (3, 2), (2, 1), (1, 0, 1, 1), (1, 2), True),
        op.pad(m, [(3, 0), (1, 1)], mode="reflect"),
        op.reshape(m, (-1, 2)), op.transpose(m, (1, 0)), op.expand_dims(m, 0),
        op.squeeze(var("s", (1, 3)), 0), op.concat([m, m], axis=1), op.split(m, [1], axis=0),
        op.stack((m, m), axis=-1), op.strided_slice(m, [0], [2], axes=[1]), op.take(m, i, axis=1),
        op.dynamic_slice(m, i, i, axes=[0, 1], strides=[1, 2]),
        op.dynamic_reshape(m, i, ("n", None), allowzero=True), op.dynamic_expand(v, i, (3, 4)),
        op.dynamic_full(i, 1.5, "float32", (None, 2)), op.dynamic_tile(m, i, (None, 4)),
        op.dynamic_arange(var("z0", (), "int64"), var("z1", (), "int64"), 2, "int64", "n"),
        op.dynamic_reduce(m, i, "max", keepdims=False, noop_with_empty_axes=True),
        op.dynamic_trilu(m, var("k0", (), "int64"), upper=False),
        op.dynamic_scan(m, var("a0", (1,), "int64"), "prod", exclusive=True, reverse=True),
        op.dynamic_topk(m, var("t0", (1,), "int64"), axis=0, largest=False, sorted=False),
        op.dynamic_pad(m, var("p0", (2,), "int64"), 1.5, axes=(1,), mode="edge"),
        op.dynamic_squeeze(var("q", (1, 3, 1)), i), op.dynamic_unsqueeze(m, i),
        op.dynamic_split(m, i, axis=-1, count=2),
        op.dynamic_resize(x, var("r0", (0,)), var("r1", (2,)), var("r2", (0,), "int64"),
                          axes=(2, 3), keep_aspect_ratio_policy="not_larger", mode="linear",
                          coordinate_transformation_mode="align_corners", nearest_mode="ceil",
                          cubic_coeff_a=-0.5, exclude_outside=True, extrapolation_value=1.0,
                          antialias=True),
        op.gather(m, var("g", (3, 2), "int32"), axis=1), op.broadcast_to(v, ("n", 4)),
        op.pad(m, [(1, 0), (0, 2)], pad_value=-1.0), op.tile(m, (2, 1)),
        op.zeros(("n", 3), "int32"), op.ones((2,)), op.full((2, 2), 3, "int64"),
        op.arange(1.0, 2.0, 0.25), op.one_hot(i, 5, axis=0),
    ]  # fmt: skip
    n = var("n", (3, 4), "int32")
    calls += [getattr(op, name)(n, n) for name in (
        "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift",
    )]  # fmt: skip
    calls += [
        op.fmod(m, m), op.bitwise_not(n), op.cumprod(m, 0, exclusive=True), op.trilu(m, -1, False),
        op.gather_nd(m, var("gi", (3, 1), "int64"), batch_dims=1),
        op.scatter_elements(m, var("si", (2, 4), "int64"), var("su", (2, 4)), 1, "add"),
        op.scatter_nd(m, var("ni", (2, 1), "int64"), var("nu", (2, 4)), reduction="max"),
        op.topk(m, 2, axis=0, largest=False), op.nonzero(m), op.unique(m, 1, sorted=False),
        op.resize(x, (2, 4, 3, 12), (1.0, 1.0, 0.5, 2.0), roi=(0.0,) * 4 + (1.0,) * 4,
                  mode="cubic", coordinate_transformation_mode="tf_crop_and_resize",
                  antialias=True),
        op.check(m, const(np.array(True)), i, "bad {0} and {1}"), op.rms_norm(m, v, 1, 1e-5),
        op.rope(m, v, v),
        op.dense_bf16(m, var("bw", (3, 4), "int16")),
        op.conv2d_bf16(x, var("cw", (5, 36), "int16"), 2, 1, 1, 1, (3, 3)),
        op.max_pool2d_pairs(var("mp", (2, 2, 7, 9), "int32"), (4, 5, 6), (1, 2), 3, 2, 1,
                            plane=(1, 1, 5, 4)),
        op.pair_image(x, (1, 2, 9, 9)),
        op.conv2d_packed(x, var("pw", (1, 1, 3, 3, 4, 16)), 5, 2, 1),
        op.conv2d_winograd(x, var("ww", (16, 5, 4)), (1, 0, 2, 1)),
        op.dense_packed(m, var("dp", (1, 4, 16)), var("db", (5,)), units=5, activation="gelu"),
        op.dense_packed_bf16(m, var("pp", (1, 2, 16), "int32"), var("pb", (5,)), units=5,
                             activation="relu"),
        op.attention(x, x, var("av", (2, 4, 6, 3)), var("am", (2, 1, 6, 6), "bool"), 0.5,
                     "select", -1e4, float("nan")),
    ]  # fmt: skip
    return calls


def test_every_op_has_rule_reference_and_builder():
    assert op_names() <= set(list_ops())
    for name in op_names():
        o = get_op(name)
        assert o is getattr(ops, name)
        assert o in infer, name
        assert op.reference[o] is getattr(reference, name), name
        builder = getattr(op, name)
        assert callable(builder) and not isinstance(builder, Op), name
        assert name in op.__all__, name
    covered = {c.callee.name for c in sample_calls()}
    assert covered == op_names()


def test_python_operator_names_exist():
    for name in ("add", "subtract", "multiply", "divide", "floor_divide", "mod", "power",
                 "matmul", "less", "less_equal", "greater", "greater_equal", "equal",
                 "not_equal", "negative"):  # fmt: skip
        assert isinstance(get_op(name), Op)


@pytest.mark.parametrize("call", sample_calls(), ids=lambda c: c.callee.name)
def test_builders_round_trip_through_their_attrs(call):
    """The parser rebuilds ``op.NAME(*args, **attrs)``: it must give an equal call."""
    infer_type(call)
    args = call.args
    if call.callee.name in ("concat", "stack"):
        assert len(args) == 1 and isinstance(args[0], Tuple)
    again = getattr(op, call.callee.name)(*args, **call.attrs)
    assert again.callee is call.callee
    assert all(p is q for p, q in zip(again.args, args)) and len(again.args) == len(args)
    assert again.attrs == call.attrs
    assert infer_type(again) == call.type


def test_patterns():
    assert ops.add.pattern == OpPattern.BROADCAST
    assert ops.exp.pattern == OpPattern.ELEMWISE
    assert ops.reshape.pattern == OpPattern.INJECTIVE
    assert ops.sum.pattern == OpPattern.REDUCTION
    assert ops.conv2d.pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    assert ops.softmax.pattern == OpPattern.OPAQUE


def test_reference_modules_import_only_numpy_math_and_each_other():
    """The NumPy reference kernels (`rvm.kernels.reference`) are package code kernels import
    by name: each module imports ``math``, ``numpy``, ``ml_dtypes`` and its siblings only, and
    the package holds every op under its name."""
    package = pathlib.Path(reference.__file__).parent
    modules = sorted(package.glob("*.py"))
    assert len(modules) > 10
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module.startswith("rvm.kernels.reference."), (path.name, node.module)
            elif isinstance(node, ast.Import):
                assert {a.name for a in node.names} <= {"math", "numpy", "ml_dtypes"}, path.name
    for name in op_names():
        assert callable(getattr(reference, name)), name
    a = np.arange(6, dtype="float32").reshape(2, 3)
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(reference.softmax(a), e / e.sum(axis=-1, keepdims=True), 1e-6)


def test_numpy_ref_is_the_old_name_of_the_reference_package():
    assert numpy_ref is reference
    assert numpy_ref.conv2d is reference.conv.conv2d and numpy_ref.sum is reference.reduce.sum
