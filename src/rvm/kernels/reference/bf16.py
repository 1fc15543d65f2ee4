"""bf16 products (`rvm.op.bf16`): dense and conv2d of bf16-rounded inputs with float32 sums.

Part of the NumPy reference kernels (`rvm.kernels.reference`). The weights arrive as the int16
bits of bf16 values, as `rvm.transform.to_bf16` stores them; rounding is plain NumPy (ties to
even, NaN kept quiet), so no ml_dtypes is needed.
"""

import numpy as np

from rvm.kernels.reference.common import _bf16_values, _like, _round_bf16, bf16_bits
from rvm.kernels.reference.conv import _conv
from rvm.kernels.reference.elemwise import gelu, relu
from rvm.kernels.reference.packed import dense_packed
from rvm.kernels.reference.pool import max_pool2d

__all__ = [
    "INPUTS",
    "LAYOUTS",
    "PAIRINGS",
    "as_channels",
    "as_positions",
    "bf16_bits",
    "bf16_rows",
    "conv2d_bf16",
    "conv_pairing",
    "conv_pairs",
    "dense_bf16",
    "dense_packed_bf16",
    "max_pool2d_pairs",
    "pack_pairs",
    "pair_depth",
    "pair_image",
    "pair_plane",
    "pair_width",
    "plane_image",
    "split_operands",
    "tile_pairs",
    "turn_pairs",
    "unpair",
    "untile_pairs",
]


def bf16_rows(weight):
    """``weight`` (..., depth) float as the int16 bits of its nearest bf16 values, each row
    (along the last axis) padded with a zero to an even depth: a product's A as the bf16
    kernels read it, two values a 32-bit word (a GEMV's rows, Winograd's transformed weight)."""
    depth = weight.shape[-1]
    out = np.zeros((*weight.shape[:-1], depth + depth % 2), dtype=np.int16)
    out[..., :depth] = bf16_bits(weight).view(np.int16)
    return out


INPUTS = ("bf16", "float32")
"""What ``dense_bf16`` multiplies its weight's bf16 values by (its ``input``): ``"bf16"``, its
float32 input rounded to bf16 per call (as a bf16 dot product needs); ``"float32"``, the input
as it is (the ``"rounded"`` way of `rvm.transform.to_bf16`: its activations stay float32, and
its GEMV's float32 FMAs take them at no cost)."""


def dense_bf16(x, w, input="bf16"):
    """``bf16(x) @ w.T`` (``input`` ``"float32"``: ``x @ w.T``, `INPUTS`) with float32 sums;
    ``w`` (units, kp) int16 bf16 bits."""
    k = x.shape[-1]
    xs = _round_bf16(x) if input == "bf16" else np.asarray(x, np.float32)
    return _like(np.matmul(xs, _bf16_values(w)[:, :k].T), np.float32)


PAIRINGS = ("channels", "columns", "taps", "tiles")
"""How a bf16 convolution's weight row pairs the taps of an odd group's last channel, and in
which order its words go (the op's ``pairing``; the kernels take its index): ``"channels"``,
channel pair by channel pair, each pair's taps in turn, the channel past an odd group with a
zero (its high half 0); ``"columns"``, so, then the odd group's last channel along each
kernel row, word ``(dy, t)`` of the channel's ``kh`` x ``ceil(kw / 2)`` holding taps ``(dy, 2
t)`` (low half) and ``(dy, 2 t + 1)`` (high; 0 past ``kw``), read from a plane whose words
pair horizontally adjacent input pixels (`rvm.kernels.bf16planes`): a 3-channel 7 x 7 stem
takes 49 + 28 pairs of taps, not 98; ``"taps"``, the channel pairs as ``"channels"``' but tap
by tap, each tap's channel pairs in turn: a tap's `STEP_PAIRS` pairs lie one plane phase
apart, so AMX's walk loads them as a tile straight from the plane
(`rvm.kernels.amx.block`'s ``b_steps``) instead of packing B through the table of taps;
``"tiles"``, ``"taps"``' words laid out as the tiles of B of AMX's walk turned around
(`rvm.kernels.amxconv`: the positions as A's rows, the weight as B), `tile_pairs`."""

STEP_PAIRS = 16
"""The pairs of depth of a step of AMX's walk, a tile's rows (`rvm.kernels.amx.TILE` is
this): a group of a multiple of twice as many channels may take ``"taps"``
(`conv_pairing`)."""


