"""LLVM vector helpers for the kernels' intrinsics: what every micro-kernel's prologue needs.

`VectorIR(builder, lanes)` wraps an llvmlite builder for vectors of ``lanes`` lanes (float32
or i32, float64 too): declaring LLVM intrinsics once per module (`declare`), splatting a scalar
(`broadcast`), the mask of the first ``n`` lanes (`first`), masked loads and stores of either
element type (`load`, `store`), masked loads of lanes a stride apart (`gather`; 2 apart by
shuffles: `evens`), a block of words loaded (`block`) and turned (`turn`), and float32 ->
bf16 rounding of a vector (`bf16_bits`: ties to even, a NaN a quiet NaN, in integer
operations any vector ISA has). Addresses are int64 values, as the kernels pass them.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba.core import cgutils

from rvm.kernels.gemmshape import PLAIN_STORES

__all__ = ["VectorIR", "first_lanes"]

I1, I32, I64, F32 = ir.IntType(1), ir.IntType(32), ir.IntType(64), ir.FloatType()


def first_lanes(builder: ir.IRBuilder, n: ir.Value, lanes: int) -> ir.Value:
    """The mask of a ``lanes``-wide vector's lanes ``< n`` (an i64, clamped to 0 ..
    ``lanes``), the bits of an integer. A compare of the lane numbers with ``n``, made once
    before a loop, LLVM may move into the loop and make again at every step: the turned
    bf16 tile of 7 rows by 3 vectors (`rvm.kernels.bf16gemm`) did a ``vpcmpgtq`` and a
    ``kunpckbw`` beside its 21 dot products, and resnet50's turned 3 x 3 convolutions took
    1.05-1.07x the time (the kernels of both builds in turns in one process, one Zen 4
    thread). An integer's bits stay in a mask register."""
    assert lanes <= 64, lanes
    b, wide = builder, ir.IntType(lanes)
    n = b.select(b.icmp_signed("<", n, I64(0)), I64(0), n)
    full = b.icmp_signed(">=", n, I64(lanes))
    bits = b.sub(b.shl(I64(1), n), I64(1))  # poison at n = 64 is the branch not taken
    bits = b.select(full, ir.Constant(wide, -1), b.trunc(bits, wide))
    return b.bitcast(bits, ir.VectorType(I1, lanes))


def _bytes(vtype: ir.VectorType) -> int:
    """The size of one lane of ``vtype`` (float, double or an integer type)."""
    element = vtype.element
    if isinstance(element, ir.IntType):
        return element.width // 8
    return 8 if isinstance(element, ir.DoubleType) else 4


