"""Integer convolutions and dense layers for quantized models: their operands' geometry,
then `rvm.kernels.qgemm`'s product.

`qconv2d` and `qdense` compute what `rvm.op.qconv2d` / `rvm.op.qdense` define (int32 sums of
``(x - x_zero) * w`` plus the bias, requantized per output channel, clipped, cast to uint8 or
int8) on C-contiguous operands:

- the weight's rows are the micro-kernel's broadcast operand (int8, depths contiguous and
  padded with zeros to a multiple of 4), beside each row's sum (summed only for an input
  zero point other than 0: the sums are what it subtracts); a convolution's are in the
  panel's depth order (tap-major, 4 channels a word): an OHWI weight (``hwc``, as importers
  store it) is used in place when its channels are a multiple of 4; an OIHW one is reordered
  per call when the panel is by words, else used in place with a panel made a byte at a
  time in its order;
- the input is the packed operand, uint8 (quads of depth, positions, 4), made by
  `rvm.kernels.qcolumns`. A convolution interleaves each group of 4 channel rows of the
  NCHW image into words once, into an image padded with the zero point and split by phase
  of the strides, whose taps are offsets: the micro-kernel reads them in place (`_direct`:
  output position ``(i, j)`` is column ``i * pitch + j``, the few columns of each row's
  margin are computed and dropped; `direct_pitch` says when; without VNNI, where those
  columns would cost more than copying the taps' words, the words are gathered from the
  image into an im2col panel: `_gathers`). Others make an im2col panel by words,
  tap by tap, for every output position (or by bytes, for an OIHW weight with more channels
  than positions). Taps in the padding read the zero point, so they add nothing once
  corrected; int8 inputs are shifted by 128 into uint8 (and their zero point with them).

The product (`rvm.kernels.qgemm.product`) makes the panel's operand first (its pieces, on
the pool, when it splits: `rvm.kernels.qsplit.prepare`), then multiplies and requantizes.
The sums are exact (int32 holds 255 * 128 * 65536); results equal the ops' NumPy references.
"""

from __future__ import annotations

import numpy as np
from numba import types as nt
from numba.extending import overload

from rvm.kernels import qsplit
from rvm.kernels.jitting import NO_C_WRAPPER, alive, jit
from rvm.kernels.qcolumns import (
    columns_bytes,
    conv_weight_rows,
    hwc_weight_rows,
    weight_rows,
)
from rvm.kernels.qgemm import panel_of, product, tile_columns
from rvm.kernels.qtile import MADD16, NR

__all__ = [
    "byte_shift",
    "direct_pitch",
    "qconv2d",
    "qconv2d_bytes",
    "qdense",
    "qdense_bytes",
    "tap_offsets",
]

# A convolution reads its taps in place while the columns its image's row
# margins add stay within 5/4 of an im2col panel's (which writes every tap's columns):
DIRECT_SLACK_NUM, DIRECT_SLACK_DEN = 5, 4
GATHER_WORD = 8
"""What copying one word of a tap into an im2col panel gathered from the direct method's
image (`qcolumns.gather`) costs, in multiply-adds of the tiles without VNNI: Zen 3, one
thread, gathering resnet50's 3 x 3 layer at 56 x 56 (3,248 columns for 3,136 positions, 64
channels) took as long as it saved; at 28 x 28 and less (and squeezenet's 55, 27 and 13) it
saved 4-19% of a layer's time (7 x 7 and a stride of 2 at 56 the most)."""

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False, **NO_C_WRAPPER)


def byte_shift(x):  # type: ignore[no-untyped-def]
    """128 for an int8 array (its values shift into uint8: a product's operands are
    bytes), 0 for uint8."""
    return 128 if x.dtype == np.int8 else 0


@overload(byte_shift, jit_options=_OPTS)
def _byte_shift_impl(x):  # type: ignore[no-untyped-def]
    value = 128 if x.dtype == nt.int8 else 0
    return lambda x: value


