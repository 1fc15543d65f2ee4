"""Helpers of the jit tests: primitive functions from expressions, and reference runs."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rvm.ir import Call, Constant, Function, Tuple, Var, VarBinding, infer_type, seq
from rvm.ir.expr import Expr, TupleGetItem
from rvm.ir.types import TensorType
from rvm.jit import jit_kernel, load_kernel
from rvm.jit.numpy_kernel import numpy_kernel
from rvm.op import numpy_ref


def run_warm(script: str) -> None:
    """Runs ``script`` in a second Python process that loads its kernels from Numba's cache,
    its allocations from 4 KB on mapped apart (``MALLOC_MMAP_THRESHOLD_``, fixed) so that a
    free unmaps them: a scratch array reached only through its address and freed too early
    (`rvm.kernels.jitting.alive`) crashes there, where a compiling process reuses the freed
    memory unseen. Asserts the process succeeded."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="4096", RVM_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert run.returncode == 0, f"rc {run.returncode}: {run.stderr[-2000:]}"


# Haswell's features (AVX2 + FMA, 8 lanes) in LLVM's names: the target the tests of the AVX2
# path compile for in a subprocess on a wider host (`NUMBA_CPU_NAME`/`NUMBA_CPU_FEATURES`),
# all with this one string, so they share that build (`haswell_caches` in conftest.py).
HASWELL = "+64bit,+avx,+avx2,+fma,+f16c,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+cmov,+popcnt"


def host_has(feature: str) -> bool:
    """Whether this host's CPU has ``feature`` (LLVM's name: ``avx2``, ``avx512f``...): can
    run code compiled for a target with it."""
    from llvmlite import binding as llvm

    return f"+{feature}" in llvm.get_host_cpu_features().flatten().split(",")


def var(name: str, shape: Sequence[object], dtype: str = "float32") -> Var:
    """A typed parameter."""
    return Var(name, TensorType(tuple(shape), dtype))


def prim(params: Sequence[Var], result: Expr, name: str = "f") -> Function:
    """A primitive function whose body binds every call of ``result`` (post-order)."""
    bindings: list[VarBinding] = []
    done: dict[int, Expr] = {}

    def visit(e: Expr) -> Expr:
        if id(e) in done:
            return done[id(e)]
        if isinstance(e, (Var, Constant)):
            return e
        if isinstance(e, Tuple):
            out: Expr = Tuple(tuple(visit(f) for f in e.fields))
        elif isinstance(e, TupleGetItem):
            item = TupleGetItem(visit(e.tuple_value), e.index)
            out = Var(f"t{len(bindings)}", infer_type(item))
            bindings.append(VarBinding(out, item))
        else:
            assert isinstance(e, Call)
            call = Call(e.callee, tuple(visit(a) for a in e.args), dict(e.attrs))
            ty = infer_type(call)
            out = Var(f"t{len(bindings)}", ty)
            bindings.append(VarBinding(out, call))
        done[id(e)] = out
        return out

    body = visit(result)
    func = Function(tuple(params), seq(bindings, body), attrs={"primitive": True})
    infer_type(func)
    return func


def numpy_run(func: Function, *inputs: np.ndarray, style: str = "return"):
    """The numpy kernel of ``func`` run on ``inputs`` (the reference)."""
    rec = numpy_kernel("ref_kernel", func, "return")
    namespace = {"np": np, "math": math, "ref": numpy_ref}
    exec(compile(rec.source, "<ref>", "exec"), namespace)
    return namespace["ref_kernel"](*inputs)


class Jit:
    """A compiled jit kernel of a function, callable in both styles."""

    def __init__(
        self, func: Function, name: str = "k", style: str = "return", generic: bool = True
    ) -> None:
        self.func = func
        self.record = jit_kernel(name, func, style, generic)
        assert self.record.backend == "jit", self.record.meta.get("jit_fallback")
        self.kernel = load_kernel(self.record)

    def __call__(self, *inputs: np.ndarray):
        return self.kernel(*inputs)


def check(
    func: Function,
    *inputs: np.ndarray,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    kernel: Jit | None = None,
) -> None:
    """The jit kernel of ``func`` agrees with the numpy kernel on ``inputs``."""
    k = kernel or Jit(func)
    got = k(*inputs)
    want = numpy_run(func, *inputs)
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w, rtol, atol)
    else:
        _close(got, want, rtol, atol)


def _close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> None:
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(got, want)


def rand(
    shape: Sequence[int], dtype: str = "float32", seed: int = 0, low: int = -5, high: int = 5
) -> np.ndarray:
    """A random array of ``dtype``."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        lo = 0 if np.dtype(dtype).kind == "u" else low
        return rng.integers(lo, high, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)
