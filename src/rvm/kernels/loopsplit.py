"""A jit kernel's output loop on rvm's thread pool: what a generated kernel's pieces call.

A jit kernel (`rvm.jit.lower`) whose whole work is one loop nest over its output (elementwise
maps, broadcasts, casts, a reduction per output element) runs that loop's outermost range in
pieces on the pool (`rvm.kernels.workpool`) when it touches `parfor.MIN_WORK` elements or more
(`parfor.chunks`, the rule of the library's own loops): an int8 model's input quantized, its
output dequantized, a transformer's GELU over 128 x 3072. Its source (`rvm.jit.split`) holds
three functions: the kernel, which checks its operands and then either runs the loop itself or
writes its arrays' addresses and shapes into a job on its stack (`parfor.stack_job`) and runs
the job; a piece (a `numba.cfunc` of the pool's C signature, `PIECE`) that rebuilds the arrays
from the job (`pointer`, ``numba.carray``) and runs its share of the loop (`parfor.piece_range`)
in the part function, the kernel's body again on that share. Each output element is computed
by the same code on the same inputs as in one thread, so the results are the same bits.

The kernel finds its piece through a slot (`slot`): an int64 registered with llvmlite under a
symbol named by the hash of the kernel's source, which the kernel's module fills with the
piece's address when it is imported, before the kernel's code is compiled or loaded from
Numba's cache. The kernel reads it (`address_in`) at the call, so cached object code links to
the piece of the process that runs it.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types as nt
from numba.extending import intrinsic

from rvm.kernels.parfor import (
    address,
    chunks,
    job,
    piece_range,
    registered_int,
    registered_slot,
    stack_job,
)
from rvm.kernels.workpool import run

__all__ = [
    "PIECE",
    "address",
    "address_in",
    "at_least_zero",
    "chunks",
    "job",
    "piece_range",
    "pointer",
    "run",
    "slot",
    "stack_job",
]

PIECE = nt.void(nt.int64, nt.voidptr, nt.CPointer(nt.int64))
"""A piece's C signature: the pool's (`rvm.kernels.workpool`): the piece, a null pointer, the
job's int64 array."""

slot = registered_slot
"""The int64 registered with llvmlite as a symbol (`parfor.registered_slot`): 0 until its
kernel's module stores its piece's address in it."""


def address_in(symbol: str):  # type: ignore[no-untyped-def]
    """The intrinsic ``read()``: the int64 in slot ``symbol`` (`slot`), read at the call."""

    @intrinsic
    def read(typingctx):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.load(registered_int(builder, symbol))

        return nt.int64(), codegen

    return read


@intrinsic
def at_least_zero(typingctx, value):  # type: ignore[no-untyped-def]
    """``value`` (an int64), which LLVM is told is at least 0 (``llvm.assume``): a piece's
    loop index, its range's start plus a count from 0 (`rvm.jit.split`), and every index a
    jit kernel computes (`rvm.jit.te.Emitter.ref`). Numba checks a signed index for a
    negative one to wrap around, and a loop from an unknown start, ``range(lo, hi)``, kept
    those checks and went scalar, element by element (twice the time of the whole loop's
    vectors); an assume on the start alone did not reach the index. A slice's ``d5 + i9``
    (``d5`` from a shape) did the same: 4096 x 1024 -> 4096 x 512 times 2, 2.06 -> 0.52 ms on
    one thread. The whole test suite ran with this assume replaced by a trap on a negative
    value, and none fired."""
    if not isinstance(value, nt.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        v = context.cast(builder, args[0], value, nt.int64)
        builder.assume(builder.icmp_signed(">=", v, ir.Constant(v.type, 0)))
        return v

    return nt.int64(value), codegen


@intrinsic
def pointer(typingctx, at):  # type: ignore[no-untyped-def]
    """Address ``at`` (an int64) as a void pointer, for ``numba.carray(pointer(at), shape,
    dtype)``."""
    if not isinstance(at, nt.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        value = context.cast(builder, args[0], at, nt.int64)
        return builder.inttoptr(value, context.get_value_type(nt.voidptr))

    return nt.voidptr(at), codegen
