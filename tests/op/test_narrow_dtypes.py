"""Ops on the narrow dtypes: every op's reference keeps its rule's dtype on bfloat16 and the
float8/float4 types; the storage dtypes (int4...) pass only the ops that move them; bitcast."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from op_testing import RNG, check, var
from test_registry import sample_calls

from rvm import op
from rvm.errors import IRError
from rvm.ir import Call, Constant, Tuple, TupleType, Type, Var, infer_type, tensor
from rvm.op import reference
from rvm.op.core import OP_PRECISION
from rvm.op.dynamic import DYNAMIC_OPS
from rvm.op.ops import STORAGE_OP_NAMES

NARROW_FLOATS = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"]


def _retyped(call: Call, dtype: str, wide: str) -> tuple[Call, dict[Var, np.ndarray]]:
    """``call`` with its ``wide``-typed variables and constants made ``dtype``, and inputs
    for its variables (small values every narrow float holds)."""
    env: dict[Var, np.ndarray] = {}
    memo: dict[Var, Var] = {}

    def walk(e):
        if isinstance(e, Var):
            if e not in memo:
                ty = e.type
                dt = dtype if ty.dtype == wide else ty.dtype
                memo[e] = Var(e.name, tensor(ty.shape, dt))
                shape = tuple(2 if isinstance(d, str) else d for d in ty.shape)
                data = RNG.integers(-2, 3, shape) * (0.5 if dt in NARROW_FLOATS else 0)
                env[memo[e]] = data.astype(dt) if dt != "bool" else data > 0
            return memo[e]
        if isinstance(e, Tuple):
            return Tuple(tuple(walk(f) for f in e.fields))
        if isinstance(e, Constant) and e.data.dtype == np.dtype(wide):
            return Constant(e.data.astype(dtype))
        if isinstance(e, Call):
            return Call(e.callee, tuple(walk(a) for a in e.args), dict(e.attrs))
        return e

    return walk(call), env


def _concrete(attrs: dict) -> dict:
    """Symbolic dims in attributes made 2 (the inputs' size for them)."""
    return {
        k: tuple(2 if isinstance(d, str) else d for d in v) if isinstance(v, tuple) else v
        for k, v in attrs.items()
    }


def _assert_dtypes(value, ty: Type) -> None:
    """``value`` has the dtypes and ranks of ``ty`` (symbolic dims are any size here)."""
    values, types = (value, ty.fields) if isinstance(ty, TupleType) else ((value,), (ty,))
    assert len(values) == len(types)
    for v, t in zip(values, types):
        assert isinstance(v, np.ndarray) and v.dtype == np.dtype(t.dtype), (v, t)
        assert v.ndim == len(t.shape), (v.shape, t)


def _run(call: Call, env: dict[Var, np.ndarray]):
    args = [
        tuple(env[f] for f in a.fields)
        if isinstance(a, Tuple)
        else env.get(a, getattr(a, "data", None))
        for a in call.args
    ]
    with np.errstate(all="ignore"):
        return reference[call.callee](*args, **_concrete(call.attrs))


@pytest.mark.parametrize("dtype", NARROW_FLOATS)
def test_every_op_keeps_its_rules_dtype_on_narrow_floats(dtype):
    """A numpy kernel fuses ops without casting between them: each must give the dtype its
    rule promises (ml_dtypes' own loops do for most; matmul, conv and clip are made to)."""
    for call in sample_calls():
        if call.callee.name == "bitcast":
            continue  # its rule depends on the size of the dtype (test_bitcast_*)
        if call.callee.name in DYNAMIC_OPS:
            continue  # their int inputs are shapes and axes, zeros here (tests/op/test_dynamic)
        if call.callee.name in OP_PRECISION or call.callee.name == "dense_packed":
            continue  # reduced-precision and packed products: float32 in and out, by definition
        narrow, env = _retyped(call, dtype, "float32")
        ty = infer_type(narrow)  # every op takes narrow floats
        _assert_dtypes(_run(narrow, env), ty)


@pytest.mark.parametrize("dtype", ["int4", "uint2"])
def test_storage_dtypes_pass_exactly_the_storage_ops(dtype):
    moved = set()
    for call in sample_calls():
        narrow, env = _retyped(call, dtype, "float32")
        if not any(v.type.dtype == dtype for v in env):
            continue
        if call.callee.name not in STORAGE_OP_NAMES:
            with pytest.raises(IRError, match=f"{call.callee.name}: input . is {dtype}"):
                infer_type(narrow)
            continue
        _assert_dtypes(_run(narrow, env), infer_type(narrow))
        moved.add(call.callee.name)
    assert {"cast", "reshape", "concat", "take", "where", "less", "pad"} <= moved


def test_narrow_float_arithmetic_is_ml_dtypes():
    x = (RNG.standard_normal((3, 4)) * 4).astype(ml_dtypes.bfloat16)
    y = (RNG.standard_normal((3, 4)) * 4).astype(ml_dtypes.bfloat16)
    a, b = var("a", (3, 4), "bfloat16"), var("b", (3, 4), "bfloat16")
    env = {a: x, b: y}
    np.testing.assert_array_equal(check(op.add(a, b), env), x + y)
    np.testing.assert_array_equal(check(op.exp(a), env), np.exp(x))
    out = check(op.matmul(a, op.transpose(b)), env)  # numpy's matmul gives float32: cast back
    np.testing.assert_array_equal(
        out, (x.astype("float32") @ y.astype("float32").T).astype(x.dtype)
    )


@pytest.mark.parametrize("src", ["float32", "bfloat16", "float16", "int16", "bool"])
def test_bitcast_reads_the_bits(src):
    data = (
        RNG.integers(0, 2, (2, 3)).astype(src)
        if src == "bool"
        else np.arange(6).reshape(2, 3).astype(src)
    )
    dst = {"float32": "int32", "bfloat16": "uint16", "float16": "bfloat16", "int16": "float16",
           "bool": "uint8"}[src]  # fmt: skip
    x = var("x", (2, 3), src)
    out = check(op.bitcast(x, dst), {x: data}, tensor((2, 3), dst))
    np.testing.assert_array_equal(out.view(np.uint8), data.view(np.uint8))


def test_bitcast_needs_equal_sizes():
    with pytest.raises(IRError, match=r"bitcast: float32 and int16 differ in size \(4 and 2"):
        infer_type(op.bitcast(var("x", (2,)), "int16"))
