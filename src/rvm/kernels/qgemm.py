"""Integer products for quantized models: uint8 x int8 -> int32, requantized.

`product` computes ``out`` (channels x positions, or its transpose) from the weight's rows
(int8, depths contiguous and padded with zeros to a multiple of 4, beside each row's sum)
times a panel (`panel_of`: the uint8 packed operand, quads of depth by columns, read at tap
offsets) that `rvm.kernels.qconv`'s ``qconv2d`` and ``qdense`` make; its sums are
requantized per output channel (``(x - x_zero) * w`` summed, plus the bias, scaled, rounded
half to even, the output zero point added, clipped, cast to uint8 or int8):

- the micro-kernel (`_micro`, LLVM IR in `rvm.kernels.qtile`) keeps `MR` rows x `NR`
  columns of int32 sums in registers: for every 4 depths it broadcasts each row's 4 bytes
  and issues one ``vpdpbusd`` (AVX-512 VNNI: 64 multiply-adds of uint8 by int8 into int32)
  per vector.
  Without VNNI, on AVX2 (`MADD16`), the same tiles (`MR` rows from the register count, of
  `LANES` 8) multiply 16-bit values by ``vpmaddwd``, the weight's rows int16: widened once
  at compile time for a constant weight (`rvm.op.quantized.widen_weight`), else once a
  product (`_operand_rows`); a constant weight whose pairs fit 16 bits (7-bit weights:
  `rvm.kernels.qtile.pairs_fit`, the op's ``weight_pairs``) stays int8 and its tiles
  multiply bytes by ``vpmaddubsw`` (``pairs``); without either a plain loop computes the
  same sums;
- the sums are made a block of columns at a time (`_blocks`) and requantized: the
  epilogue corrects for the input zero point (``- x_zero * weight_sum``), adds the bias,
  scales in float32, rounds half to even, adds the output zero point and clips. With VNNI
  or `MADD16` it runs in the micro-kernel on its registers (`_epilogue`: a record of the
  rows' shifts and scales; `rvm.kernels.qepilogue` stores the bytes masked at their
  positions, a row's margin dropped; on AVX2 a row's bytes whole or the run an image row
  takes), so no int32 sum goes through memory (13 x 13's 3 x 3 convolutions ~9% faster with
  VNNI, 14 x 14's ~4%, one thread; on AVX2 squeezenet's 1 x 1 convolutions of depth 16-64
  ~10-20%); else (the plain loop, a transposed output, sums or shifts past 2 ** 30, a
  product's last columns taken by dots) the block's sums are stored and requantized after
  it (`_requantize`, in cache);
- a product runs as pieces of a task (`rvm.kernels.parfor`: built once, its job addresses
  and sizes; each piece its own blocks; a small product's in the calling thread): ``qgemm``
  for int8 rows, ``qgemm_wide`` for int16 ones, so that a process builds the blocks of only
  the rows it multiplies (`first_run_tasks`), either output layout one strided type; a large
  product's pieces on rvm's pool, as the float GEMMs are, cut as `rvm.kernels.qsplit`
  plans (`split_plan`: from `SPLIT_MIN` multiply-adds a piece, each tile's fixed cost
  counted, `TILE_DEPTHS_FIXED`): pieces of columns, or of rows
  (output channels) when those share the work out more evenly between the threads (few
  positions: a 7 x 7 output's 49 are two tiles of columns). The job's first pieces make the
  panel's operand (a convolution's image and the panel gathered from it, or its im2col panel
  by words: `qsplit.prepare`), a share of its quads each, and the others wait for them
  before they multiply;
- the last tile of a product's columns is one vector (`LANES`) wide when no more are left
  (`_micro_tail`: 13 x 13's 169 positions compute 176 columns, not 192), three vectors wide
  when three are left (`_micro_wide`, in two passes of 4 rows: each row's broadcast feeds
  3 products, where a tile of 2 and a tile of 1 load it twice; 24 accumulators at once
  spilled), and a few columns past the last vector are
  dot products of the column with each row (`_dot_columns`, ``vpdpbusd`` over the depth)
  when that costs less than a vector of columns: 7 x 7's 49 positions are a wide tile and
  one dot (not 64 columns: resnet50's last stage's 1 x 1 convolutions ~12% faster alone),
  14 x 14's 196 six tiles and four dots for depths past about 550. The last few columns
  join the block of sums before them rather than make a block of their own.

The sums are exact (int32 holds 255 * 128 * 65536); results equal the ops' NumPy references.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba import types as nt
from numba.extending import overload
from numpy.lib.stride_tricks import as_strided

from rvm.kernels import parfor, qsplit, workpool
from rvm.kernels.jitting import NO_C_WRAPPER, alive, jit
from rvm.kernels.parfor import PIECES_PER_THREAD  # noqa: F401  (`rvm.kernels.qturned`'s)
from rvm.kernels.planes import U
from rvm.kernels.qepilogue import EPILOGUE
from rvm.kernels.qsplit import (  # noqa: F401  (SPLIT_MIN: the docstring's, an importer's)
    F32,
    I8,
    I32,
    I64,
    SPLIT_MIN,
    TILE_DEPTHS_FIXED,
    U8,
    pointer_at,
    split_plan,
)
from rvm.kernels.qtile import (
    DOT_COLUMNS,
    DOT_DEPTHS,
    LANES,
    MADD16,
    MR,
    NR,
    TILE_DEPTHS,
    VNNI,
    _dot_columns,
    _micro,
    _micro_pairs,
    _micro_pairs_tail,
    _micro_tail,
    _micro_wide,
)

__all__ = [
    "MR",
    "NR",
    "VNNI",
    "first_run_tasks",
    "panel_of",
    "product",
    "split_plan",
    "tile_columns",
]


_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False, **NO_C_WRAPPER)
# Functions are jitted by `jitting.jit` (a constant argument types plainly: one compile per
# array types), but `_dots` and `_gemm` by Numba's own: their callers pass a constant that
# chooses their code (``swap``, the micro-kernels' operand order), one value a caller.
# Numba types every branch of a function, a literal argument's dead one too (its branch
# pruning folds only comparisons with None), so a choice made by types is made at typing by
# an overload (`_byte_rows`, `_as_plain`), not by an ``if``.


# The weight rows' type as the micro-kernels read them (`_operand_rows`; a dtype marker).
_ROWS = np.zeros(0, np.int16 if MADD16 else np.int8)


def _byte_rows(rows):  # type: ignore[no-untyped-def]
    """Whether ``rows`` are bytes: a fact of their type, a constant at typing, so `_gemm`
    builds only the micro-kernels its rows take (``vpmaddubsw`` on int8, ``vpmaddwd`` on
    int16)."""
    return rows.itemsize == 1


@overload(_byte_rows, inline="always", jit_options=_OPTS)
def _byte_rows_impl(rows):  # type: ignore[no-untyped-def]
    if rows.dtype.bitwidth == 8:
        return lambda rows: True
    return lambda rows: False


def _operand_rows(rows):  # type: ignore[no-untyped-def]
    """The weight rows as the micro-kernels read them: int16 values for the ``vpmaddwd``
    kernels (`MADD16`), else int8: ``rows`` itself when of that type (an int16 weight is
    widened once at compile time, `rvm.op.quantized.widen_weight`), else a copy."""
    return rows.astype(_ROWS.dtype)


@jit(**_OPTS)
def _convert_rows(rows, like):  # type: ignore[no-untyped-def]
    """`_operand_rows` when ``rows`` are not of ``like``'s type: their values as that type
    (a loop the compiler vectorizes; per call, for every product)."""
    n, depth = rows.shape
    flat = np.ascontiguousarray(rows).reshape(-1)
    out = np.empty(n * depth, like.dtype)
    for i in range(flat.size):
        out[i] = flat[i]
    return out.reshape(n, depth)


@overload(_operand_rows, jit_options=_OPTS)
def _operand_rows_impl(rows):  # type: ignore[no-untyped-def]
    if rows.dtype == nb.from_dtype(_ROWS.dtype):
        return lambda rows: rows
    return lambda rows: _convert_rows(rows, _ROWS)


@nb.njit(inline="always", **_OPTS)  # typed with its constants (see `_OPTS`)
def _dots(rows, b, acc, swap, j0, j1):  # type: ignore[no-untyped-def]
    """Columns ``[j0, j1)``'s few last ones past a multiple of `LANES` made by dots
    (`_dot_columns`, into ``acc`` as `_gemm`) when those cost less than a tile of `LANES`
    columns (a dot: a pass over the depth, `DOT_DEPTHS` an instruction, and a sum of the
    lanes per row; a tile's column `TILE_DEPTHS` an instruction); the first column they took
    (``j1`` if none)."""
    spare = _dotted(j1 - j0, rows.shape[1]) if swap else 0
    if spare:
        _dot_columns(rows, b, acc, j0, j1 - spare, j1)
    return j1 - spare


@jit(**_OPTS)
def _dotted(cols, lda):  # type: ignore[no-untyped-def]
    """How many of a product's last ``cols`` columns (past a multiple of `LANES`) `_dots`
    takes for rows of ``lda`` depths: all of them when they are `DOT_COLUMNS` or fewer and
    their dots cost less than a tile of `LANES` columns, else none."""
    spare = cols % LANES
    if spare > DOT_COLUMNS or TILE_DEPTHS * spare * (lda // DOT_DEPTHS + 24) >= lda:
        return 0
    return spare


@jit(**_OPTS)
def tile_columns(cols, lda):  # type: ignore[no-untyped-def]
    """The columns the tiles without VNNI compute (`_gemm`) for a product of ``cols`` columns
    and rows of ``lda`` depths: tiles of `NR`, the last `LANES` wide when no more are left,
    after the last few taken by dots (`_dotted`)."""
    cols -= _dotted(cols, lda)
    rest = cols % NR
    return cols - rest + (0 if rest == 0 else (LANES if rest <= LANES else NR))


@nb.njit(inline="always", **_OPTS)  # typed with its constants (see `_OPTS`)
def _gemm(rows, b, acc, swap, j0, j1, epi):  # type: ignore[no-untyped-def]
    """``acc[r, j - j0] = sum_d rows[r, d] * B[d, j]`` in int32 for columns ``j0 <= j < j1``
    (``j0`` a multiple of `NR`), B the panel ``b`` (see `panel_of`); ``swap`` says which
    operand is the uint8 one (see `_micro`). Tiles of `NR` columns, the last one `LANES`
    wide when no more are left (its other columns of ``acc`` are not written). With an
    epilogue record ``epi`` (`_epilogue`, else empty) the tiles' sums are
    requantized into its output instead (the last columns' dots still go to ``acc``).
    Returns the first column taken by dots (``j1`` if none)."""
    flat, offsets, quads, ldb = b[0], b[1], b[2], b[3]
    n_rows, lda = rows.shape
    ldc, taps = acc.shape[1], offsets.size
    fused = epi.ctypes.data if epi.size else 0  # the epilogue record's address, else 0
    if VNNI:
        a0, b0, c0, offs = rows.ctypes.data, flat.ctypes.data, acc.ctypes.data, offsets.ctypes.data
        j1 = _dots(rows, b, acc, swap, j0, j1)
        j = j0
        while j < j1:
            tail, wide = j1 - j <= LANES, j1 - j == NR + LANES
            for r in range(0, n_rows, MR):
                count = min(MR, n_rows - r)
                at_a, at_c = a0 + r * lda, c0 + 4 * (r * ldc + j - j0)
                if wide:
                    _micro_wide(taps, offs, quads, at_a, lda, b0 + 4 * j, ldb, at_c, ldc, count,
                                swap, fused, r, j)  # fmt: skip
                elif tail:
                    _micro_tail(taps, offs, quads, at_a, lda, b0 + 4 * j, ldb, at_c, ldc, count,
                                swap, fused, r, j)  # fmt: skip
                else:
                    _micro(taps, offs, quads, at_a, lda, b0 + 4 * j, ldb, at_c, ldc, count, swap,
                           fused, r, j)  # fmt: skip
            j += NR + LANES if wide else NR
        return j1
    if MADD16:  # the rows int16 (`_operand_rows`), tiles of `NR` columns or a last `LANES`
        j1 = _dots(rows, b, acc, swap, j0, j1)
        a0, b0, c0, offs = rows.ctypes.data, flat.ctypes.data, acc.ctypes.data, offsets.ctypes.data
        lda_bytes = lda * rows.itemsize
        pairs = _byte_rows(rows)  # int8 rows whose pairs fit 16 bits (`product`)
        j = j0
        while j < j1:
            tail = j1 - j <= LANES
            for r in range(0, n_rows, MR):
                count = min(MR, n_rows - r)
                at_a, at_c = a0 + r * lda_bytes, c0 + 4 * (r * ldc + j - j0)
                if tail and pairs:
                    _micro_pairs_tail(taps, offs, quads, at_a, lda_bytes, b0 + 4 * j, ldb, at_c,
                                      ldc, count, swap, fused, r, j)  # fmt: skip
                elif tail:
                    _micro_tail(taps, offs, quads, at_a, lda_bytes, b0 + 4 * j, ldb, at_c, ldc,
                                count, swap, fused, r, j)  # fmt: skip
                elif pairs:
                    _micro_pairs(taps, offs, quads, at_a, lda_bytes, b0 + 4 * j, ldb, at_c, ldc,
                                 count, swap, fused, r, j)  # fmt: skip
                else:
                    _micro(taps, offs, quads, at_a, lda_bytes, b0 + 4 * j, ldb, at_c, ldc, count,
                           swap, fused, r, j)  # fmt: skip
            j += NR
        return j1
    for r in range(n_rows):
        for j in range(j0, j1):
            total = np.int32(0)
            for tap in range(taps):
                for q in range(quads):
                    at, d = offsets[tap] + q * ldb + 4 * j, 4 * (tap * quads + q)
                    for t in range(4):
                        total += np.int32(rows[r, d + t]) * np.int32(flat[at + t])
            acc[r, j - j0] = total
    return j1


@jit(inline="always", **_OPTS)
def _requantize(acc, sums, x_zero, bias, scale, o0, y_zero, low, high, out, p0, p1, pitch,
                width, narrow, c0):  # type: ignore[no-untyped-def]  # fmt: skip
    """``out`` (channels x positions, any layout) from the sums ``acc[o, c - p0]`` of channel
    ``o0 + o`` for the columns ``c0 <= c < p1`` (``c0 >= p0``): column ``c = i * pitch + j``
    is position ``i * width + j`` when ``j < width`` (else dropped); ``narrow``: every sum is
    below 2 ** 30 in magnitude."""
    og = out.shape[0]
    i0, i1 = c0 // pitch, min(out.shape[1] // width, (p1 + pitch - 1) // pitch)
    one_bias, one_scale = bias.size == 1, scale.size == 1
    for o in range(og):
        b = bias[0] if one_bias else bias[o0 + o]
        f = np.float32(scale[0] if one_scale else scale[o0 + o])
        shift = np.int64(b) - x_zero * sums[o]
        if i1 - i0 == 1 and pitch == width:  # the columns are the positions: one run
            end = min(p1, out.shape[1])
            if end > c0:
                _run(acc, o, U(c0 - p0), out, U(c0), U(end - c0), shift, f, y_zero, low, high,
                     narrow)  # fmt: skip
            continue
        for i in range(i0, i1):
            start = i * pitch
            first, end = max(c0, start), min(p1, start + width)
            if end > first:
                _run(acc, o, U(first - p0), out, U(i * width + first - start), U(end - first),
                     shift, f, y_zero, low, high, narrow)  # fmt: skip


@jit(inline="always", **_OPTS)
def _run(acc, o, a0, out, at, count, shift, f, y_zero, low, high, narrow):  # type: ignore[no-untyped-def]
    """``out[o, at + p]`` from ``acc[o, a0 + p]`` for ``p < count`` (whole arrays, not
    slices, and unsigned indices keep contiguous ones' loops vectorized)."""
    # In float32 (16 lanes): a sum past 2 ** 24 may round when the zero point is added,
    # but it is then far outside the range and clipped the same.
    zero, lo, hi = np.float32(y_zero), np.float32(low), np.float32(high)
    if narrow and abs(shift) < 1 << 30:  # acc + shift fits in int32: 16 lanes
        shift32 = np.int32(shift)
        for p in range(count):
            q = np.rint(np.float32(np.int32(acc[o, a0 + p] + shift32)) * f) + zero
            out[o, at + p] = np.int32(min(max(q, lo), hi))
        return
    for p in range(count):
        q = np.rint(np.float32(acc[o, a0 + p] + shift) * f) + zero
        out[o, at + p] = np.int32(min(max(q, lo), hi))


def _as_plain(bias, scale):  # type: ignore[no-untyped-def]
    """``bias`` as int32 and ``scale`` as float32 (the ops' types: what a piece reads),
    themselves when of those types, else copies (`_requantize` takes those values of them)."""
    return bias.astype(np.int32), scale.astype(np.float32)


@overload(_as_plain, jit_options=_OPTS)
def _as_plain_impl(bias, scale):  # type: ignore[no-untyped-def]
    if bias.dtype == nt.int32 and scale.dtype == nt.float32:
        return lambda bias, scale: (bias, scale)
    return lambda bias, scale: (bias.astype(np.int32), scale.astype(np.float32))


BLOCK_BYTES = 1 << 17  # the int32 sums of a block of columns, requantized while in cache


@jit(inline="always", **_OPTS)
def panel_of(flat, offsets, quads, ldb, cols, pitch, width):  # type: ignore[no-untyped-def]
    """The B operand of a product, as a tuple: ``flat`` (uint8) holds, for tap ``t`` and quad
    ``s`` of depth, the ``cols`` columns' 4 bytes each from byte ``offsets[t] + s * ldb``;
    column ``i * pitch + j`` is output position ``i * width + j`` (``j < width``)."""
    return (flat, offsets, quads, ldb, cols, pitch, width)


@jit(**_OPTS)
def _blocks(rows, sums, b, zero, bias, scale, o0, y_zero, low, high, out, j0, j1, signed):  # type: ignore[no-untyped-def]  # noqa: E501
    """Columns ``[j0, j1)`` of the panel ``b``'s product with ``rows``, requantized into
    ``out`` (channels x positions, any layout; bytes, int8 ones when ``signed``), a block of
    columns at a time (its sums stay in cache)."""
    og = out.shape[0]
    block = max(NR, BLOCK_BYTES // (4 * og) // NR * NR)
    acc = np.empty((og, block + NR), np.int32)
    narrow = rows.shape[1] * 255 * 128 < 1 << 30  # |sum| <= 255 * 128 * depth
    last = out.shape[1] - 1  # the last position's column, plus one: the columns used
    used = last // b[6] * b[5] + last % b[6] + 1
    epi = _epilogue(sums, zero, bias, scale, o0, y_zero, low, high, out, b[5], b[6], used,
                    narrow, signed)  # fmt: skip
    b0 = j0
    while b0 < j1:
        b1 = min(j1, b0 + block)
        if min(j1, used) - b1 <= LANES + DOT_COLUMNS:  # the few columns left: this block's
            b1 = j1  # (a wide last tile and dots, not a block of one tile)
        dots = _gemm(rows, b, acc, 1, b0, min(b1, used), epi)
        if epi.size == 0 or dots < min(b1, used):  # the sums the tiles left in ``acc``
            _requantize(acc, sums, zero, bias, scale, o0, y_zero, low, high, out, b0, b1, b[5],
                        b[6], narrow, b0 if epi.size == 0 else dots)  # fmt: skip
        b0 = b1
    alive(acc)  # the inlined `_gemm`'s tiles write it, and read ``epi``, by their addresses
    alive(epi)


@jit(inline="always", **_OPTS)
def _epilogue(sums, zero, bias, scale, o0, y_zero, low, high, out, pitch, width, used, narrow,
              signed):  # type: ignore[no-untyped-def]  # fmt: skip
    """The record (`EPILOGUE` int64 fields, then the rows' int32 shifts and float32 scales it
    points to) with which the micro-kernels requantize their tiles into ``out`` themselves,
    or an empty array when they cannot: a plain loop (neither `VNNI` nor `MADD16`),
    ``out``'s positions not contiguous (a transposed output), a sum or shift past the narrow
    path of `_run` (whose arithmetic the epilogue repeats), or a scale of 1/2 or more (the
    epilogue's scaled sums stay within int32 below it)."""
    og = out.shape[0]
    if not (VNNI or MADD16) or not narrow or out.strides[1] != 1 or og == 0:
        return np.empty(0, np.int64)
    words = np.empty(2 * (EPILOGUE + og), np.int32)
    floats = words.view(np.float32)
    at = 2 * EPILOGUE
    for o in range(og):
        shift = np.int64(bias[0] if bias.size == 1 else bias[o0 + o]) - zero * sums[o]
        if abs(shift) >= 1 << 30:
            return np.empty(0, np.int64)
        words[at + o] = shift
        f = np.float32(scale[0] if scale.size == 1 else scale[o0 + o])
        if not abs(f) < 0.5:
            return np.empty(0, np.int64)
        floats[at + og + o] = f
    record = words.view(np.int64)
    record[0] = words.ctypes.data + 4 * at
    record[1] = words.ctypes.data + 4 * (at + og)
    record[2], record[3] = out.ctypes.data, out.strides[0]
    record[4], record[5], record[6] = pitch, width, used
    record[7], record[8], record[9] = y_zero, low, high
    record[10] = 1 if signed else 0
    return record


@jit(inline="always", **_OPTS)
def _piece(p, job, like):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a product (the record ``job``, `rvm.kernels.qsplit.JOB`) of weight rows
    of ``like``'s dtype: its first ``job[JOB_MAKERS]`` make the operand, a share of its quads
    each (`qsplit.prepare`); then, each waiting for those (claimed before it, done soon),
    columns ``[p * step, (p + 1) * step)`` of every row, or (axis 1) rows ``[p * step, (p + 1)
    * step)`` of every column (``p`` counted from the first), their sums requantized."""
    count, made = job[qsplit.JOB_MAKERS], job.ctypes.data + 8 * qsplit.JOB_MADE
    if p < count:
        prep = nb.carray(pointer_at(job[qsplit.JOB_PREP], I64), qsplit.PREP)
        total = qsplit.quads(prep)
        qsplit.prepare(prep, p * total // count, (p + 1) * total // count)
        workpool.add_at(made, 1)
        return
    workpool.wait_until(made, count)
    p -= count
    og, cols = job[qsplit.JOB_OG], job[qsplit.JOB_COLS]
    rows = nb.carray(pointer_at(job[qsplit.JOB_ROWS], like), (og, job[qsplit.JOB_DEPTH]))
    p_total, kind, step = job[qsplit.JOB_POSITIONS], job[qsplit.JOB_KIND], job[qsplit.JOB_STEP]
    flat = nb.carray(pointer_at(job[qsplit.JOB_FLAT], U8), job[qsplit.JOB_FLAT_SIZE])
    offsets = nb.carray(pointer_at(job[qsplit.JOB_OFFSETS], I64), job[qsplit.JOB_TAPS])
    quads, ldb = job[qsplit.JOB_QUADS], job[qsplit.JOB_LDB]
    b = panel_of(flat, offsets, quads, ldb, cols, job[qsplit.JOB_PITCH], job[qsplit.JOB_WIDTH])
    sums = nb.carray(pointer_at(job[qsplit.JOB_SUMS], I32), og)
    bias = nb.carray(pointer_at(job[qsplit.JOB_BIAS], I32), job[qsplit.JOB_BIAS_SIZE])
    scale = nb.carray(pointer_at(job[qsplit.JOB_SCALE], F32), job[qsplit.JOB_SCALE_SIZE])
    zero, o0, y_zero = job[qsplit.JOB_ZERO], job[qsplit.JOB_O0], job[qsplit.JOB_Y_ZERO]
    low, high = job[qsplit.JOB_LOW], job[qsplit.JOB_HIGH]
    if job[qsplit.JOB_AXIS]:
        r0, r1, j0, j1 = p * step, min(og, (p + 1) * step), 0, cols
    else:
        r0, r1, j0, j1 = 0, og, p * step, min(cols, (p + 1) * step)
    # The output (channels x positions; int8 bytes if signed), stored channel-major or, for a
    # transposed one, position-major: one strided type for both, so one `_blocks` build.
    strides = (1, og) if kind & 2 else (p_total, 1)
    out = as_strided(nb.carray(pointer_at(job[qsplit.JOB_OUT], U8), og * p_total),
                     (og, p_total), strides)  # fmt: skip
    _blocks(rows[r0:r1], sums[r0:r1], b, zero, bias, scale, o0 + r0, y_zero, low, high,
            out[r0:r1], j0, j1, kind & 1 != 0)  # fmt: skip


_WIDE = np.zeros(0, np.int16)  # the widened weight rows' type (`MADD16`; a dtype marker)


def _task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of an integer product of int8 weight rows (a pool task)."""
    _piece(p, parfor.job(data), I8)


def _task_wide(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of an integer product of int16 weight rows (`MADD16`'s: a weight whose
    pairs do not fit 16 bits, widened); a task of its own, so that a process builds the
    blocks of only the rows it multiplies."""
    _piece(p, parfor.job(data), _WIDE)


parfor.export_task("qgemm", _task)
parfor.export_task("qgemm_wide", _task_wide)
_run_pieces, _run_pieces_wide = parfor.runner("qgemm"), parfor.runner("qgemm_wide")
_run_piece = parfor.caller("qgemm", "float32")
_run_piece_wide = parfor.caller("qgemm_wide", "float32")
_stack_job = parfor.stack_job(qsplit.JOB)


def first_run_tasks(pairs: bool) -> tuple[str, ...]:
    """The task a product runs (`rvm.jit.first_run`; a turned one's aside): ``qgemm_wide``
    where its weight rows are int16 (`MADD16`, the weight's pairs not fitting 16 bits:
    ``pairs`` false), else ``qgemm``."""
    return ("qgemm_wide",) if MADD16 and not pairs else ("qgemm",)


@jit(**_OPTS)
def product(rows, sums, b, zero, bias, scale, o0, y_zero, low, high, out, transposed, signed,
             pairs, prep):  # type: ignore[no-untyped-def]  # fmt: skip
    """``out`` (channels x positions, or its transpose stored when ``transposed``; bytes,
    int8 ones when ``signed``) requantized from ``rows`` times the panel ``b``: in pieces of
    columns on rvm's pool when large. ``pairs``: the weight's pairs fit 16 bits
    (`rvm.kernels.qtile.pairs_fit`, a fact of a constant weight), so without VNNI its int8
    rows are read as they are (``vpmaddubsw``), not widened. ``prep``: the record of the
    panel's operand (`qsplit.PREP`), made first: by the pieces, a share of its quads each, when
    the product is split. (Made by the caller alone, the other core waited: on a Zen 3 core
    squeezenet's 3 x 3 at 55 x 55 took 29 us to make its image and gathered panel against
    390 us of tiles, resnet50's at 56 x 56 97 us.)"""
    bias, scale = _as_plain(bias, scale)
    if MADD16 and pairs and rows.itemsize == 1:
        _multiply(rows, sums, b, zero, bias, scale, o0, y_zero, low, high, out, transposed,
                  signed, prep)  # fmt: skip
    else:
        _multiply(_operand_rows(rows), sums, b, zero, bias, scale, o0, y_zero, low, high, out,
                  transposed, signed, prep)  # fmt: skip


@jit(**_OPTS)
def _multiply(rows, sums, b, zero, bias, scale, o0, y_zero, low, high, out, transposed, signed,
              prep):  # type: ignore[no-untyped-def]  # fmt: skip
    """`product` on the rows as the micro-kernels read them: the pieces of the task of their
    type (``qgemm``, ``qgemm_wide``: `_piece`), on the pool when the product is large
    (`split_plan`; its first pieces make its operand, `qsplit.prepare`), else in the calling
    thread (one piece makes the operand, one multiplies). The blocks (`_blocks`, one build
    for both output layouts, a row type's a task) are built once, in that task, not linked into
    each function calling them, where every level optimized and compiled them again (the
    int8 library's first build: seconds of LLVM each)."""
    og, depth, cols = rows.shape[0], rows.shape[1], b[4]
    threads = parfor.threads()
    axis, step, pieces = 0, cols, 1
    if threads > 1 and not workpool.busy():
        axis, step, pieces = split_plan(og, depth, cols, threads)
    p_total = out.shape[0] if transposed else out.shape[1]
    kind = (1 if signed else 0) + (2 if transposed else 0)
    job = _stack_job()  # the pieces end before this returns
    qsplit.job(job, rows, b, sums, bias, scale, zero, o0, y_zero, low, high, p_total, kind, step,
               out, axis, prep, threads if pieces > 1 else 1)  # fmt: skip
    count, wide = job[qsplit.JOB_MAKERS] + pieces, not _byte_rows(rows)  # which task
    if pieces > 1:
        if wide:
            _run_pieces_wide(F32, count, job)
        else:
            _run_pieces(F32, count, job)
        return
    for p in range(count):
        if wide:
            _run_piece_wide(p, job)
        else:
            _run_piece(p, job)
