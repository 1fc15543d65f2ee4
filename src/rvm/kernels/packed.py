"""float32 products with a constant weight packed once into panels, as ONNX Runtime's MLAS does.

`rvm.kernels.sgemm` reads B's rows where they are: a product with a wide B (768 x 3072 in
BERT's feed-forward) then walks rows 12 KB apart, a new page every few rows, for every band of
A. A constant weight is instead packed once, when the executable is built
(`rvm.transform.pack_weights`), into column panels each ``panel`` wide: ``(panels, k,
panel)`` float32, panel ``p`` holding B's columns ``p * panel`` to ``(p + 1) * panel`` (the
last padded with zeros), its ``k`` rows one contiguous stream. The GEMM then reads each
panel's rows one after the other (`rvm.kernels.sgemm`'s micro-kernel, its row stride the
panel's width), blocks of panels that fit half of L2 at a time.

- `panel_width()`: the panel width for this CPU, the micro-kernel's widest tile
  (`rvm.kernels.sgemm.NR`: three vectors on AVX-512, two on AVX2). A panel of another width
  (a weight packed on another machine) is still multiplied right, in tiles of the kernel's.
- `pack(weight, transposed, panel)`: a 2-d ``(k, n)`` weight (``(n, k)`` when
  ``transposed``, as ``dense``'s) in panels (NumPy, at build time).
- `dense(x, w, out, n)`: ``out[m, n] = x[m, k] @ B`` where ``w`` is B packed; cut on rvm's
  pool along the panels (or C's rows when the panels are few); a few rows take a row loop
  over the panels rather than the micro-kernel's tile of `MR` rows. Checks every shape first.
"""

from __future__ import annotations

import numpy as np

from rvm.kernels import parfor, sgemm, workpool
from rvm.kernels.cblas import address
from rvm.kernels.jitting import jit

