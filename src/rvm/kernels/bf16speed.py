"""Whether this CPU's bf16 dot product is faster than float32's FMAs: measured, not assumed.

``vdpbf16ps`` does twice a float32 FMA's work (two products a lane), but how many a cycle a
core issues is the microarchitecture's: on AMD Zen 4 one 512-bit ``vdpbf16ps`` a cycle against
one 512-bit FMA (bf16 products 1.2-1.8x as fast as float32's), on an Intel Emerald Rapids
without AMX one every two cycles against two FMAs a cycle (0.77 against 0.188 ns an
instruction, one core: bf16 at half float32's peak, rvm's bf16 GEMM at 81-87 GFLOP/s against
OpenBLAS's float32 105-150). The CPU's features say neither, so `dot_speed` times the two
instructions on this core, each in a loop of `ACCUMULATORS` independent accumulators (so
that throughput, not latency, bounds it) over `STEPS` steps, interleaved, the best of
`TRIALS` each (about 2 ms in all); `measured` keeps them for the process, and
`rvm.transform.to_bf16.native_way` takes the bf16 kernels only where the dot products win.

Only where the host has AVX512-BF16 and Numba compiles for it (the kernels' `DPBF16`): a
cross build (``NUMBA_CPU_FEATURES`` naming bf16 on a host without it) cannot time the target's
instructions, and keeps the bf16 kernels its features call for.
"""

from __future__ import annotations

import functools
import time

from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.bf16words import DPBF16, LANES, BFloat
from rvm.kernels.jitting import jit

__all__ = ["ACCUMULATORS", "STEPS", "TRIALS", "dot_speed", "measurable", "measured"]

ACCUMULATORS = 12  # independent sums: more than latency x issue rate on the CPUs measured
STEPS = 4096  # loop steps a timing: ~50k instructions, 10-40 us
TRIALS = 7

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


def _loop(dot: bool):  # type: ignore[no-untyped-def]
    """An intrinsic ``(steps, seed) -> float32``: `ACCUMULATORS` vectors of `LANES` lanes,
    each updated ``steps`` times by ``vdpbf16ps`` (``dot``) or an FMA, on operands made from
    ``seed`` (nothing for LLVM to fold), then summed (nothing to drop)."""

    @intrinsic
    def loop(typingctx, steps, seed):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            steps, seed = args
            f32, i32 = ir.FloatType(), ir.IntType(32)
            vec = ir.VectorType(f32, LANES)
            module = builder.module
            undef = ir.Constant(vec, ir.Undefined)
            one = builder.insert_element(undef, seed, i32(0))
            x = builder.shuffle_vector(one, undef, ir.Constant(ir.VectorType(i32, LANES), None))
            if dot:
                pairs = ir.VectorType(BFloat(), 2 * LANES)
                fn = cgutils.get_or_insert_function(
                    module, ir.FunctionType(vec, [vec, pairs, pairs]),
                    "llvm.x86.avx512bf16.dpbf16ps.512",
                )  # fmt: skip
                operand = builder.bitcast(x, pairs)
            else:
                fn = cgutils.get_or_insert_function(
                    module, ir.FunctionType(vec, [vec] * 3), f"llvm.fma.v{LANES}f32"
                )
            acc = [cgutils.alloca_once_value(builder, ir.Constant(vec, None))
                   for _ in range(ACCUMULATORS)]  # fmt: skip
            with cgutils.for_range(builder, steps):
                for a in acc:
                    old = builder.load(a)
                    args_ = [old, operand, operand] if dot else [x, x, old]
                    builder.store(builder.call(fn, args_), a)
            total = builder.load(acc[0])
            for a in acc[1:]:
                total = builder.fadd(total, builder.load(a))
            out = builder.extract_element(total, i32(0))
            for lane in range(1, LANES):
                out = builder.fadd(out, builder.extract_element(total, i32(lane)))
            return out

        return nt.float32(nt.int64, nt.float32), codegen

    return loop


_dot_loop, _fma_loop = _loop(True), _loop(False)


@jit(**_OPTS)
def _dots(steps, seed):  # type: ignore[no-untyped-def]
    return _dot_loop(steps, seed)


@jit(**_OPTS)
def _fmas(steps, seed):  # type: ignore[no-untyped-def]
    return _fma_loop(steps, seed)


def measurable() -> bool:
    """Whether `dot_speed` can time ``vdpbf16ps`` here: the kernels compile for it (`DPBF16`)
    and the host runs it."""
    from llvmlite import binding as llvm

    return bool(DPBF16) and llvm.get_host_cpu_features().get("avx512bf16", False)


def dot_speed() -> tuple[float, float]:
    """(bf16 dot products, float32 FMAs): multiply-adds a second of one core, at the best of
    `TRIALS` interleaved timings; only where `measurable`."""
    if not measurable():
        raise RuntimeError("dot_speed: this host or target has no AVX512-BF16")
    seed = 1e-3
    _dots(STEPS, seed), _fmas(STEPS, seed)  # compiled (or loaded) and warm
    best = [float("inf"), float("inf")]
    for _ in range(TRIALS):
        for i, fn in enumerate((_dots, _fmas)):
            start = time.perf_counter()
            fn(STEPS, seed)
            best[i] = min(best[i], time.perf_counter() - start)
    work = STEPS * ACCUMULATORS * LANES  # instructions x lanes
    return 2 * work / best[0], work / best[1]  # a dot lane: two products


@functools.cache
def measured() -> tuple[float, float] | None:
    """`dot_speed`, timed once a process, or None where it cannot be (not `measurable`)."""
    return dot_speed() if measurable() else None
