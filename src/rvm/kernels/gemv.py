"""rvm's own float32 vector-matrix product: one row of A times a row-major B, its sums in
registers, at the CPU's vector width.

`row(k, x, b, ldb, c, n)` computes, on int64 addresses, ``c[:n] = x[:k] @ B[:k, :n]`` where
B's row ``p`` starts ``p * ldb`` floats after ``b``. No checks: `rvm.kernels.blas` checks
every window first and cuts large products over the pool.

Why not BLAS: the product of one row by B reads each element of B once, so it runs as fast as
B streams in. OpenBLAS's ``sgemv`` (the kernel NumPy's and Numba's ``x @ w`` reach) adds each
row of B into the output in memory, four rows at a time, and reads B at half the speed a plain
sum of B does (784 x 128 float32 in L2, one core of a Zen 4: 3.6 us against 1.8). Here a tile
of up to `TILE_VECTORS` vectors of C's columns stays in registers for the whole depth: each
step loads the tile's slice of one row of B, broadcasts one element of x and adds their
products in; a narrow tile (the last columns, or a thin B) steps through several rows of B at
once into sums of their own (`_ROWS_AT_ONCE`), so that enough sums are in flight to hide the
latency of an FMA, and adds them up at the end. The last vector of a tile is loaded and stored
under a lane mask, so no edge needs a copy.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import gemmshape
from rvm.kernels.jitting import jit
from rvm.kernels.vectors import VectorIR

__all__ = ["TILE_VECTORS", "row"]

LANES = gemmshape.LANES
TILE_VECTORS = 8
"""Vectors of C's columns a tile keeps in registers (8 of the 16 AVX2 registers, 8 of 32 on
AVX-512: the rest hold B's loads and x's broadcast)."""
_IN_FLIGHT = 8  # independent sums a step keeps going: FMA latency (4) x FMA ports (2)
_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
I64, F32 = ir.IntType(64), ir.FloatType()


def _rows_at_once(vectors: int) -> int:
    """Rows of B a step of a tile of ``vectors`` vectors takes, each into sums of its own."""
    return max(1, min(4, _IN_FLIGHT // vectors))


class _Writer:
    """The IR of `_tile` on ``builder``: its pointers, mask and the loops per vector count."""

    def __init__(self, builder: ir.IRBuilder, args: list[ir.Value]) -> None:
        k, x, b, ldb, c, _, last = args
        self.builder, self.k, self.ldb = builder, k, ldb
        self.vec = ir.VectorType(F32, LANES)
        self.vptr = self.vec.as_pointer()
        self.x, self.b, self.c = (builder.inttoptr(v, F32.as_pointer()) for v in (x, b, c))
        vectors = VectorIR(builder, LANES)
        self.fma = vectors.declare(self.vec, [self.vec] * 3, f"llvm.fma.v{LANES}f32")
        self.vectors = vectors
        self.zero = ir.Constant(self.vec, None)
        self.mask = vectors.first(last)

    def _at(self, base: ir.Value, j: int) -> ir.Value:
        return self.builder.bitcast(self.builder.gep(base, [I64(j * LANES)]), self.vptr)

    def _load(self, base: ir.Value, j: int, n: int) -> ir.Value:
        """Vector ``j`` of ``n`` at ``base``, the last one under the mask."""
        if j == n - 1:
            at = self.builder.ptrtoint(self._at(base, j), I64)
            return self.vectors.load(at, self.vec, self.mask)
        return self.builder.load(self._at(base, j), align=4)

    def _add_row(self, p: ir.Value, sums: list[ir.Value], n: int) -> None:
        """Row ``p`` of B times ``x[p]`` into ``sums`` (``n`` vectors)."""
        builder = self.builder
        a = self.vectors.broadcast(builder.load(builder.gep(self.x, [p])), self.vec)
        row_b = builder.gep(self.b, [builder.mul(p, self.ldb)])
        for j in range(n):
            old, bj = builder.load(sums[j]), self._load(row_b, j, n)
            if gemmshape.FMA:
                new = builder.call(self.fma, [a, bj, old])
            else:
                new = builder.fadd(builder.fmul(a, bj), old)
            builder.store(new, sums[j])

    def run(self, n: int) -> None:
        """The loop of a tile of ``n`` vectors: `_rows_at_once` rows of B a step, each into
        sums of its own (stack slots LLVM promotes to registers), the rows left one a step,
        then the sums added up and stored."""
        builder, k = self.builder, self.k
        rows = _rows_at_once(n)
        sums = [[cgutils.alloca_once_value(builder, self.zero) for _ in range(n)]]
        sums += [[cgutils.alloca_once_value(builder, self.zero) for _ in range(n)]
                 for _ in range(rows - 1)]  # fmt: skip
        steps = builder.sdiv(k, I64(rows))
        with cgutils.for_range(builder, steps) as loop:
            first = builder.mul(loop.index, I64(rows))
            for r in range(rows):
                self._add_row(builder.add(first, I64(r)), sums[r], n)
        done = builder.mul(steps, I64(rows))
        with cgutils.for_range(builder, builder.sub(k, done)) as loop:
            self._add_row(builder.add(done, loop.index), sums[0], n)
        for j in range(n):
            total = builder.load(sums[0][j])
            for r in range(1, rows):
                total = builder.fadd(total, builder.load(sums[r][j]))
            if j == n - 1:
                self.vectors.store(total, builder.ptrtoint(self._at(self.c, j), I64), self.mask)
            else:
                builder.store(total, self._at(self.c, j), align=4)


@intrinsic
def _tile(typingctx, k, x, b, ldb, c, vectors, last):  # type: ignore[no-untyped-def]
    """On int64 addresses: ``c[:width] = x[:k] @ B[:k, :width]`` with ``width = (vectors - 1)
    * LANES + last`` (``0 < vectors <= TILE_VECTORS``, ``0 < last <= LANES``), B's row ``p``
    at ``b + 4 * p * ldb``; k > 0. One loop per number of vectors, chosen by a switch."""
    sig = nt.void(*(nt.int64,) * 7)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        writer = _Writer(builder, list(args))
        blocks = [builder.append_basic_block(f"vectors{n}") for n in range(1, TILE_VECTORS + 1)]
        done = builder.append_basic_block("stored")
        switch = builder.switch(args[5], blocks[-1])
        for n, block in enumerate(blocks, start=1):
            switch.add_case(I64(n), block)
            builder.position_at_end(block)
            writer.run(n)
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


@jit(**_OPTS)
def row(k, x, b, ldb, c, n):  # type: ignore[no-untyped-def]
    """``c[:n] = x[:k] @ B[:k, :n]`` on the float32 addresses ``x``, ``b`` (row stride
    ``ldb``) and ``c``, tile after tile of `TILE_VECTORS` vectors; k, n > 0, no checks."""
    width = TILE_VECTORS * LANES
    for j0 in range(0, n, width):
        cols = min(width, n - j0)
        vectors = (cols + LANES - 1) // LANES
        _tile(k, x, b + 4 * j0, ldb, c + 4 * j0, vectors, cols - (vectors - 1) * LANES)
