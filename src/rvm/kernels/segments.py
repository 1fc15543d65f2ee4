"""The segmented GEMM of convolutions: ``C = A @ B`` for float32 with B's rows gathered
through a table and C's columns in runs, for many (image, group) products in one call.

`gemm_segments` is what `rvm.kernels.conv` calls for its pointwise, strided and tap methods:
B's row ``r`` is at ``b[table[r]]`` (a convolution reads its taps in place, no column matrix)
or ``r * ldb`` with no table, the output's columns come in ``segments`` runs of ``width`` (one
per output row), and each batch (an image's group) takes its own A, B and C. Its products are
rvm's own float32 kernel (`rvm.kernels.sgemm.sgemm_segments`), cut on rvm's thread pool
(`rvm.kernels.workpool`) into batches, bands of C's rows, runs of segments and of columns; each
piece is a task of `rvm.kernels.parfor`, built when first run. It checks every window it will touch
first, as the GEMM of `rvm.kernels.blas` does, with the same rules (`blas.window_fits`,
`blas.split_parts`, `blas.packed_cut`).
"""

from __future__ import annotations

import numpy as np

from rvm.kernels import parfor, sgemm, workpool
from rvm.kernels.blas import SPLIT_MIN_MNK, packed_cut, split_parts, window_fits
from rvm.kernels.blocks import kept
from rvm.kernels.cblas import address, require_operands
from rvm.kernels.jitting import alive, jit

