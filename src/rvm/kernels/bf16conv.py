"""bf16 convolution with float32 accumulation: NCHW, weights in channel pairs.

`conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, kh, kw)`: float32 ``x`` (NCHW) by the
weight ``w`` converted once, at compile time (`rvm.transform.to_bf16`), into float32 ``out``.
``w`` is ``(out channels, kp)`` int16 bf16 bits in the GEMM's A layout (`rvm.kernels.bf16gemm`:
a row's 32-bit word ``p`` is a pair of bf16 values) with its depth in *channel pairs*: word
``p = (c2 * kh + dy) * kw + dx`` of output channel ``o`` holds the weights of input channels
``2 c2`` (low half) and ``2 c2 + 1`` (high half) of its group at tap ``(dy, dx)``, an odd
group's last high half 0 (`rvm.op.bf16.conv_pairs`), or with ``pairing`` 1 that channel's
taps paired along the kernel's rows, read from column-pair phases of the plane
(`rvm.kernels.bf16planes.column_pairs`; a 3-channel 7 x 7 stem: 77 pairs, not 98).

Per image and group, the input is rounded (to nearest even) once into a zero-padded *pair
plane* of 32-bit words, word ``(c2, y, x)`` the bf16 pair of channels ``2 c2`` and ``2 c2 + 1``
at ``(y, x)`` (`pair_plane`): exactly what ``vdpbf16ps`` takes as B. The plane is kept in its
*stride phases* (as `rvm.kernels.planes.padded_phases` splits a float32 plane): phase ``(a,
b)`` holds the padded rows ``a, a + sh, ...`` and columns ``b, b + sw, ...``, only the phases
some tap reads, each ``(hq, wq)`` with ``wq`` the output's width plus the kernel's reach (at
stride 1 less the right padding, a row borrowing the next one's left: `pair_width`). Output
position ``(y, x)`` is then word ``y * wq + x`` of every phase, and the GEMM's pair row ``p``
at that position is the word ``taps[p]`` (`tap_table`: phase, pair, tap's row and column)
after it, at any stride. So there is no im2col at all (`direct`): the GEMM micro-kernel
(`rvm.kernels.bf16gemm.micro`, its ``indexed`` mode) runs `MR` output channels by up to `NR`
positions of the run of output rows, B's pair row ``p`` read straight from the phases at
``taps[p]`` on, the lanes unit-stride (a row's last ``wq - ow`` positions computed and
dropped). Rows of the output are cut into blocks whose plane rows stay in L2 while every band
of output channels walks them.

Large convolutions are cut into pieces on rvm's pool (`rvm.kernels.parfor`) by (band of output
channels, block of rows), the plane by channel pairs; the groups of a grouped convolution too
small to be cut (shufflenet's grouped 1 x 1s) run side by side instead, one a thread, each on
its own plane (`_groups_apart`): one after the other they left the second core idle. Small
maps run turned around on the same plane (`rvm.kernels.bf16turned`). Every entry point
checks its arrays' shapes first and raises `ValueError` naming what disagrees.

Between convolutions the activation may stay bf16 (`rvm.op.bf16`, decided by
`rvm.transform.to_bf16`): a convolution then writes the next one's pair plane instead of
float32, each block of rows rounded from a small buffer while in cache
(`rvm.kernels.bf16planes.rows_to_pairs`; turned around, each panel of channels as it is done,
in its piece), and the next one reads it as its plane. A prologue
(``x * scale + shift`` per channel, then ReLU: densenet's BN-ReLU) is applied as the plane
is built (`pair_words`).
"""

from __future__ import annotations

import numpy as np

from rvm.kernels import amx, amxconv, parfor, workpool
from rvm.kernels.bf16direct import direct, direct_group, vectors_out, walks_out
from rvm.kernels.bf16gemm import SPLIT_MIN
from rvm.kernels.bf16planes import (
    _pair_depth,
    _pair_width,
    pair_plane,
    phase_slots,
    plane_count,
    plane_dims,
    rows_to_pairs,
    tap_table,
    turned_words,
    widened,
)
from rvm.kernels.bf16turned import turned_group
from rvm.kernels.jitting import alive, jit
from rvm.kernels.planes import copy
from rvm.kernels.reference.packed import ACTIVATIONS

