"""Scaled dot-product attention for the jit's `rvm.op.attention` kernels, on rvm's pool.

`attention(q, k, v, mask, out, scale, fill, masked_row, select)` computes, per (batch, head),
``softmax(scale * q @ k^T, masked) @ v`` into ``out`` (`rvm.op.attention`'s semantics and
`rvm.kernels.reference`'s numbers). The work is cut into pieces, one (batch, head) and a
band of its query rows each, that run at once on the pool (`rvm.kernels.parfor`): the
calling thread and the pool's helpers take them. A piece

- finds the keys its rows read: those up to the last one some row keeps (a decode step over
  a preallocated cache reads only the slots written so far; a row that keeps no key reads
  them all, as the reference does);
- computes the band's scores ``q @ k^T`` in a scratch buffer of its own: a GEMM (`rvm.
  kernels.blas.product`, rvm's float32 kernel, on K's head transposed once) for several
  rows, a dot product per key for a head of a few (whatever the band: its cut changes
  speed, never the answer);
- scales, masks and normalizes each row (the vectorizable `exp32` for float32; its largest
  score and its sum in a fixed order, `_reduction`, so no compiled copy rounds otherwise);
- and writes ``p @ v`` into its rows of ``out`` (a GEMM, or a sum of V's rows for a few).

With ``bf16`` (float32, `rvm.op.attention`'s ``precision="bf16"``) both GEMMs are rvm's bf16
GEMM with float32 sums (`rvm.kernels.bf16gemm.walk`, ``vdpbf16ps`` where the CPU has it): a
first pass on the pool converts each head's K and V once to the GEMM's pair panels (K's rows,
V's columns), then each piece rounds its band's Q rows and, after the softmax (float32), its
probabilities to bf16 pairs. A decode step's few rows keep their float32 dot products: they
read each key once, and converting K and V would cost as much as the products.

Bands are as tall as fit `SCORE_BYTES` of scores (half of the CPU's L2, read from the
system) and cut shorter when there are fewer (batch, head) pairs than pieces wanted, so the
whole (batch, heads, seq, kv_seq) scores tensor never exists. The task is built when first
run (seconds of LLVM once per machine; a kernel calling `attention` compiles only the call),
the bf16 one (``attention_bf16``) apart, so float32 attention builds no bf16 code.
"""

from __future__ import annotations

import os

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic, overload

from rvm.kernels import blas, parfor, sgemm, workpool
from rvm.kernels.bf16 import pack_rows, pair_rows, round_bits
from rvm.kernels.bf16gemm import NR, panels, walk
from rvm.kernels.bf16words import pair_words
from rvm.kernels.cblas import NO_TRANS
from rvm.kernels.jitting import alive, jit
from rvm.kernels.mathlib import exp32
from rvm.kernels.microkernel import floats_at
from rvm.kernels.planes import copy
from rvm.kernels.vectors import VectorIR

