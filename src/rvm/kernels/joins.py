"""A concatenation's pieces copied into its result for jit kernels, compiled once, split over
threads when large.

`join_rows(piece, out, offset)` copies ``piece`` (rows, 1, 1, run) into columns ``offset`` to
``offset + run`` of ``out`` (rows, 1, 1, width), both C-contiguous of one float dtype: a piece
of a concatenation along any axis, both viewed as rows of what follows the axis (the axes
before it are the rows; a row of the piece is one run of its row of the result). A jit
kernel that fills a concatenation of float arrays (`rvm.jit.assemble.join`) calls it once a
piece, where its own loop nest (one loop an axis, the innermost a map's row: 13 to 55
elements on the CNNs' maps) ran in the calling thread.

Why: at batch 8 the memory plan cannot place a channel concatenation's pieces in its result
(a piece is not one run there, `rvm.transform.concat_plan`), and where they are not computed
image by image (`rvm.transform.concat_images`: squeezenet's fire modules whose 3 x 3
expansion is a Winograd convolution) the kernel copies them: 4.1 ms of squeezenet's 47.8 at
two threads on an Emerald Rapids, in one thread, while ONNX Runtime's Concat splits its copy.
Here a chunk is a range of the piece's elements (`parfor.piece_range`, whole vectors), each of
its rows' parts one run of loads and stores that LLVM vectorizes.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import entry, parfor
from rvm.kernels.cpu import cpu
from rvm.kernels.jitting import jit

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_ALIGN = cpu().lanes  # chunks start on a float32 vector of the piece from its start


@jit(**_OPTS)
def _copy(pf, of, run, width, offset, lo, hi):  # type: ignore[no-untyped-def]
    """Elements ``lo`` to ``hi`` of the flat piece ``pf`` (rows of ``run``) into the flat
    result ``of`` (rows of ``width``, the piece's from column ``offset``)."""
    r = lo // run
    while lo < hi:
        end = min(hi, (r + 1) * run)
        dst = r * width + offset + lo - r * run
        src, to = pf[lo:end], of[dst : dst + end - lo]
        for i in range(end - lo):  # indices known not negative: no wraparound, one vector loop
            to[i] = src[i]
        lo = end
        r += 1


_JOB = 8  # a job: its length, piece, out, rows, run, width, offset, chunks


def _task(k, like, data):  # type: ignore[no-untyped-def]
    """Chunk ``k`` of a piece's copy split over threads (`rvm.kernels.parfor`)."""
    job = parfor.job(data)
    rows, run, width = job[3], job[4], job[5]
    pf = parfor.array_at(job[1], (rows * run,), like)
    of = parfor.array_at(job[2], (rows * width,), like)
    lo, hi = parfor.piece_range(k, job[7], rows * run, _ALIGN)
    _copy(pf, of, run, width, job[6], lo, hi)


parfor.export_task("join_rows", _task)
_run = parfor.runner("join_rows")


@jit(**_OPTS, inline="always")
def _work(elements):  # type: ignore[no-untyped-def]
    """The elements a piece's copy touches (`parfor.chunks`' measure): each read and written
    once."""
    return 2 * elements


@jit(**_OPTS)
def _chunks(elements):  # type: ignore[no-untyped-def]
    """The chunks a piece of ``elements`` is cut into (`parfor.chunks`)."""
    return parfor.chunks(_work(elements), max(1, elements // (16 * _ALIGN)))


def first_run_tasks(elements: int) -> tuple[str, ...]:
    """The library task a piece of ``elements`` runs (when split): what its first run builds,
    worth building beforehand (`rvm.kernels.parfor.prefetch`)."""
    large = parfor.splits.py_func(_work.py_func(elements))  # Python: nothing to compile
    return ("join_rows",) if large else ()


@jit(**_OPTS, inline="always")
def _join_rows(piece, out, offset):  # type: ignore[no-untyped-def]
    """`join_rows`' work; False when the shapes disagree."""
    rows, run, width = piece.shape[0], piece.shape[3], out.shape[3]
    ok = out.shape[0] == rows and piece.shape[1] * piece.shape[2] * out.shape[1] * out.shape[2] == 1
    if not (ok and 0 <= offset and offset + run <= width):
        return False
    if rows * run == 0:
        return True
    pf, of = piece.reshape(rows * run), out.reshape(rows * width)
    chunks = _chunks(rows * run)
    if chunks < 2:
        _copy(pf, of, run, width, offset, 0, rows * run)
        return True
    job = np.array((_JOB, parfor.address(piece), parfor.address(out), rows, run, width, offset,
                    chunks), dtype=np.int64)  # fmt: skip
    _run(piece, chunks, job)
    return True


def _entry(a, b, c, dims, params):  # type: ignore[no-untyped-def]
    """`_join_rows` on piece (a), out (b) (see `rvm.kernels.entry`): 0 done, 1 the shapes
    disagree."""
    d = nb.carray(dims, 8)
    piece = nb.carray(a, (d[0], d[1], d[2], d[3]))
    out = nb.carray(b, (d[4], d[5], d[6], d[7]))
    return 0 if _join_rows(piece, out, nb.carray(params, 1)[0]) else 1


entry.export("join_rows", _entry)
# What kernels call (`rvm.kernels.entry.caller`): ``entry_call(arrays, params)``, 0 done.
entry_call = entry.caller("join_rows", 1)


# For Python callers (kernels call `entry_call`). Not cached: compiling it types the call, which
# registers the entry point (`entry.require`); cached object code would be linked without it.
@nb.njit(nogil=True)
def join_rows(piece, out, offset):  # type: ignore[no-untyped-def]
    """Columns ``offset`` on of ``out``'s rows = ``piece``'s (see the module docstring)."""
    if entry_call((piece, out), (np.int64(offset),)) != 0:
        raise ValueError("join_rows: the piece's rows do not fit the result's")