__all__ = ["conv2d", "direct", "phase_slots", "tap_table"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_NONE4, _NONE3 = (0, 0, 0, 0), (0, 0, 0)  # conv2d's ``to`` and ``of``: no pair plane
_NONE2 = (0, 0)  # conv2d's ``before``: no prologue
# A groups job (int64): its length; x's, w's, out's, the planes', the tap table's and the
# wide rows' addresses; n, c, h, w; co, kp; oh, ow; the planes' (phase pairs, hq, wq); the
# table's length; the wide rows' (og, oh * wq) (0, 0: none); the image, the groups; the
# geometry (pt, pl, sh, sw, kh, dh, kw, dw, the prologue's affine's address and index, the
# column pairs); the epilogue (the bias's address, 0: none; the activation's index; the
# residual's address, 0: none).
_GROUPS_JOB = 37


def _group_task(p, like, data):  # type: ignore[no-untyped-def]
    """Group ``p`` of an image (a pool task): its own plane and wide rows, one thread."""
    job = parfor.job(data)
    xc = parfor.array_at(job[1], (job[7], job[8], job[9], job[10]), like)
    w = parfor.array_at(job[2], (job[11], job[12] // 2), like).view(np.int16)
    oc = parfor.array_at(job[3], (job[7], job[11], job[13], job[14]), like)
    size = job[15] * job[16] * job[17]
    plane = parfor.array_at(job[4] + 4 * p * size, (job[15], job[16], job[17]), like)
    table = parfor.array_at(job[5], (2 * job[18],), like).view(np.int64)
    wsize = job[19] * job[20]
    wide = parfor.array_at(job[6] + 4 * p * wsize, (job[19], job[20]), like)
    geometry, epilogue = job[23:34].copy(), job[34:37].copy()
    planes = plane.view(np.uint32)
    cg = job[8] // job[22]
    pair_plane(xc[job[21]], p * cg, cg, geometry, planes)
    direct_group(w, oc, job[21], p, job[22], planes, table, wide, epilogue)


parfor.export_task("bf16_conv_groups", _group_task)
_run_groups = parfor.runner("bf16_conv_groups")


@jit(**_OPTS)
def _groups_apart(xc, w, oc, groups, plane):  # type: ignore[no-untyped-def]
    """Whether the groups of an image run side by side on the pool, one a thread: when there
    are several, each too small to be split itself (a grouped 1 x 1 convolution's)."""
    if groups < 2 or parfor.threads() < 2 or workpool.busy():
        return False
    og, oh, k2 = w.shape[0] // groups, oc.shape[2], w.shape[1] // 2
    return og * oh * plane.shape[2] * k2 < 2 * SPLIT_MIN


@jit(**_OPTS)
def _direct_image(xc, w, oc, b, groups, geometry, plane, table, wide, epilogue, built, src, c):  # type: ignore[no-untyped-def]  # noqa: E501
    """Image ``b``, group after group (`direct_group`, each split on the pool when large), or,
    when `_groups_apart`, all groups side by side on the pool, each with its own plane
    and wide rows; ``built``: ``plane`` is the image's pair plane already (one group);
    ``src``: ``xc`` holds pair planes of images of ``c`` channels (`pair_plane`'s ``src``;
    one group)."""
    if built or src[0] != 0 or not _groups_apart(xc, w, oc, groups, plane):
        cg = c // groups
        for g in range(groups):
            if not built:
                pair_plane(xc[b], g * cg, cg, geometry, plane, src)
            direct_group(w, oc, b, g, groups, plane, table, wide, epilogue)
        return
    # every group's plane, then every group's wide rows, in one array: the pool's task takes
    # it as its ``like`` argument, which keeps it alive until the groups are done
    room = np.empty(groups * (plane.size + wide.size), dtype=np.float32)
    job = np.empty(_GROUPS_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3] = _GROUPS_JOB, xc.ctypes.data, w.ctypes.data, oc.ctypes.data
    job[4], job[5] = room.ctypes.data, table.ctypes.data
    job[6] = room.ctypes.data + 4 * groups * plane.size
    for i in range(4):
        job[7 + i] = xc.shape[i]
    job[11], job[12], job[13], job[14] = w.shape[0], w.shape[1], oc.shape[2], oc.shape[3]
    job[15], job[16], job[17] = plane.shape[0], plane.shape[1], plane.shape[2]
    job[18], job[19], job[20] = table.shape[0], wide.shape[0], wide.shape[1]
    job[21], job[22] = b, groups
    copy(job[23:], geometry, 11)
    copy(job[34:], epilogue, 3)
    _run_groups(room, groups, job)


# -- the entry point --------------------------------------------------------------------------


@jit(**_OPTS)
def _check(x, w, out, groups, kh, kw, bias, act, res, c, co_out, pairing, res_shape, lines):  # type: ignore[no-untyped-def]  # noqa: E501
    n = x.shape[0]
    co = w.shape[0]
    if groups < 1 or c % groups or co % groups:
        raise ValueError("bf16 conv2d: the channels do not divide into the groups")
    if pairing < 0 or pairing > 3:
        raise ValueError("bf16 conv2d: unknown pairing index")
    cg = c // groups
    if pairing == 3 and (groups != 1 or co % 32 or cg % 32):  # `amxconv`'s bands and steps
        raise ValueError("bf16 conv2d: a weight in tiles needs one group, channels in 32s")
    if w.shape[1] != _pair_depth(cg, kh, kw, pairing):
        raise ValueError("bf16 conv2d: the weight's depth is not channel pairs x kernel")
    if out.shape[0] != n or plane_dims(out.shape[1:], lines)[0] != co_out:
        raise ValueError("bf16 conv2d: the output's batch or channels disagree")
    if bias.size != 0 and bias.size != co:
        raise ValueError("bf16 conv2d: the bias needs one value per output channel, or none")
    if act < 0 or act >= len(ACTIVATIONS):
        raise ValueError("bf16 conv2d: unknown activation index")
    if res.size != 0 and res.shape != res_shape:
        raise ValueError("bf16 conv2d: the residual's shape is not the output's")


@jit(inline="always", **_OPTS)
def conv2d(
    x,
    w,
    out,
    groups,
    sh,
    sw,
    dh,
    dw,
    pt,
    pl,
    kh,
    kw,
    bias,
    act,
    res,
    panel=0,
    to=_NONE4,
    of=_NONE3,
    before=_NONE2,
    pairing=0,
    rof=_NONE3,
    at=_NONE3,
    orders=0,
):  # type: ignore[no-untyped-def]
    """NCHW convolution of float32 ``x`` with the bf16 weight ``w`` (int16 bits, ``(out
    channels, kp)`` in channel pairs: `rvm.op.bf16.conv_pairs`) into float32 ``out``; padding
    top ``pt``, left ``pl`` (the output's size says the rest), by the direct method on the
    input's pair plane in its stride phases; then ``act(out + bias + res)`` (``bias`` float32,
    one value per output channel or empty: none; ``res`` float32 as the output image or
    empty: none; ``act`` an index of `ACTIVATIONS`) on each band of channels' rows as soon as
    they are summed, not as a pass after the convolution.

    Activations may stay bf16 between convolutions (`rvm.op.bf16`): ``to`` (int64: padding
    top, left, the output's height, width; height 0: none) makes ``out`` the next
    convolution's pair plane ``(n, (co + 1) // 2, hq, wq)`` (its uint32 words in a float32
    array; one group), each block of rows rounded into it as it is summed (on AMX from the
    walk's block in L1, `amx.BLOCK_OUT`; else `rows_to_pairs`); ``of`` (int64: the image's
    c, h, w; c 0: none) says ``x`` is this convolution's pair plane of such an image ``(n, (c
    + 1) // 2, hq, wq)`` (stride 1, one group), read as it is. ``before`` (int64: the address
    of a ``(2, c)`` float32 affine, its scales then its shifts, 0: none; a
    `rvm.op.bf16.PROLOGUES` index) applies ``x * scale + shift`` per channel (then ReLU) to
    the input as its pair plane is built. ``pairing`` (a
    `rvm.kernels.reference.bf16.PAIRINGS` index) says how ``w`` pairs an odd group's last
    channel's taps: 1, along the kernel's rows (not with a pair plane in). ``rof`` (int64: 1,
    then the padding top and left; ``(0, 0, 0)``: none) says ``res`` is the pair plane ``(n,
    (co + 1) // 2, hq, wq)`` of the output's image with that padding (a convolution's plane
    out, its words in a float32 array), read as it is by AMX's walk (`_conv2d`), else
    widened first (`bf16planes.widened`). ``at`` (int64: 1, then the padding top and left; ``(0, 0,
    0)``: none) with ``of`` says ``x`` is a pair plane of that image laid out for another
    convolution, with that padding: its words are copied into this one's stride phases (a
    strided convolution reading the plane a stride-1 one reads too). ``orders`` (bit 0 with
    ``of``: ``x`` is laid out as positions by channel pairs, ``(n, hq, wq, (c + 1) // 2)``, a
    pair plane's words turned; bit 1 with ``to``: so is ``out``, ``(n, hq, wq, (co + 1) //
    2)``; bit 2 with ``rof``: so is ``res``) lets the walk turned around (`amxconv`) read a
    position's channel pairs as one line and write them so; where it does not run
    (`_walks_positions`) the planes are turned into pair planes first and after
    (`turned_words`)."""
    rkind = 0 if res.size == 0 else (2 if rof[0] != 0 else 1)
    apart = orders != 0 and not _walks_positions(pairing, panel, groups, act, rkind, orders)
    # one call of `_planes` (inlined: a second would compile it twice for every caller)
    xc, oc, rc = _turned_in(x, out, res, orders if apart else 0)
    _planes(xc, w, oc, groups, sh, sw, dh, dw, pt, pl, kh, kw, bias, act, rc, panel, to, of,
            before, pairing, rof, at, 0 if apart else orders)  # fmt: skip
    if apart and orders & 2:
        _turned_images(oc, oc.shape[1], oc.shape[2] * oc.shape[3], out)


@jit(inline="always", **_OPTS)
def _walks_positions(pairing, panel, groups, act, rkind, orders):  # type: ignore[no-untyped-def]
    """Whether a convolution's planes of positions (``orders``, as `conv2d`'s) are walked as
    they lie: by the walk turned around (a weight in tiles, on AMX), a plane out only with at
    most a ReLU and no float32 residual (``rkind`` 1; `amxconv._lines`)."""
    lines_ok = orders & 2 == 0 or (act <= 1 and rkind != 1)
    return pairing == 3 and panel == 0 and groups == 1 and walks_out(act, rkind != 0) and lines_ok


@jit(**_OPTS)
def _turned_in(x, out, res, orders):  # type: ignore[no-untyped-def]
    """``(x, out, res)`` as pair planes where ``orders`` (`conv2d`'s) says they are planes of
    positions: ``x`` and ``res`` turned into new arrays, a new array for ``out`` (turned into
    it after); the others as they are."""
    xc, oc, rc = x, out, res
    if orders & 1:
        xc = _as_pair_plane(x)
    if orders & 2:
        oc = np.empty((out.shape[0], out.shape[3], out.shape[1], out.shape[2]), np.float32)
    if orders & 4:
        rc = _as_pair_plane(res)
    return xc, oc, rc


@jit(inline="always", **_OPTS)
def _as_pair_plane(plane):  # type: ignore[no-untyped-def]
    """A new pair plane of the words of ``plane``, a plane of positions."""
    n, hq, wq, pairs = plane.shape
    out = np.empty((n, pairs, hq, wq), np.float32)
    _turned_images(plane, hq * wq, pairs, out)
    return out


@jit(**_OPTS)
def _turned_images(src, rows, cols, dst):  # type: ignore[no-untyped-def]
    """Each image's ``rows`` x ``cols`` words of ``src`` turned into ``dst``'s
    (`turned_words`)."""
    s = np.ascontiguousarray(src)
    for b in range(src.shape[0]):
        turned_words(s[b].ctypes.data, rows, cols, dst[b].ctypes.data)


@jit(inline="always", **_OPTS)
def _planes(x, w, out, groups, sh, sw, dh, dw, pt, pl, kh, kw, bias, act, res, panel, to, of,
            before, pairing, rof, at, orders):  # type: ignore[no-untyped-def]  # fmt: skip
    """`conv2d`, its planes of positions walked as they lie, if any."""
    planed_out = to[2] > 0
    n, co = x.shape[0], w.shape[0]
    oh, ow = (to[2], to[3]) if planed_out else (out.shape[2], out.shape[3])
    kind = 0 if res.size == 0 else (2 if rof[0] != 0 else 1)
    if kind == 2:
        _check_residual_plane(res, n, co, oh, ow, rof, orders & 4 != 0)
        kind = amx.POSITIONS if orders & 4 else kind  # a plane of positions' (walked so)
    wq = _plane_width(x, of, ow, pl, kw, dw, sw)
    fast = _puts_out(wq, ow, planed_out, panel, act)  # with any residual
    if kind == 0 or (kind == 1 and not planed_out) or fast:
        _conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, kh, kw, bias, act, res, panel, to, of,
                before, pairing, kind, rof, at, orders)  # fmt: skip
        return
    # else the residual as float32 and, with a plane out, the float32 output rounded after
    rf = widened(res, co, oh, ow, rof[1], rof[2]) if kind == 2 else res
    if not planed_out:
        _conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, kh, kw, bias, act, rf, panel, to, of,
                before, pairing, 1, rof, at, 0)  # fmt: skip
        return
    sums = np.empty((n, co, oh, ow), np.float32)
    _conv2d(x, w, sums, groups, sh, sw, dh, dw, pt, pl, kh, kw, bias, act, rf, panel, _NONE4,
            of, before, pairing, 1, rof, at, 0)  # fmt: skip
    plane = np.empty(5, np.int64)
    plane[1], plane[2], plane[3], plane[4] = to[0], to[1], out.shape[2], out.shape[3]
    for b in range(n):
        plane[0] = out.ctypes.data + 4 * b * out.shape[1] * out.shape[2] * out.shape[3]
        at = sums.ctypes.data + 4 * b * co * oh * ow
        rows_to_pairs(plane, at, oh * ow, ow, co, oh, ow, 0, co, 0, oh)


@jit(inline="always", **_OPTS)
def _puts_out(wq, ow, planed_out, panel, act):  # type: ignore[no-untyped-def]
    """Whether the direct walk puts a convolution's blocks where they go itself, adding any
    residual there (a pair plane's too) and rounding them into a pair plane out: AMX's
    (`walks_out`), or the vector walk where `vectors_out` (its rows ``wq`` words wide, the
    output's ``ow``)."""
    return panel == 0 and (walks_out(act, True) or vectors_out(planed_out, wq > ow, act, True))


@jit(inline="always", **_OPTS)
def _plane_width(x, of, ow, pl, kw, dw, sw):  # type: ignore[no-untyped-def]
    """``wq``, the width of the convolution's pair plane phases (`pair_width`; ``x`` and
    ``of`` as `conv2d`'s, ``ow`` the output's width)."""
    return _pair_width(of[2] if of[0] > 0 else x.shape[3], ow, pl, kw, dw, sw)


@jit(**_OPTS)
def _check_residual_plane(res, n, co, oh, ow, rof, lines):  # type: ignore[no-untyped-def]
    pairs, hq, wq = plane_dims(res.shape[1:], lines)
    if res.ndim != 4 or res.shape[0] != n or pairs != (co + 1) // 2:
        raise ValueError("bf16 conv2d: the residual's pair plane has not the output's pairs")
    if rof[1] < 0 or rof[2] < 0 or hq < rof[1] + oh or wq < rof[2] + ow:
        raise ValueError("bf16 conv2d: the residual's pair plane is too small for the output")


@jit(**_OPTS)
def _conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, kh, kw, bias, act, res, panel, to, of,
            before, pairing, kind, rof, at, orders):  # type: ignore[no-untyped-def]  # fmt: skip
    """`conv2d` with a float32 residual (``kind`` 1) or none, or on AMX (one group, ReLU at
    most) a pair plane's (``kind`` 2, its padding ``rof[1:]``), read as the walk stores its
    blocks (`amx.BLOCK_OUT`); planes of positions (``orders``) only where the walk turned
    around runs (`_walks_positions`). Not inlined: `_planes` calls it three ways, and three
    inlined copies took 43 s to compile where one takes 31 (session 80)."""
    gathered = at[0] != 0 and of[0] > 0  # a pair plane in, copied into this one's phases
    planed_in, planed_out = of[0] > 0 and not gathered, to[2] > 0
    across, lines = orders & 1 != 0 and planed_in, orders & 2 != 0 and planed_out
    n, c = x.shape[0], of[0] if of[0] > 0 else x.shape[1]
    co = w.shape[0]
    co_out = (co + 1) // 2 if planed_out else co
    oh, ow = (to[2], to[3]) if planed_out else (out.shape[2], out.shape[3])
    wq = _plane_width(x, of, ow, pl, kw, dw, sw)
    res_shape = res.shape if kind >= 2 else (n, co, oh, ow)  # a plane's: checked by `conv2d`
    _check(x, w, out, groups, kh, kw, bias, act, res, c, co_out, pairing, res_shape, lines)
    cg, og = c // groups, co // groups
    columns = 1 if pairing == 1 and cg % 2 == 1 else 0
    if planed_in and columns:
        raise ValueError("bf16 conv2d: a pair plane in pairs its channels, not columns")
    if (planed_in or planed_out or gathered) and groups != 1:
        raise ValueError("bf16 conv2d: pair planes in or out need one group")
    if gathered and (
        columns
        or x.shape[1] != (c + 1) // 2
        or at[1] < 0
        or at[2] < 0
        or x.shape[2] < at[1] + of[1]
        or x.shape[3] < at[2] + of[2]
    ):
        raise ValueError("bf16 conv2d: the input's pair plane does not hold its image")
    if (
        (planed_out or kind >= 2)
        and res.size != 0
        and not _puts_out(wq, ow, planed_out, panel, act)
    ):
        raise ValueError(
            "bf16 conv2d: a pair plane out or residual here needs a walk that puts "
            "its blocks out (AMX's; on vectors, rows as wide as the output's)"
        )
    if planed_in and (sh != 1 or sw != 1):
        raise ValueError("bf16 conv2d: a pair plane in needs stride 1")
    _, height, width = plane_dims(out.shape[1:], lines)
    if planed_out and (height < to[0] + oh + 1 or width < to[1] + ow):
        raise ValueError("bf16 conv2d: the pair plane out is too small for the output")
    if orders != 0 and not _walks_positions(pairing, panel, groups, act, kind, orders):
        raise ValueError("bf16 conv2d: a plane of positions here needs the walk turned around")
    if n == 0 or co == 0 or oh * ow == 0:
        return
    xc = np.ascontiguousarray(x)
    wc = np.ascontiguousarray(w)
    cg2 = (cg + 1) // 2
    # each phase holds its taps' rows of every output row, and one row more for the
    # positions past a row's end (their taps run on into the next row)
    hq = oh + ((kh - 1) * dh) // sh + 1
    # a weight in tiles: the walk turned around (`amxconv`) where it puts its blocks itself
    turned = pairing == 3 and panel == 0 and groups == 1
    turned = turned and walks_out(act, res.size != 0, planed_out or kind >= 2 or wq > ow or across)
    if pairing == 3 and not turned:
        wc = amxconv.rows_of(wc, kh * kw)
    dims = plane_dims(x.shape[1:], across)
    if planed_in and (dims[0] != cg2 or dims[1] != hq or dims[2] != wq):
        raise ValueError("bf16 conv2d: the input's pair plane is not this convolution's")
    # with a pair plane out, the float32 rows are scratch: a block's (direct: `_direct`) or
    # an image's (turned around)
    scratch = np.empty((n if panel > 0 and planed_out else 0, co, oh, ow), np.float32)
    oc = scratch if planed_out else np.ascontiguousarray(out)
    phases = 0 if planed_in else plane_count(cg2, kh, kw, dh, dw, sh, sw, columns)
    plane = np.empty((phases, hq, wq), dtype=np.uint32)
    table = tap_table(cg2, kh, kw, dh, dw, sh, sw, hq, wq, columns, 1 if pairing >= 2 else 0)
    geometry = np.array([pt, pl, sh, sw, kh, dh, kw, dw, before[0], before[1], columns],
                        dtype=np.int64)  # fmt: skip
    # `pair_plane`'s source: a pair plane's height, padding and width, and the image's size
    src = (x.shape[2], at[1], at[2], x.shape[3], of[1], of[2]) if gathered else (0, 0, 0, 0, 0, 0)
    rows_wide = wq > ow and panel == 0 and not planed_out and not walks_out(act, res.size != 0)
    rows_wide = rows_wide and not vectors_out(planed_out, True, act, res.size != 0)  # tiles out
    wide = np.empty((og if rows_wide else 0, oh * wq), np.float32)
    bc = np.ascontiguousarray(bias)
    rc = np.ascontiguousarray(res)
    epilogue = np.zeros(17, dtype=np.int64)
    epilogue[13] = kh * kw if turned else 0
    epilogue[14] = cg2 if across else 0  # planes of positions: their channel pairs
    epilogue[15] = co_out if lines else 0
    epilogue[0] = bc.ctypes.data if bc.size else 0
    epilogue[1] = act
    epilogue[2] = rc.ctypes.data if rc.size else 0
    epilogue[8] = kind if rc.size else 0
    if kind >= 2:  # the residual plane's padding top and left, height and width (its pairs)
        epilogue[9], epilogue[10] = rof[1], rof[2]
        lines_res = kind == amx.POSITIONS
        pairs, epilogue[11], epilogue[12] = plane_dims(rc.shape[1:], lines_res)
        epilogue[16] = pairs if lines_res else 0
    image_words = out.shape[1] * out.shape[2] * out.shape[3]
    res_words = rc.shape[1] * rc.shape[2] * rc.shape[3]
    for b in range(n):
        image = xc[b].view(np.uint32) if planed_in else plane
        if kind >= 2 and rc.size:
            epilogue[2] = rc.ctypes.data + 4 * b * res_words
        if planed_out:
            epilogue[3] = out.ctypes.data + 4 * b * image_words
            epilogue[4], epilogue[5] = to[0], to[1]
            epilogue[6], epilogue[7] = height, width
        if panel > 0:
            offs = np.empty(oh * ow, dtype=np.int64)
            for y in range(oh):
                for x_ in range(ow):
                    offs[y * ow + x_] = y * wq + x_
            for g in range(groups):
                if not planed_in:
                    pair_plane(xc[b], g * cg, cg, geometry, image, src)
                turned_group(wc, oc, b, g, groups, image, table, offs, epilogue, panel)
        else:
            _direct_image(xc, wc, oc, b, groups, geometry, image, table, wide, epilogue, planed_in,
                          src, c)  # fmt: skip
    if not planed_out and oc.ctypes.data != out.ctypes.data:
        for i in np.ndindex(out.shape):  # not ``out[...] = oc``: see `planes.copy`
            out[i] = oc[i]
    alive(bc)  # copies of a strided bias or residual: read through their addresses
    alive(rc)
