"""The bf16 convolutions' pair planes: a float32 image rounded (to nearest even) into the
zero-padded 32-bit words ``vdpbf16ps`` takes as B, word ``(c2, y, x)`` the bf16 pair of
channels ``2 c2`` (low half) and ``2 c2 + 1`` (high half) at ``(y, x)``, kept in its stride
phases (`pair_plane`, split on the pool by channel pairs), and where each of a convolution's
GEMM pair rows reads in them (`tap_table`), each run of values rounded by
`rvm.kernels.bf16words.pair_words`: the convolutions build their input planes so
(`rvm.kernels.bf16conv`, `rvm.kernels.bf16turned`), and without AMX write the next
convolution's plane from their float32 rows so (`rows_to_pairs`).

An odd group's last channel may pair its taps along the kernel's rows instead (``pairing``
``"columns"``, `rvm.kernels.reference.bf16.PAIRINGS`): then the plane holds, after its
phases, that channel's *column-pair* phases, word ``(r, q)`` of phase ``(a, b)`` the pair of
padded pixels ``(r sh + a, q sw + b)`` and ``(r sh + a, q sw + b + dw)``, which taps ``(dy,
2 t)`` and ``(dy, 2 t + 1)`` read as one word (`column_pairs`, `tap_table`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import entry, parfor, workpool
from rvm.kernels.bf16gemm import PACK_SPLIT_MIN
from rvm.kernels.bf16words import NO_AFFINE, move_words, pair_words
from rvm.kernels.direct_tile import read_line
from rvm.kernels.gemmshape import LINE
from rvm.kernels.jitting import jit
from rvm.kernels.microkernel import floats_at
from rvm.kernels.reference.bf16 import pair_depth, pair_width

__all__ = [
    "column_pairs",
    "pad_pairs",
    "pad_positions",
    "pair_image",
    "pair_plane",
    "phase_slots",
    "plane_count",
    "plane_dims",
    "read_rows",
    "rows_to_pairs",
    "tap_table",
    "turned_words",
    "widened",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


_pair_width = jit(inline="always", **_OPTS)(pair_width)  # the kernels' copies
_pair_depth = jit(inline="always", **_OPTS)(pair_depth)


@jit(**_OPTS)
def phase_slots(k, d, s):  # type: ignore[no-untyped-def]
    """Along one axis (kernel ``k``, dilation ``d``, stride ``s``): ``slots[a]``, the place of
    stride phase ``a`` among the phases some tap reads (-1 when none does), and their count."""
    slots = np.full(s, -1, dtype=np.int64)
    for t in range(k):
        slots[(t * d) % s] = 0
    count = 0
    for a in range(s):
        if slots[a] == 0:
            slots[a] = count
            count += 1
    return slots, count


@jit(**_OPTS)
def plane_count(cg2, kh, kw, dh, dw, sh, sw, columns):  # type: ignore[no-untyped-def]
    """The ``(hq, wq)`` planes of a group's pair plane: ``cg2`` channel pairs in each stride
    phase some tap reads, and with ``columns`` (an odd group's last channel paired along
    columns) that channel's column-pair phases, one per row phase and phase of an even
    tap's column (`column_pairs`)."""
    _, nrows = phase_slots(kh, dh, sh)
    _, ncols = phase_slots(kw, dw, sw)
    _, nhcols = phase_slots(kw // 2, 2 * dw, sw)
    return nrows * (ncols * cg2 + (nhcols if columns else 0))


@jit(**_OPTS)
def column_pairs(plane, cg2, kh, kw, dh, dw, sh, sw):  # type: ignore[no-untyped-def]
    """The column-pair phases of a pair plane whose last pair is an odd group's last channel
    (its high halves 0), from that pair's phases, built: phase ``(a, b)``'s word ``i``
    (flat, rows of ``wq``) is the pair of its phase ``(a, b)``'s ``i`` (low half) and its
    phase ``(a, (b + dw) % sw)``'s ``i + (b + dw) // sw`` (high; 0 past the phase), so a
    tap ``(dy, 2 t)`` reading word ``i`` of phase ``(a, b)`` reads tap ``(dy, 2 t + 1)``'s
    word as its high half, the stride-1 rows' borrowing of the next row's padding included;
    after the channel pairs' phases, row phase after row phase (`plane_count`)."""
    rows, nrows = phase_slots(kh, dh, sh)
    cols, ncols = phase_slots(kw, dw, sw)
    hcols, nhcols = phase_slots(kw // 2, 2 * dw, sw)
    size = plane.shape[1] * plane.shape[2]
    flat = plane.reshape(plane.shape[0], size)
    for a in range(sh):
        for b in range(sw):
            if rows[a] < 0 or hcols[b] < 0:
                continue
            b2, e = (b + dw) % sw, (b + dw) // sw
            lo = flat[(rows[a] * ncols + cols[b]) * cg2 + cg2 - 1]
            hi = flat[(rows[a] * ncols + cols[b2]) * cg2 + cg2 - 1]
            out = flat[nrows * ncols * cg2 + rows[a] * nhcols + hcols[b]]
            for i in range(max(0, size - e)):
                out[i] = (lo[i] & 0xFFFF) | (hi[i + e] << 16)
            for i in range(max(0, size - e), size):
                out[i] = lo[i] & 0xFFFF


@jit(inline="always", **_OPTS)
def _scales(at, mode, c, i, pair):  # type: ignore[no-untyped-def]
    """The prologue's (scale, shift) of channel ``i`` and of ``i + 1`` (when ``pair``) of its
    affine at ``at`` (scales, then ``c`` shifts; `pair_words`), ones and zeros at ``mode``
    0."""
    if mode == 0:
        return NO_AFFINE
    f = floats_at(at)
    j = i + pair
    return (f[i], f[c + i], f[j], f[c + j])


@jit(inline="always", **_OPTS)
def _zero(at, n):  # type: ignore[no-untyped-def]
    """``n`` words of 0 (float32 0.0's bits) from the int64 address ``at`` on (none where
    ``n <= 0``)."""
    out = floats_at(at)
    for q in range(n):
        out[q] = 0.0


@jit(inline="always", **_OPTS)
def _plane_part(job, c2a, c2b):  # type: ignore[no-untyped-def]
    """Channel pairs [c2a, c2b) of a plane job (`_PLANE_JOB`) in each stride phase a tap
    reads: phase ``(a, b)``'s row ``r``, column ``q`` is the padded image's row ``r * sh +
    a``, column ``q * sw + b``; the words no input reaches 0, the others rounded from the
    image's channel pair, a vector loop a row (`pair_words`)."""
    at_x, cg, h, wd, at_p = job[1], job[2], job[3], job[4], job[5]
    hq, wq, pt, pl, sh, sw = job[6], job[7], job[8], job[9], job[11], job[12]
    cg2 = (cg + 1) // 2
    rows, _ = phase_slots(job[13], job[14], sh)
    cols, ncols = phase_slots(job[15], job[16], sw)
    for a in range(sh):
        for b in range(sw):
            if rows[a] < 0 or cols[b] < 0:
                continue
            # the phase's columns [q0, q1) hold input columns q * sw + b - pl
            q0 = min(wq, max(0, -(-(pl - b) // sw)))
            q1 = max(q0, min(wq, -(-(wd + pl - b) // sw)))
            first = q0 * sw + b - pl
            slot = (rows[a] * ncols + cols[b]) * cg2
            # unit strides, no column padding: the rows an input row fills are one run of
            # words in both the image and the phase, converted in one call
            whole = sh == 1 and sw == 1 and q0 == 0 and q1 == wq and wq == wd and job[20] == 0
            for c2 in range(c2a, c2b):
                pair = 1 if 2 * c2 + 1 < cg else 0
                lo = at_x + 4 * (2 * c2 * h * wd + first)
                scales = _scales(job[17], job[18], job[19], 2 * c2, pair)
                base = at_p + 4 * (slot + c2) * hq * wq  # the phase's row 0 of this pair
                if whole:
                    r0, r1 = min(hq, pt), min(hq, pt + h)  # the rows of input rows 0 .. h
                    _zero(base, r0 * wq)
                    _zero(base + 4 * r1 * wq, (hq - r1) * wq)
                    src = lo + 4 * (r0 - pt) * wd
                    dst = base + 4 * r0 * wq
                    pair_words(src, src + 4 * h * wd * pair, dst, (r1 - r0) * wq, pair, 1,
                                scales, job[18])  # fmt: skip
                    continue
                # row by row through addresses (a view a row, and a slice for each run of
                # zeros, took twice the time of a strided convolution's pair plane copied
                # from the plane another wrote: resnet50's 128 -> 128 3 x 3 at stride 2)
                # a pair plane source's row 0 of this pair, from its column ``first`` on
                words = at_x + 4 * (c2 * job[20] * job[23] + job[21] * job[23] + job[22] + first)
                for r in range(hq):
                    y = r * sh + a - pt
                    at = base + 4 * r * wq
                    if y < 0 or y >= h:
                        _zero(at, wq)
                        continue
                    _zero(at, q0)
                    _zero(at + 4 * q1, wq - q1)
                    if job[20] != 0:  # a pair plane's words, copied
                        move_words(words + 4 * y * job[23], at + 4 * q0, q1 - q0, sw)
                        continue
                    src = lo + 4 * y * wd
                    pair_words(src, src + 4 * h * wd * pair, at + 4 * q0, q1 - q0, pair, sw,
                                scales, job[18])  # fmt: skip


@jit(**_OPTS)
def rows_to_pairs(to, src, ldc, wp, og, oh, ow, co0, co1, y0, y1):  # type: ignore[no-untyped-def]  # noqa: E501
    """A convolution's float32 output rows into the next convolution's pair plane: rows [y0,
    y1) of channels [co0, co1) (``co0`` even; ``og`` the channels in all) at ``src`` (channel
    ``o``'s row ``y0`` at ``src + 4 o ldc``, rows ``wp`` floats apart, ``ow`` of them the
    image's), rounded to bf16 pairs while in cache; ``to`` (int64) the plane's address, its
    padding top and left, its height and width in words (a channel pair's ``hq`` x ``wq``).
    Its padding's words are written too (`pad_pairs`)."""
    pad_pairs(to, og, oh, ow, co0, co1, y0, y1)
    at_plane, pt, pl, hq, wq = to[0], to[1], to[2], to[3], to[4]
    for c2 in range(co0 // 2, (co1 + 1) // 2):
        pair = 1 if 2 * c2 + 1 < og else 0
        lo = src + 4 * 2 * c2 * ldc
        at = at_plane + 4 * c2 * hq * wq
        for y in range(y0, y1):
            row = lo + 4 * (y - y0) * wp
            r = (pt + y) * wq
            pair_words(row, row + 4 * ldc * pair, at + 4 * (r + pl), ow, pair, 1, NO_AFFINE, 0)


@jit(**_OPTS)
def pad_pairs(to, og, oh, ow, co0, co1, y0, y1):  # type: ignore[no-untyped-def]
    """The padding of rows [y0, y1) of a pair plane's channel pairs of channels [co0, co1)
    (``to`` as `rows_to_pairs`'; the image ``og`` channels by ``oh`` x ``ow``): the words
    left and right of those rows written 0, and with the image's first row the plane's rows
    above it, with its last the rows below."""
    at_plane, pt, pl, hq, wq = to[0], to[1], to[2], to[3], to[4]
    for c2 in range(co0 // 2, (co1 + 1) // 2):
        at = at_plane + 4 * c2 * hq * wq
        if y0 == 0:
            _zero(at, pt * wq)
        if y1 == oh:
            _zero(at + 4 * (pt + oh) * wq, (hq - pt - oh) * wq)
        for y in range(y0, y1):
            r = at + 4 * (pt + y) * wq
            _zero(r, pl)
            _zero(r + 4 * (pl + ow), wq - pl - ow)


@jit(**_OPTS)
def pad_positions(to, across, oh, ow, co0, co1, y0, y1):  # type: ignore[no-untyped-def]
    """`pad_pairs` for a plane of positions by ``across`` channel pairs (``to`` its address,
    padding top and left, height and width): the words of the channel pairs of channels
    [co0, co1) at the positions left and right of rows [y0, y1) written 0, and with the
    image's first row at the positions above it, with its last below."""
    at_plane, pt, pl, hq, wq = to[0], to[1], to[2], to[3], to[4]
    p0, p1 = co0 // 2, (co1 + 1) // 2
    if y0 == 0:
        _zero_positions(at_plane, 0, pt * wq, across, p0, p1)
    if y1 == oh:
        _zero_positions(at_plane, (pt + oh) * wq, hq * wq, across, p0, p1)
    for y in range(y0, y1):
        r = (pt + y) * wq
        _zero_positions(at_plane, r, r + pl, across, p0, p1)
        _zero_positions(at_plane, r + pl + ow, r + wq, across, p0, p1)


@jit(inline="always", **_OPTS)
def _zero_positions(at_plane, first, end, across, p0, p1):  # type: ignore[no-untyped-def]
    """Pairs [p0, p1) of positions [first, end) of a plane of positions (``across`` pairs a
    position, at ``at_plane``) written 0."""
    words = floats_at(at_plane)  # 0.0's bits are 0
    for p in range(first, end):
        for c2 in range(p0, p1):
            words[p * across + c2] = 0.0


@jit(inline="always", **_OPTS)
def plane_dims(dims, positions):  # type: ignore[no-untyped-def]
    """A plane's ``(pairs, hq, wq)`` from its dims past the batch: as `pair_plane` lays it,
    ``(pairs, hq, wq)``, or laid out as positions by channel pairs, ``(hq, wq, pairs)``
    (``positions``; `rvm.kernels.reference.bf16.LAYOUTS`)."""
    if positions:
        return dims[2], dims[0], dims[1]
    return dims[0], dims[1], dims[2]


@jit(**_OPTS)
def turned_words(src, rows, cols, dst):  # type: ignore[no-untyped-def]
    """The ``rows`` x ``cols`` 32-bit words at ``src`` into ``dst`` turned (``dst[j, i] =
    src[i, j]``; int64 addresses): a pair plane's channel pairs by positions into positions by
    channel pairs, or back (for a convolution that does not walk such planes as they lie,
    `rvm.kernels.bf16conv`)."""
    a, b = floats_at(src), floats_at(dst)
    for i0 in range(0, rows, 16):  # 16 x 16 blocks: a block's lines stay in L1
        for j0 in range(0, cols, 16):
            for i in range(i0, min(rows, i0 + 16)):
                for j in range(j0, min(cols, j0 + 16)):
                    b[j * rows + i] = a[i * cols + j]


@jit(**_OPTS)
def widened(res, co, oh, ow, pt, pl):  # type: ignore[no-untyped-def]
    """The float32 image ``(n, co, oh, ow)`` whose pair plane (padding ``pt``, ``pl``) is
    ``res`` (its words in a float32 array): channel ``2 c2`` the low halves of pair ``c2``'s
    words, ``2 c2 + 1`` the high halves."""
    words = res.view(np.uint32)
    n = res.shape[0]
    image = np.empty((n, co, oh, ow), np.float32)
    bits = image.view(np.uint32)
    for b in range(n):
        for o in range(co):
            for y in range(oh):
                for x in range(ow):
                    word = words[b, o // 2, pt + y, pl + x]
                    bits[b, o, y, x] = word << 16 if o % 2 == 0 else word & 0xFFFF0000
    return image


# A plane job (int64): its length; the group's first channel's address, the group's channels,
# the image's height and width; the plane's address, its phases' height and width; the
# padding top and left; the pairs a piece; the strides; the kernel and dilation by rows, by
# columns; the prologue's affine's address at the group's first channel (0: none), the
# prologue's index, the image's channels (the shifts' offset from the scales); when the
# source is a pair plane (its words at the group's first channel's address), its height (0:
# a float32 image), padding top and left and width.
_PLANE_JOB = 24
_IMAGE = (0, 0, 0, 0, 0, 0)  # `pair_plane`'s ``src``: a float32 image


def _plane_task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a pair plane: ``step`` of its channel pairs (a pool task)."""
    job = parfor.job(data)
    cg2, step = (job[2] + 1) // 2, job[10]
    _plane_part(job, p * step, min(cg2, (p + 1) * step))


parfor.export_task("bf16_plane", _plane_task)
_run_plane = parfor.runner("bf16_plane")


@jit(**_OPTS)
def pair_plane(x, c0, cg, geometry, plane, src=_IMAGE):  # type: ignore[no-untyped-def]
    """The pair plane of channels [c0, c0 + cg) of ``x`` (float32 CHW) in its stride phases
    (`_plane_part`; ``geometry``: pt, pl, sh, sw, kh, dh, kw, dw): ``plane`` (uint32,
    ``(phases * cg2, hq, wq)``), phase after phase, pair after pair; word ``(c2, r, q)`` of a
    phase the bf16 pair of channels ``c0 + 2 c2`` (low) and ``c0 + 2 c2 + 1`` (high; 0 past
    ``cg``); ``geometry[8:10]`` the prologue's affine's address (0: none) and index, applied
    to each value first (`pair_words`); ``geometry[10]`` 1: the last channel's column-pair
    phases after them (`column_pairs`; ``cg`` odd). Cut by channel pairs into pieces on the
    pool when large. With ``src`` (int64: its height, padding top and left, width, and the
    image's height and width; height 0: none) ``x`` is instead a pair plane of the image
    (``(cg2, height, width)`` words, ``c0`` even, no prologue), whose words are copied into
    the phases: a strided convolution reading the plane another wrote."""
    h, wd = (src[4], src[5]) if src[0] != 0 else (x.shape[1], x.shape[2])
    cg2 = (cg + 1) // 2
    job = np.empty(_PLANE_JOB, dtype=np.int64)
    first = c0 // 2 * src[0] * src[3] if src[0] != 0 else c0 * h * wd
    job[0], job[1], job[2], job[3], job[4] = _PLANE_JOB, x.ctypes.data + 4 * first, cg, h, wd
    job[20], job[21], job[22], job[23] = src[0], src[1], src[2], src[3]
    job[5], job[6], job[7] = plane.ctypes.data, plane.shape[1], plane.shape[2]
    job[8], job[9], job[11], job[12] = geometry[0], geometry[1], geometry[2], geometry[3]
    job[13], job[14], job[15], job[16] = geometry[4], geometry[5], geometry[6], geometry[7]
    job[17] = geometry[8] + 4 * c0 if geometry[8] != 0 else 0
    job[18], job[19] = geometry[9] if geometry[8] != 0 else 0, x.shape[0]
    threads = parfor.threads()
    parts = 1
    if threads > 1 and not workpool.busy():
        parts = parfor.pieces(threads, min(cg2, plane.size // PACK_SPLIT_MIN))
    if parts <= 1:
        _plane_part(job, 0, cg2)
    else:
        step = -(-cg2 // parts)
        job[10] = step
        _run_plane(x, -(-cg2 // step), job)
    if geometry[10] != 0:
        column_pairs(plane, cg2, job[13], job[15], job[14], job[16], job[11], job[12])


@jit(**_OPTS)
def pair_image(x, out, pt, pl):  # type: ignore[no-untyped-def]
    """float32 ``x`` (n, c, h, w) rounded into the pair planes ``out`` (uint32 (n, (c + 1) //
    2, hq, wq)), the image at row ``pt``, column ``pl`` of each, the other words 0: `rvm.op`'s
    ``pair_image``, as `pair_plane` builds a 1 x 1's plane (its stride-1 phase, cut by channel
    pairs on the pool), so that its readers read the words they would have built. False
    where the planes do not hold the images."""
    n, c, h, w = x.shape
    if out.shape[0] != n or out.shape[1] != (c + 1) // 2 or min(pt, pl) < 0:
        return False
    if out.shape[2] < pt + h or out.shape[3] < pl + w:
        return False
    geometry = np.array([pt, pl, 1, 1, 1, 1, 1, 1, 0, 0, 0], dtype=np.int64)
    xc = np.ascontiguousarray(x)
    for b in range(n):
        pair_plane(xc[b], 0, c, geometry, out[b])
    return True


def _entry(a, b, c, dims, params):  # type: ignore[no-untyped-def]
    """`pair_image` on x (a) and the planes' words as float32 bits (b) (see
    `rvm.kernels.entry`): 0 done, 1 the shapes disagree."""
    d, p = nb.carray(dims, 8), nb.carray(params, 2)
    x = nb.carray(a, (d[0], d[1], d[2], d[3]))
    out = nb.carray(b, (d[4], d[5], d[6], d[7])).view(np.uint32)
    return 0 if pair_image(x, out, p[0], p[1]) else 1


entry.export("pair_image", _entry)
# What kernels call (`rvm.kernels.entry.caller`): ``entry_call(arrays, params)``, 0 done.
entry_call = entry.caller("pair_image", 2)


@jit(**_OPTS)
def tap_table(cg2, kh, kw, dh, dw, sh, sw, hq, wq, columns=0, taps_first=0):  # type: ignore[no-untyped-def]  # noqa: E501
    """``table[p]`` (int64): the plane word of the GEMM's pair row ``p = (c2 * kh + dy) * kw +
    dx`` (with ``taps_first``, ``p = (dy * kw + dx) * cg2 + c2``: a tap's pairs one phase
    apart, which AMX's tiles load from the plane, `rvm.kernels.amx.block`) relative to an
    output position's (in phases ``(hq, wq)`` of ``cg2`` pairs, the phases no tap reads
    left out: `pair_plane`). Output position ``(y, x)`` is word ``y * wq
    + x`` of each phase: every tap reads the positions as one unit-stride run. With
    ``columns`` the last pair is an odd group's last channel paired along columns
    (`rvm.kernels.reference.bf16.PAIRINGS`): its rows ``p = (cg2 - 1) * kh * kw + dy * kwp +
    t`` (``kwp`` ``ceil(kw / 2)``) read taps ``(dy, 2 t)`` and ``(dy, 2 t + 1)`` in its
    column-pair phases (`column_pairs`), a last odd tap in its channel pair's phase."""
    rows, nrows = phase_slots(kh, dh, sh)
    cols, ncols = phase_slots(kw, dw, sw)
    hcols, nhcols = phase_slots(kw // 2, 2 * dw, sw)
    full = cg2 - 1 if columns else cg2
    kwp = (kw + 1) // 2
    taps = kh * kw
    table = np.empty(full * taps + (kh * kwp if columns else 0), dtype=np.int64)
    # pair 0's words tap by tap, and pair c2's c2 * hq * wq words on: the divisions once a
    # tap, not once a row (they took 8.6 us of a 3 x 3 from 224 channels at each call)
    first = np.empty(taps, dtype=np.int64)
    for dy in range(kh):
        for dx in range(kw):
            slot = rows[(dy * dh) % sh] * ncols + cols[(dx * dw) % sw]
            first[dy * kw + dx] = (slot * cg2 * hq + (dy * dh) // sh) * wq + (dx * dw) // sw
    for c2 in range(full):
        for t in range(taps):
            table[t * full + c2 if taps_first else c2 * taps + t] = first[t] + c2 * hq * wq
    if columns:  # the last pair: an odd group's last channel, its taps paired along rows
        for dy in range(kh):
            r = (dy * dh) // sh
            for dx in range(kw):
                p = full * taps + dy * kwp + dx // 2
                if dx % 2 == 1:  # the pair's first tap's column-pair phase
                    slot = nrows * ncols * cg2 + rows[(dy * dh) % sh] * nhcols
                    slot += hcols[((dx - 1) * dw) % sw]
                    table[p] = (slot * hq + r) * wq + ((dx - 1) * dw) // sw
                elif dx == kw - 1:  # a last odd tap, in its channel pair's phase
                    table[p] = first[dy * kw + dx] + full * hq * wq
    return table


@jit(**_OPTS)
def read_rows(plane, planes, size, w0, w1):  # type: ignore[no-untyped-def]
    """Words [w0, w1) of each of the ``planes`` planes of ``size`` words at ``plane``, read
    one load a cache line (`read_line`) into L2 before a block's first band of channels
    reads them (`rvm.kernels.bf16conv`). That band otherwise fetched them from memory at the
    pace of its products, and on rows wider than about 160 words it waited for them: vgg19's
    64 -> 64 3 x 3 at 224 x 224 (plane rows 225 words, 3.3 MB of plane) ran its first band
    at ~100 GF/s against ~215 on rows of 113 words, 167 GF/s in all, the hardware's
    prefetchers not keeping up (measured on Zen 4, one thread; the other bands, on L2, ran
    at ~222 either way)."""
    for i in range(planes):
        at = plane + 4 * i * size
        for w in range(w0, w1, LINE):
            read_line(at + 4 * w)
