"""Parameters that mix fixed, symbolic and unknown (`None`) dimensions: the VM binds the
symbolic ones and checks the rest like the interpreter, in every exec mode and kernel backend."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.errors import ShapeError, VMError
from rvm.script import T, Tuple, func, module


@module
class Mixed:
    @func
    def none_last(x: T[("n", None), "float32"], y: T[("n",), "float32"]):
        return op.sum(x, axis=1) + y

    @func
    def none_first(x: T[(None, "n"), "float32"], y: T[("n",), "float32"]):
        return op.mean(x, axis=0) * y

    @func
    def two_symbols(x: T[("n", None, "m"), "float32"], b: T[("m",), "float32"]):
        return op.max(x, axis=1) + b

    @func
    def shared_symbol(x: T[("n", None), "float32"], y: T[("n", 3), "float32"]):
        return op.sum(x, axis=1, keepdims=True) * y

    @func
    def elementwise(x: T[("n", None), "float32"], y: T[("n", None), "float32"]):
        return op.exp(x) + y

    @func
    def matmul(a: T[("n", None), "float32"], w: T[(None, "m"), "float32"]):
        return op.relu(op.matmul(a, w))

    @func
    def helper(x: T[("n", None), "float32"], y: T[("n",), "float32"]):
        if op.sum(y) > 1e30:  # a branch: not inlined, so the call checks its shapes
            return y
        return op.sum(x, axis=1) - y

    @func
    def calls(x: T[(None, None), "float32"], y: T[(None,), "float32"]):
        return helper(x, y) * 2.0

    @func
    def pair(t: Tuple[T[("n", None), "float32"], T[("n",), "float32"]]):
        a, b = t
        return op.sum(a, axis=1) + b

    @func
    def packs(x: T[("n", None), "float32"], y: T[("n",), "float32"]):
        return pair((x, y))

    @func
    def loop(x: T[("n", None), "float32"], y: T[("n",), "float32"], k: T[(), "int64"]):
        i = rvm.const(0, "int64")
        while i < k:
            x = x * 0.5
            y = y + op.sum(x, axis=1)
            i = i + 1
        return y


def _f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype("float32")


def _loop_ref(x: np.ndarray, y: np.ndarray, k: np.int64) -> np.ndarray:
    for _ in range(int(k)):
        x = x * np.float32(0.5)
        y = y + x.sum(axis=1)
    return y


CASES = [
    ("none_last", (_f32(3, 5), _f32(3)), lambda x, y: x.sum(axis=1) + y),
    ("none_first", (_f32(5, 3), _f32(3)), lambda x, y: x.mean(axis=0) * y),
    ("two_symbols", (_f32(2, 7, 3), _f32(3)), lambda x, b: x.max(axis=1) + b),
    ("shared_symbol", (_f32(4, 2), _f32(4, 3)), lambda x, y: x.sum(1, keepdims=True) * y),
    ("elementwise", (_f32(3, 4), _f32(3, 4)), lambda x, y: np.exp(x) + y),
    ("matmul", (_f32(3, 6), _f32(6, 2)), lambda a, w: np.maximum(a @ w, 0)),
    ("calls", (_f32(3, 5), _f32(3)), lambda x, y: (x.sum(axis=1) - y) * 2),
    ("packs", (_f32(3, 5), _f32(3)), lambda x, y: x.sum(axis=1) + y),
    ("pair", ((_f32(3, 5), _f32(3)),), lambda t: t[0].sum(axis=1) + t[1]),
    ("loop", (_f32(3, 5), _f32(3), np.int64(3)), _loop_ref),
    ("none_last", (_f32(0, 5), _f32(0)), lambda x, y: x.sum(axis=1) + y),  # n = 0
    ("none_last", (_f32(6, 0), _f32(6)), lambda x, y: x.sum(axis=1) + y),  # ? = 0
]

_EXECUTABLES: dict[str, rvm.Executable] = {}


def _vm(kernels: str, exec_mode: str) -> rvm.VirtualMachine:
    if kernels not in _EXECUTABLES:
        _EXECUTABLES[kernels] = rvm.compile(Mixed, kernels=kernels)
    return rvm.VirtualMachine(_EXECUTABLES[kernels], exec_mode=exec_mode)


@pytest.mark.parametrize("fname, args, numpy_ref", CASES, ids=[c[0] for c in CASES])
def test_mixed_dims_match_interpreter_and_numpy(fname, args, numpy_ref, exec_mode, kernels):
    out = _vm(kernels, exec_mode)[fname](*args)
    ref = rvm.interpret(Mixed, fname, *args)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out, numpy_ref(*args), rtol=1e-5, atol=1e-5)


def test_the_prologue_matches_every_symbolic_parameter(kernels):
    text = _vm(kernels, "bytecode").executable.as_text()
    assert "int64[4] [1, 0, 3, 0]" in text  # (n, ?): n stored, ? any
    assert "int64[4] [3, 0, 1, 0]" in text  # (?, n)
    assert "int64[6] [1, 0, 3, 0, 1, 1]" in text  # (n, ?, m)


ENTRY_ERRORS = [
    ("none_last", (_f32(3, 5), _f32(4)), "none_last: argument 1 'y' has shape (4,), but n = 3"),
    ("none_last", (_f32(3, 5, 1), _f32(3)), "none_last: argument 0 'x' expects rank 2"),
    ("shared_symbol", (_f32(4, 2), _f32(4, 2)), "but dimension 1 must be 3"),
    ("two_symbols", (_f32(2, 7, 3), _f32(2)), "two_symbols: argument 1 'b' has shape (2,), but m"),
    (  # a tuple's fields are checked at the entry too
        "pair",
        ((_f32(3, 5), _f32(2)),),
        "pair: argument 0 't' field 1 has shape (2,), but n = 3 from argument 0 't' field 0",
    ),
]


@pytest.mark.parametrize("fname, args, message", ENTRY_ERRORS)
def test_wrong_arguments_are_shape_errors(fname, args, message, exec_mode, kernels):
    with pytest.raises(ShapeError, match="argument"):
        rvm.interpret(Mixed, fname, *args)
    with pytest.raises(ShapeError) as info:
        _vm(kernels, exec_mode)[fname](*args)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "fname, args, message",
    [
        ("calls", (_f32(3, 5), _f32(4)), "helper: argument 1 'y': shape (4,) has 4 at axis 0"),
    ],
)
def test_calls_check_the_shapes_inside_the_vm(fname, args, message, exec_mode, kernels):
    with pytest.raises(ShapeError, match="argument"):
        rvm.interpret(Mixed, fname, *args)
    with pytest.raises(VMError) as info:
        _vm(kernels, exec_mode)[fname](*args)
    assert isinstance(info.value.__cause__, ShapeError)
    assert message in str(info.value)
    assert "but an earlier shape set that dimension to 3" in str(info.value)
