"""A bf16 convolution's weight in AMX's tiles (``pairing="tiles"``, `rvm.kernels.amxconv`:
the walk turned around, the positions as A's rows): the layout and its inverse, the pass's
choice, and the convolution bit for bit the ``"taps"`` one's -- float32 or a pair plane in
and out, a float32 or a pair plane's residual, every activation, strides of the plane's
rows that are not whole tiles, one and two threads -- on AMX turned around, elsewhere (and
where the walk is not turned) through the weight's rows again."""

from __future__ import annotations

import numpy as np
import pytest
from conv_cases import bf16_conv2d, bf16_direct_case

import rvm
from rvm import op
from rvm.errors import IRError
from rvm.ir import Var, tensor
from rvm.kernels import amxconv
from rvm.kernels.reference.bf16 import (
    PAIRINGS,
    conv2d_bf16,
    conv_pairing,
    conv_pairs,
    tile_pairs,
    unpair,
    untile_pairs,
)
from rvm.kernels.reference.packed import ACTIVATIONS
from rvm.op.bf16 import bf16_bits

TAPS, TILES = PAIRINGS.index("taps"), PAIRINGS.index("tiles")
NONE4 = (0, 0, 0, 0)


def test_the_tiles_layout() -> None:
    """Word ``(band, tap, step, half, pair, channel)`` of the tiles is the ``"taps"`` rows'
    word of output channel ``32 band + 16 half + channel`` at depth pair ``tap * c2 + 16 step
    + pair``; `untile_pairs`, `unpair` and `amxconv.rows_of` undo it."""
    rng = np.random.default_rng(0)
    o, c, kh, kw = 64, 96, 3, 2
    w = rng.standard_normal((o, c, kh, kw)).astype(np.float32)
    rows = bf16_bits(conv_pairs(w, TAPS)).view(np.int16)
    tiles = bf16_bits(conv_pairs(w, TILES)).view(np.int16)
    assert tiles.shape == rows.shape
    np.testing.assert_array_equal(tile_pairs(rows, kh * kw), tiles)
    words = rows.view(np.int32)  # (o, taps * c2)
    laid = tiles.view(np.int32).reshape(2, kh * kw, 3, 2, 16, 16)
    for band, tap, step, half, pair, channel in [(0, 0, 0, 0, 0, 0), (1, 5, 2, 1, 15, 3)]:
        word = words[32 * band + 16 * half + channel, tap * 48 + 16 * step + pair]
        assert laid[band, tap, step, half, pair, channel] == word
    np.testing.assert_array_equal(untile_pairs(tiles, kh * kw), rows)
    np.testing.assert_array_equal(unpair(conv_pairs(w, TILES), c, kh, kw, TILES), w)
    np.testing.assert_array_equal(amxconv.rows_of(tiles, kh * kw), rows)


def test_which_convolutions_take_tiles() -> None:
    """On AMX (``taps``) a kernel of more than one tap whose input channels fill steps of 16
    pairs takes ``"tiles"`` where its output channels fill bands of 32, else ``"taps"``."""
    assert conv_pairing(64, 3, 3, taps=True, out_channels=96) == "tiles"
    assert conv_pairing(64, 3, 3, taps=True, out_channels=48) == "taps"
    assert conv_pairing(64, 3, 3, taps=True) == "taps"
    assert conv_pairing(64, 1, 1, taps=True, out_channels=64) == "channels"
    assert conv_pairing(64, 3, 3, out_channels=64) == "channels"
    assert conv_pairing(48, 3, 3, taps=True, out_channels=64) == "channels"


CASES = [  # n, c, o, h, w, k, padding, dilation
    (1, 64, 96, 28, 28, 3, 1, 1),  # several bands and blocks, an edge block of positions
    (2, 32, 64, 13, 11, 3, 2, 2),  # dilated, two images, not square
    (1, 64, 32, 9, 9, 5, 2, 1),  # 5 x 5
    (1, 128, 64, 7, 7, 3, 0, 1),  # no padding, a small map
    (1, 32, 32, 40, 40, 3, 1, 1),  # rows of 41 words: runs across the plane's rows
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("act", ["none", "relu", "gelu"])
def test_tiles_bit_for_bit_the_taps(case: tuple, act: str, blas_threads: int) -> None:
    """The convolution with its weight in tiles gives the ``"taps"`` one's bits, from a
    float32 image or its pair plane, into float32 or the next one's pair plane, with no
    residual, a float32 one or a pair plane's (a GELU with a residual: not turned, the tiles
    turned back into rows); and the NumPy reference's values."""
    n, c, o, h, w_, k, p, d = case
    x, w, bias, (oh, ow), plane_in, res, res_plane = bf16_direct_case(*case)
    index = ACTIVATIONS.index(act)
    none = np.zeros((0, 0, 0, 0), np.float32)
    out_plane = (1, 1, oh, ow)

    def conv(pairing: int, src: np.ndarray, r: np.ndarray, rof: tuple, to: tuple) -> np.ndarray:
        bits = bf16_bits(conv_pairs(w, pairing)).view(np.int16)
        of = (c, h, w_) if src is plane_in else (0, 0, 0)
        shape = (n, o // 2, oh + 3, ow + 1) if to[2] else (n, o, oh, ow)
        out = np.full(shape, np.nan, np.float32)
        bf16_conv2d(src, bits, out, 1, 1, 1, d, d, p, p, k, k, bias, index, r, 0, to, of,
                    (0, 0), pairing, rof)  # fmt: skip
        return out

    for src in (x, plane_in):
        for r, rof in ((none, (0, 0, 0)), (res, (0, 0, 0)), (res_plane, (1, 1, 1))):
            for to in (NONE4, out_plane):
                taps, tiles = (conv(pairing, src, r, rof, to) for pairing in (TAPS, TILES))
                np.testing.assert_array_equal(tiles.view(np.int32), taps.view(np.int32))
    bits = bf16_bits(conv_pairs(w, TILES)).view(np.int16)
    attrs = dict(strides=(1, 1), padding=(p,) * 4, dilation=(d, d), groups=1, kernel=(k, k))
    want = conv2d_bf16(x, bits, bias, res, **attrs, activation=act, pairing="tiles")
    got = conv(TILES, x, res, (0, 0, 0), NONE4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_tiles_need_whole_bands() -> None:
    """A weight in tiles needs one group and its input and output channels multiples of 32:
    the type rule's error and the kernel's."""
    x = Var("x", tensor((1, 32, 8, 8), "float32"))
    ok = op.conv2d_bf16(x, Var("w", tensor((64, 32 * 9), "int16")), kernel=3, pairing="tiles")
    assert rvm.ir.infer.infer_type(ok) == tensor((1, 64, 6, 6), "float32")
    bad = op.conv2d_bf16(x, Var("w", tensor((48, 32 * 9), "int16")), kernel=3, pairing="tiles")
    with pytest.raises(IRError, match="a weight in tiles needs one group"):
        rvm.ir.infer.infer_type(bad)
    x = np.zeros((1, 32, 8, 8), np.float32)
    w = np.zeros((48, 32 * 9), np.int16)
    out = np.zeros((1, 48, 8, 8), np.float32)
    with pytest.raises(ValueError, match="tiles needs one group"):
        bf16_conv2d(x, w, out, 1, 1, 1, 1, 1, 1, 1, 3, 3, np.zeros(0, np.float32), 0,
                    np.zeros((0, 0, 0, 0), np.float32), 0, NONE4, (0, 0, 0), (0, 0),
                    TILES)  # fmt: skip