@jit(inline="always", **_OPTS)
def qconv2d(x, w, bias, scale, out, x_zero, y_zero, low, high, groups, sh, sw, dh, dw, pt, pl,
            hwc=False, pairs=False):  # type: ignore[no-untyped-def]  # fmt: skip
    """`rvm.op.qconv2d` into ``out`` (n, o, oh, ow) of uint8 or int8; ``w`` int8, (o, cg,
    kh, kw) or, ``hwc``, (o, kh, kw, cg); ``pairs``: its pairs fit 16 bits (`product`)."""
    xu, outu = x.view(np.uint8), out.view(np.uint8)
    flip, signed = byte_shift(x), byte_shift(out) != 0
    qconv2d_bytes(xu, w, bias, scale, outu, x_zero, y_zero, low, high, groups, sh, sw, dh, dw, pt,
                  pl, hwc, flip, signed, pairs)  # fmt: skip


@jit(inline="always", **_OPTS)
def qconv2d_bytes(x, w, bias, scale, out, x_zero, y_zero, low, high, groups, sh, sw, dh, dw, pt,
                  pl, hwc, flip, signed, pairs):  # type: ignore[no-untyped-def]  # fmt: skip
    """`qconv2d` on the bytes of ``x`` and ``out`` (uint8 arrays): ``flip`` 128 when ``x``'s
    are int8 (0 for uint8), ``signed`` when ``out``'s are: one build serves every sign."""
    o, oh, ow = w.shape[0], out.shape[2], out.shape[3]
    cg, kh, kw = (w.shape[3], w.shape[1], w.shape[2]) if hwc else w.shape[1:]
    og = o // groups
    p_total = oh * ow
    # The panel by words (4 channels of a tap) needs the weight in tap-major order: an OHWI
    # weight is (in place when its channels are a multiple of 4); an OIHW one is reordered
    # per call, worth it for many positions. Many channels of an OIHW weight: the weight in
    # place, the panel a byte at a time.
    by_words = hwc or 4 * og < p_total
    cq = (cg + 3) // 4 if by_words else 1  # words of 4 channels
    zero = x_zero + flip  # int8 inputs shift into uint8
    cols = (p_total + NR - 1) // NR * NR
    pitch = direct_pitch(oh, ow, kw, sw, dw) if by_words else 0
    if pitch:
        return _direct(x, w, bias, scale, out, zero, y_zero, low, high, groups, sh, sw, dh, dw,
                       pt, pl, hwc, pitch, flip, signed, pairs)  # fmt: skip
    quads = kh * kw * cq if by_words else (cg * kh * kw + 3) // 4
    words = np.zeros((quads, cols), np.uint32)  # the panel, 4 bytes a word
    flat = words.view(np.uint8).reshape(-1)
    b = panel_of(flat, np.zeros(1, np.int64), quads, 4 * cols, cols, p_total, p_total)
    none = np.zeros(0, np.int64)
    for g in range(groups):
        rows, sums = _group_rows(w, g, og, cg, cq, kh * kw, hwc, by_words, zero)
        for n in range(x.shape[0]):
            # by words: the panel made by the product (`qsplit.prepare`, by its pieces when split)
            kind = qsplit.COLUMNS if by_words else qsplit.NONE
            prep = qsplit.operand(kind, x, n, g * cg, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow,
                                  zero, flip, words, 0, 0, none, none, words)  # fmt: skip
            if not by_words:
                columns_bytes(x, n, g * cg, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, zero,
                              flip, flat.reshape(quads, cols, 4))  # fmt: skip
            dest = out[n, g * og : (g + 1) * og].reshape(og, p_total)
            product(rows, sums, b, zero, bias, scale, g * og, y_zero, low, high, dest, False,
                     signed, pairs, prep)  # fmt: skip
    alive(words)  # written through ``prep``'s address (`qsplit.prepare`)


