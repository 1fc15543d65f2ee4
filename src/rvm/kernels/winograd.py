"""Winograd convolution F(2x2, 3x3) for float32 3x3 convolutions at stride 1 (jit kernels), its
products in float32 or bf16.

A 3x3 convolution at stride 1 and dilation 1 computes each 2 x 2 block of output positions (a
tile) from the 4 x 4 input window under it with 16 multiplies a channel pair where the direct
sum takes 36 (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015):
``Y = A^T [(G g G^T) * (B^T d B)] A``, the products elementwise over the 16 positions of a 4 x 4
transformed tile. Summed over input channels, each of the 16 positions is one GEMM:
``M[xi] = U[xi] @ V[xi]``, ``U[xi]`` the transformed weight (output channels by input
channels), ``V[xi]`` the transformed input (input channels by tiles). 2.25 times fewer
multiply-adds than the direct sum, for transforms that move each input and output value a few
times; the error grows by a few ulps (its transforms' coefficients are 0, +-1 and +-1/2).

`conv2d(x, w, out, pt, pl, epilogue)` (``x`` (n, c, ih, iw), ``w`` (o, c, 3, 3), ``out`` (n, o,
oh, ow), C-contiguous float32; ``pt``, ``pl`` the top and left padding, the output's size
giving the rest; the caller checks the geometry, `rvm.kernels.conv`):

- the weight is transformed into ``U`` (16, o, c): once, at build time, where it is a
  constant (`transform`; `rvm.op.conv2d_winograd`, which runs `conv2d_transformed`), else at
  each call, on the pool (`_weights`);
- the tiles of each image are cut into blocks of whole rows of tiles (`block_rows`: at each
  of the 16 positions, a block's transformed input and products take about one core's L2,
  `rvm.kernels.cpu`), and blocks are the pieces of a job on rvm's pool
  (`rvm.kernels.parfor`), a batch's images' blocks all in one job;
- each piece runs its block's three phases in its thread: the input transform (`_input`:
  a vector of tiles along a row of tiles at a time, their windows read straight from the
  image under lane masks, into ``V`` (16, c, tiles): the tiles along the GEMM's lanes;
  `rvm.kernels.winotiles`), the 16 GEMMs ``M[xi] = U[xi] @ V[xi]`` (rvm's `rvm.kernels.sgemm`, its
  blocking read from the machine), and the output transform (`_output`), which applies the
  convolution's epilogue (a bias per channel or one for all, a residual of the output's
  layout, a ReLU: `rvm.kernels.sgemm.sgemm_segments`' ``epilogue``) as it stores, the output
  written once;
- where those blocks are too few for the pool's threads (small maps: `cut`), the three
  phases are cut apart instead, each over whole images, in one job whose pieces wait for the
  phase before (`rvm.kernels.workpool.wait_until`): the input transform by ranges of input
  channels, the GEMMs by ranges of the 16 positions, the output transform by ranges of
  output channels; no piece transforms an input or packs a GEMM's operand again. Each phase's
  ranges go to the same thread at every call while the threads keep pace
  (`rvm.kernels.parfor.affine_unit`), so a core writes again the lines of the transformed
  input and products it wrote last time.

Where it pays against the other methods is `rvm.kernels.convmethod.winograd_pays`' rule.

With ``precision="bf16"`` (`rvm.transform.to_bf16`, where `rvm.kernels.convmethod.
winograd_bf16_pays`) the 16 GEMMs run in bf16 with float32 sums (`conv2d_transformed_bf16`):
``U`` transformed, rounded to bf16 and paired along the input channels once, at build time
(`transform_bf16`: int32 words, (16, o, ceil(c / 2)), A as `rvm.kernels.bf16gemm.walk` reads
it), each block's ``V`` written straight into bf16 pair rows by its input transform
(`_input`, a pair of channels at a time), the output transform and ``M`` float32. On a
Zen 4 core (``vdpbf16ps``, two threads) that took 0.59-0.69 of float32 Winograd's time on
vgg19's and squeezenet's layers, where the direct bf16 convolution took about float32
Winograd's; its error about 1.7 times the direct bf16 convolution's (the transformed input's
rounding: 3.7-4.4e-3 of the largest output against 2.2-2.7e-3, random weights and inputs).
"""

