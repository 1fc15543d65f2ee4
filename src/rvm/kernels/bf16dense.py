"""bf16 products with a constant weight packed once in pair panels, the epilogue in the tile.

The bf16 counterpart of `rvm.kernels.packed`: a constant weight, as B ``(k, n)``, is packed
once, when the executable is built (`rvm.transform.to_bf16`,
`rvm.kernels.reference.bf16.pack_pairs`), into column panels of bf16 *pairs*: int32 ``(panels,
k2, panel)``, word ``(q, p, j)`` holding B's values ``(2p, q * panel + j)`` (low half) and
``(2p + 1, q * panel + j)`` (high half; 0 past ``k``), the last panel padded with zeros. That
is what ``vdpbf16ps`` takes as B, and each panel's pair rows are one unit-stride stream: the
micro-kernel (`rvm.kernels.bf16gemm.micro`, its row stride the panel's width) reads them as
they lie, with no packing per call. The input is rounded (to nearest even) once per call into
pair words, row-major ``(m, k2)``: the GEMM's A, each step broadcasting a pair of a row.

C comes out row-major ``(m, n)`` as the model wants it (no transpose), in tiles of `MR` rows
by `NR` columns; the bias, activation and residual (`rvm.kernels.packed`'s epilogue) run on
each tile after its last depth block, in the thread that computed it, while it is in cache.

- `dense(x, w, out, n, bias, act, residual=None)`: ``out[m, n] = act(bf16(x) @ B + bias) +
  residual``; cut on rvm's pool along the panels (or C's rows when the panels are few);
  checks every shape first and raises `ValueError` naming what disagrees.
"""

from __future__ import annotations

import numpy as np

from rvm.kernels import amx, parfor, workpool
from rvm.kernels.bf16 import pair_rows
from rvm.kernels.bf16gemm import MR, SPLIT_MIN, band
from rvm.kernels.cblas import address
from rvm.kernels.epilogue import tile as _epilogue
from rvm.kernels.gemmshape import BLOCK_BYTES
from rvm.kernels.jitting import jit
from rvm.kernels.packed import ACTIVATIONS

