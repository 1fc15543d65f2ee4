"""Shape checks at a kernel's start, fallbacks, and compile errors."""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import Jit, prim, rand, var

from rvm import op
from rvm.errors import JITError
from rvm.jit import jit_kernel, load_kernel
from rvm.jit.compute import _elementwise, compute
from rvm.jit.scalar import scalar_compute
from rvm.op import ops


def test_symbolic_dims_must_agree() -> None:
    x, y = var("x", ("n", 4)), var("y", ("n", 4))
    k = Jit(prim([x, y], x + y))
    with pytest.raises(ValueError, match="disagrees on dimension 'n'"):
        k(rand((3, 4)), rand((2, 4)))
    with pytest.raises(ValueError, match="must have 4 at axis 1"):
        k(rand((3, 5)), rand((3, 5)))


def test_broadcast_mismatch_and_output_shape() -> None:
    x, y = var("x", ("n", "m")), var("y", ("k",))
    k = Jit(prim([x, y], x * y), style="dps")
    with pytest.raises(ValueError, match="do not broadcast"):
        k(rand((2, 3)), rand((4,)), np.empty((2, 3), np.float32))
    with pytest.raises(ValueError, match="output 0"):
        k(rand((2, 3)), rand((3,)), np.empty((3, 3), np.float32))
    out = np.empty((2, 3), np.float32)
    k(rand((2, 3)), rand((1,)), out)


def test_matmul_inner_dims_and_take_bounds() -> None:
    a, b = var("a", ("m", "k")), var("b", ("k2", "n"))
    k = Jit(prim([a, b], op.matmul(a, b)))
    with pytest.raises(ValueError, match="inner dimensions differ"):
        k(rand((2, 3)), rand((4, 2)))
    x, i = var("x", ("n",)), var("i", (2,), "int64")
    t = Jit(prim([x, i], op.take(x, i)))
    with pytest.raises(IndexError, match="out of range"):
        t(rand((3,)), np.array([0, 3]))
    np.testing.assert_array_equal(t(np.arange(3, dtype=np.float32), np.array([-3, 2])), [0, 2])


def test_fallback_to_numpy() -> None:
    x = var("x", (1, 4, 3, 3))
    rec = jit_kernel("fused_lrn", prim([x], op.lrn(x)), "dps")
    assert rec.backend == "numpy"
    assert "lrn" in rec.meta["jit_fallback"]


def test_compile_error_names_kernel_and_line(monkeypatch) -> None:
    monkeypatch.setitem(scalar_compute, ops.exp, lambda attrs, t, a: f"no_such_function({a})")
    monkeypatch.setitem(compute, ops.exp, _elementwise(ops.exp))
    x = var("x", ("n",))
    rec = jit_kernel("fused_broken_exp", prim([x], op.exp(x) + 1.0), "dps")
    with pytest.raises(JITError) as info:
        load_kernel(rec)
    message = str(info.value)
    assert "fused_broken_exp" in message and "exp" in message
    assert "no_such_function" in message and "generated source line" in message