class VectorIR:
    """Vector helpers on ``builder`` for ``lanes``-wide vectors (see the module docstring)."""

    def __init__(self, builder: ir.IRBuilder, lanes: int) -> None:
        self.builder, self.lanes = builder, lanes
        self.f32 = ir.VectorType(F32, lanes)
        self.i32 = ir.VectorType(I32, lanes)
        self.masks = ir.VectorType(I1, lanes)
        self._splat = ir.Constant(ir.VectorType(I32, lanes), [0] * lanes)
        self._lane_ids = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))

    def declare(self, ret: ir.Type, params: list[ir.Type], name: str) -> Any:
        """The function ``name`` of this type in the builder's module (declared once)."""
        fnty = ir.FunctionType(ret, params)
        return cgutils.get_or_insert_function(self.builder.module, fnty, name)

    def broadcast(self, value: ir.Value, vtype: ir.VectorType) -> ir.Value:
        """``value`` in every lane of a ``vtype`` vector."""
        b = self.builder
        undef = ir.Constant(vtype, ir.Undefined)
        return b.shuffle_vector(b.insert_element(undef, value, I32(0)), undef, self._splat)

    def first(self, n: ir.Value) -> ir.Value:
        """The mask of lanes ``< n`` (an i64; `first_lanes`)."""
        return first_lanes(self.builder, n, self.lanes)

    def _suffix(self, vtype: ir.VectorType) -> str:
        kind = "i" if isinstance(vtype.element, ir.IntType) else "f"
        return f"v{self.lanes}{kind}{_bytes(vtype) * 8}"

    def pointer(self, address: ir.Value, vtype: ir.VectorType) -> ir.Value:
        """The int64 ``address`` as a pointer to a ``vtype`` vector."""
        return self.builder.inttoptr(address, vtype.as_pointer())

    def load(
        self, address: ir.Value, vtype: ir.VectorType, mask: ir.Value, fill: ir.Value = None
    ) -> ir.Value:
        """The ``vtype`` vector at the int64 ``address``, lanes off ``mask`` 0 or ``fill``'s
        (not read)."""
        name = f"llvm.masked.load.{self._suffix(vtype)}.p0"
        fn = self.declare(vtype, [vtype.as_pointer(), I32, self.masks, vtype], name)
        fill = ir.Constant(vtype, None) if fill is None else fill
        align = I32(_bytes(vtype))
        return self.builder.call(fn, [self.pointer(address, vtype), align, mask, fill])

    def gather(
        self, address: ir.Value, step: ir.Value, vtype: ir.VectorType, mask: ir.Value
    ) -> ir.Value:
        """The ``vtype`` vector whose lane ``i`` is the element at the int64 ``address + i *
        step`` (bytes), lanes off ``mask`` 0 (not read)."""
        b, wide = self.builder, ir.VectorType(I64, self.lanes)
        at = b.add(self.broadcast(address, wide), b.mul(self._lane_ids, self.broadcast(step, wide)))
        pointers = b.inttoptr(at, ir.VectorType(vtype.element.as_pointer(), self.lanes))
        name = f"llvm.masked.gather.{self._suffix(vtype)}.v{self.lanes}p0"
        fn = self.declare(vtype, [pointers.type, I32, self.masks, vtype], name)
        return b.call(fn, [pointers, I32(_bytes(vtype)), mask, ir.Constant(vtype, None)])

    def evens(self, address: ir.Value, n: ir.Value) -> ir.Value:
        """The float32 vector whose lane ``i`` is the element at the int64 ``address + 8 i``,
        lanes ``i >= n`` (an i64) 0: two masked loads of the ``2 n - 1`` elements it spans and
        a shuffle of their even lanes. With gathers instead, `rvm.kernels.bf16conv`'s stride-2
        pair planes took 1.8-3.6x as long to build (one Zen 4 core)."""
        b, lanes = self.builder, self.lanes
        span = b.sub(b.add(n, n), I64(1))
        low = self.load(address, self.f32, self.first(span))
        high = self.load(
            b.add(address, I64(4 * lanes)), self.f32, self.first(b.sub(span, I64(lanes)))
        )
        even = ir.Constant(ir.VectorType(I32, lanes), list(range(0, 2 * lanes, 2)))
        return b.shuffle_vector(low, high, even)

    def store(self, value: ir.Value, address: ir.Value, mask: ir.Value) -> None:
        """``value``'s lanes on ``mask`` to the int64 ``address``; a mask of every lane a
        plain store where masks are vector registers (`gemmshape.PLAIN_STORES`: AVX2's
        masked store costs several plain ones, and LLVM keeps a store masked whenever its
        mask is not a constant). On a Zen 3 (two threads, float32, native mode, both ways in
        turns in one process, the same bits): vgg19 0.942-0.954 of its time, inception_v2
        0.958, inception_v1 0.966, resnet50 0.986-0.999 (Winograd's transforms,
        `rvm.kernels.winotiles`, store their tiles under masks)."""
        b, vtype = self.builder, value.type
        name = f"llvm.masked.store.{self._suffix(vtype)}.p0"
        fn = self.declare(ir.VoidType(), [vtype, vtype.as_pointer(), I32, self.masks], name)
        at, align = self.pointer(address, vtype), _bytes(vtype)
        if not PLAIN_STORES:
            b.call(fn, [value, at, I32(align), mask])
            return
        every = ir.Constant(ir.IntType(self.lanes), -1)
        whole = b.icmp_unsigned("==", b.bitcast(mask, ir.IntType(self.lanes)), every)
        with b.if_else(whole, likely=True) as (plain, masked):
            with plain:
                b.store(value, at, align=align)
            with masked:
                b.call(fn, [value, at, I32(align), mask])

    def block(self, src: ir.Value, src_row: ir.Value, rows: ir.Value, cols: ir.Value) -> list:
        """``lanes`` i32 vectors: vector ``i`` the first ``cols`` words of row ``i`` of a block
        at the int64 ``src`` (rows ``src_row`` bytes apart) where ``i < rows``, 0 past them
        (masked loads: nothing past the block is read)."""
        b = self.builder
        across, none = self.first(cols), ir.Constant(self.masks, [0] * self.lanes)
        return [
            self.load(
                b.add(src, b.mul(src_row, I64(i))),
                self.i32,
                b.select(b.icmp_signed(">", rows, I64(i)), across, none),
            )
            for i in range(self.lanes)
        ]

    def turn(self, rows: list[ir.Value]) -> list[ir.Value]:
        """``lanes`` vectors of 32-bit lanes (rows of a square) turned: vector ``i`` of the
        result is lane ``i`` of each row in turn. log2(lanes) rounds of shuffles, each swapping
        the off-diagonal blocks of every 2b x 2b block (b = lanes / 2, ..., 1): 64 two-vector
        shuffles for 16 x 16."""
        b, lanes = self.builder, self.lanes
        assert len(rows) == lanes and lanes & (lanes - 1) == 0, (len(rows), lanes)
        half = lanes // 2
        while half >= 1:
            low = [j if not j & half else lanes + j - half for j in range(lanes)]
            high = [j + half if not j & half else lanes + j for j in range(lanes)]
            turned = list(rows)
            for r in range(lanes):
                if not r & half:
                    pair = rows[r], rows[r + half]
                    turned[r] = b.shuffle_vector(*pair, ir.Constant(self.i32, low))
                    turned[r + half] = b.shuffle_vector(*pair, ir.Constant(self.i32, high))
            rows = turned
            half //= 2
        return rows

    def constant(self, value: int) -> ir.Constant:
        """An i32 vector of ``value`` in every lane."""
        return ir.Constant(self.i32, [value] * self.lanes)

    def bf16_bits(self, x: ir.Value) -> ir.Value:
        """The bf16 bits (in the low 16 bits of i32 lanes) nearest the float32 vector ``x``:
        ties to even, a NaN a quiet NaN, as `rvm.kernels.reference.bf16.bf16_bits`."""
        b, c = self.builder, self.constant
        w = b.bitcast(x, self.i32)
        odd = b.and_(b.lshr(w, c(16)), c(1))
        rounded = b.lshr(b.add(b.add(w, c(0x7FFF)), odd), c(16))
        nan = b.icmp_unsigned(">", b.and_(w, c(0x7FFFFFFF)), c(0x7F800000))
        return b.select(nan, b.or_(b.lshr(w, c(16)), c(0x40)), rounded)