__all__ = ["dense"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
DEPTH2 = 512
"""The deepest block in pairs: a band's `MR` rows of A take 16 KB of L1 at most. The depth
is cut into equal blocks of at most this: BERT's 768 values (384 pairs) are one block, its
3072 three of 512 pairs, each tile of C stored once a block."""


@jit(**_OPTS)
def _panels(a, k2, bp, panel, c, m, n, first, last, bias, act, res):  # type: ignore[no-untyped-def]  # noqa: E501
    """``C[:m, cols] = act(A[:m] @ B[:, cols] + bias) + R`` for the columns of panels
    ``first`` to ``last`` (exclusive) of the pair panels at ``bp``, on addresses (A pair
    words ``(m, k2)``, C and R row-major ``(m, n)``; ``bias``/``res`` 0: none), in the calling
    thread: blocks of panels that fit half of L2, each depth block, each band of A across the
    block, tile after tile (`rvm.kernels.bf16gemm.band`); after the last depth block, each
    tile's epilogue."""
    if amx.AMX and panel % amx.TILE == 0:  # the panels' columns in one walk: A packed once
        at = 4 * first * panel
        width = min(n, last * panel) - first * panel
        at_bias, at_res = bias + at if bias != 0 else 0, res + at if res != 0 else 0
        amx.walk(a, k2, 0, m, bp + at * k2, 4 * k2, panel, panel, 0, c + at, n, width, k2, 0,
                 at_bias, act, at_res, 1, None)  # fmt: skip
        return
    blocks = -(-k2 // DEPTH2)
    step = -(-k2 // blocks)
    block = max(1, BLOCK_BYTES // (4 * step * panel))
    epilogue = bias != 0 or act != 0 or res != 0
    for q0 in range(first, last, block):
        q1 = min(last, q0 + block)
        for p0 in range(0, k2, step):
            kc2 = min(step, k2 - p0)
            add = 1 if p0 > 0 else 0
            final = epilogue and p0 + kc2 == k2
            for i0 in range(0, m, MR):
                rows = min(MR, m - i0)
                a_band, c_band = a + 4 * (i0 * k2 + p0), c + 4 * i0 * n
                for q in range(q0, q1):
                    width = min(panel, n - q * panel)
                    at_b = bp + 4 * (q * k2 * panel + p0 * panel)
                    at_c = c_band + 4 * q * panel
                    band(kc2, a_band, k2, at_b, 4, panel, 0, at_c, n, add, rows, width)
                    if final:
                        at_bias = bias + 4 * q * panel if bias != 0 else 0
                        at_res = at_c - c + res if res != 0 else 0
                        _epilogue(at_c, n, rows, width, at_bias, act, at_res)


# A job (int64): its length; A's (pair words), w's and out's addresses; m, k2, n, the panel
# width; the pieces' panels (along n) or rows (along m), and whether along n; the bias's
# address (0: none), the activation's index and the residual's address (0: none).
_JOB = 13


def _task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a packed bf16 product (a pool task, `rvm.kernels.parfor`)."""
    job = parfor.job(data)
    pa, pw, po, m, k2, n, panel = job[1], job[2], job[3], job[4], job[5], job[6], job[7]
    step, along_n, bias, act, res = job[8], job[9], job[10], job[11], job[12]
    panels = -(-n // panel)
    if along_n:
        last = min(panels, (p + 1) * step)
        _panels(pa, k2, pw, panel, po, m, n, p * step, last, bias, act, res)
    else:
        rows = min(step, m - p * step)
        at_a, at_o = pa + 4 * p * step * k2, po + 4 * p * step * n
        at_r = res + 4 * p * step * n if res != 0 else 0
        _panels(at_a, k2, pw, panel, at_o, rows, n, 0, panels, bias, act, at_r)


parfor.export_task("bf16_packed_dense", _task)
FIRST_RUN_TASKS = ("bf16_packed_dense",)
"""The library task every product on a bf16 pair-packed weight runs (`rvm.kernels.parfor`)."""
_run = parfor.runner("bf16_packed_dense")
_call = parfor.caller("bf16_packed_dense")


@jit(**_OPTS)
def _cut(m, k2, n, panel):  # type: ignore[no-untyped-def]
    """(pieces, step, along_n): pieces along the panels (``step`` panels a piece) or, when
    the panels are fewer than the pieces, along C's rows (``step`` a multiple of `MR`)."""
    panels = -(-n // panel)
    threads = parfor.threads()
    work = m * n * k2
    if threads < 2 or work < 2 * SPLIT_MIN or workpool.busy():
        return 1, panels, True
    parts = parfor.pieces(threads, work // SPLIT_MIN)
    if amx.AMX:  # a piece per thread: each piece's walk reads its A once a block of columns
        parts = min(parts, threads)
    if panels >= parts or m < 2 * MR * threads:
        step = -(-panels // min(parts, panels))
        return -(-panels // step), step, True
    band = -(-m // parts)
    step = -(-band // MR) * MR
    return -(-m // step), step, False


@jit(**_OPTS)
def _check(x, w, out, n, bias, act, residual):  # type: ignore[no-untyped-def]
    m, k = x.shape
    panels, k2, panel = w.shape
    if k2 != (k + 1) // 2 or out.shape[0] != m or out.shape[1] != n or panel <= 0:
        raise ValueError(
            "bf16 packed dense: the shapes do not match: expected x (m, k), the pair-packed "
            "weight (panels, (k + 1) // 2, panel) and out (m, n)"
        )
    if n < 0 or panels != -(-n // panel):
        raise ValueError("bf16 packed dense: the weight's panels do not cover n columns")
    if bias.shape[0] != 0 and bias.shape[0] != n:
        raise ValueError("bf16 packed dense: the bias must have n values (or none)")
    if act < 0 or act >= len(ACTIVATIONS):
        raise ValueError("bf16 packed dense: unknown activation index")
    if residual is not None and (residual.shape[0] != m or residual.shape[1] != n):
        raise ValueError("bf16 packed dense: the residual must have out's shape (m, n)")


@jit(**_OPTS)
def dense(x, w, out, n, bias, act, residual=None):  # type: ignore[no-untyped-def]
    """``out[m, n] = act(bf16(x[m, k]) @ B + bias) + residual`` for float32 C-contiguous
    ``x`` and ``out``, ``w`` the pair panels ``(panels, k2, panel)`` int32 of B's ``n``
    columns, ``bias`` ``(n,)`` or empty (none), ``act`` an index of `ACTIVATIONS`,
    ``residual`` None or a C-contiguous ``(m, n)`` float32 array."""
    _check(x, w, out, n, bias, act, residual)
    m, k = x.shape
    k2, panel = w.shape[1], w.shape[2]
    if m == 0 or n == 0:
        return
    # A's words in a float32 array: the pool's task takes it as its ``like`` argument, which
    # keeps it alive until the product is done (Numba frees an array after its last use)
    a = np.empty((m, k2), dtype=np.float32)
    if k2 > 0:
        pair_rows(np.ascontiguousarray(x), a.view(np.uint32))
    else:
        out[:, :] = 0
    res = address(residual, 0) if residual is not None else 0
    at_bias = address(bias, 0) if bias.shape[0] > 0 else 0
    if k2 == 0:
        for i in range(m):
            at_res = res + 4 * i * n if res != 0 else 0
            _epilogue(address(out, i * n), n, 1, n, at_bias, act, at_res)
        return
    parts, step, along_n = _cut(m, k2, n, panel)
    job = np.empty(_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3] = _JOB, address(a, 0), address(w, 0), address(out, 0)
    job[4], job[5], job[6], job[7], job[8] = m, k2, n, panel, step
    job[9], job[10], job[11], job[12] = 1 if along_n else 0, at_bias, act, res
    if parts == 1:
        _call(a, 0, job)
    else:
        _run(a, parts, job)
