"""float32 products with a constant weight packed once into panels, as ONNX Runtime's MLAS does.

`rvm.kernels.sgemm` reads B's rows where they are: a product with a wide B (768 x 3072 in
BERT's feed-forward) then walks rows 12 KB apart, a new page every few rows, for every band of
A. A constant weight is instead packed once, when the executable is built
(`rvm.transform.pack_weights`), into column panels each ``panel`` wide: ``(panels, k,
panel)`` float32, panel ``p`` holding B's columns ``p * panel`` to ``(p + 1) * panel`` (the
last padded with zeros), its ``k`` rows one contiguous stream. The GEMM then reads each
panel's rows one after the other (the panels' micro-kernel, `microkernel.micro_panel`: its
row stride the panel's width, whole vectors read without masks), blocks of panels that fit
half of L2 at a time, the depth in equal blocks of at most `DEPTH`.

- `panel_width()`: the panel width for this CPU, the micro-kernel's widest tile
  (`rvm.kernels.sgemm.NR`: three vectors on AVX-512, two on AVX2). A panel of another width
  (a weight packed on another machine) is still multiplied right, in tiles of the kernel's.
- `pack(weight, transposed, panel)`: a 2-d ``(k, n)`` weight (``(n, k)`` when
  ``transposed``, as ``dense``'s) in panels (NumPy, at build time; written once, in
  `rvm.kernels.reference.packed`, with `ACTIVATIONS`).
- `dense(x, w, out, n, bias, act, residual=None)`: ``out[m, n] = act(x[m, k] @ B + bias) +
  residual`` where ``w`` is B packed; cut on rvm's pool along the panels (or C's rows when
  the panels are few); a few rows take a one-row tile (a GEMV's) rather than the
  micro-kernel's tile of `MR` rows, and a single row (a decode step's) streams `GEMV_GROUP`
  panels at once (`_gemv_group`). Where x's rows crowd L1d's sets (`gemmcut.crowded`: rows
  a multiple of 4 KB apart, as a transformer's 1024, 3072 or 4096 features are), the calling
  thread first copies them to rows that do not (`gemmcut.uncrowded`), once for every piece.
  The bias, activation (the GEMM's epilogue: `ACTIVATIONS`) and residual (a transformer's
  skip connection, ``(m, n)``) run on each tile right after its last depth block, in the
  thread that computed it, while it is in cache. Checks every shape first.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import entry, parfor, sgemm, workpool
from rvm.kernels.blas import SPLIT_MIN_MNK, split_parts
from rvm.kernels.blocks import kept
from rvm.kernels.cblas import address
from rvm.kernels.cpu import Cpu, cpu
from rvm.kernels.epilogue import tile as tile_epilogue
from rvm.kernels.gemmcut import crowded, uncrowded
from rvm.kernels.gemmshape import FMA, panel_width
from rvm.kernels.jitting import alive, jit
from rvm.kernels.microkernel import micro_panel, micro_row
from rvm.kernels.parfor import even
from rvm.kernels.planes import copy as copy_floats
from rvm.kernels.reference.packed import ACTIVATIONS, pack, packed_shape

__all__ = ["ACTIVATIONS", "dense", "pack", "packed_shape", "panel_width"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
SMALL_ROWS = 4  # fewer rows take the one-row tile (the `MR`-row tile computes MR rows anyway)
SPLIT_MIN_ROWS_LOOP = 1 << 16  # weights a row-loop piece reads at least
GEMV_GROUP = 4  # panels a one-row product streams at once (`_gemv_group`)


def depth_limit(c: Cpu) -> int:
    """`DEPTH`: the deepest block of a product, a band's `sgemm.MR` rows of A taking two thirds
    of L1d at most (1024 with a 48 KB L1d), 128 to 2048."""
    return min(2048, max(128, 2 * c.l1d // 3 // (4 * sgemm.MR)))


DEPTH = depth_limit(cpu())
"""The depth is cut into equal blocks of at most this (`_depth_step`): BERT's 768 is one
block, its 3072 three of 1024. `sgemm.KC`'s power of two (512) cut 768 into 512 and 256,
which stored every tile of C twice and ran a short block: 5-10% slower on one core."""


@jit(**_OPTS)
def _depth_step(k):  # type: ignore[no-untyped-def]
    """The depth of each block (the last one may be shorter): ``k`` in as few blocks of at
    most `DEPTH` as there can be, all about as deep."""
    blocks = -(-k // DEPTH)
    return -(-k // blocks)


@jit(**_OPTS)
def _panels(a, lda, bp, k, panel, c, ldc, m, n, first, last, bias, act, res):  # type: ignore[no-untyped-def]  # noqa: E501
    """``C[:m, cols] = act(A[:m, :k] @ B[:, cols] + bias)`` for the columns of panels
    ``first`` to ``last`` (exclusive) of the packed B at ``bp``, on addresses, in the calling
    thread: blocks of panels that fit half of L2, each depth block (`_depth_step`), each band
    of A across the block; after the last depth block, each tile's epilogue
    (`rvm.kernels.epilogue.tile`: ``bias``, ``act`` and ``res``, R's address laid out as C,
    0: none) while it is in cache.

    A panel of whole vectors, at most a tile wide (this CPU's, `panel_width`), is a tile's
    B as the panels' micro-kernel reads it (`microkernel.micro_panel`: B's vectors without
    masks, zeros past the columns, and no prefetch of A's next band in its loop). On a Zen 3
    core BERT's products took 0.91-0.94 of the time that `sgemm.band_tiles` (the GEMM's
    general tiles, which read B's last vector under a mask rebuilt from the stack at every
    step on AVX2, and whose loop computes the next band's address) took, BERT-base 0.885
    (the same bits). A panel of another width takes the general tiles."""
    step = _depth_step(k)
    block = max(1, sgemm.BLOCK_BYTES // (4 * step * panel))
    epilogue = bias != 0 or act != 0 or res != 0
    whole = panel % sgemm.LANES == 0 and panel <= sgemm.NR
    for q0 in range(first, last, block):
        q1 = min(last, q0 + block)
        for p0 in range(0, k, step):
            kc = min(step, k - p0)
            add = 1 if p0 > 0 else 0
            final = epilogue and p0 + kc == k
            for i0 in range(0, m, sgemm.MR):
                rows = min(sgemm.MR, m - i0)
                a_band, c_band = a + 4 * (i0 * lda + p0), c + 4 * i0 * ldc
                for q in range(q0, q1):
                    width = min(panel, n - q * panel)
                    at_b = bp + 4 * (q * k * panel + p0 * panel)
                    at_c = c_band + 4 * q * panel
                    if whole:
                        vectors = (width + sgemm.LANES - 1) // sgemm.LANES
                        tail = width - (vectors - 1) * sgemm.LANES
                        micro_panel(kc, a_band, lda, at_b, panel, 0, at_c, ldc, add, rows,
                                    vectors, tail, sgemm.LANES, sgemm.LANES, 0, 0, 0, 0, 0, 0,
                                    0, 0)  # fmt: skip
                    else:
                        sgemm.band_tiles(kc, a_band, lda, at_b, panel, 0, at_c, ldc, add, rows,
                                         width, 0, 0, 0)  # fmt: skip
                    if final:
                        at_bias = bias + 4 * q * panel if bias != 0 else 0
                        at_res = at_c - c + res if res != 0 else 0
                        tile_epilogue(at_c, ldc, rows, width, at_bias, act, at_res)


@intrinsic
def _gemv_group(typingctx, k, x, bp, c, group):  # type: ignore[no-untyped-def]
    """On int64 addresses: ``C[:group * NR] = x[:k] @`` the ``group`` (1 to `GEMV_GROUP`)
    whole panels of `sgemm.NR` columns at ``bp``, one after the other (``k * NR`` floats
    each). A one-row product is bound by how fast the weights stream in: each step reads a row
    of every panel of the group, ``group`` streams at once with ``group * VECTORS``
    independent sums, where `sgemm`'s one-row tile reads one stream with `sgemm.VECTORS`
    sums, each waiting on its last FMA."""
    sig = nt.void(nt.int64, nt.int64, nt.int64, nt.int64, nt.int64)
    lanes, vectors, width = sgemm.LANES, sgemm.VECTORS, sgemm.NR

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        vec = ir.VectorType(f32, lanes)
        vptr, fptr = vec.as_pointer(), f32.as_pointer()
        k, group = args[0], args[4]
        x, bp, c = (builder.inttoptr(v, fptr) for v in args[1:4])
        fnty = ir.FunctionType(vec, [vec] * 3)
        fma = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.fma.v{lanes}f32")
        zero, undef = ir.Constant(vec, None), ir.Constant(vec, ir.Undefined)
        splat = ir.Constant(ir.VectorType(i32, lanes), [0] * lanes)
        stride = builder.mul(k, i64(width))

        def run(panels: int) -> None:
            acc = [cgutils.alloca_once_value(builder, zero) for _ in range(panels * vectors)]
            with cgutils.for_range(builder, k) as loop:
                step = loop.index
                one = builder.insert_element(undef, builder.load(builder.gep(x, [step])), i32(0))
                a = builder.shuffle_vector(one, undef, splat)
                row = builder.mul(step, i64(width))
                for p in range(panels):
                    base = builder.add(builder.mul(stride, i64(p)), row)
                    for j in range(vectors):
                        at = builder.gep(bp, [builder.add(base, i64(j * lanes))])
                        b = builder.load(builder.bitcast(at, vptr), align=4)
                        slot = acc[p * vectors + j]
                        if FMA:
                            new = builder.call(fma, [a, b, builder.load(slot)])
                        else:
                            new = builder.fadd(builder.fmul(a, b), builder.load(slot))
                        builder.store(new, slot)
            for i, slot in enumerate(acc):
                at = builder.bitcast(builder.gep(c, [i64(i * lanes)]), vptr)
                builder.store(builder.load(slot), at, align=4)

        blocks = [builder.append_basic_block(f"group{g}") for g in range(1, GEMV_GROUP + 1)]
        done = builder.append_basic_block("grouped")
        switch = builder.switch(group, blocks[0])
        for g, block in enumerate(blocks, start=1):
            switch.add_case(i64(g), block)
            builder.position_at_end(block)
            run(g)
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


@jit(**_OPTS)
def _rows(a, lda, bp, k, panel, c, ldc, m, n, first, last, bias, act, res):  # type: ignore[no-untyped-def]  # noqa: E501
    """`_panels` for a few rows: one row at a time (`microkernel.micro_row`, a GEMV's tile), the
    whole depth at once, each panel streamed once per row (in L2 for the next row), then the
    panel's epilogue (`rvm.kernels.epilogue.tile`; ``res``: the residual's address, row
    stride ``ldc``; 0: none)."""
    for q in range(first, last):
        width = min(panel, n - q * panel)
        at_b = bp + 4 * q * k * panel
        for j0 in range(0, width, sgemm.NR):
            cols = min(sgemm.NR, width - j0)
            vectors = (cols + sgemm.LANES - 1) // sgemm.LANES
            tail = cols - (vectors - 1) * sgemm.LANES
            for i in range(m):
                micro_row(k, a + 4 * i * lda, lda, at_b + 4 * j0, panel, 0,
                                 c + 4 * (i * ldc + q * panel + j0), ldc, 0, 1, vectors, tail,
                                 sgemm.LANES, sgemm.LANES, 0, 0, 0, 0)  # fmt: skip
        if bias != 0 or act != 0 or res != 0:
            at_bias = bias + 4 * q * panel if bias != 0 else 0
            at_res = res + 4 * q * panel if res != 0 else 0
            tile_epilogue(c + 4 * q * panel, ldc, m, width, at_bias, act, at_res)


@jit(**_OPTS)
def _row(a, bp, k, panel, c, n, first, last, bias, act, res):  # type: ignore[no-untyped-def]
    """`_rows` for one row and panels `sgemm.NR` wide: the whole panels `GEMV_GROUP` at a
    time (`_gemv_group`), a last partial one by `_rows`; then the epilogue."""
    whole = min(last, n // panel)
    for q in range(first, whole, GEMV_GROUP):
        group = min(GEMV_GROUP, whole - q)
        _gemv_group(k, a, bp + 4 * q * k * panel, c + 4 * q * panel, group)
    if bias != 0 or act != 0 or res != 0:
        for q in range(first, whole):
            at_bias = bias + 4 * q * panel if bias != 0 else 0
            at_res = res + 4 * q * panel if res != 0 else 0
            tile_epilogue(c + 4 * q * panel, n, 1, panel, at_bias, act, at_res)
    if whole < last:
        _rows(a, k, bp, k, panel, c, n, 1, n, max(first, whole), last, bias, act, res)


# A packed-product job (int64): its length; x's, w's and out's addresses; m, k, n, the panel
# width; the pieces (along n: equal shares of the panels) or their rows (along m), and whether
# along n; the bias's address (0: none), the activation's index and the residual's address
# (0: none); x's row stride (k, or its copy's: `dense`).
_JOB = 14


def _task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a packed product (a pool task, `rvm.kernels.parfor`)."""
    job = parfor.job(data)
    px, pw, po, m, k, n, panel = job[1], job[2], job[3], job[4], job[5], job[6], job[7]
    step, along_n, bias, act, res, lda = job[8], job[9], job[10], job[11], job[12], job[13]
    panels = -(-n // panel)
    if not along_n:
        rows = min(step, m - p * step)
        at_x, at_o = px + 4 * p * step * lda, po + 4 * p * step * n
        at_r = res + 4 * p * step * n if res != 0 else 0
        _panels(at_x, lda, pw, k, panel, at_o, n, rows, n, 0, panels, bias, act, at_r)
        return
    first, last = parfor.piece_range(p, step, panels, 1)  # along n ``step`` is the pieces
    if m == 1 and panel == sgemm.NR:
        _row(px, pw, k, panel, po, n, first, last, bias, act, res)
    elif m < SMALL_ROWS:
        _rows(px, lda, pw, k, panel, po, n, m, n, first, last, bias, act, res)
    else:
        _panels(px, lda, pw, k, panel, po, n, m, n, first, last, bias, act, res)


parfor.export_task("packed_dense", _task)
FIRST_RUN_TASKS = ("packed_dense",)
"""The library task (`rvm.kernels.parfor`) every product on a packed weight runs: what its
first run builds, worth building beforehand (`rvm.kernels.parfor.prefetch`)."""
_run = parfor.runner("packed_dense")
_call = parfor.caller("packed_dense")  # unsplit: the code built once, as the task


@jit(**_OPTS)
def _cut(m, k, n, panel):  # type: ignore[no-untyped-def]
    """(pieces, step, along_n): the pieces of a product worth the pool, along the panels
    (``step`` the pieces again: each an equal share of the panels, `parfor.piece_range`) or,
    when they are fewer than the pieces, C's rows (``step`` a multiple of `sgemm.MR`). Along
    the panels the pieces stay a multiple of the threads: pieces of ``ceil(panels / parts)``
    panels each had cut 14 panels in 6 parts into 5 pieces of 3, 3, 3, 3 and 2, one thread's
    share 9 panels against the other's 5."""
    panels = -(-n // panel)
    threads = workpool.threads()
    work, least = m * n * k, SPLIT_MIN_MNK  # the rule `blas` cuts its products by
    if m < SMALL_ROWS:
        work, least = n * k, SPLIT_MIN_ROWS_LOOP
    parts = split_parts(work, least)  # a multiple of the threads where there are as many
    if parts == 1:
        return 1, 1, True
    if panels >= parts or m < 2 * sgemm.MR * threads:
        pieces = even(min(parts, panels), threads)
        return pieces, pieces, True
    band = -(-m // parts)
    step = -(-band // sgemm.MR) * sgemm.MR
    return -(-m // step), step, False


@jit(**_OPTS)
def _bias_at(bias):  # type: ignore[no-untyped-def]
    """The bias's address, 0 when it is empty (none)."""
    return address(bias, 0) if bias.shape[0] > 0 else 0


@jit(**_OPTS, inline="always")
def _wrong(x, w, out, n, bias, act, rm, rn):  # type: ignore[no-untyped-def]
    """What is wrong with `dense`'s operands (a residual of ``rm`` x ``rn``; ``rm`` -1: none):
    0 nothing, else the number of `dense`'s error, in the order it checks them."""
    m, k = x.shape
    panels, kw, panel = w.shape
    if rm >= 0 and (rm != m or rn != n):
        return 1
    if bias.shape[0] != 0 and bias.shape[0] != n:
        return 2
    if act < 0 or act >= len(ACTIVATIONS):
        return 3
    if kw != k or out.shape[0] != m or out.shape[1] != n or panel <= 0:
        return 4
    if n < 0 or panels != -(-n // panel):
        return 5
    return 0


@jit(**_OPTS)
def dense(x, w, out, n, bias, act, residual=None):  # type: ignore[no-untyped-def]
    """``out[m, n] = act(x[m, k] @ B + bias) + residual`` for float32 C-contiguous ``x`` and
    ``out``, ``w`` the packed B ``(panels, k, panel)`` (`pack`) of ``n`` columns, ``bias``
    ``(n,)`` or empty (none), ``act`` an index of `ACTIVATIONS`, ``residual`` None or a
    C-contiguous ``(m, n)`` float32 array. The bias, activation and residual run on each
    tile as it is done, in the thread that computed it. Kernels call it through its entry
    point (`dense_packed_call`), not compiled into them."""
    m, k = x.shape
    res = 0
    rm, rn = -1, 0
    if residual is not None:
        rm, rn = residual.shape[0], residual.shape[1]
        if rm == m and rn == n and m > 0 and n > 0:
            res = address(residual, 0)
    wrong = _wrong(x, w, out, n, bias, act, rm, rn)
    if wrong == 1:
        raise ValueError("packed dense: the residual must have out's shape (m, n)")
    if wrong == 2:
        raise ValueError("packed dense: the bias must have n values (or none)")
    if wrong == 3:
        raise ValueError("packed dense: unknown activation index")
    if wrong == 4:
        raise ValueError(
            "packed dense: the shapes do not match: expected x (m, k), the packed weight "
            "(panels, k, panel) and out (m, n)"
        )
    if wrong == 5:
        raise ValueError("packed dense: the packed weight's panels do not cover n columns")
    panel = w.shape[2]
    if m == 0 or n == 0:
        return
    if k == 0:
        out[:, :] = 0
        for i in range(m):
            at_res = res + 4 * i * n if res != 0 else 0
            tile_epilogue(address(out, i * n), n, 1, n, _bias_at(bias), act, at_res)
        return
    parts, step, along_n = _cut(m, k, n, panel)
    job = np.empty(_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3] = _JOB, address(x, 0), address(w, 0), address(out, 0)
    job[4], job[5], job[6], job[7], job[8], job[9] = m, k, n, panel, step, along_n
    job[10], job[11], job[12], job[13] = _bias_at(bias), act, res, k
    # x's rows copied where they do not crowd L1d's sets: BERT-base's feed-forward output
    # (128 x 3072 by 3072 x 768) took 0.88 of its time on one Zen 3 core, 0.90 on two, and
    # BERT-base 0.93-0.94 (a copy in each piece instead: 0.98; the pieces copying a share
    # each, the others waiting: 0.98-1.0 of the product's time, not kept). No block is taken
    # for a product whose rows do not crowd (a decode step's one row among them).
    if m < SMALL_ROWS or not crowded(k, sgemm.MR):
        _start(out, parts, job)
        return
    stride = uncrowded(k, sgemm.MR)
    copy = kept(m * stride, np.float32)
    rows = copy.reshape((m, stride))
    for i in range(m):
        copy_floats(rows[i], x[i], k)
    job[1], job[13] = copy.ctypes.data, stride
    _start(out, parts, job)
    alive(copy)  # read only through its address in the job: not freed before


@jit(**_OPTS, inline="always")
def _start(out, parts, job):  # type: ignore[no-untyped-def]
    """The product's ``parts`` pieces (`_task`): in the calling thread when one, else on the
    pool."""
    if parts == 1:
        _call(out, 0, job)
    else:
        _run(out, parts, job)


def _entry(x, w, out, bias, res, dims, params):  # type: ignore[no-untyped-def]
    """`dense` on x (m, k), the packed weight w (panels, k, panel), out (m, n), bias (n,) or
    empty (none) and res, the residual (m, n) when ``params[2]`` is not 0 (else out, unread);
    ``params``: n, the activation's index, whether a residual. 0 done, 1 the operands
    disagree."""
    d, p = nb.carray(dims, 10), nb.carray(params, 3)
    xa, wa = nb.carray(x, (d[0], d[1])), nb.carray(w, (d[2], d[3], d[4]))
    oa, ba = nb.carray(out, (d[5], d[6])), nb.carray(bias, (d[7],))
    n, act, with_res = p[0], p[1], p[2] != 0
    if _wrong(xa, wa, oa, n, ba, act, d[8] if with_res else -1, d[9]) != 0:
        return 1
    if with_res:
        dense(xa, wa, oa, n, ba, act, nb.carray(res, (d[8], d[9])))
    else:
        dense(xa, wa, oa, n, ba, act)
    return 0


entry.export("dense_packed", _entry)
# What kernels call (`rvm.kernels.entry.caller`): ``dense_packed_call((x, w, out, bias, res),
# (n, act, with residual))``, 0 done: a kernel links the symbol of `dense`'s code built once,
# not `dense` and the levels below it optimized again into its own.
dense_packed_call = entry.caller("dense_packed", 3)
