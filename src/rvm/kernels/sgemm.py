"""rvm's own float32 GEMM: a register-blocked micro-kernel in LLVM IR at the CPU's vector width.

Why not BLAS: NumPy's OpenBLAS picks its kernels once per process, by CPU or by the
``OPENBLAS_CORETYPE`` the environment sets, and rvm cannot choose for the user. On the AVX-512
machine the benchmarks run on, the environment pins it to its Haswell (AVX2) kernels: 110-125
GFLOP/s on one core, where ONNX Runtime's own GEMM (MLAS, dispatched on the CPU itself) reaches
about twice that. This kernel is built by Numba for the CPU Numba targets, so it uses the
widest vectors there are (210-250 GFLOP/s on one core of that machine, against OpenBLAS's
115-125 there: `benchmarks/kernels.py`).

`sgemm(a, lda, b, ldb, c, ldc, m, n, k, accumulate)` computes, row-major on int64 addresses,
``C[m, n] = A[m, k] @ B[k, n]`` (``+= ...`` when ``accumulate``). No checks: the callers
(`rvm.kernels.blas`) check every window first.

How (a register-blocked GEMM, C's rows along A and its columns in vectors):

- the depth is cut into blocks of `KC`; for each block, each band of `MR` rows of A walks
  across C in tiles of `MR` rows by up to `NR` columns: for each of the ``KC`` steps the
  micro-kernel loads up to three vectors of B's row, broadcasts the band's ``MR`` values of A
  and adds their products into ``MR x 3`` accumulator registers (24 of the 32 AVX-512
  registers); it stores the tile once per block;
- A is not packed (BLIS packs both operands): its rows are read where they are, each a
  unit-stride stream. Packing A's band cost 4.5 times a plain copy of A, most of a GEMM with
  few columns (a 7 x 7 image's 49). A plain GEMM copies each block of B into panels of `NR`
  columns first and its tiles read them without masks (`PACK_B`: read in place, B's rows
  split vectors across lines and share L1d's sets; `_packed_blocks`, in a block kept across
  calls: `PACK_FLOATS`), B's rows by their stride or through a table, in runs whose C columns
  lie end to end (`packs`: a convolution's taps, its im2col straight into the panels); with
  few rows of C, the first band's tiles pack B as they read it in place (`IN_PLACE_ROWS`);
  without mask registers (AVX2), whole tiles store without masks (`PLAIN_STORES`);
- each step of the micro-kernel prefetches a line of A's next band into L2: a convolution's
  weight comes from memory (a model's weights outgrow L3), and its first tile waited for each
  band's rows. A 1x1 convolution on a cold weight (256 to 1024 channels on 14 x 14, 512 to
  2048 on 7 x 7) took 5-10% less time at one thread on Zen 4, resnet50 2% less on a loaded
  machine (within noise on a quieter one); on a weight in cache, the same. Not where B is
  packed (`micro_panel`): there a step is half as many multiply-adds (12 on AVX2's 16
  registers), and the prefetch's address (a division by `MR`, products, two prefetches every
  two steps, ~14 integer instructions to 24 multiply-adds) cost a Zen 3 core 1-6% of its rate
  on operands in cache at load 8, up to a quarter at load 13 (the same loop, the machine
  busier); without it resnet50's 1x1 GEMMs took 0.74-1.0 of the time on
  cold weights, 0.82-1.08 on warm ones (the hardware follows A's band rows). There the
  bands prefetch it between tiles instead (`_bands_on_panels`): before each tile, a row or
  more of the next band's depth block into L2, its rows spread over the band's tiles, a few
  dozen hints a tile outside the loop. A band of a few tiles reads its rows from memory
  where the weight is cold and the tiles few: Winograd's 16 GEMMs on 14 x 14 maps (U, 22 MB of
  inception_v2's constants, 49 columns: 4 tiles a band) took 0.77-0.85 of the time with it,
  squeezenet's conv10 (512 -> 1000 on 13 x 13) 0.92, one Zen 3 core, in the model;
- on plain rows of B (not a convolution's taps), it prefetches the row `AHEAD` tiles on along C: a
  1x1 convolution's wide input at batch 8 comes from memory in as many streams as it has rows;
- where B is packed (`FUSED_EPILOGUE`), a convolution's bias, residual and ReLU are applied
  in registers as the last depth block's tiles store (``epilogue``), C written once;
- the last tile of a row is as wide as what is left (one, two or three vectors), its last
  vector loaded and stored under a lane mask, and rows past ``m`` are not stored, so no edge
  needs a copy;
- a last tile of at most half a vector's lanes (`HALF`: 196 positions of a 14 x 14 map are
  4 tiles and 4 columns, 49 of a 7 x 7 one tile and 1) runs on half vectors: a CPU that
  executes its widest vectors as two halves (Zen 4's AVX-512) does half the work for it, one
  that does not the same. One thread, Zen 4: 1x1 convolutions' GEMMs on 14 x 14 2% faster
  (256 to 1024 channels, 944 to 925 us), on 7 x 7 5% (512 to 2048, 1162 to 1107 us);
- where B is packed, a last panel of one or two columns (`TAIL_DOTS`) runs as dot products
  along the depth instead (`microkernel.tail_dots`): a tile of one vector costs most of two.

Multiple threads: `rvm.kernels.blas` cuts large products into pieces on rvm's pool, one
call of this each.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.extending import intrinsic, overload

from rvm.kernels import parfor
from rvm.kernels.blocks import kept
from rvm.kernels.gemmcut import column_step, moved, one_block
from rvm.kernels.gemmshape import (
    BLOCK_BYTES,
    FUSED_EPILOGUE,
    IN_PLACE_ROWS,
    KC,
    LANES,
    LINE,
    MR,
    NO_EPILOGUE,
    NR,
    PACK_B,
    PACK_FLOATS,
    VECTORS,
)
from rvm.kernels.jitting import alive, jit
from rvm.kernels.microkernel import (
    floats_at,
    ints_at,
    micro,
    micro_panel,
    move_lanes,
    prefetch_l2,
    tail_dots,
)

__all__ = [  # with the shape of its tiles and blocks its callers reason about (`gemmshape`)
    "BLOCK_BYTES",
    "FUSED_EPILOGUE",
    "IN_PLACE_ROWS",
    "KC",
    "LANES",
    "MR",
    "NO_EPILOGUE",
    "NR",
    "PACK_B",
    "TAIL_DOTS",
    "VECTORS",
    "TASKS",
    "applies",
    "bands_on_packed",
    "column_step",
    "fuses",
    "gemm_tasks",
    "has_epilogue",
    "moved",
    "one_block",
    "pack_whole",
    "packs",
    "packed_path",
    "packs_in_place",
    "require",
    "sgemm",
    "sgemm_segments",
    "takes_packed",
    "wrapped",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS, inline="always")
def wrapped(c, j, wrap, cols, phase):  # type: ignore[no-untyped-def]
    """Where B's column ``j`` of a run goes in C (``c``: the run's first column's place) and
    its column in its row: with ``wrap``, B's rows of positions are ``wrap`` apart, C's
    ``cols``, and the run starts at column ``phase`` of a row (`sgemm_segments`)."""
    if wrap == 0:
        return c + 4 * j, 0
    q = phase + j
    return c + 4 * ((q // wrap) * cols + q % wrap - phase), q % wrap


@jit(**_OPTS, inline="always")  # in its two callers' tasks (`_block`, `rvm.kernels.packed`)
def band_tiles(kc, a, lda, b, rows_b, indexed, c, ldc, add, rows, width, wrap, cols, phase):  # type: ignore[no-untyped-def]  # noqa: E501
    """A's band of ``rows`` times B's first ``width`` columns, tile after tile along C's rows
    (``wrap``, ``cols``, ``phase``: see `sgemm_segments`)."""
    for j0 in range(0, width, NR):
        n = min(NR, width - j0)
        vectors = (n + LANES - 1) // LANES
        last = n - (vectors - 1) * LANES
        at_c, col0 = wrapped(c, j0, wrap, cols, phase)
        micro(kc, a, lda, b + 4 * j0, rows_b, indexed, at_c, ldc, add, rows, vectors,
               last, LANES, LANES, 0, wrap, cols, col0)  # fmt: skip


# A library of its own, linked into its callers (the GEMM's and the segmented GEMM's tasks):
# its paths are tasks (`TASKS`), so it links no micro-kernel, and Numba's IR inlining (which
# types and lowers a copy of it in every caller) cost more than a link: on a Zen 3 core the
# ``gemm`` and ``gemm_segments`` tasks built in 1.45-1.75 CPU-s against 2.18-2.31 inlined.
# (Before its paths were tasks, every level of the chain linked the micro-kernel and was
# optimized again: inlining it then took the GEMM task from 3.5 to 2.1 CPU-s on a Zen 4.)
@jit(**_OPTS)
def sgemm_segments(
    a,
    lda,
    b,
    ldb,
    table,
    c,
    ldc,
    m,
    k,
    segments,
    width,
    b_step,
    c_step,
    accumulate,
    wrap,
    cols,
    phase,
    epilogue,
):  # type: ignore[no-untyped-def]  # noqa: E501
    """``C (+)= A[m, k] @ B`` where C's and B's columns come in ``segments`` runs of
    ``width``: run ``s`` of B starts ``s * b_step`` floats after ``b``, of C ``s * c_step``
    after ``c``. B's row ``r`` is ``r * ldb`` floats on, or with a ``table`` (an int64 array's
    address, else 0) ``table[r]``. One segment of ``n`` columns is a plain GEMM; a convolution
    reads its taps in place, an output row a segment (`rvm.kernels.conv`). float32
    at int64 addresses, in the calling thread, no checks.

    ``wrap`` (with a table and one segment; 0: none): B's columns are positions in rows
    ``wrap`` apart, of which the first ``cols`` are C's, whose rows are ``cols`` apart (a
    convolution's output rows in its zero-padded input, ``wrap - cols`` columns between two:
    the whole map one run, so that a row's last vector is not mostly idle lanes); the run
    starts at column ``phase`` of its row, ``c`` at that place in C. The other columns are
    computed, not stored.

    ``epilogue`` (`NO_EPILOGUE`: none), where `fuses` holds: (the address of the bias of C's
    first row or 0, the floats from a row's bias to the next's (1, or 0: one for all), the
    activation (1: ReLU), the floats from C to the residual, of C's layout, or 0): C becomes
    ``act(A @ B + bias + residual)``, applied as each tile stores (`FUSED_EPILOGUE`)."""
    if m <= 0 or segments <= 0 or width <= 0:
        return
    if k <= 0:
        if not accumulate:
            for s in range(segments):
                out = floats_at(c + 4 * s * c_step)
                for i in range(m):
                    for j in range(width):
                        out[i * ldc + j] = 0.0
        return
    # B packed (`packs`), or one run in place (a plain GEMM): blocks of C's columns whose rows
    # of B stay in L2 while every band of A walks them. Runs of taps read in place are not
    # cut: their rows overlap (a block would read every band of A again for little B), and
    # cutting them was slower.
    step = column_step(k, segments * width)
    job = _path_job()
    job[0], job[1], job[2], job[3], job[4], job[5] = _PATH_JOB, a, lda, b, ldb, table
    job[6], job[7], job[8], job[9], job[10], job[11] = c, ldc, m, k, segments, width
    job[12], job[13], job[14], job[15] = b_step, c_step, accumulate, wrap
    job[16], job[17], job[18] = cols, phase, step
    job[19], job[20], job[21], job[22] = epilogue
    # A band or less reads B once, unpacked; an epilogue is the packed tiles' own.
    if takes_packed(m, segments, width, c_step, wrap, epilogue):
        _call_packed(0, job)
    else:
        _call_block(0, job)


# The job of `sgemm_segments`' two paths (int64, in its stack frame): its length; a, lda, b,
# ldb, table, c, ldc, m, k, segments, width, b_step, c_step, accumulate, wrap, cols, phase (as
# `sgemm_segments` takes them); the step of C's columns a block of B's rows takes; the
# epilogue's four.
_PATH_JOB = 23
_path_job = parfor.stack_job(_PATH_JOB)


def _packed_task(p, like, data):  # type: ignore[no-untyped-def]
    """`sgemm_segments` where it packs B (`_packed_blocks`), as a task (`rvm.kernels.parfor`):
    built when a product first takes this path, once, not into every caller of the GEMM."""
    j = parfor.job(data)
    _packed_blocks(j[1], j[2], j[3], j[4], j[5], j[6], j[7], j[8], j[9], j[10] * j[11], j[11],
                   j[12], j[18], j[14], (j[19], j[20], j[21], j[22]))  # fmt: skip


def _block_task(p, like, data):  # type: ignore[no-untyped-def]
    """`sgemm_segments` on B in place (`_block`), as a task (`rvm.kernels.parfor`): one block
    of ``step`` columns after the other for one run, all runs in one block otherwise."""
    j = parfor.job(data)
    a, lda, b, ldb, table, c, ldc, m, k = j[1], j[2], j[3], j[4], j[5], j[6], j[7], j[8], j[9]
    segments, width, b_step, c_step, accumulate = j[10], j[11], j[12], j[13], j[14]
    wrap, cols, phase, step = j[15], j[16], j[17], j[18]
    one = segments == 1  # `_block` at one place: inlined once
    for j0 in range(0, width if one else 1, step if one else 1):
        at_c, col0 = wrapped(c, j0, wrap, cols, phase) if one else (c, 0)
        n = min(step, width - j0) if one else width
        _block(a, lda, b + 4 * j0, ldb, table, at_c, ldc, m, k, segments, n, b_step, c_step,
               accumulate, wrap if one else 0, cols if one else 0, col0)  # fmt: skip


parfor.export_task("sgemm_packed", _packed_task)
parfor.export_task("sgemm_block", _block_task)
_call_packed = parfor.caller("sgemm_packed", "float32")
_call_block = parfor.caller("sgemm_block", "float32")
TASKS = ("sgemm_block", "sgemm_packed") if PACK_B else ("sgemm_block",)
"""The tasks of `sgemm_segments`' paths (`rvm.kernels.parfor`), each built when a product
first takes it: B in place, and packed (`packs`) where `PACK_B` holds."""


@intrinsic
def _move_panel_row(typingctx, src, dst):  # type: ignore[no-untyped-def]
    """Copies `NR` floats from the int64 address ``src`` to ``dst``, as one vector."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        vptr = ir.VectorType(ir.FloatType(), NR).as_pointer()
        src, dst = (builder.inttoptr(x, vptr) for x in args)
        builder.store(builder.load(src, align=4), dst, align=4)
        return context.get_dummy_value()

    return nt.void(nt.int64, nt.int64), codegen


@jit(**_OPTS)
def _pack(b, ldb, table, p0, kc, j0, cols, run, b_step, into):  # type: ignore[no-untyped-def]
    """B's rows ``p0`` to ``p0 + kc`` by C's columns ``j0`` to ``j0 + cols`` into the floats at
    the address ``into``: panels of `NR` columns one after the other, each ``kc`` rows of `NR`
    floats, the last panel's columns past ``cols`` zeros (`micro_panel` reads whole vectors).
    B's row ``r`` starts ``r * ldb`` floats after the address ``b``, or ``table[r]`` (an int64
    array's address, else 0); C's column ``q`` is column ``q % run`` of B's run ``q // run``,
    ``b_step`` floats after the one before (`sgemm_segments`' runs end to end in C: a
    convolution's output rows, each a run of taps in its input's phases).

    A panel at a time, its rows in turn: the writes one stream, the reads one line a row of B
    (a stride the hardware follows). Row by row, each row's panels in turn, every write went
    to another panel, ``4 * kc * NR`` bytes on: on a Zen 3 core that took 1.1 to 1.75 times
    as long (147 to 1024 rows by 64 to 1024 columns; a 1x1 convolution's 256 rows of 3136
    positions: 340 against 195 us, a quarter of its GEMM of 64 rows). A panel within one run
    moves a vector a row; one across runs (or the last) moves each piece of a row in masked
    vectors (`microkernel.move_lanes`, zeros past the last; AVX2 stores them whole, its masked
    stores cost twice the float-at-a-time copy on a Zen 3): squeezenet's 3 x 3 im2col on rows
    of 55 (144 rows by 3025 columns, Emerald Rapids, one thread) packed in 0.74 of the time
    the float-at-a-time copy took (LLVM's vectorized copy ran pieces under 8 floats and the
    last 7 of each a float at a time), 0.70-0.83 on rows of 111, 27 and 13."""
    rows = ints_at(table)
    for q0 in range(0, cols, NR):
        n = min(NR, cols - q0)
        q = j0 + q0
        s, off = q // run, q % run
        src, dst = b + 4 * (s * b_step + off), into + 4 * q0 * kc
        if n == NR and off + NR <= run:
            if table == 0:
                for r in range(kc):
                    _move_panel_row(src + 4 * (p0 + r) * ldb, dst + 4 * r * NR)
            else:
                for r in range(kc):
                    _move_panel_row(src + 4 * rows[p0 + r], dst + 4 * r * NR)
            continue
        for r in range(kc):
            row = src + 4 * (rows[p0 + r] if table != 0 else (p0 + r) * ldb)
            j, piece, skip = 0, min(n, run - off), 0
            while j < n:
                move_lanes(row + 4 * (skip - j), dst + 4 * r * NR, j, j + piece)
                j, skip = j + piece, skip + piece + b_step - run
                piece = min(n - j, run)


@jit(**_OPTS, inline="always")
def has_epilogue(epilogue):  # type: ignore[no-untyped-def]
    """Whether ``epilogue`` (`sgemm_segments`') does anything: a bias, an activation or a
    residual (`NO_EPILOGUE` does none)."""
    return epilogue[0] != 0 or epilogue[2] != 0 or epilogue[3] != 0


@jit(**_OPTS, inline="always")
def packs(segments, width, c_step, wrap):  # type: ignore[no-untyped-def]
    """Whether `sgemm_segments` copies B into panels of `NR` columns (`PACK_B`) for a product
    over ``segments`` runs of ``width`` columns, C's ``c_step`` apart (``wrap``: its wrapped
    run, 0: none): one run, or runs end to end in C (a convolution's output rows), B's rows
    by their stride or through a table (its taps, `_pack`: an im2col straight into the
    panels, no column matrix)."""
    return PACK_B and wrap == 0 and (segments == 1 or c_step == width)


def packed_path(packs_b, m, applies_epilogue):  # type: ignore[no-untyped-def]
    """Whether `sgemm_segments` takes its packed path (`sgemm_packed`) on a product of ``m``
    rows whose B packs (``packs_b``: `packs`): more than a band of rows or an epilogue to
    apply (``applies_epilogue``). In jitted code (`takes_packed`) and in Python
    (`gemm_tasks`)."""
    return packs_b and (m > MR or applies_epilogue)


_packed_path = jit(**_OPTS, inline="always")(packed_path)


@jit(**_OPTS, inline="always")
def takes_packed(m, segments, width, c_step, wrap, epilogue):  # type: ignore[no-untyped-def]
    """Whether `sgemm_segments` takes its packed path on a product of ``m`` rows
    (`packed_path`)."""
    return _packed_path(packs(segments, width, c_step, wrap), m, has_epilogue(epilogue))


def gemm_tasks(m: int, epilogue: bool | None = False) -> tuple[str, ...]:
    """The tasks of the paths a product of ``m`` rows whose B packs (`packs`) takes
    (`packed_path`), with an ``epilogue`` or not, or (None) either: what its first run builds
    (`rvm.kernels.blas.first_run_tasks`, `rvm.kernels.convmethod.first_run_tasks`)."""
    if packed_path(PACK_B, m, bool(epilogue)):
        return ("sgemm_packed",)
    return TASKS if epilogue is None else ("sgemm_block",)


@jit(**_OPTS, inline="always")
def fuses(segments, width, c_step, wrap, k):  # type: ignore[no-untyped-def]
    """Whether `sgemm_segments` applies an ``epilogue`` to a product of depth ``k`` over
    ``segments`` runs of ``width`` columns, C's ``c_step`` apart (``wrap``: its wrapped run):
    where it packs B (`packs`) and `FUSED_EPILOGUE` holds. A caller passes `NO_EPILOGUE`
    elsewhere and runs the pass."""
    return FUSED_EPILOGUE and packs(segments, width, c_step, wrap) and k > 0


@jit(**_OPTS, inline="always")
def packs_in_place(m):  # type: ignore[no-untyped-def]
    """Whether `_packed_blocks` packs B in its first band's tiles (`IN_PLACE_ROWS`) for a
    product of ``m`` rows (B's rows by their stride), not in a pass before the bands."""
    return m <= IN_PLACE_ROWS


@jit(**_OPTS, inline="always")
def _in_place(b, ldb, p0, q, n, run, b_step):  # type: ignore[no-untyped-def]
    """The address of B's row ``p0`` (rows by their stride) at C's column ``q`` where the
    panel of C's columns ``q`` to ``q + n`` is a whole one (``n`` = `NR`) in one run: read
    there by rows ``ldb`` floats apart, its copy is a vector a row (`_pack`); else 0."""
    s, off = q // run, q % run
    if n != NR or off + NR > run:
        return 0
    return b + 4 * (s * b_step + off + p0 * ldb)


@jit(**_OPTS, inline="always")
def _row_into_l2(row, kc):  # type: ignore[no-untyped-def]
    """Prefetches ``kc`` floats of a row of A at the address ``row`` into L2, a hint a line."""
    for at in range(0, kc, LINE):
        prefetch_l2(row + 4 * at)


TAIL_DOTS = LANES // 4
"""The most columns of a product's last panel that `_bands_on_panels` computes as dot
products along the depth (`microkernel.tail_dots`), not in a tile of one vector: there each
step broadcasts `MR` values of A for `MR` multiply-adds (the loads bound it: 4.0 cycles a step
on a Zen 3 core where a tile of two vectors takes 5.3), whatever the columns it keeps. A
quarter of a vector's lanes (2 on AVX2): 7 x 7 maps' 49 positions and the Winograd GEMMs of 14
x 14 and 13 x 13 maps (49 tiles) end in one column; with 4 (14 x 14 maps' 196 positions) the
dots were as slow as the tile."""


@jit(**_OPTS, inline="always")
def _bands_on_panels(a, lda, c, ldc, m, p0, kc, j0, cols, panels, depth, add, last, epilogue,
                     first, b, ldb, table, run, b_step, one_run):  # type: ignore[no-untyped-def]  # fmt: skip  # noqa: E501
    """The bands of A's rows (``m``) times one depth block (rows ``p0`` to ``p0 + kc``) of B's
    columns ``j0`` to ``j0 + cols``, packed in panels of `NR` columns (panel ``q0 / NR`` at
    ``panels + 4 * q0 * depth``, its rows `NR` floats apart): each band's tiles across the
    panels, into C's rows (``add``: onto them), the ``epilogue`` (`sgemm_segments`') on the
    ``last`` depth block. With ``first`` the first band packs each panel from B (``b``,
    ``ldb``, ``table``, ``run``, ``b_step``: `_pack`'s) as it reads it, or reads B in place
    (`_in_place`) and writes the panel for the other bands. Each band's tiles prefetch the
    next band's rows of the depth block into L2 (`_row_into_l2`), row ``r`` before tile
    ``r``, ``r + tiles``...: where a weight comes from memory, a band of few tiles otherwise
    waits on it (the module's notes). Where C's columns are ``one_run`` (a plain GEMM's:
    cut on the tiles' grid at every thread count, so its last panel is the same), a last
    panel of `TAIL_DOTS` columns or fewer goes as dot products. The loops `_packed_blocks`
    and `bands_on_packed` share (the latter without ``first``, a constant its copy folds)."""
    bias, bias_step, act, res = epilogue
    tiles = -(-cols // NR)
    tail_q0 = (tiles - 1) * NR
    tail_n = cols - tail_q0
    dots = one_run and tail_n <= TAIL_DOTS
    tail_block = np.empty(TAIL_DOTS * KC if dots else 0, np.float32)  # a few KB, from the heap
    tail = tail_block.ctypes.data
    if dots:  # the last panel's few columns gathered, each ``kc`` floats
        panel = panels + 4 * tail_q0 * depth
        if first:
            _pack(b, ldb, table, p0, kc, j0 + tail_q0, tail_n, run, b_step, panel)
        at, into = floats_at(panel), floats_at(tail)
        for t in range(kc):
            for j in range(tail_n):
                into[j * kc + t] = at[t * NR + j]
    for i0 in range(0, m, MR):
        rows = min(MR, m - i0)
        a_band, c_band = a + 4 * (i0 * lda + p0), c + 4 * (i0 * ldc + j0)
        at_bias = bias + 4 * i0 * bias_step if last and bias != 0 else 0
        ahead = min(MR, m - i0 - MR)  # the next band's rows, 0 on the last band
        for q0 in range(0, cols, NR):
            n = min(NR, cols - q0)
            vectors = (n + LANES - 1) // LANES
            panel = panels + 4 * q0 * depth
            for r in range(q0 // NR, ahead, tiles):  # its rows in turn, a row or more a tile
                _row_into_l2(a_band + 4 * (MR + r) * lda, kc)
            if dots and q0 == tail_q0:
                tail_dots(kc, a_band, lda, tail, n, c_band + 4 * q0, ldc, add, rows, at_bias,
                          bias_step, act if last else 0, res if last else 0)  # fmt: skip
                continue
            at_b, rows_b, in_place = panel, NR, 0
            if first and i0 == 0:
                at = _in_place(b, ldb, p0, j0 + q0, n, run, b_step)
                if at == 0:
                    _pack(b, ldb, table, p0, kc, j0 + q0, n, run, b_step, panel)
                else:
                    at_b, rows_b, in_place = at, ldb, 1
            # In place, the tile also writes the panel when other bands read it.
            into_panel = panel if in_place and m > MR else 0
            micro_panel(kc, a_band, lda, at_b, rows_b, in_place, c_band + 4 * q0, ldc, add,
                         rows, vectors, n - (vectors - 1) * LANES, LANES, LANES, 0, 0, 0,
                         into_panel, at_bias, bias_step, act if last else 0,
                         res if last else 0)  # fmt: skip
    alive(tail_block)  # read only through its address above: not freed before


@jit(**_OPTS, inline="always")  # its one caller, the task: built and optimized once
def _packed_blocks(a, lda, b, ldb, table, c, ldc, m, k, width, run, b_step, step, accumulate,
                   epilogue):  # type: ignore[no-untyped-def]  # fmt: skip
    """`sgemm_segments` where it packs B (`packs`; C's ``width`` columns, B's runs of ``run``
    ``b_step`` apart, its rows by ``ldb`` or the ``table``: `_pack`): for each block of
    ``step`` columns and each depth block, B's block copied into panels of `NR` columns, then
    every band of A across the panels, each tile reading its panel's rows one after the other,
    the last depth block's tiles applying the ``epilogue`` (`sgemm_segments`); m, k, width >
    0. With few rows (`packs_in_place`) and B's rows by their stride, the first band packs as
    it computes instead."""
    into = kept(PACK_FLOATS, np.float32)  # one size for every call: a kept block
    packed = into.ctypes.data
    first = packs_in_place(m) and table == 0  # a table's taps: no panel reads in place
    for j0 in range(0, width, step):
        cols = min(step, width - j0)
        for p0 in range(0, k, KC):
            kc = min(KC, k - p0)
            if not first:
                _pack(b, ldb, table, p0, kc, j0, cols, run, b_step, packed)
            add = 1 if (accumulate or p0 > 0) else 0
            _bands_on_panels(a, lda, c, ldc, m, p0, kc, j0, cols, packed, kc, add, p0 + kc == k,
                             epilogue, first, b, ldb, table, run, b_step, run == width)  # fmt: skip
    alive(into)  # read only through its address above: not freed before


@jit(**_OPTS, inline="always")
def pack_whole(b, ldb, table, k, j0, cols, run, b_step, into):  # type: ignore[no-untyped-def]
    """B's columns ``j0`` (a multiple of `NR`) to ``j0 + cols``, every one of its ``k`` rows
    (`_pack`'s B), into their panels of all of B packed at the address ``into``: (panels,
    ``k``, `NR`) floats, panel ``j0 / NR`` on (what `bands_on_packed` reads), the last
    panel's columns past B's zeros."""
    _pack(b, ldb, table, 0, k, j0, cols, run, b_step, into + 4 * j0 * k)


@jit(**_OPTS, inline="always")
def bands_on_packed(a, lda, packed, c, ldc, m, k, width, run, epilogue):  # type: ignore[no-untyped-def]
    """``C[:m, :width] = A[:m, :k] @ B`` (then the ``epilogue``, `sgemm_segments`') with all
    of B packed at ``packed`` (`pack_whole`): `_packed_blocks`' loops and tiles on panels
    packed once for every band (its column blocks, depth blocks, bands, tiles; the same sums
    in the same order), C's columns end to end, B's in runs of ``run``; m, k, width > 0."""
    step = column_step(k, width)
    for j0 in range(0, width, step):
        cols = min(step, width - j0)
        for p0 in range(0, k, KC):
            kc = min(KC, k - p0)
            panels = packed + 4 * (j0 * k + p0 * NR)
            _bands_on_panels(a, lda, c, ldc, m, p0, kc, j0, cols, panels, k, 1 if p0 > 0 else 0,
                             p0 + kc == k, epilogue, False, 0, 0, 0, 1, 0,
                             run == width)  # fmt: skip


# Its one caller is its task (`_block_task`): inlined there, built and optimized once, not
# again as a library of its own.
@jit(**_OPTS, inline="always")
def _block(a, lda, b, ldb, table, c, ldc, m, k, segments, width, b_step, c_step, accumulate,
           wrap, cols, phase):  # type: ignore[no-untyped-def]  # fmt: skip
    """`sgemm_segments` on one block of C's columns: each depth block, each band of A across
    the block's segments; m, k, segments, width > 0."""
    indexed = 1 if table != 0 else 0
    narrow = width < LANES and segments > 1
    for p0 in range(0, k, KC):
        kc = min(KC, k - p0)
        add = 1 if (accumulate or p0 > 0) else 0
        if indexed:
            b_block, rows_b = b, table + 8 * p0
        else:
            b_block, rows_b = b + 4 * p0 * ldb, ldb
        for i0 in range(0, m, MR):
            rows = min(MR, m - i0)
            a_band, c_band = a + 4 * (i0 * lda + p0), c + 4 * i0 * ldc
            if narrow:  # one segment per vector, up to `VECTORS` of them a tile
                for s in range(0, segments, VECTORS):
                    at_b, at_c = b_block + 4 * s * b_step, c_band + 4 * s * c_step
                    vectors = min(VECTORS, segments - s)
                    micro(kc, a_band, lda, at_b, rows_b, indexed, at_c, ldc, add, rows, vectors,
                           width, b_step, c_step, 1, 0, 0, 0)  # fmt: skip
                continue
            for s in range(segments):
                at_b, at_c = b_block + 4 * s * b_step, c_band + 4 * s * c_step
                band_tiles(kc, a_band, lda, at_b, rows_b, indexed, at_c, ldc, add, rows, width,
                           wrap, cols, phase)  # fmt: skip


@jit(**_OPTS, inline="always")  # see `sgemm_segments`
def sgemm(a, lda, b, ldb, c, ldc, m, n, k, accumulate):  # type: ignore[no-untyped-def]
    """``C[m, n] (+)= A[m, k] @ B[k, n]`` on the float32 row-major matrices at the int64
    addresses ``a``, ``b``, ``c`` (row strides ``lda``, ``ldb``, ``ldc``), in the calling
    thread; ``accumulate`` adds to C. No checks."""
    sgemm_segments(a, lda, b, ldb, 0, c, ldc, m, k, 1, n, 0, 0, accumulate, 0, 0, 0, NO_EPILOGUE)


def _serves(like: nt.Type) -> bool:
    """Whether `sgemm` serves the Numba type ``like`` (an array or a typed pointer)."""
    return isinstance(like, (nt.Array, nt.CPointer)) and like.dtype == nt.float32


def applies(like):  # type: ignore[no-untyped-def]
    """Whether `sgemm` serves ``like``'s dtype (an array or a typed pointer): float32. A
    compile-time constant in jitted code."""
    return np.asarray(like).dtype == np.float32


@overload(applies, jit_options=dict(cache=True))
def _applies(like):  # type: ignore[no-untyped-def]
    serves = _serves(like)
    return lambda like: serves


@intrinsic
def require(typingctx, like):  # type: ignore[no-untyped-def]
    """Nothing at run time; at typing, refuses (a TypingError) what `applies` rejects."""
    if not _serves(like):
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return context.get_dummy_value()

    return nt.void(like), codegen