__all__ = ["dense", "pack", "packed_shape", "panel_width"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
SMALL_ROWS = 4  # fewer rows run the row loop (the tile computes `MR` rows whatever m is)
SPLIT_MIN_MNK = 1 << 20  # multiply-adds a piece keeps at least when a product is split
SPLIT_MIN_ROWS_LOOP = 1 << 16  # weights a row-loop piece reads at least
PIECES_PER_THREAD = 4


def panel_width() -> int:
    """The panel width this CPU's GEMM reads best: its micro-tile's columns."""
    return sgemm.NR


def packed_shape(k: int, n: int, panel: int) -> tuple[int, int, int]:
    """The packed array's shape for a ``(k, n)`` weight: ``(panels, k, panel)``."""
    return (-(-n // panel), k, panel)


def pack(weight: np.ndarray, transposed: bool, panel: int) -> np.ndarray:
    """``weight`` as B ``(k, n)`` (its transpose when ``transposed``: ``(n, k)``) in column
    panels ``(panels, k, panel)`` float32, the last padded with zeros."""
    if weight.ndim != 2 or panel <= 0:
        raise ValueError(f"pack: expects a 2-d weight and panel > 0, got {weight.shape}, {panel}")
    b = weight.T if transposed else weight
    k, n = b.shape
    out = np.zeros((-(-n // panel) * panel, k), dtype=np.float32)
    out[:n] = b.T
    return np.ascontiguousarray(out.reshape(-1, panel, k).transpose(0, 2, 1))


@jit(**_OPTS)
def _panels(a, lda, bp, k, panel, c, ldc, m, n, first, last):  # type: ignore[no-untyped-def]
    """``C[:m, cols] = A[:m, :k] @ B[:, cols]`` for the columns of panels ``first`` to
    ``last`` (exclusive) of the packed B at ``bp``, on addresses, in the calling thread: blocks
    of panels that fit half of L2, each depth block, each band of A across the block."""
    kc_max = min(sgemm.KC, k)
    block = max(1, sgemm.BLOCK_BYTES // (4 * kc_max * panel))
    for q0 in range(first, last, block):
        q1 = min(last, q0 + block)
        for p0 in range(0, k, sgemm.KC):
            kc = min(sgemm.KC, k - p0)
            add = 1 if p0 > 0 else 0
            for i0 in range(0, m, sgemm.MR):
                rows = min(sgemm.MR, m - i0)
                a_band, c_band = a + 4 * (i0 * lda + p0), c + 4 * i0 * ldc
                for q in range(q0, q1):
                    width = min(panel, n - q * panel)
                    at_b = bp + 4 * (q * k * panel + p0 * panel)
                    sgemm._tiles(kc, a_band, lda, at_b, panel, 0, c_band + 4 * q * panel, ldc,
                                 add, rows, width)  # fmt: skip


@jit(**_OPTS)
def _rows(a, lda, bp, k, panel, c, ldc, m, n, first, last):  # type: ignore[no-untyped-def]
    """`_panels` for a few rows: one row at a time (`sgemm._micro_row`, a GEMV's tile), the
    whole depth at once, each panel streamed once per row (in L2 for the next row)."""
    for q in range(first, last):
        width = min(panel, n - q * panel)
        at_b = bp + 4 * q * k * panel
        for j0 in range(0, width, sgemm.NR):
            cols = min(sgemm.NR, width - j0)
            vectors = (cols + sgemm.LANES - 1) // sgemm.LANES
            tail = cols - (vectors - 1) * sgemm.LANES
            for i in range(m):
                sgemm._micro_row(k, a + 4 * i * lda, lda, at_b + 4 * j0, panel, 0,
                                 c + 4 * (i * ldc + q * panel + j0), ldc, 0, 1, vectors, tail,
                                 sgemm.LANES, sgemm.LANES, 0)  # fmt: skip


# A packed-product job (int64): its length; x's, w's and out's addresses; m, k, n, the panel
# width; the pieces' panels (along n) or rows (along m), and whether along n.
_JOB = 10


def _task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a packed product (a pool task, `rvm.kernels.parfor`)."""
    job = parfor.job(data)
    px, pw, po, m, k, n, panel = job[1], job[2], job[3], job[4], job[5], job[6], job[7]
    step, along_n = job[8], job[9]
    panels = -(-n // panel)
    if m < SMALL_ROWS:
        _rows(px, k, pw, k, panel, po, n, m, n, p * step, min(panels, (p + 1) * step))
    elif along_n:
        _panels(px, k, pw, k, panel, po, n, m, n, p * step, min(panels, (p + 1) * step))
    else:
        rows = min(step, m - p * step)
        at_x, at_o = px + 4 * p * step * k, po + 4 * p * step * n
        _panels(at_x, k, pw, k, panel, at_o, n, rows, n, 0, panels)


parfor.export_task("packed_dense", _task)
_run = parfor.runner("packed_dense")
_call = parfor.caller("packed_dense")  # unsplit: the code built once, as the task


@jit(**_OPTS)
def _cut(m, k, n, panel):  # type: ignore[no-untyped-def]
    """(pieces, step, along_n): the pieces of a product worth the pool, along the panels
    (``step`` panels a piece) or, when they are fewer than the pieces, C's rows (``step`` a
    multiple of `sgemm.MR`)."""
    panels = -(-n // panel)
    threads = workpool.threads()
    work, least = m * n * k, SPLIT_MIN_MNK
    if m < SMALL_ROWS:
        work, least = n * k, SPLIT_MIN_ROWS_LOOP
    if threads < 2 or work < 2 * least or workpool.busy():
        return 1, panels, True
    parts = min(PIECES_PER_THREAD * threads, work // least)
    if panels >= parts or m < 2 * sgemm.MR * threads:
        step = -(-panels // min(parts, panels))
        return -(-panels // step), step, True
    band = -(-m // parts)
    step = -(-band // sgemm.MR) * sgemm.MR
    return -(-m // step), step, False


@jit(**_OPTS)
def dense(x, w, out, n):  # type: ignore[no-untyped-def]
    """``out[m, n] = x[m, k] @ B`` for float32 C-contiguous ``x`` and ``out``, ``w`` the
    packed B ``(panels, k, panel)`` (`pack`) of ``n`` columns."""
    m, k = x.shape
    panels, kw, panel = w.shape
    if kw != k or out.shape[0] != m or out.shape[1] != n or panel <= 0:
        raise ValueError(
            "packed dense: the shapes do not match: expected x (m, k), the packed weight "
            "(panels, k, panel) and out (m, n)"
        )
    if n < 0 or panels != -(-n // panel):
        raise ValueError("packed dense: the packed weight's panels do not cover n columns")
    if m == 0 or n == 0:
        return
    if k == 0:
        out[:, :] = 0
        return
    parts, step, along_n = _cut(m, k, n, panel)
    job = np.empty(_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3] = _JOB, address(x, 0), address(w, 0), address(out, 0)
    job[4], job[5], job[6], job[7], job[8], job[9] = m, k, n, panel, step, along_n
    if parts == 1:
        _call(out, 0, job)
    else:
        _run(out, parts, job)
