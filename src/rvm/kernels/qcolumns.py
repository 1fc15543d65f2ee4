"""The operands of `rvm.kernels.qgemm`'s integer products: weight rows and input panels.

- weight rows (`weight_rows`, `hwc_weight_rows`, `conv_weight_rows`): the weight's dtype
  (int8, or int16 for a weight widened at compile time, `rvm.op.quantized.widen_weight`), depths
  contiguous and padded with zeros to a multiple of 4, beside each row's int32 sum (when
  wanted: `_row_sums`); a convolution's in the panel's depth order (tap-major, 4 channels a
  word), an OHWI weight in place when its channels are a multiple of 4;
- an im2col panel (`columns`: by 32-bit words of 4 channels, tap by tap, for every output
  position; `columns_bytes`: a byte at a time in an OIHW weight's own depth order);
- an image (`image`): the input's channels interleaved by words once, padded with the zero
  point, split by phase of the strides (``x[..., a::sh, b::sw]`` each), rows ``pitch`` words
  apart, so that a convolution's taps are offsets into it and the micro-kernel reads them
  in place (no im2col: output position ``(i, j)`` is column ``i * pitch + j``; the columns
  ``j >= ow`` of each row are computed and dropped).
- an im2col panel gathered from that image (`gather`: a run of words per tap, quad and
  output row, the row margins left out), where computing the margins would cost more than
  copying the taps' words (`rvm.kernels.qconv`'s ``_gathers``).

Bytes of int8 inputs are flipped by 0x80 into uint8 as they are copied.
"""

from __future__ import annotations

import numpy as np

from rvm.kernels.cpu import cpu
from rvm.kernels.jitting import jit
from rvm.kernels.planes import U, copy