@jit(**_OPTS)
def direct_pitch(oh, ow, kw, sw, dw):  # type: ignore[no-untyped-def]
    """The pitch (words between rows) of the image whose words a convolution's taps read in
    place (`_direct`; an output of ``oh`` x ``ow``, ``kw`` taps ``dw`` apart in a row, ``sw``
    apart in the input), or 0 for an im2col panel: when the columns the image's row margins
    add to the product pass `DIRECT_SLACK_NUM` / `DIRECT_SLACK_DEN` of the panel's."""
    pitch = ow + (kw - 1) * dw // sw
    cols = (oh * ow + NR - 1) // NR * NR
    if ((oh - 1) * pitch + ow) * DIRECT_SLACK_DEN > cols * DIRECT_SLACK_NUM:
        return 0
    return pitch


@jit(**_OPTS)
def _gathers(og, oh, ow, pitch, quads):  # type: ignore[no-untyped-def]
    """Whether `_direct` copies its taps' words from the image into an im2col panel
    (`qcolumns.gather`) for ``og`` output channels of an ``oh`` x ``ow`` output, rows
    ``pitch`` words apart, ``quads`` quads deep: without VNNI, when the tiles' columns of
    the rows' margins would cost more multiply-adds than the words copied (`GATHER_WORD`
    each). With VNNI never: its small maps turn around (`rvm.kernels.qturned`)."""
    if not MADD16 or pitch == ow:
        return False
    lda = 4 * quads
    extra = tile_columns((oh - 1) * pitch + ow, lda) - tile_columns(oh * ow, lda)
    return extra * og * 4 > GATHER_WORD * oh * ow