__all__ = ["SHARED_TASKS", "gemm_segments"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

# A segmented GEMM job (int64): its length; the A, B, table (0: none), C addresses; lda, ldb,
# ldc, m, k, segments, width, b_step, c_step; the batches: how many, the groups A cycles
# through, A's step per group, B's and C's per batch; the pieces a batch is cut into along its
# rows, its segments and their columns, and per batch; B's and C's positions a row when the
# run wraps (`sgemm.sgemm_segments`; 0: it does not); the epilogue (`sgemm.sgemm_segments`):
# the bias's address (0: none) and its step a row, the activation, the residual's address (0:
# none), of C's layout; the cut's rounds (`_share`) along the rows, segments and columns.
(_A, _B, _TABLE, _C, _LDA, _LDB, _LDC, _M, _K, _SEGS, _WIDTH, _BSTEP, _CSTEP, _BATCHES, _GROUPS,
 _AGROUP, _BBATCH, _CBATCH, _MPARTS, _SPARTS, _WPARTS, _PER_BATCH, _WRAP, _COLS, _BIAS,
 _BIAS_STEP, _ACT, _RES, _MROUND, _SROUND, _WROUND) = range(1, 32)  # fmt: skip
_SEGMENTS_JOB = 32


@jit(**_OPTS, inline="always")
def _share(i, parts, total, align, rounds):  # type: ignore[no-untyped-def]
    """Share ``i`` of ``parts`` of a side of ``total`` in whole steps of ``align``: guided
    (`parfor.guided_range`, ``rounds`` pieces claimed together) where ``rounds`` > 0, equal
    (`parfor.piece_range`) otherwise."""
    if rounds > 0:
        return parfor.guided_range(i, parts, rounds, total, align)
    return parfor.piece_range(i, parts, total, align)


@jit(**_OPTS)
def _guided_rounds(threads, batches, m_parts, s_parts, w_parts):  # type: ignore[no-untyped-def]
    """(rows, segments, columns): the rounds `_share` cuts each side in (0: equal shares).
    One batch: its outermost side cut in more than one part is cut guided
    (`parfor.guided_range`), its pieces claimed ``threads`` at a time spanning that many
    shares of it (a share of the rows spans every run of columns), so the last pieces claimed
    are the smallest; several batches: equal (their pieces interleave in claim order)."""
    if batches != 1:
        return 0, 0, 0
    if m_parts > 1:
        return max(1, -(-threads // (s_parts * w_parts))), 0, 0
    if s_parts > 1:
        return 0, max(1, -(-threads // w_parts)), 0
    return 0, 0, threads


@jit(**_OPTS, inline="always")
def _segments_piece(p, job):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a split segmented GEMM: one batch's band of C's rows by a range of its
    segments and of their columns, in whole bands and tiles, equal shares or guided ones
    (`_share`)."""
    batch, piece = p // job[_PER_BATCH], p % job[_PER_BATCH]
    cols = job[_SPARTS] * job[_WPARTS]
    m0, m1 = _share(piece // cols, job[_MPARTS], job[_M], sgemm.MR, job[_MROUND])
    s0, s1 = _share((piece % cols) // job[_WPARTS], job[_SPARTS], job[_SEGS], 1, job[_SROUND])
    j0, j1 = _share(piece % job[_WPARTS], job[_WPARTS], job[_WIDTH], sgemm.NR, job[_WROUND])
    lda, ldc, b_step, c_step = job[_LDA], job[_LDC], job[_BSTEP], job[_CSTEP]
    at_a = job[_A] + 4 * ((batch % job[_GROUPS]) * job[_AGROUP] + m0 * lda)
    at_b = job[_B] + 4 * (batch * job[_BBATCH] + s0 * b_step + j0)
    wrap, cols = job[_WRAP], job[_COLS]
    at_c = job[_C] + 4 * (batch * job[_CBATCH] + m0 * ldc + s0 * c_step)
    at_c, phase = sgemm.wrapped(at_c, j0, wrap, cols, 0)
    rows, runs, width = m1 - m0, s1 - s0, j1 - j0
    bias, bias_step, res = job[_BIAS], job[_BIAS_STEP], job[_RES]
    if bias != 0:  # this batch's group's channels, from the band's first
        bias += 4 * bias_step * ((batch % job[_GROUPS]) * job[_M] + m0)
    epilogue = (bias, bias_step, job[_ACT], (res - job[_C]) // 4 if res != 0 else 0)
    sgemm.sgemm_segments(at_a, lda, at_b, job[_LDB], job[_TABLE], at_c, ldc, rows, job[_K], runs,
                         width, b_step, c_step, False, wrap, cols, phase, epilogue)  # fmt: skip


def _segments_task(p, like, data):  # type: ignore[no-untyped-def]
    """`_segments_piece` as a pool task."""
    _segments_piece(p, parfor.job(data))


parfor.export_task("gemm_segments", _segments_task)
_run_segments = parfor.runner("gemm_segments")
# Unsplit, the task runs in the calling thread: its code is built once, as the GEMM's.
_call_segments = parfor.caller("gemm_segments")


# A product on B packed once for all its bands (`_shared`; int64): its length; A's address,
# lda, B's, ldb, the table's (0: none), C's, ldc, m, k, C's columns, B's run and its step, the
# packed panels' address, the pieces packing them, the bands, the threads (the bands' guided
# cut), the epilogue (4: `_segments_piece`'s, the residual as floats from C), the packing
# pieces done.
(_SA, _SLDA, _SB, _SLDB, _STABLE, _SC, _SLDC, _SM, _SK, _SWIDTH, _SRUN, _SBSTEP, _SPACKED,
 _SPACKS, _SBANDS, _STHREADS, _SBIAS, _SBIAS_STEP, _SACT, _SRES, _SDONE) = range(1, 22)  # fmt: skip
_SHARED_JOB = 22


def _shared_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a product on B packed once (`_shared`): the first ``job[_SPACKS]`` pack
    a range of B's panels each, the rest (once those are done) a band of C's rows each on all
    of them (guided: `parfor.guided_range`)."""
    job = parfor.job(data)
    packs, k, width = job[_SPACKS], job[_SK], job[_SWIDTH]
    if p < packs:
        panels = -(-width // sgemm.NR)
        q0, q1 = parfor.piece_range(p, packs, panels, 1)
        j0 = q0 * sgemm.NR
        cols = min(width, q1 * sgemm.NR) - j0
        sgemm.pack_whole(job[_SB], job[_SLDB], job[_STABLE], k, j0, cols, job[_SRUN],
                         job[_SBSTEP], job[_SPACKED])  # fmt: skip
        workpool.add_at(parfor.address(job) + 8 * _SDONE, 1)
        return
    workpool.wait_until(parfor.address(job) + 8 * _SDONE, packs)  # claimed before: done soon
    m0, m1 = parfor.guided_range(p - packs, job[_SBANDS], job[_STHREADS], job[_SM], sgemm.MR)
    lda, ldc, bias, bias_step = job[_SLDA], job[_SLDC], job[_SBIAS], job[_SBIAS_STEP]
    at_bias = bias + 4 * bias_step * m0 if bias != 0 else 0
    epilogue = (at_bias, bias_step, job[_SACT], job[_SRES])
    at_a, at_c = job[_SA] + 4 * m0 * lda, job[_SC] + 4 * m0 * ldc
    sgemm.bands_on_packed(at_a, lda, job[_SPACKED], at_c, ldc, m1 - m0, k, width, job[_SRUN],
                          epilogue)  # fmt: skip


parfor.export_task("gemm_shared", _shared_task)
_run_shared = parfor.runner("gemm_shared")
SHARED_TASKS = ("gemm_shared",) if sgemm.PACK_B else ()
"""The task a product whose B packs runs at two threads or more when cut into bands
(`_shared`): what a 1x1 convolution's first run may build beside the GEMM's."""


@jit(**_OPTS)
def _shared(c, at_a, lda, at_b, ldb, at_table, at_c, ldc, m, k, width, run, b_step, bands,
            epilogue):  # type: ignore[no-untyped-def]  # fmt: skip
    """One product whose B packs (`sgemm.packs`: C's ``width`` columns end to end, B's in runs
    of ``run``, ``b_step`` apart) on the pool with B packed once, shared: its panels packed by
    a piece a thread, then ``bands`` bands of C's rows on them (`_shared_task`). Where the cut
    moves least (`blas.packed_cut`) has bands, each packed all of B again: 1x1 convolutions
    on 14 x 14 maps (resnet50's 256 to 1024 and 1024 to 256 channels) took 1.11 and 1.26
    times their one-thread CPU at two threads on a Zen 3 (its pieces' CPU), 1.01-1.02 this
    way. Every band reads all of B's panels (from L3 where they outgrow L2), as the one
    thread's bands do the blocks it packs; the results are one thread's bits (the same
    tiles, `sgemm.bands_on_packed`)."""
    threads = workpool.threads()
    panels = -(-width // sgemm.NR)
    packed = kept(panels * k * sgemm.NR, c.dtype)
    packs = min(panels, threads)
    bias, bias_step, act, res = epilogue
    job = np.empty(_SHARED_JOB, dtype=np.int64)
    job[0], job[_SA], job[_SLDA], job[_SB], job[_SLDB] = _SHARED_JOB, at_a, lda, at_b, ldb
    job[_STABLE], job[_SC], job[_SLDC], job[_SM], job[_SK] = at_table, at_c, ldc, m, k
    job[_SWIDTH], job[_SRUN], job[_SBSTEP], job[_SPACKED] = width, run, b_step, address(packed, 0)
    job[_SPACKS], job[_SBANDS], job[_STHREADS] = packs, bands, threads
    job[_SBIAS], job[_SBIAS_STEP], job[_SACT], job[_SRES] = bias, bias_step, act, res
    job[_SDONE] = 0
    _run_shared(c, packs + bands, job)
    alive(packed)  # read by the pieces through its address: not freed before


@jit(**_OPTS)
def _rows_fit(table, ldb, k, lo, hi, size):  # type: ignore[no-untyped-def]
    """Whether every one of B's ``k`` rows (at ``table[r]``, or ``r * ldb`` with no table)
    plus ``[lo, hi)`` lies in ``size`` elements."""
    if table.shape[0] == 0:
        return ldb >= 0 and lo >= 0 and (k - 1) * ldb + hi <= size
    for r in range(k):
        if table[r] + lo < 0 or table[r] + hi > size:
            return False
    return True


@jit(**_OPTS)
def gemm_segments(a, ia, lda, b, ldb, table, c, ic, ldc, m, k, segments, width, b_step, c_step,
                  batches, groups, a_group, b_batch, c_batch, wrap, cols, epilogue):  # type: ignore[no-untyped-def]  # fmt: skip
    """``C = A[m, k] @ B`` for float32 (`rvm.kernels.sgemm.sgemm_segments`), for
    each of ``batches`` products: B's row ``r`` at ``b[r * ldb]``, or at ``b[table[r]]`` when
    ``table`` (int64) is not empty; the columns in ``segments`` runs of ``width``, run ``s`` of B
    ``s * b_step`` elements on, of C ``s * c_step``. Batch ``i`` takes A ``(i % groups) *
    a_group`` elements on, B ``i * b_batch``, C ``i * c_batch``: the (image, group) pairs of a
    grouped convolution. A convolution reads its taps in place through the table, one segment
    per output row, or its whole map one segment whose positions wrap (``wrap``, ``cols``:
    B's rows of ``wrap`` positions, C's of their first ``cols``; `sgemm.sgemm_segments`).

    ``epilogue`` (`sgemm.NO_EPILOGUE`: none; only where `sgemm.fuses` holds): (the bias's
    address, 0 for none, of ``groups * m`` values or one (its step a row: 1 or 0), the
    activation, the residual's address, 0 for none): C = ``act(A @ B + bias + residual)``,
    the residual of C's layout from ``c[ic]``, applied as each tile stores. The caller checks
    the bias and the residual span what C does.

    Cut on the pool into batches, then bands of C's rows, then runs of segments when the rows
    are few, then runs of columns when the segments are few too; where the GEMM packs B
    (`sgemm.packs`), into bands and runs of columns (segments, or the columns of one run) by
    the floats each cut moves, as `blas.gemm_split` does (`blas.packed_cut`); where that cut
    of one product has bands, B is packed once for all of them instead (`_shared`). Checks
    every window first;
    float32 only (a TypingError for other dtypes); a ValueError for an epilogue where
    `sgemm.fuses` does not hold."""
    require_operands(a, b, c)
    sgemm.require(c)
    if m <= 0 or segments <= 0 or width <= 0 or batches <= 0:
        return
    if min(b_step, c_step, a_group, b_batch, c_batch, groups - 1) < 0 or (
        table.shape[0] > 0 and table.shape[0] < k
    ):
        raise IndexError("gemm_segments: a negative step or a short table")
    if wrap != 0 and not (segments == 1 and table.shape[0] > 0 and 0 < cols <= wrap):
        raise IndexError("gemm_segments: a wrapped run that is not one run of taps")
    span_b = (batches - 1) * b_batch + (segments - 1) * b_step + width
    # A wrapped run's positions in C: its whole rows' first `cols`, and its last row's.
    run_c = width if wrap == 0 else (width // wrap) * cols + min(width % wrap, cols)
    span_c = (batches - 1) * c_batch + (segments - 1) * c_step + run_c
    if not (
        window_fits(ia, m, k, lda, a.size)
        and window_fits(ia + (min(groups, batches) - 1) * a_group, m, k, lda, a.size)
        and _rows_fit(table, ldb, k, 0, span_b, b.size)
        and ic >= 0
        and ldc >= 0
        and ic + (m - 1) * ldc + span_c <= c.size
    ):
        raise IndexError("gemm_segments: a matrix window lies outside its array")
    packed = sgemm.packs(segments, width, c_step, wrap)
    if sgemm.has_epilogue(epilogue) and not sgemm.fuses(segments, width, c_step, wrap, k):
        raise ValueError("gemm_segments: an epilogue on a product the GEMM does not fuse it in")
    parts = split_parts(batches * m * k * segments * width, SPLIT_MIN_MNK)
    per_batch = max(1, -(-parts // batches))
    bands = m // (4 * sgemm.MR)
    # Columns of a run cut in whole tiles; B packed, a piece keeps whole runs (end to end in C).
    tiles = max(1, width // sgemm.NR) if segments == 1 or not packed else 1
    if packed:
        # B packed a piece (`sgemm.packs`): bands of C's rows pack all of B again each, runs
        # of its columns (whole segments, or one run's tiles: one of the two is 1) read all of
        # A again each; the cut that moves the least (`blas.packed_cut`).
        m_parts, n_parts = packed_cut(m, segments * width, k, per_batch, bands,
                                      segments * tiles, batches)  # fmt: skip
        s_parts = min(segments, n_parts)
        w_parts = n_parts // s_parts
    else:
        m_parts = max(1, min(per_batch, bands))
        s_parts = max(1, min(segments, per_batch // m_parts))
        # Too few rows and segments (a 1x1 convolution's one run, squeezenet's 16-64
        # channels): the columns of each run too.
        w_parts = max(1, min(tiles, per_batch // (m_parts * s_parts)))
    # Shares in whole bands and tiles (`parfor.piece_range`, guided: `_guided_rounds`): steps
    # rounded up to them left a last piece short (256 rows in 8: 7 of 36 and one of 4, a
    # thread taking 144 rows to the other's 112) or a piece fewer (196 columns in 8: 7 of 32).
    job = np.empty(_SEGMENTS_JOB, dtype=np.int64)
    job[0], job[_A], job[_B], job[_C] = _SEGMENTS_JOB, address(a, ia), address(b, 0), address(c, ic)
    job[_TABLE] = table.ctypes.data if table.shape[0] > 0 else 0
    job[_LDA], job[_LDB], job[_LDC], job[_M], job[_K] = lda, ldb, ldc, m, k
    job[_SEGS], job[_WIDTH], job[_BSTEP], job[_CSTEP] = segments, width, b_step, c_step
    job[_BATCHES], job[_GROUPS], job[_AGROUP] = batches, groups, a_group
    job[_BBATCH], job[_CBATCH] = b_batch, c_batch
    job[_MPARTS], job[_SPARTS], job[_WPARTS] = m_parts, s_parts, w_parts
    job[_WRAP], job[_COLS] = wrap, cols
    job[_PER_BATCH] = m_parts * s_parts * w_parts
    rounds = _guided_rounds(workpool.threads(), batches, m_parts, s_parts, w_parts)
    job[_MROUND], job[_SROUND], job[_WROUND] = rounds
    job[_BIAS], job[_BIAS_STEP], job[_ACT], job[_RES] = epilogue
    pieces = batches * job[_PER_BATCH]
    if packed and batches == 1 and m_parts > 1 and parts > 1 and wrap == 0:
        # bands would pack all of B again each: B packed once, shared (`_shared`)
        res = epilogue[3]
        shared = (epilogue[0], epilogue[1], epilogue[2], (res - job[_C]) // 4 if res else 0)
        n_bands = max(m_parts, min(parts, bands))
        _shared(c, job[_A], lda, job[_B], ldb, job[_TABLE], job[_C], ldc, m, k,
                segments * width, width, b_step, n_bands, shared)  # fmt: skip
        return
    if pieces == 1 or parts == 1:
        for p in range(pieces):
            _call_segments(c, p, job)
    else:
        _run_segments(c, pieces, job)
