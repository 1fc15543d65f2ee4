"""Helpers of the op tests: typed variables, random inputs, and a tiny reference evaluator."""

from __future__ import annotations

from typing import Any

import numpy as np

from rvm.ir import Call, Constant, TensorType, Tuple, TupleType, Type, Var, infer_type, tensor
from rvm.op import reference

RNG = np.random.default_rng(0)


def var(name: str, shape: Any, dtype: str = "float32") -> Var:
    return Var(name, tensor(shape, dtype))


def rand(shape: tuple[int, ...], dtype: str = "float32", low: float = -2.0, high: float = 2.0):
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return RNG.uniform(low, high, size=shape).astype(dtype)


def evaluate(expr: Any, env: dict[Var, np.ndarray]) -> Any:
    """Run ``expr`` (calls of ops on vars, constants and tuples) with the references."""
    if isinstance(expr, Var):
        return env[expr]
    if isinstance(expr, Constant):
        return expr.data
    if isinstance(expr, Tuple):
        return tuple(evaluate(f, env) for f in expr.fields)
    assert isinstance(expr, Call)
    args = [evaluate(a, env) for a in expr.args]
    return reference[expr.callee](*args, **expr.attrs)


def assert_matches(value: Any, ty: Type) -> None:
    """``value`` has the dtype of ``ty`` and its shape (any size where a dim is None)."""
    if isinstance(ty, TupleType):
        assert isinstance(value, tuple) and len(value) == len(ty.fields)
        for v, t in zip(value, ty.fields):
            assert_matches(v, t)
        return
    assert isinstance(ty, TensorType)
    assert isinstance(value, np.ndarray), type(value)
    assert value.dtype == np.dtype(ty.dtype), (value.dtype, ty)
    assert ty.shape is not None and len(value.shape) == len(ty.shape), (value.shape, ty)
    assert all(t is None or v == t for v, t in zip(value.shape, ty.shape)), (value.shape, ty)


def check(call: Call, env: dict[Var, np.ndarray], expected: Type | None = None) -> Any:
    """Infer ``call``'s type (== ``expected`` if given), run it, check the result's type."""
    ty = infer_type(call)
    if expected is not None:
        assert ty == expected, f"{ty} != {expected}"
    out = evaluate(call, env)
    assert_matches(out, ty)
    return out