@jit(**_OPTS)
def _group_rows(w, g, og, cg, cq, taps, hwc, by_words, zero):  # type: ignore[no-untyped-def]
    """Group ``g``'s weight rows and their sums, in the panel's depth order (the sums zeros
    when the input zero point ``zero`` is 0: nothing to subtract)."""
    wanted = zero != 0
    if hwc:
        return hwc_weight_rows(w, g * og, og, cq, wanted)
    if by_words:
        return conv_weight_rows(w, g * og, og, cq, wanted)
    wm = w[g * og : (g + 1) * og].reshape(og, cg * taps)
    return weight_rows(wm, (cg * taps + 3) // 4, wanted)


@jit(**_OPTS)
def tap_offsets(kh, kw, sh, sw, dh, dw, hp, pitch):  # type: ignore[no-untyped-def]
    """(offsets, slots, used): tap ``(u, v)``'s byte offset ``offsets[u * kw + v]`` into the
    image `qcolumns.image` makes (``hp`` rows of ``pitch`` words a phase): it reads phase
    ``(u * dh % sh, v * dw % sw)``, in slot ``slots[phase]`` (-1: no tap reads it; ``used``
    slots), ``(u * dh // sh, v * dw // sw)`` words on."""
    offsets = np.empty(kh * kw, np.int64)
    slots = np.full(sh * sw, -1, np.int64)  # the phases the taps read, in slots
    used = 0
    for u in range(kh):
        for v in range(kw):
            phase = (u * dh % sh) * sw + v * dw % sw
            if slots[phase] < 0:
                slots[phase], used = used, used + 1
            at = slots[phase] * hp * pitch + (u * dh // sh) * pitch + v * dw // sw
            offsets[u * kw + v] = 4 * at
    return offsets, slots, used


@jit(**_OPTS)
def _direct(x, w, bias, scale, out, zero, y_zero, low, high, groups, sh, sw, dh, dw, pt, pl,
            hwc, pitch, flip, signed, pairs):  # type: ignore[no-untyped-def]  # fmt: skip
    """A `qconv2d` whose taps read the image in place (`qcolumns.image`, split by phase of
    the strides): output position ``(i, j)`` is column ``i * pitch + j``; tap ``(u, v)``
    reads phase ``(u * dh % sh, v * dw % sw)`` (only the phases some tap reads are made),
    ``(u * dh // sh, v * dw // sw)`` words on."""
    o, oh, ow = w.shape[0], out.shape[2], out.shape[3]
    cg, kh, kw = (w.shape[3], w.shape[1], w.shape[2]) if hwc else w.shape[1:]
    og, cq, taps = o // groups, (cg + 3) // 4, kh * kw
    cols = ((oh - 1) * pitch + ow + NR - 1) // NR * NR
    hp = oh + (kh - 1) * dh // sh
    offsets, slots, used = tap_offsets(kh, kw, sh, sw, dh, dw, hp, pitch)
    plane = max(used * hp * pitch, cols + offsets.max() // 4)  # the last column's taps
    words = np.empty((cq, plane), np.uint32)
    flat = words.view(np.uint8).reshape(-1)
    rows_of = ow if pitch > ow else oh * ow  # no margins: the columns are the positions
    b = panel_of(flat, offsets, cq, 4 * plane, cols, rows_of + pitch - ow, rows_of)
    gathers = _gathers(og, oh, ow, pitch, taps * cq)
    panel = np.empty((taps * cq if gathers else 0, (oh * ow + NR - 1) // NR * NR), np.uint32)
    if gathers:  # the taps' words copied, the columns the positions
        b = panel_of(panel.view(np.uint8).reshape(-1), np.zeros(1, np.int64), taps * cq,
                   4 * panel.shape[1], panel.shape[1], oh * ow, oh * ow)  # fmt: skip
    kind = qsplit.GATHERED if gathers else qsplit.IMAGE
    for g in range(groups):
        rows, sums = _group_rows(w, g, og, cg, cq, taps, hwc, True, zero)
        for n in range(x.shape[0]):
            # the image (and the panel gathered from it) made by the product (`qsplit.prepare`)
            prep = qsplit.operand(kind, x, n, g * cg, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow,
                                  zero, flip, words, hp, pitch, slots, offsets, panel)  # fmt: skip
            dest = out[n, g * og : (g + 1) * og].reshape(og, oh * ow)
            product(rows, sums, b, zero, bias, scale, g * og, y_zero, low, high, dest, False,
                     signed, pairs, prep)  # fmt: skip
    alive(words)  # read through ``prep``'s addresses (`qsplit.prepare`)
    alive(slots)
    alive(offsets)
    alive(panel)


@jit(inline="always", **_OPTS)
def qdense(x, w, bias, scale, out, x_zero, y_zero, low, high, pairs=False):  # type: ignore[no-untyped-def]  # noqa: E501
    """`rvm.op.qdense` of ``x`` (m, k) into ``out`` (m, n) of uint8 or int8; ``w`` int8.
    As a convolution's: the weight's rows broadcast, ``x``'s rows packed as the panel."""
    qdense_bytes(x.view(np.uint8), w, bias, scale, out.view(np.uint8), x_zero, y_zero, low, high,
                 byte_shift(x), byte_shift(out) != 0, pairs)  # fmt: skip


@jit(inline="always", **_OPTS)
def qdense_bytes(x, w, bias, scale, out, x_zero, y_zero, low, high, flip, signed, pairs):  # type: ignore[no-untyped-def]  # noqa: E501
    """`qdense` on the bytes of ``x`` and ``out`` (uint8 arrays), as `qconv2d_bytes`."""
    m, k = x.shape
    quads = (k + 3) // 4
    cols = (m + NR - 1) // NR * NR
    panel = np.zeros((quads, cols, 4), np.uint8)
    for p in range(m):
        for d in range(k):
            panel[d // 4, p, d % 4] = np.uint8((np.int32(x[p, d]) + flip) & 255)
    rows, sums = weight_rows(w, quads, x_zero + flip != 0)
    b = panel_of(panel.reshape(-1), np.zeros(1, np.int64), quads, 4 * cols, cols, m, m)
    prep = np.zeros(qsplit.PREP, np.int64)  # `NONE`: the panel made
    product(rows, sums, b, x_zero + flip, bias, scale, 0, y_zero, low, high, out, True, signed,
             pairs, prep)  # fmt: skip
