"""The int8 tiles' fused epilogue, in LLVM IR: a tile's int32 sums requantized in its
registers and stored as bytes at their positions (`rvm.kernels.qtile`'s micro-kernels, and
`rvm.kernels.qturned`'s), so that no sum goes through memory.

- `EPILOGUE`: the fields of the record (int64) the epilogue reads, which
  `rvm.kernels.qgemm`'s ``_epilogue`` writes;
- `Requantizer`: the arithmetic (float32 scale, rounding half to even, the zero point added,
  packed to bytes with saturation and clipped), on vectors of ``lanes`` int32 values: zmm
  registers (16) with AVX-512, ymm ones (8) on AVX2;
- `epilogue_code`: a tile's rows requantized and stored, each image row the tile's columns
  meet, with byte-masked stores (AVX-512) or, on AVX2, a row's bytes whole or the run an
  image row takes (`_store_rows`).

The code is a function of the vectors' width it is given, not of the CPU: its callers build
their tiles for this one's (`rvm.kernels.qtile.LANES`).
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils

__all__ = ["EPILOGUE", "Requantizer", "epilogue_code"]


# The record a fused epilogue reads (int64 fields): the addresses of the rows' int32 shifts
# (bias minus the input zero point times the row's weight sum) and float32 scales and of the
# output's row 0 (bytes); the bytes between its rows; the columns' pitch and width (column
# ``i * pitch + j`` is position ``i * width + j`` when ``j < width``), the columns used; the
# output zero point and its clip range; 1 for an int8 output, 0 for uint8.
EPILOGUE = 11


class Requantizer:
    """The fused epilogue's arithmetic, declared once in a builder's module, on the fields of
    an `EPILOGUE` record (its output zero point, clip range and signedness): `rounded` scales
    a vector of sums in float32 and rounds it half to even as it converts back to int32
    (``vcvtps2dq {rn-sae}``: the scales are below 1/2, `qgemm._epilogue`, so none
    overflows); `bytes` packs 4 such vectors to bytes with saturation (int16, the zero point
    added, then bytes) and clips them to the range: byte ``16 L + 4 p + t`` of the register
    is lane ``4 L + t`` of vector ``p`` (the packs work within 128-bit lanes). On zmm
    registers with AVX-512, on ymm ones without VNNI (`MADD16`: ``vcvtps2dq`` rounding as
    MXCSR says, to nearest even as ``np.rint`` does)."""

    def __init__(self, builder: ir.IRBuilder, field: list, lanes: int) -> None:
        i8, i16, i32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
        self.builder, module, self.lanes = builder, builder.module, lanes
        self.vec, self.fvec = ir.VectorType(i32, lanes), ir.VectorType(ir.FloatType(), lanes)
        words, self.bytes64 = ir.VectorType(i16, 2 * lanes), ir.VectorType(i8, 4 * lanes)

        def fn(name, result, *params):  # type: ignore[no-untyped-def]
            return cgutils.get_or_insert_function(module, ir.FunctionType(result, params), name)

        vec, fvec, bytes64 = self.vec, self.fvec, self.bytes64
        # zmm (AVX-512) or ymm (AVX2: `MADD16`) instructions, by the vectors' width.
        x86 = "llvm.x86.avx512" if lanes == 16 else "llvm.x86.avx2"
        if lanes == 16:
            self.cvt = fn("llvm.x86.avx512.mask.cvtps2dq.512", vec, fvec, vec, i16, i32)
        else:  # rounds as MXCSR says: to nearest even, as ``np.rint``
            self.cvt = fn("llvm.x86.avx.cvt.ps2dq.256", vec, fvec)
        suffix = ".512" if lanes == 16 else ""
        self.pack_words = fn(f"{x86}.packssdw{suffix}", words, vec, vec)
        self.add_sat = fn(f"llvm.sadd.sat.v{2 * lanes}i16", words, words, words)
        self.packs = {
            True: fn(f"{x86}.packsswb{suffix}", bytes64, words, words),
            False: fn(f"{x86}.packuswb{suffix}", bytes64, words, words),
        }
        self.clips = {
            name: fn(f"llvm.{name}.v{4 * lanes}i8", bytes64, bytes64, bytes64)
            for name in ("umax", "umin", "smax", "smin")
        }
        self.zero = self.broadcast(builder.trunc(field[7], i16), words)
        self.low, self.high = (self.broadcast(builder.trunc(v, i8), bytes64) for v in field[8:10])
        self.signed = builder.icmp_signed("!=", field[10], ir.IntType(64)(0))
        self.slot = cgutils.alloca_once(builder, bytes64)

    def broadcast(self, value, vtype):  # type: ignore[no-untyped-def]
        """``value`` in every lane of a ``vtype``."""
        b, i32 = self.builder, ir.IntType(32)
        undef = ir.Constant(vtype, ir.Undefined)
        splat = ir.Constant(ir.VectorType(i32, vtype.count), [0] * vtype.count)
        return b.shuffle_vector(b.insert_element(undef, value, i32(0)), undef, splat)

    def rounded(self, sums, scale):  # type: ignore[no-untyped-def]
        """The int32 vector ``rint(float32(sums) * scale)`` (``scale`` a float32 vector)."""
        b, i16, i32 = self.builder, ir.IntType(16), ir.IntType(32)
        q = b.fmul(b.sitofp(sums, self.fvec), scale)
        if self.lanes != 16:
            return b.call(self.cvt, [q])
        return b.call(self.cvt, [q, ir.Constant(self.vec, None), i16(-1), i32(8)])

    def bytes(self, v):  # type: ignore[no-untyped-def]
        """The 4 rounded vectors ``v`` as one register of output bytes (see the class)."""
        b = self.builder
        low_words = b.call(self.add_sat, [b.call(self.pack_words, [v[0], v[1]]), self.zero])
        high_words = b.call(self.add_sat, [b.call(self.pack_words, [v[2], v[3]]), self.zero])
        with b.if_else(self.signed) as (as_signed, as_unsigned):
            for flag, up, down, branch in (
                (True, "smax", "smin", as_signed),
                (False, "umax", "umin", as_unsigned),
            ):
                with branch:
                    packed = b.call(self.packs[flag], [low_words, high_words])
                    packed = b.call(self.clips[up], [packed, self.low])
                    b.store(b.call(self.clips[down], [packed, self.high]), self.slot)
        return b.load(self.slot)


def epilogue_code(builder: ir.IRBuilder, acc: list, rows, epi, row, col, first: int,
                  lanes: int) -> None:  # type: ignore[no-untyped-def]  # fmt: skip
    """Rows ``row + first + i`` (``first + i < rows``) of the tile's sums ``acc[i]`` (started
    from the rows' shifts; vectors of ``lanes`` int32 values) requantized as
    `rvm.kernels.qgemm._run` does (``rint((sum + shift) * scale) + zero``, clipped) and
    stored as bytes, column ``col + l`` of a row (lane ``l`` of its vectors) at its position.

    The sums are scaled in float32 and rounded half to even as they convert back to int32
    (``vcvtps2dq {rn-sae}``; the scales are below 1/2, `qgemm._epilogue`, so none
    overflows); then 4 vectors at a time are packed to bytes with saturation (int16, the zero
    point added, then bytes), clipped to the range as bytes and put back in order, 4 vectors'
    bytes a register. Each row's bytes are stored from the register that holds them: with
    AVX-512's 16 lanes a masked store per (row, register) for each image row the tile's
    columns meet (a row's margin and the columns past the used ones dropped); with AVX2's 8,
    `_store_rows`."""
    i1, i8, i32, i64 = (ir.IntType(n) for n in (1, 8, 32, 64))
    f32 = ir.FloatType()
    vec, fvec = ir.VectorType(i32, lanes), ir.VectorType(f32, lanes)
    bytes64 = ir.VectorType(i8, 4 * lanes)
    record = builder.inttoptr(epi, i64.as_pointer())
    field = [builder.load(builder.gep(record, [i64(k)])) for k in range(EPILOGUE)]
    scales = builder.inttoptr(field[1], f32.as_pointer())
    out = builder.inttoptr(field[2], i8.as_pointer())
    ldo, pitch, width, used = field[3:7]
    requantize = Requantizer(builder, field, lanes)
    # The rounded int32 values, row by row (a row past ``rows`` repeats row 0's scale,
    # and is not stored).
    values, inside = [], []
    for i in range(len(acc)):
        inside.append(builder.icmp_signed("<", i64(first + i), rows))
        r = builder.add(row, builder.select(inside[i], i64(first + i), i64(0)))
        scale = requantize.broadcast(builder.load(builder.gep(scales, [r])), fvec)
        for j in range(len(acc[i])):  # the shift is in the sums
            values.append(requantize.rounded(builder.load(acc[i][j]), scale))
    # 4 vectors a register: piece ``p`` (``lanes`` bytes) of register ``g`` is vector ``4g + p``
    # (row ``(4g + p) // vectors``). The packs work within 128-bit lanes: lane ``L`` holds
    # 4 values of each vector, put back in order by one permutation of 32-bit words.
    quarters = lanes // 4  # 128-bit lanes a register
    order = [4 * (k % quarters) + k // quarters for k in range(lanes)]
    values += values[:1] * (-len(values) % 4)  # whole registers (6 rows of 1 vector)
    groups = []
    for g in range(len(values) // 4):
        packed = builder.bitcast(requantize.bytes(values[4 * g : 4 * g + 4]), vec)
        packed = builder.shuffle_vector(
            packed, ir.Constant(vec, ir.Undefined), ir.Constant(vec, order)
        )
        groups.append(builder.bitcast(packed, bytes64))
    vectors = len(acc[0])
    span = vectors * lanes  # the tile's columns
    bases = [
        builder.gep(out, [builder.mul(builder.add(row, i64(first + i)), ldo)])
        for i in range(len(acc))
    ]
    # The image rows the tile's columns meet: one, with no division, when the columns are
    # the positions (the pitch spans them all).
    one_row = builder.icmp_signed(">=", pitch, used)
    first_at, meets_at = cgutils.alloca_once(builder, i64), cgutils.alloca_once(builder, i64)
    with builder.if_else(one_row) as (single, several):
        with single:
            builder.store(i64(0), first_at)
            builder.store(i64(1), meets_at)
        with several:
            top = builder.sdiv(col, pitch)
            bottom = builder.sdiv(builder.add(col, i64(span - 1)), pitch)
            builder.store(top, first_at)
            builder.store(builder.add(builder.sub(bottom, top), i64(1)), meets_at)
    skip = builder.sub(width, pitch)  # a row's margin, taken off the columns after it
    if lanes != 16:  # no byte-masked store (AVX2): `_store_rows`
        _store_rows(builder, groups, vectors, bases, inside, col, pitch, width, used, first_at,
                    meets_at, skip)  # fmt: skip
        return
    masks = ir.VectorType(i1, 4 * lanes)
    store = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(ir.VoidType(), [bytes64, bytes64.as_pointer(), i32, masks]),
        "llvm.masked.store.v64i8.p0",
    )

    def below(n):  # type: ignore[no-untyped-def]
        """The int64 mask of the ``n`` (0..48) low bits."""
        return builder.sub(builder.shl(i64(1), n), i64(1))

    def body(lo, hi, offset):  # type: ignore[no-untyped-def]
        taken = builder.and_(below(hi), builder.not_(below(lo)))  # bit c: column ``col + c``
        for i in range(len(acc)):
            # Row i's pieces, by register: piece p of register g is its vector 4g + p - i * V.
            for g in range(len(groups)):
                pieces = [p for p in range(4) if (4 * g + p) // vectors == i]
                if not pieces:
                    continue
                delta = 4 * g - i * vectors  # a piece's vector minus its place
                bits = sum(0xFFFF << (16 * p) for p in pieces)
                bits -= 1 << 64 if bits >= 1 << 63 else 0  # as a signed int64
                mask = (
                    builder.lshr(taken, i64(16 * delta))
                    if delta >= 0
                    else builder.shl(taken, i64(-16 * delta))
                )
                mask = builder.and_(mask, i64(bits))
                mask = builder.select(inside[i], mask, i64(0))
                at = builder.gep(bases[i], [builder.add(offset, i64(16 * delta))])
                at = builder.bitcast(at, bytes64.as_pointer())
                builder.call(store, [groups[g], at, i32(1), builder.bitcast(mask, masks)])

    _row_runs(builder, col, pitch, width, used, first_at, meets_at, skip, span, body)


def _row_runs(builder, col, pitch, width, used, first_at, meets_at, skip, span, body):  # type: ignore[no-untyped-def]  # noqa: E501
    """Calls ``body(lo, hi, offset)`` for each image row the tile's ``span`` columns from
    ``col`` meet: its columns are the tile's ``lo`` to ``hi`` (``0 <= lo <= hi <= span``),
    stored ``offset`` bytes from a row's start (column ``col + c`` at ``offset + c``)."""
    i64 = ir.IntType(64)

    def clamp(v):  # type: ignore[no-untyped-def]
        v = builder.select(builder.icmp_signed("<", v, i64(0)), i64(0), v)
        return builder.select(builder.icmp_signed(">", v, i64(span)), i64(span), v)

    with cgutils.for_range(builder, builder.load(meets_at)) as loop:
        image_row = builder.add(builder.load(first_at), loop.index)
        start, end = _row_span(builder, image_row, pitch, width, used)
        lo, hi = clamp(builder.sub(start, col)), clamp(builder.sub(end, col))
        body(lo, hi, builder.add(col, builder.mul(image_row, skip)))


def _row_span(builder, image_row, pitch, width, used):  # type: ignore[no-untyped-def]
    """Image row ``image_row``'s first column and its end (past its last; at most ``used``)."""
    start = builder.mul(image_row, pitch)
    end = builder.add(start, width)
    return start, builder.select(builder.icmp_signed("<", end, used), end, used)


def _store_rows(builder, groups, vectors, bases, inside, col, pitch, width, used, first_at,
                meets_at, skip):  # type: ignore[no-untyped-def]  # fmt: skip
    """`epilogue_code`'s stores without byte-masked ones (AVX2): each row's ``vectors *
    lanes`` bytes (whole pieces of one register: 4 divisible by ``vectors``) stored plainly
    where an image row takes all the tile's columns, else the run of them it takes copied
    from a slot on the stack (``llvm.memcpy``: a run's bytes only, as another thread may
    write the bytes around it). The common tile, one image row taking all its columns, is
    tested before `_row_runs`' loop and stored outside it: inside, the copies' calls made
    LLVM keep the rows on the stack (Zen 3, one thread: 1 x 1 convolutions of 16-64
    channels 5-12% faster, squeezenet's 3 x 3 ones 1-5%)."""
    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    lanes = groups[0].type.count // 4  # the registers of bytes hold 4 vectors each
    span = vectors * lanes
    row_bytes = ir.VectorType(i8, span)
    slot = builder.bitcast(cgutils.alloca_once(builder, row_bytes), i8.as_pointer())
    copy = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(ir.VoidType(), [i8.as_pointer(), i8.as_pointer(), i64, ir.IntType(1)]),
        "llvm.memcpy.p0.p0.i64",
    )
    rows = []
    for i in range(len(bases)):
        g, p = divmod(i * vectors, 4)  # row i: pieces p.. of register g
        picks = ir.Constant(ir.VectorType(i32, span), list(range(p * lanes, p * lanes + span)))
        rows.append(builder.shuffle_vector(groups[g], groups[g], picks))

    def store(values, at):  # type: ignore[no-untyped-def]
        builder.store(values, builder.bitcast(at, row_bytes.as_pointer()), align=1)

    def body(lo, hi, offset):  # type: ignore[no-untyped-def]
        whole = builder.and_(
            builder.icmp_signed("==", lo, i64(0)), builder.icmp_signed("==", hi, i64(span))
        )
        for i, values in enumerate(rows):
            with builder.if_then(inside[i]):
                at = builder.gep(bases[i], [offset])
                with builder.if_else(whole) as (plain, run):
                    with plain:
                        store(values, at)
                    with run:
                        with builder.if_then(builder.icmp_signed("<", lo, hi)):
                            builder.store(values, builder.bitcast(slot, row_bytes.as_pointer()))
                            builder.call(copy, [builder.gep(at, [lo]), builder.gep(slot, [lo]),
                                                builder.sub(hi, lo), ir.IntType(1)(0)])  # fmt: skip

    # The common tile (see above): one image row takes all its columns.
    image_row = builder.load(first_at)
    start, end = _row_span(builder, image_row, pitch, width, used)
    fast = builder.and_(
        builder.icmp_signed("==", builder.load(meets_at), i64(1)),
        builder.and_(
            builder.icmp_signed("<=", start, col),
            builder.icmp_signed(">=", end, builder.add(col, i64(span))),
        ),
    )
    with builder.if_else(fast) as (plain, general):
        with plain:
            offset = builder.add(col, builder.mul(image_row, skip))
            for i, values in enumerate(rows):
                with builder.if_then(inside[i]):
                    store(values, builder.gep(bases[i], [offset]))
        with general:
            _row_runs(builder, col, pitch, width, used, first_at, meets_at, skip, span, body)
