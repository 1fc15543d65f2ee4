"""GEMM and the matmul anchor for jit kernels: rvm's float32 kernel or NumPy's BLAS, split
over rvm's thread pool.

Float32 products with B as it is (not transposed) and beta 0 or 1 -- every convolution's --
run rvm's own kernel (`rvm.kernels.sgemm`, the CPU's full vector width whatever BLAS
was told); the rest run NumPy's BLAS.

Numba's ``np.dot`` reaches BLAS through SciPy's bundled OpenBLAS, a second library beside
NumPy's with its own thread pool, and on this build its ``sgemm`` costs 75-100 us for any
product of two to sixteen rows by a 784 x 128 float32 matrix (NumPy's: 25-55 us, one thread);
strided operands are copied first. So float matmul and convolution call NumPy's BLAS directly
(`rvm.kernels.cblas`, the raw binding):

- `gemm(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta)` computes, row-major,
  ``C[m, n] = A[m, k] @ B[k, n] + beta * C`` where ``A`` starts at flat element ``ia`` of the
  C-contiguous array ``a`` with row stride ``lda`` (likewise ``B``, ``C``): the im2col
  blocks of a convolution. `gemm_split` is the same cut into pieces that run at
  once on the pool.
- `matmul(a, b, out, b_t)` computes ``out = a @ b`` (``a @ b.T`` when ``b_t``) on 2-d
  C-contiguous arrays, with the BLAS call that costs least for the shape (see `matmul`).

Convolutions' segmented GEMM (B's rows through a table, C's columns in runs, many products
in one call) is `rvm.kernels.segments`, on this module's window check and split rule
(`window_fits`, `split_parts`).

Large products are cut into pieces, one single-threaded call each -- where rvm's kernel
packs B a piece, into bands of rows and runs of columns by the floats each cut moves
(`packed_cut`), elsewhere along the longer output side -- run as a job of
`rvm.kernels.workpool`: the calling thread and the pool's
helpers take them. rvm splits its GEMMs itself and OpenBLAS runs on one thread
(`rvm.kernels.threads`): OpenBLAS's own threading pays off only on large products,
one at a time per process, and its threads spin on after each call, taking the core the
next kernel wants. OpenBLAS's batched GEMM (``cblas_sgemm_batch``) is not used: it crashed
on products of up to 1e6 multiply-adds (its small-matrix path), and the pool does its job.

Every entry point checks that each element it touches lies inside its array before BLAS runs,
so a wrong offset or shape raises instead of reading or writing out of bounds.
`AVAILABLE` is False when NumPy's BLAS does not export the ILP64 CBLAS interface; the
lowering then uses ``np.dot``.
"""

from __future__ import annotations

import numba as nb
from llvmlite import ir
from numba.core import types as nt
from numba.extending import intrinsic

from rvm.kernels import cblas, entry, gemv, parfor, sgemm, workpool
from rvm.kernels.cblas import AVAILABLE, NO_TRANS, TRANS, address, require_operands
from rvm.kernels.jitting import jit
from rvm.kernels.parfor import PIECES_PER_THREAD, even, pieces