from __future__ import annotations

import numpy as np

from rvm.kernels import parfor, sgemm, workpool
from rvm.kernels.bf16gemm import walk
from rvm.kernels.blocks import kept
from rvm.kernels.cpu import cpu
from rvm.kernels.jitting import alive, jit
from rvm.kernels.planes import U
from rvm.kernels.reference.bf16 import bf16_rows
from rvm.kernels.winotiles import input_tiles, output_tiles

__all__ = [
    "FIRST_RUN_TASKS",
    "FIRST_RUN_TASKS_BF16",
    "OWN_TASKS",
    "POSITIONS",
    "block_rows",
    "conv2d",
    "conv2d_transformed",
    "conv2d_transformed_bf16",
    "cut",
    "first_run_tasks",
    "kernel_transform",
    "transform",
    "transform_bf16",
    "transformed_at",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

POSITIONS = 16
"""The positions of a transformed tile (4 x 4): the GEMMs a block runs."""
L2_FLOATS = cpu().l2 // 4
"""One core's L2 in floats: a block's transformed input and products take 16 times this at
most (`block_rows`)."""
_PAIRS = 128  # (output, input) channel pairs a block of the weight's transform (`_weights`)
OWN_TASKS = ("conv2d_winograd", "winograd_blocks")
"""The library tasks (`rvm.kernels.parfor`) of this method's own, in float32."""
FIRST_RUN_TASKS = (*OWN_TASKS, *sgemm.TASKS)
"""The library tasks a float32 convolution by this method may run; those one of ``o`` output
channels runs: `first_run_tasks`."""
FIRST_RUN_TASKS_BF16 = ("conv2d_winograd", "winograd_blocks_bf16")
"""Those of one on a weight transformed into bf16 pairs (`conv2d_transformed_bf16`)."""


def first_run_tasks(o: int) -> tuple[str, ...]:
    """The library tasks a float32 call to ``o`` output channels runs: its own, and the path
    its 16 GEMMs take (`sgemm.gemm_tasks`: each of all ``o`` rows, no epilogue, B by its
    stride, in a block or a range of positions alike: `_blocks`, `_apart`)."""
    return (*OWN_TASKS, *sgemm.gemm_tasks(o))


@jit(**_OPTS)
def block_rows(c, oc, tw, th):  # type: ignore[no-untyped-def]
    """Rows of tiles a block takes, of ``th`` rows of ``tw`` tiles, for ``c`` input and
    ``oc`` output channels a piece: the most whose transformed input and products at one
    position (a tile and channel a float each) fit one core's L2 (`L2_FLOATS`), what each of
    the block's 16 GEMMs reads and writes, one row at least.

    On a Zen 3 core (512 KB L2, one thread) this took 0.6 to 0.75 of the time of blocks
    whose 16 positions fit L2 (1 to 14 tiles a block with 512 channels: GEMMs one panel wide,
    the transformed weight read again from L3 for each) on vgg19's layers from 56 x 56 and
    128 channels at 28 x 28; 64 channels at 56 x 56 ran about as fast either way (the
    machine loaded: 0.9 to 1.2)."""
    per_row = (c + oc) * tw
    return max(1, min(th, L2_FLOATS // per_row))


ROW_BLOCK_TILES = 8 * sgemm.NR
"""Tiles a block of rows keeps at least where a small batch's images are cut into blocks of
rows for the threads (`cut`), its GEMMs 8 of the micro-kernel's tiles wide or more (half that
where the transformed weight fits one core's L2): on a Zen 3 (AVX2, 16 columns a tile)
inception_v2's 64 -> 192 on 56 x 56 in blocks of 196 tiles won (6.7-7.0 -> 4.6 ms in the model
at two threads), vgg19's 512 -> 512 on 28 x 28 in blocks of 42-56 lost to its phases cut apart
(18.5-27 -> 22-26 ms alone, loaded). On a Zen 4 (AVX-512, 48 columns a tile, 1 MB of L2: an
image of 56 x 56 one block, so none of them was cut in rows before session 65) blocks of 196
tiles took 0.86-1.01 of the phases apart's time where the weight fits L2 (resnet50's 64 -> 64,
densenet121's 128 -> 32 and inception_v2's 64 -> 192 on 56 x 56: a layer alone in a model, two
threads, its input in cache or evicted, medians and quartiles of alternated processes) but
1.24 on vgg19's 256 -> 256 on 56 x 56 (a 4 MB weight each block reads again)."""


@jit(**_OPTS)
def cut(c, o, n, tw, th, threads, words):  # type: ignore[no-untyped-def]
    """(rows of tiles a block, blocks an image, ranges of output channels, ranges of input
    channels): a call's pieces on the pool's ``threads``, ``n`` images of ``th`` rows of ``tw``
    tiles, for ``c`` input and ``o`` output channels, the transformed input float32 or (``words``
    1) bf16 pair words.

    Blocks as large as `block_rows` has them (an image's rows cut evenly), each piece one
    block's three phases, where they give each thread `rvm.kernels.parfor.PIECES_PER_THREAD`
    pieces or more (or there is one thread): one range of output channels, no range of input
    channels (0). Where there are fewer but an image takes more than one block, or its
    transformed weight fits one core's L2 (each block reads it all), whole blocks still: a
    multiple of the threads, two a thread at least (each thread's operands stay in its own
    L2), each of `ROW_BLOCK_TILES` tiles or more (half as many with that weight). Else (small
    maps, or blocks that would be too narrow), each phase is cut apart for the
    whole image, its pieces waiting for the phase before: the input transform by ranges of
    input channels (one a vector of them at most), the GEMMs by ranges of the 16 positions
    (the "blocks"), the output transform by ranges of output channels, as many of each as
    the threads want, so no piece does another's work again. (Session 43 cut small maps'
    blocks into ranges of output channels and rows of tiles, each transforming its input
    again and packing its GEMMs' operand again: 1.5 to 2.5 times the direct method's time on
    14 x 14 maps at two threads. Cut apart, inception_v2's 64 -> 192 on 56 x 56, two blocks,
    streamed its image's 13 MB of transformed input and products through L3 between the
    phases: 7.0 ms in the model at two threads against 4.6 in four blocks of rows, its one
    thread's 6.7; on 28 x 28 and 14 x 14, one block an image, blocks of rows lost: 0.56 ms
    -> 0.73 with four on 64 -> 64 at 28 x 28, whose GEMMs get narrow.)

    At batch 1 on two threads that takes inception_v1's and inception_v2's 64 -> 192 on 56 x
    56 and vgg19's layers on 112 x 112 and 56 x 56 out of the phases cut apart (vgg19's
    image streamed 13-38 MB of them through L3 and memory).

    With ``words`` (bf16 products: the transformed input in pair words, half its floats),
    whole blocks of rows are cut further, a multiple of the threads, until a block's
    transformed input and products at all 16 positions fit one core's L2 (inception_v2's 64
    -> 192 on 56 x 56: 14 blocks of 2 rows, not 4 of 7). Session 90, the rule switched at run
    time in turns in one process (two threads, Zen 4): inception_v2 0.977-0.987 of its bf16
    time, inception_v1 0.988, resnet50 0.999-1.002, vgg19 0.996, densenet121 0.999-1.005.
    (Float32 blocks that fit L2 so, session 88: inception_v2's 64 -> 192 in 14 blocks 0.975,
    in 28 1.076.)"""
    per = block_rows(c, o, tw, th)
    blocks = -(-th // per)
    want = parfor.PIECES_PER_THREAD * threads
    if threads < 2 or n * blocks >= want:
        return -(-th // blocks), blocks, 1, 0
    b = min(th, -(-max(blocks, -(-2 * threads // n)) // threads) * threads)
    small_weight = POSITIONS * o * c <= L2_FLOATS  # each block reads it all again
    least = ROW_BLOCK_TILES // 2 if small_weight else ROW_BLOCK_TILES
    if (blocks > 1 or small_weight) and th * tw >= b * least:  # whole blocks of rows
        if words:  # all 16 positions' pair words and products in one core's L2
            fit = -(-th // max(1, L2_FLOATS // (POSITIONS * ((c + 1) // 2 + o) * tw)))
            b = min(th, max(b, -(-fit // threads) * threads))
        return -(-th // b), b, 1, 0
    each = -(-want // n)
    return th, min(POSITIONS, each), min(o, each), max(1, min(each, c // sgemm.LANES))


def kernel_transform(g0, g1, g2, g3, g4, g5, g6, g7, g8):  # type: ignore[no-untyped-def]
    """The 16 positions of ``G g G^T`` (row-major: position ``4 k + j``) of the 3x3 kernel
    ``g`` (row-major, float32): G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]].
    On scalars in jitted code (`_weights`), on arrays of many kernels' values in NumPy
    (`transform`): the same float32 operations in the same order, so both give the same bits."""
    h = np.float32(0.5)
    # The rows of G g: g's first, half the sum, half the alternating sum, its last; each row's
    # columns by G^T alike.
    a0, a1, a2 = h * (g0 + g3 + g6), h * (g1 + g4 + g7), h * (g2 + g5 + g8)
    b0, b1, b2 = h * (g0 - g3 + g6), h * (g1 - g4 + g7), h * (g2 - g5 + g8)
    return (
        g0, h * (g0 + g1 + g2), h * (g0 - g1 + g2), g2,
        a0, h * (a0 + a1 + a2), h * (a0 - a1 + a2), a2,
        b0, h * (b0 + b1 + b2), h * (b0 - b1 + b2), b2,
        g6, h * (g6 + g7 + g8), h * (g6 - g7 + g8), g8,
    )  # fmt: skip


_kernel_transform = jit(**_OPTS, inline="always")(kernel_transform)


@jit(**_OPTS)
def _weights(wf, uf, pairs, lo, hi):  # type: ignore[no-untyped-def]
    """``uf`` (16 ``pairs`` floats: (16, o, c)) = ``G g G^T`` of each 3x3 kernel ``g`` of
    ``wf`` (``pairs`` = o c kernels of 9 floats), kernels ``lo`` to ``hi``
    (`kernel_transform`)."""
    s = U(pairs)
    # Through a block of pairs a position in L1, then a run a position: stored straight, the
    # 16 positions' streams (o c floats apart: a multiple of 4 KB) share one set of L1 ways.
    tmp = np.empty(POSITIONS * _PAIRS, dtype=np.float32)
    for q0 in range(lo, hi, _PAIRS):
        block = min(_PAIRS, hi - q0)
        for i in range(block):
            g = U(9 * (q0 + i))
            t = _kernel_transform(wf[g], wf[g + U(1)], wf[g + U(2)], wf[g + U(3)],
                                  wf[g + U(4)], wf[g + U(5)], wf[g + U(6)], wf[g + U(7)],
                                  wf[g + U(8)])  # fmt: skip
            for xi in range(POSITIONS):
                tmp[U(xi * _PAIRS + i)] = t[xi]
        for xi in range(POSITIONS):
            dst, src = U(xi) * s + U(q0), U(xi * _PAIRS)
            for i in range(block):
                uf[dst + U(i)] = tmp[src + U(i)]


@jit(**_OPTS)
def _input(x, n_, pt, pl, ty0, ty1, tw, at_v, plane, c0, c1, words):  # type: ignore[no-untyped-def]  # noqa: E501
    """``B^T d B`` of the 4 x 4 input window ``d`` of each tile in rows ``ty0`` to ``ty1`` of
    image ``n_`` (the window of tile (ty, tx) at input row ``2 ty - pt``, column ``2 tx - pl``;
    zeros outside the input), input channels ``c0`` to ``c1``: position ``xi``'s tile ``(ty -
    ty0) tw + tx`` at ``at_v + xi plane`` (bytes), channel ``c``'s ``c`` rows of tiles on,
    float32, where ``words`` is 0; else (``c0`` even) bf16 pair words as
    `rvm.kernels.bf16gemm.walk` reads B, channels ``2 p`` (low half) and ``2 p + 1`` (high
    half; 0 past ``c1``) in the row ``p``: a channel (pair) at a time by
    `rvm.kernels.winotiles.input_tiles`, which reads the windows straight from the image."""
    c, ih, iw = x.shape[1], x.shape[2], x.shape[3]
    tiles = (ty1 - ty0) * tw
    each, at_x = 2 if words else 1, parfor.address(x)
    for c_ in range(c0, c1, each):
        lo = at_x + 4 * (n_ * c + c_) * ih * iw
        hi = lo + 4 * ih * iw if words and c1 - c_ > 1 else 0
        at = at_v + 4 * (c_ // each) * tiles
        input_tiles(lo, hi, ih, iw, 2 * ty0 - pt, pl, ty1 - ty0, tw, at, plane, words)


@jit(**_OPTS)
def _output(m, positions, out, n_, o0, o1, ty0, ty1, tw, epilogue, like):  # type: ignore[no-untyped-def]  # noqa: E501
    """Output channels ``o0`` to ``o1`` of image ``n_``'s rows of tiles ``ty0`` to ``ty1``:
    ``A^T M A`` of each tile's 16 products ``m`` (16 positions ``positions`` floats apart,
    each (o1 - o0, tiles)), then the ``epilogue`` (`rvm.kernels.sgemm.sgemm_segments`': the
    bias's address or 0, its step, the activation, the residual's address (out's layout) or
    0), stored straight into the output by `rvm.kernels.winotiles.output_tiles`, the
    positions past the output's edge not stored."""
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    tiles = (ty1 - ty0) * tw
    at_bias, bias_step, act, at_res = epilogue
    bias = parfor.array_at(at_bias, (o if at_bias != 0 else 0,), like)
    zero = np.float32(0.0)
    at_m, at_out = parfor.address(m), parfor.address(out)
    for k in range(o1 - o0):
        b = bias[(o0 + k) * bias_step] if at_bias != 0 else zero
        top = 4 * ((n_ * o + o0 + k) * oh + 2 * ty0) * ow  # its first row's bytes
        res = at_res + top if at_res != 0 else 0
        output_tiles(at_m + 4 * k * tiles, 4 * positions, tw, ty1 - ty0, at_out + top, ow,
                     oh - 2 * ty0, res, b, act)  # fmt: skip


# A job (int64): its length, x, u (the transformed weight), out, n, c, ih, iw, o, oh, ow, pt,
# pl, rows of tiles a block, blocks an image (or ranges of positions), ranges of output
# channels, the epilogue (4), the phase (0: the blocks; else the pieces of the weight's
# transform), w, then where the phases are cut apart (`cut`): ranges of input channels an
# image (0: they are not), the transformed input's address, the products', and the count of
# the pieces done of each of the first two phases; then, where the phases are cut apart on
# more than one thread, each phase's counters of `rvm.kernels.parfor.affine_unit`, one a
# thread.
_JOB = 27
_APART = 22
_DONE = 25


@jit(**_OPTS)
def _products(at_u, at_v, at_m, xi0, xi1, o0, oc, o, c, tiles):  # type: ignore[no-untyped-def]
    """The GEMMs of positions ``xi0`` to ``xi1``: ``M[xi] = U[xi] @ V[xi]`` for output channels
    ``o0`` to ``o0 + oc`` (M's rows), V (16, c, tiles) at ``at_v`` and M (16, oc, tiles) at
    ``at_m``, float32, by `rvm.kernels.sgemm` on U (16, o, c)."""
    for xi in range(xi0, xi1):
        sgemm.sgemm(at_u + 4 * (xi * o + o0) * c, c, at_v + 4 * xi * c * tiles, tiles,
                    at_m + 4 * xi * oc * tiles, tiles, oc, tiles, c, 0)  # fmt: skip


@jit(**_OPTS)
def _products_bf16(at_u, at_v, at_m, xi0, xi1, o0, oc, o, c, tiles):  # type: ignore[no-untyped-def]  # noqa: E501
    """`_products` in bf16: V in bf16 pair rows ((16, c2, tiles) words, `_input`) by
    `rvm.kernels.bf16gemm.walk` on U (16, o, c2) of bf16 pairs (`transform_bf16`)."""
    c2 = (c + 1) // 2
    for xi in range(xi0, xi1):
        a, b = at_u + 4 * (xi * o + o0) * c2, at_v + 4 * xi * c2 * tiles
        m = at_m + 4 * xi * oc * tiles
        walk(a, c2, 0, oc, b, 4, 4 * tiles, tiles, 0, 0, m, tiles, tiles, c2, 0, 0, 0, 0)


def _blocks_task(piece, like, data):  # type: ignore[no-untyped-def]
    _blocks(piece, like, data, _products, 0)


def _blocks_bf16_task(piece, like, data):  # type: ignore[no-untyped-def]
    _blocks(piece, like, data, _products_bf16, 1)


@jit(**_OPTS, inline="always")
def _blocks(piece, like, data, products, bf16):  # type: ignore[no-untyped-def]
    """Piece ``piece`` of a call (`conv2d`): a range of the weight's kernels transformed
    (phase 1); or one block of rows of tiles of one image, for one range of output channels:
    its input transformed, its 16 GEMMs (``products``: `_products`, or `_products_bf16` in
    the bf16 task, so a float32 model builds no bf16 GEMM; ``bf16`` 1 there: U holds bf16
    pairs, `transform_bf16`, and V is written in pair words), its output transformed; or,
    where the phases are cut apart (`cut`), a piece of one of them (`_apart`)."""
    j = parfor.job(data)
    if j[20] > 0:
        pairs = j[8] * j[5]
        lo, hi = parfor.piece_range(piece, j[20], pairs, _PAIRS)
        wf = parfor.array_at(j[21], (9 * pairs,), like)
        _weights(wf, parfor.array_at(j[2], (POSITIONS * pairs,), like), pairs, lo, hi)
        return
    if j[_APART] > 0:
        _apart(piece, j, like, products, bf16)
        return
    n, c, ih, iw, o, oh, ow = j[4], j[5], j[6], j[7], j[8], j[9], j[10]
    pt, pl, per, blocks, parts = j[11], j[12], j[13], j[14], j[15]
    x = parfor.array_at(j[1], (n, c, ih, iw), like)
    out = parfor.array_at(j[3], (n, o, oh, ow), like)
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    part = piece % parts
    b_ = (piece // parts) % blocks
    n_ = piece // parts // blocks
    ty0, ty1 = parfor.piece_range(b_, blocks, th, 1)  # even: at most ``per`` rows
    o0, o1 = parfor.piece_range(part, parts, o, sgemm.MR)
    oc, tiles = o1 - o0, (ty1 - ty0) * tw
    c2 = (c + 1) // 2
    v = kept(POSITIONS * (c2 if bf16 else c) * per * tw, x.dtype)  # bf16: pair words
    m = kept(POSITIONS * oc * per * tw, x.dtype)
    at_v, at_m = parfor.address(v), parfor.address(m)
    _input(x, n_, pt, pl, ty0, ty1, tw, at_v, 4 * (c2 if bf16 else c) * tiles, 0, c, bf16)
    products(j[2], at_v, at_m, 0, POSITIONS, o0, oc, o, c, tiles)
    alive(v)  # read by the GEMMs through its address: not freed before
    _output(m, oc * tiles, out, n_, o0, o1, ty0, ty1, tw, (j[16], j[17], j[18], j[19]), like)


@jit(**_OPTS, inline="always")
def _unit(j, phase, units, index):  # type: ignore[no-untyped-def]
    """The unit of phase ``phase`` (0 the input's, 1 the GEMMs', 2 the output's; ``units`` in
    all) that the piece ``index`` of that phase does: `rvm.kernels.parfor.affine_unit`'s where
    the job carries the phases' counters (three a thread past `_JOB`), else ``index``."""
    threads = (j[0] - _JOB) // 3
    if threads == 0:
        return index
    return parfor.affine_unit(parfor.address(j) + 8 * (_JOB + phase * threads), units, threads)


@jit(**_OPTS, inline="always")
def _apart(piece, j, like, products, bf16):  # type: ignore[no-untyped-def]
    """Piece ``piece`` of a call whose phases are cut apart (`cut`), each image's whole: the
    first ``n`` times ``j[22]`` a range of an image's input channels transformed, the next
    ``n`` times ``j[14]`` a range of an image's positions' GEMMs (once the input's pieces are
    done), the rest a range of an image's output channels transformed (once the GEMMs' are);
    each piece's range in its phase from `rvm.kernels.parfor.affine_unit` where the job has
    its counters."""
    n, c, ih, iw, o, oh, ow = j[4], j[5], j[6], j[7], j[8], j[9], j[10]
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    tiles = th * tw
    ranges, spans, parts = j[_APART], j[14], j[15]
    image_v, image_m = POSITIONS * c * tiles, POSITIONS * o * tiles
    v = parfor.array_at(j[_APART + 1], (n * image_v,), like)
    m = parfor.array_at(j[_APART + 2], (n * image_m,), like)
    done = parfor.address(j) + 8 * _DONE
    inputs, gemms = n * ranges, n * spans
    if piece < inputs:
        x = parfor.array_at(j[1], (n, c, ih, iw), like)
        u = _unit(j, 0, inputs, piece)
        n_, r = u // ranges, u % ranges
        c0, c1 = parfor.piece_range(r, ranges, c, 1 + bf16)  # bf16: whole pairs
        plane = 4 * ((c + 1) // 2 if bf16 else c) * tiles
        at_v = parfor.address(v) + 4 * n_ * image_v
        _input(x, n_, j[11], j[12], 0, th, tw, at_v, plane, c0, c1, bf16)
        workpool.add_at(done, 1)
        return
    if piece < inputs + gemms:
        workpool.wait_until(done, inputs)  # claimed before this piece: done soon
        u = _unit(j, 1, gemms, piece - inputs)
        n_, r = u // spans, u % spans
        xi0, xi1 = parfor.piece_range(r, spans, POSITIONS, 1)
        at_v = parfor.address(v) + 4 * n_ * image_v
        at_m = parfor.address(m) + 4 * n_ * image_m
        products(j[2], at_v, at_m, xi0, xi1, 0, o, o, c, tiles)
        workpool.add_at(done + 8, 1)
        return
    workpool.wait_until(done + 8, gemms)
    out = parfor.array_at(j[3], (n, o, oh, ow), like)
    u = _unit(j, 2, n * parts, piece - inputs - gemms)
    n_, r = u // parts, u % parts
    o0, o1 = parfor.piece_range(r, parts, o, 1)
    at = n_ * image_m + o0 * tiles
    _output(m[at:], o * tiles, out, n_, o0, o1, 0, th, tw, (j[16], j[17], j[18], j[19]), like)


parfor.export_task("winograd_blocks", _blocks_task)
parfor.export_task("winograd_blocks_bf16", _blocks_bf16_task)
_run = parfor.runner("winograd_blocks")
_run_bf16 = parfor.runner("winograd_blocks_bf16")


@jit(**_OPTS)
def conv2d(x, w, out, pt, pl, epilogue):  # type: ignore[no-untyped-def]
    """``out`` = the 3x3 convolution of ``x`` by ``w`` at stride 1 (top and left padding ``pt``,
    ``pl``), then its ``epilogue`` (`rvm.kernels.sgemm.sgemm_segments`': (bias address, its
    step, activation, residual address), `rvm.kernels.sgemm.NO_EPILOGUE`: none), by
    Winograd's F(2x2, 3x3) on rvm's pool (see the module docstring), the weight transformed
    here, on the pool, then `conv2d_transformed`. float32, C-contiguous; the caller checks the
    geometry."""
    o, c = w.shape[0], w.shape[1]
    if out.size == 0:
        return
    u = kept(POSITIONS * o * c, x.dtype)
    job = np.zeros(_JOB, dtype=np.int64)
    job[0], job[2], job[5], job[8] = _JOB, parfor.address(u), c, o
    job[21] = parfor.address(w)
    job[20] = parfor.chunks(POSITIONS * o * c, max(1, o * c // _PAIRS))
    _run(x, job[20], job)  # the weight's transform, then the blocks that read it
    conv2d_transformed(x, u.reshape((POSITIONS, o, c)), out, pt, pl, epilogue)
    alive(u)  # read by the pieces through its address: not freed before


@jit(**_OPTS)
def conv2d_transformed(x, u, out, pt, pl, epilogue):  # type: ignore[no-untyped-def]
    """`conv2d` by the weight already transformed, ``u`` (16, o, c): ``G g G^T`` of each
    kernel ``g``, as `transform` gives it (at build time for a constant weight:
    `rvm.op.conv2d_winograd`)."""
    transformed_at(x, parfor.address(u), out, pt, pl, epilogue, 0)
    alive(u)


@jit(**_OPTS)
def conv2d_transformed_bf16(x, u, out, pt, pl, epilogue):  # type: ignore[no-untyped-def]
    """`conv2d_transformed` by the weight transformed into bf16 pairs, ``u`` (16, o, c2)
    int32 words (`transform_bf16`): the 16 GEMMs in bf16 with float32 sums, the transforms
    in float32."""
    transformed_at(x, parfor.address(u), out, pt, pl, epilogue, 1)
    alive(u)


@jit(**_OPTS)
def transformed_at(x, at_u, out, pt, pl, epilogue, bf16):  # type: ignore[no-untyped-def]
    """`conv2d_transformed` (``bf16`` 0) or `conv2d_transformed_bf16` (1) by the weight at
    the address ``at_u``, which the caller keeps alive."""
    n, c = x.shape[0], x.shape[1]
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    if out.size == 0:
        return
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    threads = parfor.threads()
    per, blocks, parts, ranges = cut(c, o, n, tw, th, threads, bf16)
    apart = n * POSITIONS * th * tw if ranges else 1  # the phases' shared operands, per channel
    v, m = kept(apart * c, x.dtype), kept(apart * o, x.dtype)
    size = _JOB + 3 * threads if ranges and threads > 1 and parfor.affine() else _JOB
    job = np.zeros(size, dtype=np.int64)
    job[0], job[1], job[2], job[3] = size, parfor.address(x), at_u, parfor.address(out)
    job[4], job[5], job[6], job[7] = n, c, x.shape[2], x.shape[3]
    job[8], job[9], job[10], job[11], job[12] = o, oh, ow, pt, pl
    job[13], job[14], job[15] = per, blocks, parts
    job[16], job[17], job[18], job[19] = epilogue
    job[20], job[21] = 0, 0
    job[_APART], job[_APART + 1], job[_APART + 2] = ranges, parfor.address(v), parfor.address(m)
    job[_DONE], job[_DONE + 1] = 0, 0
    pieces = n * (ranges + blocks + parts) if ranges else n * blocks * parts
    if bf16:  # two tasks, the precision theirs: a float32 model builds no bf16 GEMM (`_blocks`)
        _run_bf16(x, pieces, job)
    else:
        _run(x, pieces, job)
    alive(v)  # read by the pieces through their addresses: not freed before
    alive(m)


def transform(w: np.ndarray) -> np.ndarray:
    """The transformed weight ``U`` (16, o, c) of the OIHW 3x3 weight ``w``, float32, in
    NumPy: the build-time pass's, once for a constant weight (`rvm.op.conv.pack_conv2d`),
    nothing to compile; a call on a weight known only then transforms it on the pool
    (`_weights`), with the same bits (`kernel_transform`)."""
    o, c = w.shape[0], w.shape[1]
    g = np.ascontiguousarray(w, dtype=np.float32).reshape(o, c, 9)
    return np.stack(kernel_transform(*(g[:, :, k] for k in range(9))))


def transform_bf16(w: np.ndarray) -> np.ndarray:
    """The transformed weight in bf16 pairs, (16, o, c2) int32 words, ``c2 = ceil(c / 2)``:
    `transform`'s ``U`` rounded to bf16 (nearest even), word ``(xi, o, p)`` the bits of
    ``U[xi, o, 2 p]`` (low half) and ``U[xi, o, 2 p + 1]`` (high half; 0 past ``c``), as
    `rvm.kernels.bf16gemm.walk` reads A: for `conv2d_transformed_bf16`."""
    return bf16_rows(transform(np.ascontiguousarray(w, dtype=np.float32))).view(np.int32)
