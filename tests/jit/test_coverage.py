"""Which ops the jit compiles is explicit: every op of rvm.op has a jit compute, except the
named set `NO_JIT_COMPUTE`, whose kernels are always numpy kernels."""

from __future__ import annotations

from jit_helpers import prim, var

from rvm import op
from rvm.ir.expr import Op
from rvm.jit import NO_JIT_COMPUTE, jit_kernel
from rvm.jit.compute import compute


def _op_set() -> list[Op]:
    """The ops rvm.op defines, each with its reference (tests and the VM lowering register
    others of their own)."""
    return list(op.reference)


def test_every_op_has_a_jit_compute_or_is_named_as_having_none() -> None:
    missing = {o.name for o in _op_set() if o not in compute}
    assert missing == set(NO_JIT_COMPUTE), (
        "an op without a jit compute must be listed in rvm.jit.lower.NO_JIT_COMPUTE "
        f"(and one listed there must lack one): {sorted(missing ^ set(NO_JIT_COMPUTE))}"
    )


def test_the_named_ops_fall_back_to_numpy_kernels_that_run() -> None:
    x = var("x", (1, 4, 3, 3))
    cases = [
        ("cumprod", op.cumprod(x, axis=1)),
        ("shape_of", op.shape_of(x)),
        ("fmod", op.fmod(x, x)),
    ]
    for name, expr in cases:
        assert name in NO_JIT_COMPUTE
        rec = jit_kernel(f"fused_{name}", prim([x], expr), "return")
        assert rec.backend == "numpy" and name in rec.meta["jit_fallback"]