__all__ = [
    "DEAD",
    "FIRST_RUN_TASKS",
    "FIRST_RUN_TASKS_BF16",
    "SCORE_BYTES",
    "attention",
    "attention_heads",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
# No "reassoc": LLVM may not reorder a sum, so every compiled copy of a function (its own, one
# inlined into a task, each linked into another object: the loader binds a call to whichever
# came first) rounds it alike, in the source's order (`_reduction`).
_FAST = dict(_OPTS, fastmath={"nsz", "arcp", "contract", "afn"})

DEAD = -1e30
"""A mask value at or below this hides its key: its exponential is exactly 0 next to any key
a row keeps (exporters hide keys with -inf or the dtype's lowest value)."""


def _l2_bytes() -> int:
    """The CPU's L2 cache per core, as the system reports it (1 MB when it does not)."""
    try:
        size = os.sysconf("SC_LEVEL2_CACHE_SIZE")
    except (ValueError, OSError, AttributeError):
        size = 0
    return size if size and size > 0 else 1 << 20


SCORE_BYTES = _l2_bytes() // 2
"""A piece's scores at most, in bytes: half of L2, so they stay there between the passes."""
MIN_ROWS = 16  # a band is cut no shorter (for the pool) than this many rows
SMALL_ROWS = 4  # a head of fewer query rows takes dot products and sums of rows, not GEMMs
UNDERFLOW = -104.0  # exp of less is 0 in float32 (and below every float64 score here)

# The job (int64): its length; the q, k, v, mask, out, params addresses; b, h, s, t, d, dv;
# the mask's dims; whether it selects, whether a hidden key can be skipped; the rows of a
# band, the bands per head; the itemsize; bf16: the heads' packed K and V (0: float32
# products), the words of a head's K and V, and the phase (0: packing heads, 1: bands); the
# strides (elements) of q's, k's, v's and the output's batches, heads and rows (`_layout`).
(_Q, _K, _V, _MASK, _OUT, _PARAMS, _B, _H, _S, _T, _D, _DV, _MB, _MH, _MS, _MT, _SELECT, _SKIP,
 _ROWS, _BANDS, _SIZE, _PACKED, _KW, _VW, _PHASE, _QB, _QH, _QR, _KB, _KH, _KR, _VB, _VH,
 _VR, _OB, _OH, _OR) = range(1, 38)  # fmt: skip
_JOB = 38


@intrinsic
def _bytes_at(typingctx, at):  # type: ignore[no-untyped-def]
    """A uint8 pointer to the int64 address ``at`` (a bool mask's bytes)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], ir.IntType(8).as_pointer())

    return nt.CPointer(nt.uint8)(nt.int64), codegen


@intrinsic
def _words_at(typingctx, at):  # type: ignore[no-untyped-def]
    """A uint32 pointer to the int64 address ``at`` (bf16 pairs)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.inttoptr(args[0], ir.IntType(32).as_pointer())

    return nt.CPointer(nt.uint32)(nt.int64), codegen


@jit(**_OPTS)
def _live_keys(job, mask_add, mask_sel, base, r0, n):  # type: ignore[no-untyped-def]
    """The keys rows ``r0 .. r0 + n`` read: up to the last one some row keeps; all when
    one keeps none or no key can be hidden for certain."""
    t, ms, mt = job[_T], job[_MS], job[_MT]
    if job[_SKIP] == 0 or mt == 1:
        return t
    lo, hi = (r0, r0 + n) if ms > 1 else (0, 1)
    te = 0
    for i in range(lo, hi):
        row = base + i * mt
        last = -1
        for j in range(t - 1, -1, -1):
            live = mask_sel[row + j] != 0 if job[_SELECT] else mask_add[row + j] > DEAD
            if live:
                last = j
                break
        if last < 0:
            return t
        te = max(te, last + 1)
    return te


@jit(**_FAST)
def _mask_rows(sc, n, te, mask_add, mask_sel, rows_at, step, select, scale, fill):  # type: ignore[no-untyped-def]  # noqa: E501
    """Each of the ``n`` score rows (``te`` each) scaled and masked in place: row ``i``'s
    mask at ``rows_at[i]``, key ``j`` ``j * step`` on."""
    for i in range(n):
        row = sc[i * te : (i + 1) * te]
        at = rows_at[i]
        if select:
            for j in range(te):
                row[j] = row[j] * scale if mask_sel[at + j * step] != 0 else fill
        elif step == 1:
            m = mask_add[at : at + te]
            for j in range(te):
                row[j] = row[j] * scale + m[j]
        else:
            bias = mask_add[at]
            for j in range(te):
                row[j] = row[j] * scale + bias


def _exp(x):  # type: ignore[no-untyped-def]
    """e ** x for x <= 0: `exp32` for float32 (0 below `UNDERFLOW`), ``np.exp`` otherwise."""
    return np.exp(x)


@overload(_exp, jit_options=dict(cache=True, fastmath=_FAST["fastmath"]))
def _exp_typed(x):  # type: ignore[no-untyped-def]
    if x == nt.float32:
        return lambda x: exp32(x) if x >= np.float32(UNDERFLOW) else np.float32(0.0)
    return lambda x: np.exp(x)


def _reduction(largest: bool):  # type: ignore[no-untyped-def]
    """The intrinsic ``reduce(address, n, like)``: the sum (or, ``largest``, the largest) of
    the ``n`` floats of ``like``'s type at the int64 ``address``, in a fixed order: vector lane
    ``i`` of `REDUCE_LANES` takes the values ``i``, ``i + REDUCE_LANES``..., then halves of
    the vector are combined pairwise. The order is the source's, whatever LLVM vectorizes or
    inlines (no fastmath flag lets it reassociate). The largest propagates a NaN."""

    def typer(typingctx, address, n, like):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            at, n = args[0], args[1]
            i64, lanes = ir.IntType(64), REDUCE_LANES
            ftype = context.get_value_type(signature.return_type)
            vtype = ir.VectorType(ftype, lanes)
            v = VectorIR(builder, lanes)
            fill = ir.Constant(vtype, [-np.inf if largest else -0.0] * lanes)

            def combine(acc, x):  # type: ignore[no-untyped-def]
                if not largest:
                    return builder.fadd(acc, x)
                bigger = builder.select(builder.fcmp_unordered(">", x, acc), x, acc)
                return builder.select(builder.fcmp_unordered("uno", acc, acc), acc, bigger)

            total = cgutils.alloca_once_value(builder, fill)
            size = i64(8 if isinstance(ftype, ir.DoubleType) else 4)
            steps = builder.sdiv(builder.add(n, i64(lanes - 1)), i64(lanes))
            with cgutils.for_range(builder, steps) as loop:
                i0 = builder.mul(loop.index, i64(lanes))
                x = v.load(builder.add(at, builder.mul(i0, size)), vtype,
                           v.first(builder.sub(n, i0)), fill)  # fmt: skip
                builder.store(combine(builder.load(total), x), total)
            acc, width = builder.load(total), lanes // 2
            while width >= 1:  # lane i (< width) with lane i + width
                high = ir.Constant(v.i32, [(i + width) % lanes for i in range(lanes)])
                acc = combine(acc, builder.shuffle_vector(acc, acc, high))
                width //= 2
            return builder.extract_element(acc, ir.IntType(32)(0))

        return like(nt.int64, nt.int64, like), codegen

    return intrinsic(typer)


REDUCE_LANES = 16
_row_sum, _row_max = _reduction(False), _reduction(True)


@jit(**_FAST)
def _softmax_row(row):  # type: ignore[no-untyped-def]
    """``row`` (not empty) normalized in place; False (and ``row`` untouched) when every
    score is -inf."""
    n = row.size
    top = _row_max(parfor.address(row), n, row[0])
    if top == -np.inf:
        return False
    for j in range(n):
        row[j] = _exp(row[j] - top)
    inv = np.float32(1.0) / _row_sum(parfor.address(row), n, row[0])  # float64 for float64
    for j in range(n):
        row[j] *= inv
    return True


@jit(**_OPTS)
def _rows(at, n, d, stride, like):  # type: ignore[no-untyped-def]
    """The ``n`` rows of ``d`` values, ``stride`` apart, at address ``at``: one flat array
    (row ``j``'s value ``x`` at ``j * stride + x``), of the dtype ``like`` points to."""
    return parfor.array_at(at, ((n - 1) * stride + d if n > 0 else 0,), like)


@jit(**_FAST)
def _dots(q, kh, sc, n, te, d, w, qr, kr):  # type: ignore[no-untyped-def]
    """``sc[i, j] = q[i] . kh[j]`` for a few rows (a decode step; rows ``qr`` and ``kr``
    apart), each product's terms summed by `_row_sum` (``w``: ``d`` values of scratch)."""
    for i in range(n):
        for j in range(te):
            for x in range(d):
                w[x] = q[i * qr + x] * kh[j * kr + x]
            sc[i * te + j] = _row_sum(parfor.address(w), d, w[0])


@jit(**_FAST)
def _row_sums(sc, vh, o, n, te, dv, vr, orow):  # type: ignore[no-untyped-def]
    """``o[i] = sum_j sc[i, j] * vh[j]`` for a few rows (V's ``vr`` apart, o's ``orow``)."""
    for i in range(n):
        out = o[i * orow : i * orow + dv]
        out[:] = 0
        for j in range(te):
            p = sc[i * te + j]
            vrow = vh[j * vr : j * vr + dv]
            for x in range(dv):
                out[x] += p * vrow[x]


@jit(**_OPTS)
def _transposed(kh, te, d, kr):  # type: ignore[no-untyped-def]
    """K's first ``te`` rows (``d`` each, ``kr`` apart) transposed: (d, te), C order."""
    kt = np.empty((d, te), dtype=kh.dtype)
    for j in range(te):
        for x in range(d):
            kt[x, j] = kh[j * kr + x]
    return kt


@jit(**_OPTS)
def _add_last_key(sc, vh, o, n, te, dv, vr, orow):  # type: ignore[no-untyped-def]
    """``o[i] += p[i, te - 1] * v[te - 1]``, both rounded to bf16 as the GEMM's operands."""
    p, v = np.empty(n, dtype=np.float32), np.empty(dv, dtype=np.float32)
    for i in range(n):
        p[i] = sc[i * te + te - 1]
    copy(v, vh[(te - 1) * vr :], dv)
    for a in (p, v):
        bits = a.view(np.uint32)
        for i in range(a.size):
            bits[i] = np.uint32(round_bits(bits[i]) << 16)
    for i in range(n):
        out = o[i * orow : i * orow + dv]
        for x in range(dv):
            out[x] += p[i] * v[x]


@jit(**_OPTS)
def _pack_head(p, job, like):  # type: ignore[no-untyped-def]
    """(batch, head) ``p``'s K and V as the bf16 GEMM's B (`rvm.kernels.bf16gemm.
    panel_index`): K's rows for ``q @ k^T``, V's columns (of pairs of keys) for ``p @ v``."""
    t, d, dv, kw, vw = job[_T], job[_D], job[_DV], job[_KW], job[_VW]
    at = job[_PACKED] + 4 * p * (kw + vw)
    bi, hi = p // job[_H], p % job[_H]
    kr, vr = job[_KR], job[_VR]
    kh = parfor.array_at(job[_K] + 4 * (bi * job[_KB] + hi * job[_KH]), (t, kr), like)[:, :d]
    pack_rows(kh, d, nb.carray(_words_at(at), (panels(t), (d + 1) // 2, NR)))
    _pack_columns(job[_V] + 4 * (bi * job[_VB] + hi * job[_VH]), t, dv, vr, at + 4 * kw)


@jit(**_OPTS)
def _pack_columns(v, t, dv, vr, out):  # type: ignore[no-untyped-def]
    """V's ``t`` rows of ``dv`` floats (``vr`` apart, at address ``v``) as the bf16 GEMM's B
    for ``p @ v`` at address ``out``: word ``(q, p, j)`` holds the pair of keys ``2p`` and
    ``2p + 1`` (0 past ``t``) of column ``q * NR + j`` (0 past ``dv``), as `pack_rows` of V
    transposed would, but read along V's rows, a vector of columns at a time."""
    t2, count = (t + 1) // 2, panels(dv)
    words = nb.carray(_words_at(out), (count, t2, NR))
    words[count - 1] = 0  # the last panel's padding
    ones = (np.float32(1.0), np.float32(0.0), np.float32(1.0), np.float32(0.0))
    for p in range(t2):
        lo = v + 4 * 2 * p * vr
        pair = 1 if 2 * p + 1 < t else 0
        hi = lo + 4 * vr if pair else lo  # the last key alone: its row read twice, not past V
        for q in range(count):
            at = out + 4 * (q * t2 + p) * NR
            pair_words(lo + 4 * q * NR, hi + 4 * q * NR, at, min(NR, dv - q * NR), pair, 1,
                       ones, 0)  # fmt: skip


@jit(**_OPTS, inline="always")
def _piece(p, job, like, scores, values):  # type: ignore[no-untyped-def]
    """Piece ``p``: one (batch, head)'s band of query rows (see the module docstring), its
    products of several rows ``scores`` and ``values`` (`_f32_scores`, `_bf16_scores`...:
    each task compiles its own, so the float32 one builds no bf16 code)."""
    h, s, t, d, dv, size = job[_H], job[_S], job[_T], job[_D], job[_DV], job[_SIZE]
    bh, band = p // job[_BANDS], p % job[_BANDS]
    bi, hi = bh // h, bh % h
    r0 = band * job[_ROWS]
    n = min(job[_ROWS], s - r0)
    if n <= 0:
        return
    params = parfor.array_at(job[_PARAMS], (3,), like)
    scale, fill, empty = params[0], params[1], params[2]
    mb, mh, ms, mt = job[_MB], job[_MH], job[_MS], job[_MT]
    count = mb * mh * ms * mt
    mask_add = parfor.array_at(job[_MASK], (count,), like)  # read only when adding
    mask_sel = nb.carray(_bytes_at(job[_MASK]), (count,))  # read only when selecting
    base = ((min(bi, mb - 1) * mh + min(hi, mh - 1)) * ms) * mt
    te = _live_keys(job, mask_add, mask_sel, base, r0, n)
    head = job[_PACKED] + 4 * bh * (job[_KW] + job[_VW])  # its packed K, then V (bf16)
    qr, kr, vr = job[_QR], job[_KR], job[_VR]
    q = _rows(job[_Q] + size * (bi * job[_QB] + hi * job[_QH] + r0 * qr), n, d, qr, like)
    kh = _rows(job[_K] + size * (bi * job[_KB] + hi * job[_KH]), t, d, kr, like)
    vh = _rows(job[_V] + size * (bi * job[_VB] + hi * job[_VH]), t, dv, vr, like)
    orow = job[_OR]  # o's rows: ``orow`` apart (heads merged: the heads' columns between)
    o = _rows(job[_OUT] + size * (bi * job[_OB] + hi * job[_OH] + r0 * orow), n, dv, orow, like)
    sc = np.empty(n * te, dtype=o.dtype)
    w = np.empty(d if s < SMALL_ROWS else 0, dtype=o.dtype)  # `_dots`' scratch
    if s < SMALL_ROWS:  # the head's rows, not the band's: a band's cut changes no answer
        _dots(q, kh, sc, n, te, d, w, qr, kr)
    else:
        scores(q, kh, sc, n, te, d, head, qr, kr)
    rows_at = np.empty(n, dtype=np.int64)
    for i in range(n):
        rows_at[i] = base + min(r0 + i, ms - 1) * mt
    _mask_rows(sc, n, te, mask_add, mask_sel, rows_at, 1 if mt > 1 else 0, job[_SELECT] != 0,
               scale, fill)  # fmt: skip
    kept = np.empty(n, dtype=np.bool_)
    for i in range(n):
        kept[i] = _softmax_row(sc[i * te : (i + 1) * te])
        if not kept[i]:
            sc[i * te : (i + 1) * te] = 0
    if s < SMALL_ROWS:
        _row_sums(sc, vh, o, n, te, dv, vr, orow)
    else:
        values(sc, vh, o, n, te, t, dv, head + 4 * job[_KW], vr, orow)
    for i in range(n):
        if not kept[i]:
            o[i * orow : i * orow + dv] = empty


@jit(**_OPTS)
def _f32_scores(q, kh, sc, n, te, d, head, qr, kr):  # type: ignore[no-untyped-def]
    """``sc = q @ kh[:te].T`` for ``n`` rows: rvm's float32 GEMM on K transposed."""
    kt = _transposed(kh, te, d, kr)
    blas.product(sc, NO_TRANS, parfor.address(q), qr, parfor.address(kt), te,
                 parfor.address(sc), te, n, te, d, 0.0)  # fmt: skip
    alive(kt)


@jit(**_OPTS)
def _f32_values(sc, vh, o, n, te, t, dv, head, vr, orow):  # type: ignore[no-untyped-def]
    """``o = sc @ vh[:te]`` for ``n`` rows (``orow`` apart): rvm's float32 GEMM."""
    blas.product(o, NO_TRANS, parfor.address(sc), te, parfor.address(vh), vr,
                 parfor.address(o), orow, n, dv, te, 0.0)  # fmt: skip


@jit(**_OPTS)
def _bf16_scores(q, kh, sc, n, te, d, head, qr, kr):  # type: ignore[no-untyped-def]
    """``sc = q @ k.T`` for ``n`` rows: the bf16 GEMM on the rounded rows of ``q`` and the
    head's packed K at ``head``."""
    d2 = (d + 1) // 2
    qp = np.empty(n * d2, dtype=np.uint32)
    rows = nb.carray(floats_at(parfor.address(q)), (n, qr))[:, :d]  # strided when qr > d
    pair_rows(rows, qp.reshape((n, d2)))
    walk(parfor.address(qp), d2, 0, n, head, 4 * d2, 4 * NR, NR, 0, 0,
         parfor.address(sc), te, te, d2, 0, 0, 0, 0)  # fmt: skip
    alive(qp)


@jit(**_OPTS)
def _bf16_values(sc, vh, o, n, te, t, dv, head, vr, orow):  # type: ignore[no-untyped-def]
    """``o = sc @ v`` for ``n`` rows (``orow`` apart): the bf16 GEMM on the rounded
    probabilities and the head's packed V at ``head``."""
    te2 = (te + 1) // 2
    pp = np.empty(n * te2, dtype=np.uint32)
    pair_rows(sc.reshape((n, te)), pp.reshape((n, te2)))
    # the pairs of keys both read: not the last live key's when its pair's other key is
    # a hidden one, whose value (a cache slot not written yet) may be anything
    whole = te2 if te == t or te % 2 == 0 else te2 - 1
    if whole == 0:
        for i in range(n):
            o[i * orow : i * orow + dv] = 0
    walk(parfor.address(pp), te2, 0, n, head, 4 * ((t + 1) // 2), 4 * NR,
         NR, 0, 0, parfor.address(o), orow, dv, whole, 0, 0, 0, 0)  # fmt: skip
    alive(pp)
    if whole < te2:  # the last key alone
        _add_last_key(sc, vh, o, n, te, dv, vr, orow)


def _task(p, like, data):  # type: ignore[no-untyped-def]
    """`_piece` with float32 products as a pool task."""
    _piece(p, parfor.job(data), like, _f32_scores, _f32_values)


def _bf16_task(p, like, data):  # type: ignore[no-untyped-def]
    """`_piece` with bf16 products as a pool task; in the packing phase, head ``p``'s K and
    V in bf16 (`_pack_head`)."""
    job = parfor.job(data)
    if job[_PHASE] == 0:
        _pack_head(p, job, like)
    else:
        _piece(p, job, like, _bf16_scores, _bf16_values)


parfor.export_task("attention", _task)
parfor.export_task("attention_bf16", _bf16_task)
FIRST_RUN_TASKS = ("attention", "gemm", *sgemm.TASKS)
"""The library tasks (`rvm.kernels.parfor`) a float32 attention runs on its first calls: its
own, and the GEMM's its products run (`blas.product`), each path of rvm's GEMM by the rows a
piece takes (a generation's prompt and its steps of one query: `rvm.jit.first_run`)."""
FIRST_RUN_TASKS_BF16 = ("attention_bf16",)
"""Those of one with bf16 products: its own (the bf16 GEMM's walk is in it)."""
_run, _run_bf16 = parfor.runner("attention"), parfor.runner("attention_bf16")
_call, _call_bf16 = parfor.caller("attention"), parfor.caller("attention_bf16")


@jit(**_OPTS)
def _bands(b, h, s, t, work, itemsize):  # type: ignore[no-untyped-def]
    """(rows, bands, parts): the pieces the pool wants for ``work`` multiply-adds (1: run
    in the calling thread), and how to cut each head's ``s`` query rows -- bands whose scores
    fit `SCORE_BYTES`, more of them when there are fewer (batch, head) pairs than pieces."""
    parts = parfor.threads()
    if parts < 2 or work < 2 * blas.SPLIT_MIN_MNK or workpool.busy():
        parts = 1
    else:
        parts = min(blas.PIECES_PER_THREAD * parts, work // blas.SPLIT_MIN_MNK)
    bands = max(-(-s // max(1, SCORE_BYTES // (max(t, 1) * itemsize))), 1)
    wanted = -(-parts // (b * h))
    bands = max(bands, min(wanted, max(1, s // MIN_ROWS)))
    rows = -(-s // bands)
    return rows, -(-s // rows), parts


@jit(**_OPTS)
def attention(q, k, v, mask, out, scale, fill, masked_row, select, bf16=False, merged=False):  # type: ignore[no-untyped-def]  # noqa: E501
    """``out = softmax(scale * q @ k^T, masked) @ v`` per (batch, head): q (b, h, s, d),
    k (b, h, t, d), v (b, h, t, dv), out (b, h, s, dv) (``merged``: (b, s, h, dv), the heads
    side by side in each row, as ``transpose(out, (0, 2, 1, 3))``), C-contiguous arrays of one
    float dtype; ``mask`` (4-d, each axis 1 or the scores' (b, h, s, t)) is added (of that dtype)
    or, with ``select``, keeps a score where it holds and puts ``fill`` elsewhere (bool). A
    row whose every score is -inf gives ``masked_row``. ``bf16`` (float32): both products in
    bf16 with float32 sums (the module docstring). Checks the shapes first.

    Raises:
        ValueError: The shapes do not agree.
    """
    b, h, s, d = q.shape
    t, dv = k.shape[2], v.shape[3]
    if k.shape != (b, h, t, d) or v.shape != (b, h, t, dv):
        raise ValueError("attention: q, k, v, the mask and the output do not agree")
    ob, oh, orow = _out_layout(h, s, dv, merged)
    layout = np.array([h * s * d, s * d, d, h * t * d, t * d, d, h * t * dv, t * dv, dv, ob,
                       oh, orow])  # fmt: skip
    _attend(parfor.address(q), parfor.address(k), parfor.address(v), layout, mask, out,
            (b, h, s, t, d, dv), scale, fill, masked_row, select, bf16, merged)  # fmt: skip


@jit(**_OPTS, inline="always")
def _out_layout(h, s, dv, merged):  # type: ignore[no-untyped-def]
    """The output's strides (elements) of batches, heads and rows: (b, h, s, dv), or
    (b, s, h, dv) ``merged``."""
    return (s * h * dv, dv, h * dv) if merged else (h * s * dv, s * dv, dv)


@jit(**_OPTS)
def attention_heads(q, k, v, mask, out, scale, fill, masked_row, select, bf16, d, at, merged=False):  # type: ignore[no-untyped-def]  # noqa: E501
    """`attention` on heads read in place from 3-d (batch, seq, columns) C-contiguous arrays
    (`rvm.op.attention`'s ``heads``): head ``i`` of q is its columns ``at[0] + i * d`` to
    ``at[0] + (i + 1) * d``, of k ``at[1] + i * d`` on, of v ``at[2] + i * dv`` on (``dv``:
    out's last axis); q, k and v may be one array (a merged product's). ``out`` is
    (batch, heads, seq, dv), or (batch, seq, heads, dv) ``merged``.

    Raises:
        ValueError: The shapes do not agree.
    """
    if merged:
        b, s, h, dv = out.shape
    else:
        b, h, s, dv = out.shape
    t, cq, ck, cv = k.shape[1], q.shape[2], k.shape[2], v.shape[2]
    if (
        q.shape[:2] != (b, s)
        or k.shape[0] != b
        or v.shape[:2] != (b, t)
        or min(d, at[0], at[1], at[2]) < 0
        or at[0] + h * d > cq
        or at[1] + h * d > ck
        or at[2] + h * dv > cv
    ):
        raise ValueError("attention: the heads' columns, the mask and the output do not agree")
    ob, oh, orow = _out_layout(h, s, dv, merged)
    layout = np.array([s * cq, d, cq, t * ck, d, ck, t * cv, dv, cv, ob, oh, orow])
    size = out.itemsize
    _attend(parfor.address(q) + size * at[0], parfor.address(k) + size * at[1],
            parfor.address(v) + size * at[2], layout, mask, out, (b, h, s, t, d, dv), scale,
            fill, masked_row, select, bf16, merged)  # fmt: skip


@jit(**_OPTS)
def _attend(qa, ka, va, layout, mask, out, dims, scale, fill, masked_row, select, bf16, merged):  # type: ignore[no-untyped-def]  # noqa: E501
    """`attention` on q, k and v at the addresses ``qa``, ``ka``, ``va`` whose batches,
    heads and rows are ``layout``'s strides apart (elements: q's three, k's, v's, then the
    output's); ``dims`` (b, h, s, t, d, dv). Checks the mask and the output ((b, h, s, dv),
    or (b, s, h, dv) ``merged``)."""
    b, h, s, t, d, dv = dims
    mb, mh, ms, mt = mask.shape
    if (
        out.shape != ((b, s, h, dv) if merged else (b, h, s, dv))
        or not (mb == 1 or mb == b)
        or not (mh == 1 or mh == h)
        or not (ms == 1 or ms == s)
        or not (mt == 1 or mt == t)
    ):
        raise ValueError("attention: q, k, v, the mask and the output do not agree")
    if b * h * s * dv == 0:
        return
    if t == 0:
        out[...] = masked_row
        return
    params = np.empty(3, dtype=out.dtype)
    params[0], params[1], params[2] = scale, fill, masked_row
    skip = (not select) or fill <= DEAD
    rows, bands, parts = _bands(b, h, s, t, b * h * s * t * (d + dv), out.itemsize)
    job = np.empty(_JOB, dtype=np.int64)
    job[0], job[_Q], job[_K], job[_V] = _JOB, qa, ka, va
    for i in range(12):
        job[_QB + i] = layout[i]
    job[_MASK], job[_OUT], job[_PARAMS] = (
        parfor.address(mask),
        parfor.address(out),
        parfor.address(params),
    )
    job[_B], job[_H], job[_S], job[_T], job[_D], job[_DV] = b, h, s, t, d, dv
    job[_MB], job[_MH], job[_MS], job[_MT] = mb, mh, ms, mt
    job[_SELECT], job[_SKIP] = 1 if select else 0, 1 if skip else 0
    job[_ROWS], job[_BANDS], job[_SIZE] = rows, bands, out.itemsize
    packing = bf16 and out.itemsize == 4 and s >= SMALL_ROWS
    kw = panels(t) * ((d + 1) // 2) * NR if packing else 0
    vw = panels(dv) * ((t + 1) // 2) * NR if packing else 0
    packed = np.empty(b * h * (kw + vw), dtype=np.uint32)
    job[_PACKED], job[_KW], job[_VW] = parfor.address(packed) if packing else 0, kw, vw
    for phase in range(0 if packing else 1, 2):
        job[_PHASE] = phase
        pieces = b * h * bands if phase == 1 else b * h
        if pieces == 1 or parts == 1:
            for p in range(pieces):
                if packing:
                    _call_bf16(out, p, job)
                else:
                    _call(out, p, job)
        elif packing:
            _run_bf16(out, pieces, job)
        else:
            _run(out, pieces, job)
    alive(params)
    alive(packed)
