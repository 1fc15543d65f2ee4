"""Elementwise ops declared once (`rvm.op.declare.elementwise`) run alike in every exec mode
with both kernel backends, against NumPy: ``log1p``, ``expm1`` and ``logaddexp``, the ops added
through one declaration in `rvm.op.elemwise` and one reference function in
`rvm.kernels.reference.elemwise`. A loop on 0-d values gives the native mode's scalar forms a
chance to run them on scalar locals."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.script import T, func, module


@module
class Ops:
    @func
    def fused(x: T[("n", 8), "float32"], y: T[(8,), "float32"]):
        a = op.log1p(op.abs(x))
        b = op.expm1(x * 0.5)
        return op.logaddexp(a + b, y)

    @func
    def tiny(x: T[("n",), "float64"]):
        return op.log1p(x) + op.expm1(x)

    @func
    def wide(a: T[("n", 1), "float32"], b: T[(1, "m"), "float32"]):
        return op.logaddexp(a, b)

    @func
    def scalars(x: T[(), "float32"], k: T[(), "int64"]):
        acc = x
        i = 0
        while i < k:
            acc = op.logaddexp(op.log1p(op.abs(acc)), op.expm1(acc * 0.25))
            i = i + 1
        return acc


def _scalars(x: np.float32, k: int) -> np.float32:
    acc = np.float32(x)
    for _ in range(k):
        acc = np.logaddexp(np.log1p(np.abs(acc)), np.expm1(acc * np.float32(0.25)))
    return acc


RNG = np.random.default_rng(7)
X = RNG.uniform(-3, 3, (5, 8)).astype("float32")
Y = RNG.uniform(-3, 3, (8,)).astype("float32")
CASES = [
    ("fused", (X, Y), lambda x, y: np.logaddexp(np.log1p(np.abs(x)) + np.expm1(x * 0.5), y)),
    ("tiny", (np.array([1e-12, -1e-9, 3e-17, 0.5]),), lambda x: np.log1p(x) + np.expm1(x)),
    (
        "wide",
        (
            np.array([[-np.inf], [1e4], [-1e4], [0.0]], "float32"),
            np.array([[-np.inf, 1e4, 3.0]], "float32"),
        ),
        np.logaddexp,
    ),
    ("scalars", (np.float32(0.7), np.int64(5)), _scalars),
]
_EXECUTABLES: dict[str, rvm.Executable] = {}


@pytest.mark.parametrize("fname, args, want", CASES, ids=[c[0] for c in CASES])
def test_every_mode_matches_numpy(fname, args, want, exec_mode, kernels):
    if kernels not in _EXECUTABLES:
        _EXECUTABLES[kernels] = rvm.compile(Ops, kernels=kernels)
    out = rvm.VirtualMachine(_EXECUTABLES[kernels], exec_mode=exec_mode)[fname](*args)
    expected = np.asarray(want(*args))
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=2e-6, atol=0)
    np.testing.assert_allclose(out, rvm.interpret(Ops, fname, *args), rtol=2e-6, atol=0)


def test_the_jit_lowers_them():
    """The fused kernels are jit kernels (the declared scalar forms), not numpy fallbacks."""
    ex = _EXECUTABLES.get("jit") or rvm.compile(Ops, kernels="jit")
    ops_of = {r.meta.get("ops", ""): r.backend for r in ex.kernels.values()}
    lowered = [b for ops, b in ops_of.items() if "log1p" in ops or "logaddexp" in ops]
    assert lowered and set(lowered) == {"jit"}, ops_of