__all__ = [
    "columns",
    "columns_bytes",
    "conv_weight_rows",
    "gather",
    "hwc_weight_rows",
    "image",
    "weight_rows",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
# Rows of fewer words than two of the CPU's vectors hold run mostly in the scalar remainder of
# `_interleave`'s vector loop: a padded image interleaves them as one run, then moves them to
# their rows (Zen 4, 3 x 3 padded: 7 and 14 words 1.35-1.45x faster, 28 1.06x; 56 0.89x).
NARROW_ROW = 2 * cpu().vector_bits // 32
# Runs of at least this many words `_interleave` makes a byte at a time (four byte stores a
# word, which the compiler vectorizes as interleaving shuffles: on Zen 3 a 3136-word run
# 2.3x faster, 196 1.05x) rather than a word at a time (faster below it: its vector loop
# takes 4x fewer words a step). Measured on AVX2 only: with wider vectors the word loop
# stays (0: never).
BYTE_RUN = 4 * cpu().vector_bits // 8 if cpu().vector_bits <= 256 else 0


@jit(**_OPTS)
def weight_rows(wm, quads, wanted):  # type: ignore[no-untyped-def]
    """``wm`` (o, k) as rows of ``4 * quads`` depths (itself when ``k`` is a multiple of 4,
    else a zero-padded copy), and each row's sum (`_row_sums`, if ``wanted``)."""
    o, k = wm.shape
    rows = wm
    if k != 4 * quads:
        rows = np.zeros((o, 4 * quads), wm.dtype)
        for o_ in range(o):
            copy(rows[o_], wm[o_], k)
    return rows, _row_sums(np.ascontiguousarray(wm).reshape(-1), 0, o, k, wanted)


@jit(**_OPTS)
def _row_sums(flat, o0, og, length, wanted):  # type: ignore[no-untyped-def]
    """The int32 sums of rows ``o0 + [0, og)`` of ``flat`` viewed as rows of ``length``
    (unsigned indices: vectorized); zeros, not summed, unless ``wanted`` (a product
    subtracts the input zero point times a row's sum: none for a zero point of 0, the
    common case after a ReLU, where the pass over the weight would cost a tenth of the
    product's reads of it or more)."""
    sums = np.zeros(og, np.int32)
    if not wanted:
        return sums
    for o in range(og):
        at, total = U((o0 + o) * length), np.int32(0)
        for d in range(U(length)):
            total += np.int32(flat[at + d])
        sums[o] = total
    return sums


@jit(**_OPTS)
def hwc_weight_rows(w, o0, og, cq, wanted):  # type: ignore[no-untyped-def]
    """Output channels ``o0 + [0, og)`` of the OHWI weight ``w`` as rows of depths in the
    panel's order (itself when the channels are a multiple of 4, else each tap's channels
    padded with zeros to ``4 * cq``), and each row's sum (`_row_sums`, if ``wanted``)."""
    kh, kw, cg = w.shape[1], w.shape[2], w.shape[3]
    taps, width = kh * kw, 4 * cq
    flat = w.reshape(-1)
    sums = _row_sums(flat, o0, og, taps * cg, wanted)
    if width == cg:
        return flat[o0 * taps * cg : (o0 + og) * taps * cg].reshape(og, taps * cg), sums
    rows = np.zeros((og, taps * width), w.dtype)
    for o in range(og):
        for tap in range(taps):
            src = ((o0 + o) * taps + tap) * cg
            copy(rows[o, tap * width :], flat[src:], cg)
    return rows, sums


@jit(**_OPTS)
def conv_weight_rows(w, o0, og, cq, wanted):  # type: ignore[no-untyped-def]
    """Output channels ``o0 + [0, og)`` of the weight ``w`` (o, cg, kh, kw) as rows of depths
    in the panel's order (see `columns`: depth ``4 * ((u * kw + v) * cq + k) + t`` is
    channel ``4 * k + t`` of tap ``(u, v)``, channels past ``cg`` 0), and each row's sum
    (`_row_sums`, if ``wanted``)."""
    cg, kh, kw = w.shape[1], w.shape[2], w.shape[3]
    taps, width = kh * kw, 4 * cq
    flat = w.reshape(-1)
    sums = _row_sums(flat, o0, og, cg * taps, wanted)
    if taps * width == cg:  # a 1 x 1 kernel, channels a multiple of 4: the weight itself
        return flat[o0 * cg : (o0 + og) * cg].reshape(og, cg), sums
    rows = np.zeros((og, taps * width), w.dtype)
    rf = rows.reshape(-1)
    for o in range(og):
        src, dst = U((o0 + o) * cg * taps), U(o * taps * width)
        for tap in range(taps):
            at = dst + U(tap * width)
            for c in range(U(cg)):
                rf[at + c] = flat[src + c * U(taps) + U(tap)]
    return rows, sums


@jit(**_OPTS)
def columns(x, n, c0, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, fill, flip, words, k0, k1):  # type: ignore[no-untyped-def]  # noqa: E501
    """Image ``n``'s channels ``c0 + [0, cg)`` of ``x`` (uint8 view) as the panel by words
    (its quads ``[k0, k1)``: the pieces of a split product make theirs, `rvm.kernels.qgemm`):
    ``words[(u * kw + v) * cq + k, i * ow + j]`` holds channels ``4k`` to ``4k + 3`` (a byte
    each, ``flip`` 0x80 shifting int8 into uint8) that tap ``(u, v)`` of output position
    ``(i, j)`` reads, ``fill`` in each byte for a tap in the padding; channels past ``cg``
    repeat the last one (their weights are 0). Made straight from the NCHW image: four
    channel rows interleaved a run at a time (vectorized at unit stride). Positions past the
    end are left as they are."""
    ih, iw = x.shape[2], x.shape[3]
    cq, cols = (cg + 3) // 4, words.shape[1]
    wf, xf = words.reshape(-1), x.reshape(-1)
    fill_word = np.uint32(fill) * np.uint32(0x01010101)
    flip_word = np.uint32(flip) * np.uint32(0x01010101)
    plane = U(ih * iw)
    for k in range(k0, k1):
        base = U((n * x.shape[1] + c0) * ih * iw)
        p0 = base + U(min(4 * k, cg - 1)) * plane
        p1 = base + U(min(4 * k + 1, cg - 1)) * plane
        p2 = base + U(min(4 * k + 2, cg - 1)) * plane
        p3 = base + U(min(4 * k + 3, cg - 1)) * plane
        for u in range(kh):
            for v in range(kw):
                first = pl - v * dw
                # Output columns whose tap is inside the row: [j_lo, j_hi).
                j_lo = min(max(0, (first + sw - 1) // sw), ow)
                j_hi = min(max(j_lo, (iw - 1 + first) // sw + 1), ow)
                at0 = ((u * kw + v) * cq + k) * cols
                for i in range(oh):
                    y = i * sh - pt + u * dh
                    at = at0 + i * ow
                    if y < 0 or y >= ih:
                        wf[at : at + ow] = fill_word
                        continue
                    wf[at : at + j_lo] = fill_word
                    wf[at + j_hi : at + ow] = fill_word
                    row = U(y * iw + j_lo * sw - first)
                    dst, count = U(at + j_lo), U(j_hi - j_lo)
                    if sw == 1:
                        _interleave(xf, p0 + row, p1 + row, p2 + row, p3 + row, wf, dst,
                                    count, flip_word)  # fmt: skip
                    else:
                        step = U(sw)
                        for j in range(count):
                            s = row + j * step
                            wf[dst + j] = _word(xf, p0 + s, p1 + s, p2 + s, p3 + s) ^ flip_word


@jit(**_OPTS)
def _interleave(xf, a0, a1, a2, a3, wf, dst, count, flip_word):  # type: ignore[no-untyped-def]
    """``wf[dst + j]`` = the bytes ``xf[a0 + j]`` .. ``xf[a3 + j]`` as one word, for j <
    ``count`` (unsigned indices: a vectorized loop; by bytes from `BYTE_RUN` words)."""
    if BYTE_RUN and count >= BYTE_RUN:
        wb, flip = wf.view(np.uint8), np.uint8(flip_word & 255)
        for j in range(count):
            at = (dst + j) * U(4)
            wb[at] = xf[a0 + j] ^ flip
            wb[at + U(1)] = xf[a1 + j] ^ flip
            wb[at + U(2)] = xf[a2 + j] ^ flip
            wb[at + U(3)] = xf[a3 + j] ^ flip
        return
    for j in range(count):
        wf[dst + j] = _word(xf, a0 + j, a1 + j, a2 + j, a3 + j) ^ flip_word


@jit(**_OPTS)
def _move(wf, src, dst, count):  # type: ignore[no-untyped-def]
    """``wf[dst + j] = wf[src + j]`` for j < ``count``, in order (``dst <= src``)."""
    for j in range(count):
        wf[dst + j] = wf[src + j]


@jit(inline="always", **_OPTS)
def _word(xf, a0, a1, a2, a3):  # type: ignore[no-untyped-def]
    """The bytes ``xf[a0]`` .. ``xf[a3]`` as one little-endian word."""
    low = np.uint32(xf[a0]) | (np.uint32(xf[a1]) << 8)
    return low | (np.uint32(xf[a2]) << 16) | (np.uint32(xf[a3]) << 24)


@jit(**_OPTS)
def columns_bytes(x, n, c0, cg, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, fill, flip, panel):  # type: ignore[no-untyped-def]
    """Image ``n``'s channels ``c0 + [0, cg)`` as a uint8 panel (quads, positions, 4) in the
    weight's own depth order: depth ``d = (c * kh + u) * kw + v`` of position ``i * ow + j``
    at ``[d // 4, i * ow + j, d % 4]``, a byte at a time (for products with more channels
    than positions, where reordering the weight would cost more than these stores); taps in
    the padding read ``fill``. Positions and depths past the end stay 0."""
    ih, iw = x.shape[2], x.shape[3]
    d = 0
    for c in range(cg):
        for u in range(kh):
            for v in range(kw):
                q, t = d // 4, d % 4
                # Output columns whose tap is inside the row: [j_lo, j_hi).
                first = pl - v * dw
                j_lo = min(max(0, (first + sw - 1) // sw), ow)
                j_hi = min(max(j_lo, (iw - 1 + first) // sw + 1), ow)
                for i in range(oh):
                    y = i * sh - pt + u * dh
                    base = i * ow
                    if y < 0 or y >= ih:
                        for j in range(ow):
                            panel[q, base + j, t] = fill
                        continue
                    for j in range(j_lo):
                        panel[q, base + j, t] = fill
                    for j in range(j_lo, j_hi):
                        value = np.int32(x[n, c0 + c, y, j * sw - first]) + flip
                        panel[q, base + j, t] = np.uint8(value & 255)
                    for j in range(j_hi, ow):
                        panel[q, base + j, t] = fill
                d += 1


@jit(**_OPTS)
def image(x, n, c0, cg, sh, sw, pt, pl, hp, pitch, slots, fill, flip, words, k0, k1):  # type: ignore[no-untyped-def]  # noqa: E501
    """Image ``n``'s channels ``c0 + [0, cg)`` of ``x`` (uint8 view, NCHW) interleaved by
    words into ``words`` (quads, plane; its quads ``[k0, k1)``), split by phase of the
    strides ``sh``, ``sw``: phase
    ``(a, b)`` in slot ``slots[a * sw + b]`` (-1: not made), at ``words[k, slot * hp * pitch
    + r * pitch + j]``, holds channels ``4k`` to ``4k + 3`` (a byte each,
    ``flip`` 0x80 shifting int8 into uint8) of input pixel ``(sh * r + a - pt, sw * j + b -
    pl)``, ``fill`` in each byte outside the input; ``hp`` rows of ``pitch`` words a slot,
    the plane past the slots ``fill`` too. Channels past ``cg`` repeat the last one (their
    weights are 0). A run of words per input row, or one for all rows at unit strides
    (a padded plane's then moved to their rows: 3.4x faster for 14-word rows)."""
    ih, iw = x.shape[2], x.shape[3]
    plane, size = words.shape[1], hp * pitch
    wf, xf = words.reshape(-1), x.reshape(-1)
    fill_word = np.uint32(fill) * np.uint32(0x01010101)
    flip_word = np.uint32(flip) * np.uint32(0x01010101)
    base = U((n * x.shape[1] + c0) * ih * iw)
    for k in range(k0, k1):
        s0 = base + U(min(4 * k, cg - 1) * ih * iw)
        s1 = base + U(min(4 * k + 1, cg - 1) * ih * iw)
        s2 = base + U(min(4 * k + 2, cg - 1) * ih * iw)
        s3 = base + U(min(4 * k + 3, cg - 1) * ih * iw)
        wf[k * plane + (slots.max() + 1) * size : (k + 1) * plane] = fill_word
        for a in range(sh):
            # Rows holding input rows: sh * r + a - pt in [0, ih); columns likewise.
            y0 = min(max(0, -(-(pt - a) // sh)), hp)
            y1 = min(max(y0, -(-(ih + pt - a) // sh)), hp)
            for b in range(sw):
                slot = slots[a * sw + b]
                if slot < 0:
                    continue
                j0 = min(max(0, -(-(pl - b) // sw)), pitch)
                j1 = min(max(j0, -(-(iw + pl - b) // sw)), pitch)
                at0 = k * plane + slot * size
                wf[at0 : at0 + y0 * pitch] = fill_word
                wf[at0 + y1 * pitch : at0 + size] = fill_word
                if sh == 1 and sw == 1 and j0 == 0 and j1 == pitch and pitch == iw:
                    row = U((y0 - pt) * iw)  # whole rows, contiguous in both: one run
                    _interleave(xf, s0 + row, s1 + row, s2 + row, s3 + row, wf,
                                U(at0 + y0 * pitch), U((y1 - y0) * pitch), flip_word)  # fmt: skip
                    continue
                if sh == 1 and sw == 1 and j1 - j0 == iw and y1 > y0 and iw < NARROW_ROW:
                    # Whole input rows, padded: one run of them at the slot's end, then each
                    # row moved to its place, in order (no row's words pass its source's:
                    # ``pitch >= j0 + iw``), the margins filled after it.
                    count = (y1 - y0) * iw
                    src, row = at0 + size - count, U((y0 - pt) * iw)
                    _interleave(xf, s0 + row, s1 + row, s2 + row, s3 + row, wf, U(src),
                                U(count), flip_word)  # fmt: skip
                    for r in range(y0, y1):
                        at = at0 + r * pitch
                        _move(wf, U(src + (r - y0) * iw), U(at + j0), U(iw))
                        wf[at : at + j0] = fill_word
                        wf[at + j1 : at + pitch] = fill_word
                    wf[at0 + y1 * pitch : at0 + size] = fill_word
                    continue
                for r in range(y0, y1):
                    at = at0 + r * pitch
                    wf[at : at + j0] = fill_word
                    wf[at + j1 : at + pitch] = fill_word
                    row = U((sh * r + a - pt) * iw + sw * j0 + b - pl)
                    if sw == 1:
                        _interleave(xf, s0 + row, s1 + row, s2 + row, s3 + row, wf,
                                    U(at + j0), U(j1 - j0), flip_word)  # fmt: skip
                        continue
                    step, dst = U(sw), U(at + j0)
                    for j in range(U(j1 - j0)):
                        t = row + j * step
                        wf[dst + j] = _word(xf, s0 + t, s1 + t, s2 + t, s3 + t) ^ flip_word


@jit(**_OPTS)
def gather(words, offsets, oh, ow, pitch, panel, k0, k1):  # type: ignore[no-untyped-def]
    """The im2col panel by words (`columns`' layout) from the image `image` made: ``panel[t
    * cq + k, i * ow + j] = words[k, offsets[t] // 4 + i * pitch + j]`` (``offsets`` the taps'
    byte offsets into a quad's plane, `rvm.kernels.qconv.tap_offsets`) for the quads
    ``[k0, k1)``, a run of ``ow`` words per tap, quad and output row: the image's row margins
    left out. Columns past ``oh * ow`` are left as they are."""
    cq, plane, cols = words.shape[0], words.shape[1], panel.shape[1]
    wf, pf = words.reshape(-1), panel.reshape(-1)
    for t in range(offsets.size):
        tap = offsets[t] // 4
        for k in range(k0, k1):
            src, dst = k * plane + tap, (t * cq + k) * cols
            for i in range(oh):
                s, d = U(src + i * pitch), U(dst + i * ow)
                for j in range(U(ow)):
                    pf[d + j] = wf[s + j]