def conv_pairing(
    channels: int, kw: int, kh: int = 1, taps: bool = False, out_channels: int = 0
) -> str:
    """The `PAIRINGS` a convolution of ``channels`` input channels a group and a ``kh`` x
    ``kw`` kernel takes: ``"columns"`` when the group is odd and a kernel row has two taps to
    pair (fewer pairs of taps, the plane one or two phases larger); with ``taps`` (the
    kernel walks AMX's tiles: `rvm.transform.to_bf16`), for a kernel of more than one tap
    whose group's pairs fill whole steps (`STEP_PAIRS`), ``"tiles"`` when its
    ``out_channels`` fill whole bands of two tiles (the walk turned around,
    `rvm.kernels.amxconv`), else ``"taps"``; else ``"channels"``."""
    if channels % 2 == 1 and kw > 1:
        return "columns"
    if taps and kh * kw > 1 and channels % (2 * STEP_PAIRS) == 0:
        whole = out_channels > 0 and out_channels % (2 * STEP_PAIRS) == 0
        return "tiles" if whole else "taps"
    return "channels"


def pair_depth(channels, kh, kw, pairing=0):
    """A bf16 conv weight row's length for a group of ``channels`` and a ``kh`` x ``kw``
    kernel: the channels rounded up to even, times the taps; with ``pairing`` 1 (`PAIRINGS`'
    ``"columns"``) and an odd group, its channel pairs' taps and then the last channel's,
    ``ceil(kw / 2)`` pairs a kernel row."""
    if pairing == 1 and channels % 2 == 1:
        return (channels - 1) * kh * kw + 2 * kh * ((kw + 1) // 2)
    return (channels + (channels & 1)) * kh * kw


def conv_pairs(w, pairing=0):
    """An OIHW weight ``(o, c, kh, kw)`` in the bf16 convolution's depth order: ``(o,
    pair_depth)``, each row ``(c2, dy, dx, parity)`` -- channel ``2 c2 + parity`` at tap
    ``(dy, dx)``, so a 32-bit word holds a channel pair; the channel past an odd ``c`` is 0.
    With ``pairing`` 1 (``"columns"``, `PAIRINGS`) and an odd ``c``, the channel pairs' words
    so and then the last channel's ``(dy, t, half)``: tap ``(dy, 2 t + half)``, 0 past
    ``kw``; with ``pairing`` 2 (``"taps"``) each row ``(dy, dx, c2, parity)``."""
    o, c, kh, kw = w.shape
    if pairing == 1 and c % 2 == 1:
        last = np.zeros((o, kh, 2 * ((kw + 1) // 2)), dtype=w.dtype)
        last[:, :, :kw] = w[:, c - 1]
        return np.concatenate([conv_pairs(w[:, : c - 1]), last.reshape(o, -1)], axis=1)
    even = np.zeros((o, c + (c & 1), kh, kw), dtype=w.dtype)
    even[:, :c] = w
    pairs = even.reshape(o, (c + 1) // 2, 2, kh, kw).transpose(0, 1, 3, 4, 2)
    if pairing >= 2:
        pairs = pairs.transpose(0, 2, 3, 1, 4)
    rows = np.ascontiguousarray(pairs.reshape(o, pair_depth(c, kh, kw)))
    return tile_pairs(rows, kh * kw) if pairing == 3 else rows


def _tiles(o: int, k2: int, taps: int) -> tuple[int, ...]:
    """`tile_pairs`' values as (bands, halves, channels, taps, steps, pairs, parity)."""
    return (o // (2 * STEP_PAIRS), 2, STEP_PAIRS, taps, k2 // taps // STEP_PAIRS, STEP_PAIRS, 2)


def tile_pairs(rows, taps):
    """``"taps"`` rows (``(o, kp)``, `conv_pairs`) as ``"tiles"``: the same shape, each band of
    32 output channels the tiles of B its steps read in turn (`rvm.kernels.amxconv.walk`),
    tap by tap, each tap's 16 pairs at a time, the band's first 16 channels' tile then its
    last 16's: a tile 16 pairs of depth by 16 channels' pairs (words). ``o`` and the channel
    pairs of a tap whole multiples of 32 and 16."""
    o, kp = rows.shape
    values = np.ascontiguousarray(rows).reshape(_tiles(o, kp // 2, taps))
    tiles = values.transpose(0, 3, 4, 1, 5, 2, 6)  # bands, taps, steps, halves, pairs, channels
    return np.ascontiguousarray(tiles).reshape(o, kp)


def untile_pairs(rows, taps):
    """`tile_pairs`' inverse."""
    o, kp = rows.shape
    shape = _tiles(o, kp // 2, taps)
    order = (shape[0], shape[3], shape[4], shape[1], shape[5], shape[2], 2)
    values = np.ascontiguousarray(rows).reshape(order)
    back = values.transpose(0, 3, 5, 1, 2, 4, 6)  # bands, halves, channels, taps, steps, pairs
    return np.ascontiguousarray(back).reshape(o, kp)


def unpair(rows, c, kh, kw, pairing=0):
    """`conv_pairs`' inverse: the ``(o, c, kh, kw)`` weight in ``rows`` ``(o, pair_depth)``."""
    o = rows.shape[0]
    if pairing == 1 and c % 2 == 1:
        head = (c - 1) * kh * kw
        last = rows[:, head:].reshape(o, 1, kh, -1)[..., :kw]
        return np.concatenate([unpair(rows[:, :head], c - 1, kh, kw), last], axis=1)
    if pairing == 3:
        rows = untile_pairs(rows, kh * kw)
    if pairing >= 2:
        pairs = rows.reshape(o, kh, kw, (c + 1) // 2, 2).transpose(0, 3, 4, 1, 2)
    else:
        pairs = rows.reshape(o, (c + 1) // 2, kh, kw, 2).transpose(0, 1, 4, 2, 3)
    return pairs.reshape(o, -1, kh, kw)[:, :c]


def turn_pairs(rows, groups, panel):
    """The weight ``rows`` (int16 ``(o, kp)``: `conv_pairs`' bits) for the convolution turned
    around (output channels along the lanes, `rvm.kernels.bf16conv`): each group's ``(o /
    groups, kp / 2)`` words in panels of ``panel`` output channels, panel ``t`` the
    transpose ``(kp / 2, width)`` of its ``width`` channels (``panel``, the last one fewer),
    group after group, panel after panel; as ``(o, kp)`` int16 again."""
    o, kp = rows.shape
    words = np.ascontiguousarray(rows).view(np.int32).reshape(groups, o // groups, kp // 2)
    og = o // groups
    parts = [words[g, j : j + panel].T.ravel() for g in range(groups) for j in range(0, og, panel)]
    return np.concatenate(parts).view(np.int16).reshape(o, kp)


def unturn_pairs(rows, groups, panel):
    """`turn_pairs`' inverse."""
    o, kp = rows.shape
    og, k2 = o // groups, kp // 2
    words, out, at = np.ascontiguousarray(rows).view(np.int32).ravel(), [], 0
    for _ in range(groups):
        for j in range(0, og, panel):
            width = min(panel, og - j)
            out.append(words[at : at + k2 * width].reshape(k2, width).T)
            at += k2 * width
    return np.ascontiguousarray(np.concatenate(out)).view(np.int16).reshape(o, kp)


def pair_width(iw: int, ow: int, pl: int, kw: int, dw: int, sw: int) -> int:
    """``wq``, the width of a convolution's pair plane phases (an ``iw``-wide image, an
    ``ow``-wide output, padding ``pl`` columns left, kernel ``kw`` dilated ``dw``, stride
    ``sw``): the output's width plus the kernel's reach, output position ``(y, x)`` the word
    ``y * wq + x``, the last ``wq - ow`` of a row computed and dropped. At stride 1 a row
    borrows its right padding from the next row's left padding (its taps past the row's end
    read those zeros), so ``wq`` is ``pl + iw`` when the right padding is no wider than the
    left: a 3 x 3 "same" convolution drops one column a row, not two (28 x 28: 1 of 29)."""
    reach = ((kw - 1) * dw) // sw
    pr = ow + reach - iw - pl
    if sw == 1 and 0 < pr <= pl:
        return ow + reach - pr
    return ow + reach


def pair_plane(y, pt, pl, hq, wq):
    """float32 ``y`` (n, c, h, w) rounded to bf16 as a convolution's pair plane: int32 ``(n,
    (c + 1) // 2, hq, wq)``, word ``(c2, pt + i, pl + j)`` channel ``2 c2``'s bits (low half)
    and ``2 c2 + 1``'s (high half; 0 past ``c``) at ``(i, j)``, every other word 0."""
    n, c, h, w = y.shape
    bits = np.zeros((n, c + (c & 1), hq, wq), np.uint32)
    bits[:, :c, pt : pt + h, pl : pl + w] = bf16_bits(y)
    return np.ascontiguousarray(bits[:, 0::2] | (bits[:, 1::2] << 16)).view(np.int32)


def pair_image(x, *, plane):
    """``pair_image``: float32 ``x`` (n, c, h, w) as the pair plane ``plane`` ``(pt, pl, hq,
    wq)`` (`pair_plane`)."""
    return pair_plane(np.asarray(x, np.float32), *plane)


def plane_image(plane, c, h, w, pt, pl):
    """`pair_plane`'s inverse: the float32 ``(n, c, h, w)`` image in ``plane``, its padding
    ``pt`` rows above, ``pl`` columns left."""
    words = np.asarray(plane).view(np.uint32)[:, :, pt : pt + h, pl : pl + w]
    halves = np.stack([words & 0xFFFF, words >> 16], axis=2)  # (n, c2, 2, h, w)
    n = words.shape[0]
    image = (halves.astype(np.uint32) << 16).view(np.float32).reshape(n, -1, h, w)
    return np.ascontiguousarray(image[:, :c])


LAYOUTS = ("channels", "positions")
"""How a pair plane's words lie (``conv2d_bf16``'s ``plane_layout`` and ``source_layout``; the
kernels take a bit a plane, `rvm.kernels.bf16conv.conv2d`'s ``orders``): ``"channels"``, as
`pair_plane` lays them, ``(n, pairs, hq, wq)``, a channel pair's positions in rows;
``"positions"``, the same words turned, ``(n, hq, wq, pairs)``, a position's channel pairs in
turn (`as_positions`): what the walk turned around reads as A's rows as they lie and writes a
line a position (`rvm.kernels.amxconv`)."""


def as_positions(plane):
    """A pair plane ``(n, pairs, hq, wq)`` laid out as positions by channel pairs."""
    return np.ascontiguousarray(np.asarray(plane).transpose(0, 2, 3, 1))


def as_channels(plane):
    """`as_positions`' inverse."""
    return np.ascontiguousarray(np.asarray(plane).transpose(0, 3, 1, 2))


PROLOGUES = ("none", "affine", "affine_relu")
"""What ``conv2d_bf16`` applies to its input before rounding it (its ``prologue``): nothing,
or ``x * scale + shift`` per input channel (then ReLU), the scales and shifts its last
operand ``(2, c)`` float32."""


def split_operands(rest, prologue="none"):
    """``(bias, residual, affine)`` of ``conv2d_bf16``'s operands after ``x`` and ``w`` (None
    where absent): the bias and the residual in that order, the prologue's affine last."""
    affine = rest[-1] if prologue != "none" else None
    rest = rest[:-1] if prologue != "none" else rest
    return (rest[0] if rest else None), (rest[1] if len(rest) > 1 else None), affine


def conv2d_bf16(
    x, w, *rest, strides, padding, dilation, groups, kernel, activation="none", panel=0,
    plane=(), source=(), prologue="none", pairing="channels", residual_plane=(), source_at=(),
    plane_layout="channels", source_layout="channels", residual_layout="channels"
):  # fmt: skip
    """``activation(conv2d(bf16(x), w) + bias + residual)`` with the bf16 weight ``w`` (int16
    bits in channel pairs: `conv_pairs`; turned in panels of ``panel`` output channels when
    ``panel`` > 0: `turn_pairs`); ``rest``: none, the bias (one value per output channel), or
    the bias and the residual (float32, the output's shape). With ``plane`` ``(pt, pl, hq,
    wq)`` the result as the next convolution's pair plane (`pair_plane`); with ``source``
    ``(c, h, w)``, ``x`` this one's pair plane (`rvm.op.bf16`); ``prologue`` (`PROLOGUES`)
    applied to ``x`` first, its affine the last of ``rest``; an odd group's last channel's
    taps paired as ``pairing`` says (`PAIRINGS`); with ``residual_plane`` ``(pt, pl)`` the
    residual is the output image's pair plane with that padding (a convolution's ``plane``
    out: its values bf16); with ``source_at`` ``(pt, pl)`` ``x`` is a pair plane of the
    ``source`` image with that padding, laid out for another convolution; ``plane_layout``,
    ``source_layout`` and ``residual_layout`` (`LAYOUTS`) how the planes out, in and added
    lie."""
    if source:  # this one's plane, or with ``source_at`` another's
        x = as_channels(x) if source_layout == "positions" else x
        x = plane_image(x, *source, *(source_at or padding[:2]))
    bias, residual, affine = split_operands(rest, prologue)
    rest = tuple(r for r in (bias, residual) if r is not None)
    if affine is not None:
        scale, shift = (np.asarray(a, np.float32).reshape(-1, 1, 1) for a in affine)
        x = _like(np.asarray(x, np.float32) * scale + shift, np.float32)
        x = relu(x) if prologue == "affine_relu" else x
    if plane:
        attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
        y = conv2d_bf16(x, w, *rest, **attrs, kernel=kernel, activation=activation, panel=panel,
                        pairing=pairing, residual_plane=residual_plane,
                        residual_layout=residual_layout)  # fmt: skip
        y = pair_plane(y, *plane)
        return as_positions(y) if plane_layout == "positions" else y
    cg, (kh, kw) = x.shape[1] // groups, kernel
    if panel:
        w = unturn_pairs(np.asarray(w), groups, panel)
    weight = unpair(_bf16_values(w), cg, kh, kw, PAIRINGS.index(pairing))
    y = _conv(_round_bf16(x), weight, strides, padding, dilation, groups)
    if rest:
        y = _like(y + np.asarray(rest[0], np.float32).reshape(-1, 1, 1), np.float32)
    if len(rest) > 1:
        r = rest[1]
        r = as_channels(r) if residual_layout == "positions" else r
        r = plane_image(r, *y.shape[1:], *residual_plane) if residual_plane else r
        y = _like(y + np.asarray(r, np.float32), np.float32)
    if activation == "relu":
        return relu(y)
    if activation in ("gelu", "gelu_tanh"):
        return gelu(y, approximate="tanh" if activation == "gelu_tanh" else "none")
    return y


def max_pool2d_pairs(x, *, pool_size, strides, padding, dilation, ceil_mode, source,
                     source_at, plane=(), signed=True):  # fmt: skip
    """`max_pool2d` of the ``source`` ``(c, h, w)`` image whose pair plane ``x`` is (its
    padding ``source_at``): float32 NCHW, or with ``plane`` ``(pt, pl, hq, wq)`` the next
    convolution's pair plane of it (`pair_plane`). bf16 values' maximum is one of them, so
    the result is exact; ``signed`` False says the values are no less than +0 (the kernel
    may then compare their bits), which this reference does not need."""
    image = plane_image(x, *source, *source_at)
    y = max_pool2d(image, pool_size, strides, padding, dilation, ceil_mode)
    return pair_plane(y, *plane) if plane else y


def pack_pairs(weight, transposed, panel):
    """``weight`` as B ``(k, n)`` (its transpose when ``transposed``: ``(n, k)``), rounded to
    bf16, in column panels of pairs ``(panels, (k + 1) // 2, panel)`` int32: word ``(q, p,
    j)`` holds B's ``(2p, q * panel + j)`` in its low half and ``(2p + 1, q * panel + j)`` in
    its high half, zeros past ``k`` and ``n`` (`rvm.kernels.bf16dense`)."""
    if weight.ndim != 2 or panel <= 0:
        raise ValueError(
            f"pack_pairs: expects a 2-d weight and panel > 0, got {weight.shape}, {panel}"
        )
    b = weight.T if transposed else weight
    k, n = b.shape
    k2, panels = (k + 1) // 2, -(-n // panel)
    bits = np.zeros((2 * k2, panels * panel), dtype=np.uint32)
    bits[:k, :n] = bf16_bits(b)
    words = bits[0::2] | (bits[1::2] << 16)
    return np.ascontiguousarray(words.reshape(k2, panels, panel).transpose(1, 0, 2)).view(np.int32)


def dense_packed_bf16(x, w, *rest, units, activation):
    """``dense_packed`` of ``bf16(x)`` and the bf16 pair panels ``w`` ``(panels, k2,
    panel)`` int32 (`pack_pairs`), with float32 sums."""
    panels, k2, panel = w.shape
    words = np.asarray(w).view(np.uint32)
    values = np.stack([words & 0xFFFF, words >> 16], axis=2)  # (panels, k2, 2, panel)
    b = (values.astype(np.uint32) << 16).view(np.float32).reshape(panels, 2 * k2, panel)
    return dense_packed(_round_bf16(x), b[:, : x.shape[-1]], *rest, units=units,
                        activation=activation)  # fmt: skip