__all__ = [
    "AVAILABLE",
    "PIECES_PER_THREAD",
    "blas_threads",
    "gemm",
    "gemm_epilogue",
    "gemm_split",
    "matmul",
    "packed_cut",
    "product",
    "split_parts",
    "window_fits",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

FIRST_RUN_TASKS = ("gemv", "gemv_row", "gemm", *sgemm.TASKS)
"""The tasks a float32 matmul of shapes unknown at compile time may take on its first runs
(`rvm.kernels.parfor`): every method's of one row and of many (`first_run_tasks`)."""

COLUMN, ROW_GEMVS, ROW, ROW_BLAS, ROWS, GEMM = range(6)
"""The methods `method` picks for `matmul`; the library tasks each runs are `METHOD_TASKS`'."""

METHOD_TASKS = (
    ("gemv",),
    ("gemv",),
    ("gemv_row",),
    ("gemv",),
    ("rows_axpy",),
    ("gemm",),
)
"""The library tasks (`rvm.kernels.parfor`) a float32 `matmul` by each method runs: a GEMV's,
rvm's own row kernel's, the row loop's, the GEMM's (and, B as it is, the task of the path of
rvm's GEMM its rows take: `sgemm.gemm_tasks`, added by `first_run_tasks`; B transposed:
BLAS's, no path)."""

# A product is split only when each piece keeps at least this many multiply-adds (m * n * k):
# a piece of 1 << 20 took 20-40 us on a Zen 4 core (16 lanes), a helper's wake-up a few. A rule
# of the vector width, so that a piece is the same time of work on every CPU: with AVX2's 8
# lanes 1 << 19 (a 1x1 convolution of 2.1M multiply-adds took 92 us on a Zen 3 core, unsplit).
SPLIT_MIN_MNK = (1 << 16) * sgemm.LANES
SPLIT_ALIGN = 16  # pieces start on multiples of this many columns (or rows)
# A matrix-vector product is split only when each piece reads at least this many elements of
# the matrix (memory-bound: 256 KB of float32 take 15-30 us).
SPLIT_MIN_GEMV = 1 << 16
# A float32 product of one row whose B has at most this many bytes, half of one core's L2, runs
# rvm's own kernel (`rvm.kernels.gemv`) in the calling thread: its sums stay in registers (784 x
# 128 B: 3-15% faster than OpenBLAS's sgemv, 128 x 10: 3x). A larger B streams from L3 or
# memory, where OpenBLAS's row-by-row pass reads it better and the pool splits it.
ROW_GEMV_BYTES = sgemm.BLOCK_BYTES


@jit(**_OPTS)
def window_fits(start, rows, cols, ld, size):  # type: ignore[no-untyped-def]
    """Whether a rows x cols window at ``start`` with row stride ``ld`` fits in ``size``."""
    if rows == 0 or cols == 0:
        return True
    return start >= 0 and cols <= ld and start + (rows - 1) * ld + cols <= size


@jit(**_OPTS)
def _check_windows(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k):  # type: ignore[no-untyped-def]
    if not (
        window_fits(ia, m, k, lda, a.size)
        and window_fits(ib, k, n, ldb, b.size)
        and window_fits(ic, m, n, ldc, c.size)
    ):
        raise IndexError("gemm: a matrix window lies outside its array")


@jit(**_OPTS)
def _scale(c, ic, ldc, m, n, beta):  # type: ignore[no-untyped-def]
    """``C = beta * C`` (a product of depth 0)."""
    flat = c.reshape(c.size)
    for i in range(m):
        for j in range(n):
            flat[ic + i * ldc + j] *= beta


@jit(**_OPTS)
def _product_left(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta):  # type: ignore[no-untyped-def]
    """What `gemm` and `gemm_split` do before multiplying: type and bound checks, and an empty
    product done (depth 0 scales C); True when a product of m, n, k > 0 is left."""
    require_operands(a, b, c)
    if m <= 0 or n <= 0:
        return False
    _check_windows(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k)
    if k == 0:
        _scale(c, ic, ldc, m, n, beta)
        return False
    return True


@jit(**_OPTS, inline="always")
def _own(like, tb, beta):  # type: ignore[no-untyped-def]
    """Whether `_product` runs rvm's kernel (`rvm.kernels.sgemm`) rather than BLAS: float32,
    B as it is, beta 0 or 1."""
    return sgemm.applies(like) and tb == NO_TRANS and (beta == 0.0 or beta == 1.0)


@jit(**_OPTS, inline="always")  # one level less to build (`sgemm.sgemm_segments`)
def _product(like, tb, m, n, k, a, lda, b, ldb, beta, c, ldc, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
    """``C = A @ op(B) + beta * C`` on addresses in the calling thread, m, n, k > 0: rvm's
    own kernel (`rvm.kernels.sgemm`) for float32 with B as it is and beta 0 or 1, applying
    the ``epilogue`` (`sgemm.sgemm_segments`; `sgemm.NO_EPILOGUE` for BLAS), BLAS otherwise."""
    if _own(like, tb, beta):
        sgemm.sgemm_segments(a, lda, b, ldb, 0, c, ldc, m, k, 1, n, 0, 0, beta != 0.0, 0, 0, 0,
                             epilogue)  # fmt: skip
    else:
        cblas.gemm(like, NO_TRANS, tb, m, n, k, a, lda, b, ldb, beta, c, ldc)


@jit(**_OPTS)
def gemm(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta):  # type: ignore[no-untyped-def]
    """``C[m, n] = A[m, k] @ B[k, n] + beta * C`` on strided windows of flat arrays, one BLAS
    call in the calling thread."""
    if not _product_left(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta):
        return
    pa, pb, pc = address(a, ia), address(b, ib), address(c, ic)
    _product(c, NO_TRANS, m, n, k, pa, lda, pb, ldb, beta, pc, ldc, sgemm.NO_EPILOGUE)


@jit(**_OPTS)
def blas_threads():  # type: ignore[no-untyped-def]
    """How many threads `gemm_split` spreads a product over: the pool's (the caller and its
    helpers)."""
    return workpool.threads()


@intrinsic
def _bits(typingctx, value):  # type: ignore[no-untyped-def]
    """The int64 bits of ``value`` as a float64 (how a job carries a float)."""
    if not isinstance(value, (nt.Float, nt.Integer)):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        as_double = context.cast(builder, args[0], value, nt.float64)
        return builder.bitcast(as_double, ir.IntType(64))

    return nt.int64(value), codegen


@intrinsic
def _float(typingctx, bits):  # type: ignore[no-untyped-def]
    """The float64 whose bits are the int64 ``bits`` (`_bits` back)."""
    if not isinstance(bits, nt.Integer):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(context.cast(builder, args[0], bits, nt.int64), ir.DoubleType())

    return nt.float64(bits), codegen


@jit(**_OPTS)
def split_parts(work, min_work):  # type: ignore[no-untyped-def]
    """How many pieces a product of ``work`` is worth: up to `PIECES_PER_THREAD` per thread,
    each of ``min_work`` at least, a multiple of the threads when there are as many (`even`);
    1 with one thread, too little work or a busy pool."""
    threads = workpool.threads()
    if threads < 2 or work < 2 * min_work or workpool.busy():
        return 1
    return pieces(threads, work // min_work)


@jit(**_OPTS)
def _pieces(side, work, min_work):  # type: ignore[no-untyped-def]
    """How many pieces to cut ``side`` rows or columns of a product of ``work`` into: of at
    least ``min_work`` each (`split_parts`) and `SPLIT_ALIGN` rows or columns, a multiple of
    the threads (`even`), each an equal share in whole steps of `SPLIT_ALIGN`
    (`parfor.piece_range`); 1 when it is not worth it or the pool is busy with another job.
    (Steps of `SPLIT_ALIGN` rounded up left a piece fewer: 224 rows in 8 pieces of 32 were 7,
    4 on one thread and 3 on the other.)"""
    parts = split_parts(work, min_work)
    if parts == 1:
        return 1
    return even(min(parts, max(1, side // SPLIT_ALIGN)), workpool.threads())


@jit(**_OPTS)
def packed_cut(m, n, k, parts, m_most, n_most, batches):  # type: ignore[no-untyped-def]
    """(bands, column runs): how to cut a product ``C[m, n] = A[m, k] @ B[k, n]`` whose B is
    packed a piece (`sgemm.packs`) into at most ``parts`` pieces, at most ``m_most`` bands of
    C's rows by ``n_most`` runs of its columns: of the cuts into the most pieces that keep the
    threads even (``batches`` times the pieces a multiple of them, `even`; where none does,
    of all cuts), the one that moves the fewest floats (`gemmcut.moved`: bands pack B again,
    column runs read A again). Both `_split` (a GEMM's) and `rvm.kernels.segments` (a
    convolution's) cut by it. On a Zen 3 core (2 threads, CPU in the pool's pieces) bands
    alone took 1.05-1.3 times the CPU of the cut it picks on 1x1 convolutions on 14 x 14 and
    MatMuls with 1.3-5 times as many rows as columns; bands alone, picked on ones with 32,
    took 0.97-0.99 of the others."""
    threads = workpool.threads()
    best, best_m, best_n, best_moved = -1, 1, 1, 0
    for mp in range(1, min(parts, max(1, m_most)) + 1):
        for np_ in range(1, min(max(1, n_most), parts // mp) + 1):
            pieces = mp * np_
            # Even cuts first (none may be: 3 batches on 2 threads), then the most pieces.
            if batches * pieces % threads == 0 or batches * pieces < threads:
                pieces += parts
            if pieces < best:
                continue
            floats = sgemm.moved(m, n, k, mp, np_)
            if pieces > best or floats < best_moved:
                best, best_m, best_n, best_moved = pieces, mp, np_, floats
    return best_m, best_n


# A GEMM job (int64): its length, tb, the A, B, C addresses, lda, ldb, ldc, m, n, k, beta's
# bits, the runs of C's columns a band is cut into (`packed_cut`), the pieces, the itemsize,
# the epilogue (`gemm_epilogue`: the bias's address or 0, its step a row, the activation, the
# residual's offset from C in floats or 0).
_GEMM_JOB = 19


def _gemm_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a split GEMM (a pool task, `rvm.kernels.parfor`)."""
    job = parfor.job(data)
    tb, a, b, c, lda, ldb, ldc = job[1], job[2], job[3], job[4], job[5], job[6], job[7]
    m, n, k, beta = job[8], job[9], job[10], _float(job[11])
    n_parts, parts, size = job[12], job[13], job[14]
    bias, bias_step, act, res = job[15], job[16], job[17], job[18]
    i0, i1 = parfor.piece_range(p // n_parts, parts // n_parts, m, SPLIT_ALIGN)
    j0, j1 = parfor.piece_range(p % n_parts, n_parts, n, SPLIT_ALIGN)
    at_b = j0 * ldb if tb == TRANS else j0  # B's columns are rows of B^T
    at_a, at_c = a + i0 * lda * size, c + (i0 * ldc + j0) * size
    epilogue = (bias + 4 * i0 * bias_step if bias != 0 else 0, bias_step, act, res)
    _product(like, tb, i1 - i0, j1 - j0, k, at_a, lda, b + at_b * size, ldb, beta, at_c, ldc,
             epilogue)  # fmt: skip


# A GEMV job (int64): its length, trans, A's address, lda, rows, cols, x's and y's addresses,
# the pieces (`_pieces`), the itemsize.
_GEMV_JOB = 10


def _gemv_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a split GEMV: an equal share of the outputs (a pool task)."""
    job = parfor.job(data)
    trans, a, lda, rows, cols, x, y = job[1], job[2], job[3], job[4], job[5], job[6], job[7]
    parts, size = job[8], job[9]
    lo, hi = parfor.piece_range(p, parts, cols if trans == TRANS else rows, SPLIT_ALIGN)
    if trans == TRANS:  # outputs are A's columns
        cblas.gemv(like, TRANS, rows, hi - lo, a + lo * size, lda, x, y + lo * size)
    else:
        at = a + lo * lda * size
        cblas.gemv(like, NO_TRANS, hi - lo, cols, at, lda, x, y + lo * size)


# A one-row job (int64): its length, x's, B's and C's addresses, B's row stride, k, n.
_ROW_JOB = 7


_row_job = parfor.stack_job(_ROW_JOB)
_gemv_job = parfor.stack_job(_GEMV_JOB)


def _gemv_row_task(p, like, data):  # type: ignore[no-untyped-def]
    """``C[:n] = x[:k] @ B[:k, :n]`` (`rvm.kernels.gemv.row`) on the job at ``data`` (a task,
    built when a small product of one row first runs, not compiled into every kernel)."""
    job = parfor.job(data)
    gemv.row(job[5], job[1], job[2], job[4], job[3], job[6])


parfor.export_task("gemm", _gemm_task)
parfor.export_task("gemv", _gemv_task)
parfor.export_task("gemv_row", _gemv_row_task)
_call_gemv_row = parfor.caller("gemv_row")
_run_gemm = parfor.runner("gemm")
# An unsplit product runs the task too, in the calling thread: the code of the GEMM (rvm's
# own float32 kernel, `rvm.kernels.sgemm`) is then built once, as the task, when first run,
# not compiled again into every kernel calling `matmul` or `gemm_split`.
_call_gemm = parfor.caller("gemm")
_run_gemv = parfor.runner("gemv")
_call_gemv = parfor.caller("gemv")


@jit(**_OPTS)
def _split(tb, a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
    """``C = A @ op(B) + beta * C`` (``tb``: B's CBLAS transpose enum), cut into pieces on the
    pool when large (`_pieces`), the ``epilogue`` (`gemm_epilogue`) applied; no checks, m, n,
    k > 0. Where rvm's kernel packs B a piece (`_packs`), into bands and runs of columns by
    what each moves (`packed_cut`); elsewhere along the longer output side."""
    if _packs(c, tb, m, beta):
        parts = split_parts(m * n * k, SPLIT_MIN_MNK)
        m_parts, n_parts = packed_cut(m, n, k, parts, m // SPLIT_ALIGN, n // SPLIT_ALIGN, 1)
        parts = m_parts * n_parts
    else:
        along_n = n >= m
        parts = _pieces(n if along_n else m, m * n * k, SPLIT_MIN_MNK)
        n_parts = parts if along_n else 1
    pa, pb, pc = address(a, ia), address(b, ib), address(c, ic)
    job = _gemm_stack_job()
    _gemm_job(job, tb, pa, lda, pb, ldb, pc, ldc, m, n, k, beta, n_parts, parts, c.itemsize,
              epilogue)  # fmt: skip
    if parts == 1:  # the whole product, in this thread
        _call_gemm(c, 0, job)
    else:
        _run_gemm(c, parts, job)


_gemm_stack_job = parfor.stack_job(_GEMM_JOB)


@jit(**_OPTS, inline="always")
def _packs(like, tb, m, beta):  # type: ignore[no-untyped-def]
    """Whether `_product` runs rvm's kernel on its packed path (`sgemm.takes_packed`) for a
    product of ``m`` rows (one run, no epilogue: as `_split` cuts it)."""
    return _own(like, tb, beta) and sgemm.takes_packed(m, 1, 1, 0, 0, sgemm.NO_EPILOGUE)


@jit(**_OPTS)
def _gemm_job(job, tb, pa, lda, pb, ldb, pc, ldc, m, n, k, beta, n_parts, parts, itemsize, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501  # fmt: skip
    """Fills ``job`` (`_gemm_stack_job`, in the caller's frame: the GEMM ends before it
    returns) with a GEMM on addresses (`_GEMM_JOB`), cut into ``parts`` pieces: bands of its
    rows by ``n_parts`` runs of its columns, applying the ``epilogue`` (`gemm_epilogue`;
    `sgemm.NO_EPILOGUE`)."""
    job[0], job[1], job[2], job[3], job[4] = _GEMM_JOB, tb, pa, pb, pc
    job[5], job[6], job[7], job[8], job[9], job[10] = lda, ldb, ldc, m, n, k
    job[11], job[12], job[13], job[14] = _bits(beta), n_parts, parts, itemsize
    job[15], job[16], job[17], job[18] = epilogue


@jit(**_OPTS)
def product(like, tb, pa, lda, pb, ldb, pc, ldc, m, n, k, beta):  # type: ignore[no-untyped-def]
    """``C[m, n] = A @ op(B) + beta * C`` on the row-major matrices at the int64 addresses
    ``pa``, ``pb``, ``pc`` (row strides ``lda``, ``ldb``, ``ldc``; ``tb``: B's CBLAS transpose
    enum) of the dtype of the array ``like``, in the calling thread: rvm's float32 kernel or
    BLAS, as `gemm`. Through the GEMM task, so a library task calling it (`rvm.kernels.
    attention`) does not compile the GEMM again. No checks; m, n, k > 0."""
    job = _gemm_stack_job()
    _gemm_job(job, tb, pa, lda, pb, ldb, pc, ldc, m, n, k, beta, 1, 1, like.itemsize,
              sgemm.NO_EPILOGUE)  # fmt: skip
    _call_gemm(like, 0, job)


@jit(**_OPTS)
def gemm_split(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta):  # type: ignore[no-untyped-def]
    """`gemm`, cut into pieces that run at once on the pool (`_split`), one single-threaded
    call each (with one thread, a busy pool or pieces below `SPLIT_MIN_MNK`, one call)."""
    if not _product_left(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta):
        return
    _split(NO_TRANS, a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta, sgemm.NO_EPILOGUE)


@jit(**_OPTS)
def gemm_epilogue(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
    """`gemm_split` with beta 0 and a convolution's ``epilogue`` applied as the float32 GEMM
    stores (where `rvm.kernels.sgemm.fuses` holds for one plain run of depth ``k``; the caller
    checks): (the address of the bias of C's first row or 0, the floats from a row's bias to
    the next's, 1 or 0, the activation, the floats from C to the residual, of C's layout, or
    0). C = ``act(A @ B + bias + residual)``; the caller checks the bias and the residual span
    what C does."""
    if not _product_left(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, 0.0):
        return
    _split(NO_TRANS, a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, 0.0, epilogue)


@jit(**_OPTS)
def _gemv(trans, a, lda, rows, cols, x, ix, y, iy):  # type: ignore[no-untyped-def]
    """``y[iy:] = op(A) @ x[ix:]`` for the rows x cols matrix at the start of ``a``, cut
    along the outputs into pieces on the pool when large; no checks, rows, cols > 0."""
    outputs = cols if trans == TRANS else rows
    parts = _pieces(outputs, rows * cols, SPLIT_MIN_GEMV)
    pa, px, py = address(a, 0), address(x, ix), address(y, iy)
    job = _gemv_job()
    job[0], job[1], job[2], job[3], job[4] = _GEMV_JOB, trans, pa, lda, rows
    job[5], job[6], job[7], job[8], job[9] = cols, px, py, parts, a.itemsize
    if parts == 1:  # the whole product, in this thread (the task's code, built once)
        _call_gemv(a, 0, job)
    else:
        _run_gemv(a, parts, job)


# Fewer rows than this multiply without GEMM, whose packing of B is a fixed cost (single
# thread, 784 x 128 float32 B: GEMM 26-56 us for 1-3 rows, one GEMV per row 6-27 us, the
# row loop 7-22 us; from 4 rows GEMM is within 20% of the loop and threads help it).
SMALL_ROWS = 4
# The rows a product of rows known only at run time (a batch) is guessed to take on its first
# runs after a row (`first_run_tasks`): a small batch, the quickstart's and the benchmarks'.
BATCH_GUESS = 8


@jit(nogil=True, cache=True, fastmath={"contract", "reassoc", "nsz"})
def _rows_axpy(a, b, out):  # type: ignore[no-untyped-def]
    """``out = a @ b`` for a few rows of ``a``: B streams through once, four rows of B per
    pass, each pass adding into the output rows (which stay in L1); the inner loop runs
    along B's contiguous rows and vectorizes."""
    m, k = a.shape
    n = b.shape[1]
    out[:, :] = 0
    k4 = k - k % 4
    for p in range(0, k4, 4):
        for i in range(m):
            a0, a1, a2, a3 = a[i, p], a[i, p + 1], a[i, p + 2], a[i, p + 3]
            for j in range(n):
                out[i, j] += a0 * b[p, j] + a1 * b[p + 1, j] + a2 * b[p + 2, j] + a3 * b[p + 3, j]
    for p in range(k4, k):
        for i in range(m):
            a0 = a[i, p]
            for j in range(n):
                out[i, j] += a0 * b[p, j]


# A row-loop job (int64): its length, a's, b's and out's addresses, m, k, n.
_ROWS_JOB = 7
_rows_job = parfor.stack_job(_ROWS_JOB)


def _rows_axpy_task(p, like, data):  # type: ignore[no-untyped-def]
    """`_rows_axpy` on the operands of the job at ``data`` (a task, built when a product of
    a few rows first runs, not compiled again into every kernel calling `matmul`)."""
    job = parfor.job(data)
    m, k, n = job[4], job[5], job[6]
    a = parfor.array_at(job[1], (m, k), like)
    b = parfor.array_at(job[2], (k, n), like)
    _rows_axpy(a, b, parfor.array_at(job[3], (m, n), like))


parfor.export_task("rows_axpy", _rows_axpy_task)
_call_rows_axpy = parfor.caller("rows_axpy")


@jit(**_OPTS, inline="always")
def _shapes_agree(a, b, out, b_t):  # type: ignore[no-untyped-def]
    """Whether ``a`` (m, k), ``b`` (k, n; (n, k) when ``b_t``) and ``out`` (m, n) agree."""
    m, k = a.shape
    n = b.shape[0] if b_t else b.shape[1]
    return (b.shape[1] if b_t else b.shape[0]) == k and out.shape[0] == m and out.shape[1] == n


@jit(**_OPTS)
def matmul(a, b, out, b_t):  # type: ignore[no-untyped-def]
    """``out = a @ b`` (``a @ b.T`` when ``b_t``) on 2-d C-contiguous arrays, by the method
    its shape takes (`method`). GEMVs and GEMMs are split over the pool when large. The row
    kernel, the row loop, the GEMV and the GEMM are tasks, built when first run
    (`rvm.kernels.parfor.caller`), not compiled into each caller; kernels call it through its
    entry point (`matmul_call`), not compiled into them either.
    """
    require_operands(a, b, out)
    m, k = a.shape
    n = b.shape[0] if b_t else b.shape[1]
    if not _shapes_agree(a, b, out, b_t):
        raise ValueError(
            "matmul: the operand and output shapes do not match: expected a (m, k), b (k, n) "
            "(b (n, k) when transposed) and out (m, n)"
        )
    if m == 0 or n == 0:
        return
    if k == 0:
        out[:, :] = 0
        return
    how = method(m, k, n, b_t, sgemm.applies(out))
    if how == COLUMN:  # b is one contiguous column either way
        _gemv(NO_TRANS, a, k, m, k, b, 0, out, 0)
    elif how == ROW_GEMVS:
        for i in range(m):
            _gemv(NO_TRANS, b, k, n, k, a, i * k, out, i * n)
    elif how == ROW:
        job = _row_job()
        job[0], job[1], job[2], job[3] = _ROW_JOB, address(a, 0), address(b, 0), address(out, 0)
        job[4], job[5], job[6] = n, k, n
        _call_gemv_row(out, 0, job)
    elif how == ROW_BLAS:
        _gemv(TRANS, b, n, k, n, a, 0, out, 0)
    elif how == ROWS:
        job = _rows_job()
        job[0], job[1], job[2], job[3] = _ROWS_JOB, address(a, 0), address(b, 0), address(out, 0)
        job[4], job[5], job[6] = m, k, n
        _call_rows_axpy(a, 0, job)
    else:
        tb = TRANS if b_t else NO_TRANS
        _split(tb, a, 0, k, b, 0, k if b_t else n, out, 0, n, m, n, k, 0.0, sgemm.NO_EPILOGUE)


@jit(**_OPTS)
def method(m, k, n, b_t, f32):  # type: ignore[no-untyped-def]
    """How `matmul` computes ``a @ b`` (``a @ b.T`` when ``b_t``) of m x k times k x n, all
    > 0 (``f32``: float32 operands), by what costs least (measured, single thread): a GEMV
    for a single column (`COLUMN`, B one contiguous column either way) or row, as NumPy
    does: rvm's own for a float32 row times a B of up to `ROW_GEMV_BYTES` (`ROW`, B in L2),
    BLAS's otherwise (`ROW_BLAS`); one GEMV per row of a transposed B for fewer than
    `SMALL_ROWS` rows (`ROW_GEMVS`), the row loop `_rows_axpy` for those of B as it is
    (`ROWS`), GEMM from there on (`GEMM`)."""
    if n == 1:
        return COLUMN
    if b_t and m < SMALL_ROWS:
        return ROW_GEMVS
    if m == 1:
        return ROW if f32 and k * n * 4 <= ROW_GEMV_BYTES else ROW_BLAS
    return ROWS if m < SMALL_ROWS else GEMM


def _entry(a, b, c, dims, params):  # type: ignore[no-untyped-def]
    """`matmul` on a (m, k), b (k, n; (n, k) when ``params[0]`` is not 0: transposed) and out
    (m, n), 2-d arrays of one dtype: 0 done, 1 the shapes disagree."""
    d, b_t = nb.carray(dims, 6), nb.carray(params, 1)[0] != 0
    x, y, out = nb.carray(a, (d[0], d[1])), nb.carray(b, (d[2], d[3])), nb.carray(c, (d[4], d[5]))
    if not _shapes_agree(x, y, out, b_t):
        return 1
    matmul(x, y, out, b_t)
    return 0


entry.export("matmul", _entry)
# What kernels call (`rvm.kernels.entry.caller`): ``matmul_call((a, b, out), (b_t,))``, 0 done:
# a kernel links the symbol of `matmul`'s code built once, not `matmul` and the levels below it
# optimized again into its own (0.1-0.3 CPU-s of LLVM a kernel).
matmul_call = entry.caller("matmul", 1)


def first_run_tasks(m: int | None, k: int, n: int, b_t: bool) -> tuple[str, ...]:
    """The library tasks a float32 `matmul` of this shape runs (`method`, `METHOD_TASKS`):
    what its first run builds, worth building beforehand (`rvm.kernels.parfor.prefetch`).
    ``m`` None (rows known only at run time, a batch): a row's and those of a batch of
    `BATCH_GUESS` rows, after the path of rvm's GEMM other batches take (`sgemm.gemm_tasks`):
    what a run may never take comes first, as the background helpers, building from the far
    end of the list, reach it last, and this process takes only what it runs
    (`rvm.kernels.parfor.prefetch`). (A batch of a band of rows or less reads B in place, of
    more packs it: with the packed path guessed, the quickstart's batch of 8 waited 2.3 s
    for the band's path on an AVX-512 machine, where a helper built the other first.)"""
    if m is None:
        likely = first_run_tasks(1, k, n, b_t) + first_run_tasks(BATCH_GUESS, k, n, b_t)
        band, more = max(SMALL_ROWS, sgemm.MR), max(SMALL_ROWS, sgemm.MR + 1)
        both = first_run_tasks(band, k, n, b_t) + first_run_tasks(more, k, n, b_t)
        return tuple(dict.fromkeys((*(t for t in both if t not in likely), *likely)))
    if m * k * n == 0:
        return ()
    how = method.py_func(m, k, n, b_t, True)
    if how == GEMM and not b_t:
        return (*METHOD_TASKS[how], *sgemm.gemm_tasks(m))
    return METHOD_TASKS[how]
