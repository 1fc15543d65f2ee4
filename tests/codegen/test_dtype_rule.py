"""The dtype rule of `rvm.ir.types`: every mode gives every value the same dtype.

Python scalars take the dtype of the tensor they meet, loop-carried variables keep the dtype of
their initial value, and a dtype known only at run time stays unknown (NumPy's promotion then
decides, in the interpreter and in the VM alike) instead of being taken from the other operand.
"""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.errors import ScriptError
from rvm.script import T, func, module


@module
class Loops:
    @func
    def unknown_start(x: T[(4,), None], k: T[(), "int64"]):
        acc = x
        i = 0
        while i < k:
            acc = acc * 0.5 + 1.0
            i = i + 1
        return acc

    @func
    def const_start(x: T[(4,), "float32"], k: T[(), "int64"]):
        acc = rvm.const(0.0)
        i = 0
        while i < k:
            acc = acc + op.sum(x) * 0.5
            i = i + 1
        return acc

    @func
    def literal_start(x: T[(4,), "float32"], k: T[(), "int64"]):
        acc = 0.0
        i = 0
        while i < k:
            acc = acc * 2.0 + x
            i = i + 1
        return acc

    @func
    def int_start(x: T[(4,), "float32"], k: T[(), "int64"]):
        acc = 0
        i = 0
        while i < k:
            acc = acc + 2
            i = i + 1
        return acc * x

    @func
    def float64_start(x: T[(4,), "float64"], k: T[(), "int64"]):
        acc = rvm.const(0.0, "float64")
        i = 0
        while i < k:
            acc = acc + op.sum(x) * 0.1
            i = i + 1
        return acc

    @func
    def float16_start(x: T[(4,), "float16"], k: T[(), "int64"]):
        acc = rvm.const(1.0, "float16")
        i = 0
        while i < k:
            acc = acc * 0.5 + op.max(x)
            i = i + 1
        return acc

    @func
    def unknown_branch(x: T[(4,), None], z: T[(4,), "float32"], c: T[(), "bool"]):
        if c:
            y = x
        else:
            y = z
        return y * 2.0

    @func
    def unknown_operand(x: T[(4,), None], z: T[(4,), "float32"]):
        return op.exp(x + z)


def _loop(x, k, body):
    for _ in range(int(k)):
        x = body(x)
    return np.asarray(x)


_F32 = np.float32
_K = np.int64(3)


def _arange(dtype: str) -> np.ndarray:
    return (np.arange(4) + 1).astype(dtype)


CASES = [
    # A carried value of run-time dtype: NumPy's promotion with the float32 scalars decides.
    *[
        (
            "unknown_start",
            (_arange(d), _K),
            lambda x, k: _loop(x, k, lambda a: a * np.asarray(_F32(0.5)) + np.asarray(_F32(1))),
        )
        for d in ("float64", "float32", "float16", "int32")
    ],
    ("const_start", (_arange("float32"), _K), lambda x, k: np.asarray(_F32(k * 0.5 * x.sum()))),
    (
        "literal_start",
        (_arange("float32"), _K),
        lambda x, k: _loop(_F32(0), k, lambda a: a * 2 + x),
    ),
    ("int_start", (_arange("float32"), _K), lambda x, k: np.int64(6) * x),  # int64 * f32: f64
    ("float64_start", (_arange("float64"), _K), lambda x, k: _loop(0.0, k, lambda a: a + 1.0)),
    (
        "float16_start",
        (_arange("float16"), _K),
        lambda x, k: _loop(np.float16(1), k, lambda a: a * np.float16(0.5) + x.max()),
    ),
    (
        "unknown_branch",
        (_arange("float64"), _arange("float32"), np.bool_(True)),
        lambda x, z, c: x * 2,
    ),
    (
        "unknown_branch",
        (_arange("float16"), _arange("float32"), np.bool_(False)),
        lambda x, z, c: z * 2,
    ),
    ("unknown_operand", (_arange("float64"), _arange("float32")), lambda x, z: np.exp(x + z)),
    ("unknown_operand", (_arange("float16"), _arange("float32")), lambda x, z: np.exp(x + z)),
]

_EXECUTABLES: dict[str, rvm.Executable] = {}


@pytest.mark.parametrize(
    "fname, args, numpy_ref", CASES, ids=[f"{c[0]}-{c[1][0].dtype}" for c in CASES]
)
def test_every_mode_gives_the_interpreters_dtype(fname, args, numpy_ref, exec_mode, kernels):
    if kernels not in _EXECUTABLES:
        _EXECUTABLES[kernels] = rvm.compile(Loops, kernels=kernels)
    out = rvm.VirtualMachine(_EXECUTABLES[kernels], exec_mode=exec_mode)[fname](*args)
    ref = rvm.interpret(Loops, fname, *args)
    want = numpy_ref(*args)
    assert out.dtype == ref.dtype == want.dtype, (out.dtype, ref.dtype, want.dtype)
    assert out.shape == ref.shape == want.shape
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    np.testing.assert_allclose(out, want, rtol=1e-3)


def test_the_types_say_the_dtypes():
    text = str(Loops)
    assert "acc_1: T[(4,), None]" in text  # the carried value keeps the unknown dtype
    assert 'acc_1: T[(), "float32"]' in text  # rvm.const(0.0) and 0.0 alone are float32
    assert 'acc_1: T[(), "int64"]' in text
    assert 'acc_1: T[(), "float16"]' in text


_CHANGED_DTYPE = """
import rvm
from rvm import op
from rvm.script import T, module, func

@module
class M:
    @func
    def main(x: T[(4,), "float64"], k: T[(), "int64"]):
        acc = {start}
        i = 0
        while i < k:
            acc = acc + op.sum(x)
            i = i + 1
        return acc
"""


@pytest.mark.parametrize("start", ["0.0", "rvm.const(0.0)", "rvm.const(0.0, 'float32')"])
def test_a_body_that_changes_a_carried_dtype_is_an_error(start):
    with pytest.raises(ScriptError) as info:
        rvm.script.parse(_CHANGED_DTYPE.format(start=start))
    assert str(info.value).startswith(
        "line 12: 'acc' is carried by this loop, so it keeps the dtype it has before the loop "
        '(T[(), "float32"]), but the loop body makes it T[(), "float64"]: start it as float64 '
        '(e.g. rvm.const(..., "float64")) or op.cast it back to float32 in the body'
    )
    fixed = rvm.script.parse(_CHANGED_DTYPE.format(start="rvm.const(0.0, 'float64')"))
    x = np.arange(4, dtype="float64")
    assert rvm.interpret(fixed, "main", x, np.int64(2)).dtype == np.float64


def test_a_scalar_the_tensor_dtype_cannot_hold_is_an_error():
    source = _CHANGED_DTYPE.format(start="0").replace("acc + op.sum(x)", "acc + 1.5")
    with pytest.raises(ScriptError, match=r"add: the scalar 1.5 takes the dtype int64 of the"):
        rvm.script.parse(source)
