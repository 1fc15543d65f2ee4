"""Ops whose attributes name a symbolic dimension that none of their inputs carries
(``full(("n", 4))``, ``broadcast_to(y, ("n", 4))``): the kernel reads the dimension from a
parameter of the caller that has it, in every exec mode and kernel backend."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.script import T, func, module
from rvm.transform.pipeline import run_pipeline


@module
class Creation:
    @func
    def full_alone(x: T[("n", 3), "float32"]):
        return op.full(("n", 4), 2.5, "float32")

    @func
    def reduced(x: T[("n", 3), "float32"]):
        return op.sum(op.ones(("n", 4), "float32"), axis=0)  # n, in an output without n

    @func
    def broadcast(x: T[(2, "n"), "float32"], y: T[(1, 4), "float32"]):
        return op.broadcast_to(y, ("n", 4))

    @func
    def two_names(x: T[("m", "n"), "int64"]):
        return op.zeros(("n", "m"), "int64") + op.full(("n", 1), 7, "int64")

    @func
    def mixed(x: T[("n", 4), "float32"]):
        return op.exp(x) + op.full(("n", 4), 1.0, "float32")


CASES = [
    ("full_alone", lambda n: (np.zeros((n, 3), np.float32),)),
    ("reduced", lambda n: (np.zeros((n, 3), np.float32),)),
    ("broadcast", lambda n: (np.zeros((2, n), np.float32), np.arange(4, dtype=np.float32)[None])),
    ("two_names", lambda n: (np.zeros((n + 1, n), np.int64),)),
    ("mixed", lambda n: (np.linspace(0, 1, 4 * n, dtype=np.float32).reshape(n, 4),)),
]

_EXECUTABLES: dict[str, rvm.Executable] = {}


def _vm(kernels: str, exec_mode: str) -> rvm.VirtualMachine:
    if kernels not in _EXECUTABLES:
        _EXECUTABLES[kernels] = rvm.compile(Creation, kernels=kernels)
    return rvm.VirtualMachine(_EXECUTABLES[kernels], exec_mode=exec_mode)


@pytest.mark.parametrize("fname, make_args", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("n", [1, 3])
def test_symbolic_creation_matches_interpreter(fname, make_args, n, exec_mode, kernels):
    args = make_args(n)
    out = _vm(kernels, exec_mode)[fname](*args)
    ref = rvm.interpret(Creation, fname, *args)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    np.testing.assert_allclose(out, ref, rtol=1e-6)


def test_the_caller_allocates_the_symbolic_result():
    """The result's shape is known to the caller: no allocation by the kernel itself."""
    text = run_pipeline(Creation).script()
    assert "call_alloc" not in text
    assert "call_dps(fused_full, x, " in text  # x passed in for its dimension n
