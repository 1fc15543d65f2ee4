"""bf16 products (`rvm.kernels.bf16gemm`, `rvm.kernels.bf16`, `rvm.kernels.bf16dense`,
`rvm.kernels.bf16conv`): the micro-kernel's tile edges, dense (on the weight's rows and on pair
panels with its epilogue) and conv2d (at strides 1 and 2) against NumPy on the same
bf16-rounded operands (float64 sums), rounding to nearest even, and the conversion path of
CPUs without AVX512-BF16."""

from __future__ import annotations

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from conv_cases import bf16_conv2d
from jit_helpers import HASWELL, Jit, check, host_has, prim, run_warm, var

from rvm import op
from rvm.kernels import bf16, bf16dense, bf16gemm, bf16planes, bf16turned
from rvm.kernels.reference.bf16 import pair_depth, pair_plane, plane_image, unpair
from rvm.kernels.reference.packed import ACTIVATIONS
from rvm.op import numpy_ref
from rvm.op.bf16 import PAIRINGS, bf16_bits, conv_pairing, conv_pairs, pack_pairs, turn_pairs
from rvm.transform.to_bf16 import bf16_rows

BF16 = ml_dtypes.bfloat16
# bf16 operands are exact in float32 and their products too; only the order of the float32
# sums differs from float64's: a relative tolerance of float32's, scaled by the depth.
RTOL = 1e-5
NO_BIAS = np.empty(0, np.float32)
NO_RES = np.empty((0, 0, 0, 0), np.float32)


def _conv2d(x, w, out, g, s, d, pads, k, bias, act, res, panel=0, pairing=0, of=(0, 0, 0)):  # type: ignore[no-untyped-def]  # noqa: E501
    """`bf16conv.conv2d` through `conv_cases.bf16_conv2d` (one build for every test; its
    arrays C-contiguous): stride ``s``, dilation ``d`` and kernel ``k`` both ways."""
    bf16_conv2d(x, w, out, g, s, s, d, d, pads[0], pads[1], k[0], k[1], bias, act, res,
                panel, (0, 0, 0, 0), of, (0, 0), pairing)  # fmt: skip


def _rounded(x: np.ndarray) -> np.ndarray:
    return x.astype(BF16).astype(np.float64)


def _pairs(b: np.ndarray) -> np.ndarray:
    """B (k, n) float as the pair-packed uint32 words in panels (panels, k/2 rounded up,
    NR)."""
    k, n = b.shape
    nr = bf16gemm.NR
    bits = np.zeros((k + (k & 1), -(-n // nr) * nr), np.uint32)
    bits[:k, :n] = b.astype(BF16).view(np.uint16)
    words = bits[0::2] | (bits[1::2] << 16)  # (k2, padded n)
    return np.ascontiguousarray(words.reshape(words.shape[0], -1, nr).transpose(1, 0, 2))


def _gemm(m: int, n: int, k: int, accumulate: bool, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    rows = bf16_rows(a)  # (m, kp) int16: A as the kernel reads it
    words = _pairs(b)
    c = rng.standard_normal((m + 2, n + 3)).astype(np.float32)  # a canary border
    want = c.astype(np.float64)
    product = _rounded(a) @ _rounded(b)
    want[1 : m + 1, :n] = product + (want[1 : m + 1, :n] if accumulate else 0)
    bf16gemm.gemm_bf16(
        rows.ctypes.data, rows.shape[1] // 2, words.ctypes.data,
        c.ctypes.data + 4 * (n + 3), n + 3, m, n, words.shape[1], accumulate,
    )  # fmt: skip
    np.testing.assert_allclose(c, want, rtol=RTOL, atol=RTOL * np.sqrt(k) * 4)


SIZES_M = [1, bf16gemm.MR - 1, bf16gemm.MR, bf16gemm.MR + 1, 3 * bf16gemm.MR + 5]
SIZES_N = [1, bf16gemm.LANES - 1, bf16gemm.LANES, bf16gemm.NR, bf16gemm.NR + 1, 169]
SIZES_K = [1, 2, 7, 2 * bf16gemm.KC2, 2 * bf16gemm.KC2 + 3]


@pytest.mark.parametrize("m", SIZES_M)
@pytest.mark.parametrize("n", SIZES_N)
@pytest.mark.parametrize("k", SIZES_K)
def test_gemm_tile_edges(m: int, n: int, k: int) -> None:
    _gemm(m, n, k, accumulate=False)


def test_gemm_accumulates_and_wide_blocks() -> None:
    _gemm(bf16gemm.MR + 1, bf16gemm.NR + 1, 2 * bf16gemm.KC2 + 3, accumulate=True)
    block = bf16gemm.BLOCK_BYTES // (4 * bf16gemm.KC2) // bf16gemm.NR * bf16gemm.NR
    _gemm(3, 2 * block + 5, 2 * bf16gemm.KC2 + 6, accumulate=False)


def test_rounding_to_nearest_even_and_nan() -> None:
    values = np.array(
        [1.0, 1.00390625, 1.01171875, -2.5, 3.4e38, np.inf, -np.inf, 0.0, -0.0, 1e-40],
        np.float32,
    )
    got = np.array([bf16.round_bits(v) for v in values.view(np.uint32)], np.uint16)
    np.testing.assert_array_equal(got, values.astype(BF16).view(np.uint16))
    nan = np.array([np.nan, np.float32(np.nan) * -1], np.float32).view(np.uint32)
    assert all(np.isnan(np.uint16(bf16.round_bits(w)).view(BF16)) for w in nan)
    signalling = np.array([0x7F800001], np.uint32)  # a NaN whose payload is all low bits
    assert np.isnan(np.uint16(bf16.round_bits(signalling[0])).view(BF16))


@pytest.mark.parametrize("m", [1, 3, bf16.GEMV_ROWS + 1, 40])
@pytest.mark.parametrize(
    "k,n", [(1, 5), (7, 33), (64, 100), (129, 17), (bf16.GEMV_SHARED_DEPTH + 3, 9)]
)  # the last: a GEMV past the shared depth, four rows a pass and one row left
def test_dense(m: int, k: int, n: int, blas_threads: int) -> None:
    rng = np.random.default_rng(m * k + n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    # ``exact`` given, as the entry point gives it (`bf16entry`): one build of `bf16.dense`
    bf16.dense(x, bf16_rows(w), out, False)
    want = _rounded(x) @ _rounded(w).T
    np.testing.assert_allclose(out, want, rtol=RTOL, atol=RTOL * np.sqrt(k) * 4)
    reference = numpy_ref.dense_bf16(x, bf16_rows(w))  # the op's reference says the same
    np.testing.assert_allclose(out, reference, rtol=RTOL, atol=RTOL * np.sqrt(k) * 4)


@pytest.mark.parametrize("m,k,n", [(1, 129, 17), (bf16.GEMV_ROWS + 1, 7, 33)])
def test_dense_of_float32_inputs(m: int, k: int, n: int, blas_threads: int) -> None:
    """``exact`` (``dense_bf16``'s ``input="float32"``): ``x`` as it is times the bf16
    weight, by GEMVs whatever the rows, to float32's rounding; not ``bf16(x)``'s product."""
    rng = np.random.default_rng(m * k + n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    bf16.dense(x, bf16_rows(w), out, True)
    want = x.astype(np.float64) @ _rounded(w).T.astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=RTOL, atol=RTOL * np.sqrt(k))
    reference = numpy_ref.dense_bf16(x, bf16_rows(w), input="float32")
    np.testing.assert_allclose(out, reference, rtol=RTOL, atol=RTOL * np.sqrt(k))
    assert np.abs(out - _rounded(x) @ _rounded(w).T).max() > 1e-3  # x was not rounded


@pytest.mark.parametrize(
    "m,k,n",
    [(1, 1, 5), (bf16gemm.MR + 1, 7, bf16gemm.NR + 1), (3 * bf16gemm.MR, 1031, 50)],
)  # a single value deep; tile edges both ways; depth past a block (DEPTH2 pairs), odd
def test_packed_dense_with_its_epilogue(m: int, k: int, n: int, blas_threads: int) -> None:
    """`bf16dense.dense` on pair panels (`pack_pairs`, panels as wide as the kernel's and
    wider) with each activation, a bias and a residual, against NumPy on the rounded
    operands and against the op's reference."""
    rng = np.random.default_rng(m + k + n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    residual = rng.standard_normal((m, n)).astype(np.float32)
    pre = _rounded(x) @ _rounded(w).T + bias
    wants = {"none": pre, "relu": np.maximum(pre, 0), "gelu": numpy_ref.gelu(pre)}
    wants["gelu_tanh"] = numpy_ref.gelu(pre, approximate="tanh")
    for panel in (bf16gemm.NR, 2 * bf16gemm.NR + 3):
        panels = pack_pairs(w, True, panel)
        for act, want in wants.items():
            out = np.full((m, n), np.nan, np.float32)
            bf16dense.dense(x, panels, out, n, bias, ACTIVATIONS.index(act), residual)
            tol = RTOL * np.sqrt(k) * 4 * (1 + np.abs(want))
            np.testing.assert_allclose(out, want + residual, rtol=RTOL, atol=tol.max())
    reference = numpy_ref.dense_packed_bf16(x, panels, bias, units=n, activation="none")
    out = np.full((m, n), np.nan, np.float32)
    bf16dense.dense(x, panels, out, n, np.empty(0, np.float32), 0)
    np.testing.assert_allclose(out + bias, reference, rtol=RTOL, atol=RTOL * np.sqrt(k) * 8)


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh"])
def test_packed_dense_gelu_on_special_values(act: str) -> None:
    """The tile epilogue's vector GELU (`rvm.kernels.epilogue`) against the elementwise
    reference in float32, on values each branch of erf and tanh takes (0, -0, tiny, the
    polynomial's range, past the clamp of erf's argument, far below and above) and on NaN and
    inf: a one-deep product by 1 gives the rounded inputs plus the bias exactly."""
    special = [0.0, -0.0, 1e-30, 0.3, -0.6, 1.2, -2.5, 4.0, -6.0, -14.0, -40.0, 60.0, 1e30]
    x = np.array(special + [np.nan, np.inf, -np.inf], np.float32)[:, None]
    x = _rounded(x).astype(np.float32)
    n = 2 * bf16gemm.LANES + 3  # whole vectors and a masked tail
    bias = np.linspace(-0.5, 0.5, n).astype(np.float32)
    out = np.full((x.shape[0], n), np.nan, np.float32)
    bf16dense.dense(x, pack_pairs(np.ones((n, 1), np.float32), True, bf16gemm.NR), out, n, bias,
                    ACTIVATIONS.index(act))  # fmt: skip
    pre = x + bias
    with np.errstate(invalid="ignore", over="ignore"):
        want = numpy_ref.gelu(pre, approximate="tanh" if act == "gelu_tanh" else "none")
    # 1 + tanh (or erf) cancels where it nears 0: there the error is float32's of ``pre``
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(out[~finite], want[~finite])
    err = np.abs(out[finite] - want[finite])
    assert (err <= 4e-6 * np.abs(want[finite]) + 2e-7 * np.abs(pre[finite])).all(), err.max()


@pytest.mark.parametrize("m,k,n", [(64, 768, 300), (512, 512, 40)])  # along panels, rows
def test_packed_dense_in_pieces(m: int, k: int, n: int, blas_threads: int) -> None:
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    bias, residual = np.ones(n, np.float32), rng.standard_normal((m, n)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    bf16dense.dense(x, pack_pairs(w, True, bf16gemm.NR), out, n, bias, 1, residual)
    want = np.maximum(_rounded(x) @ _rounded(w).T + 1, 0) + residual
    np.testing.assert_allclose(out, want, rtol=RTOL, atol=RTOL * np.sqrt(k) * 8)


CONVS = [  # n, c, h, w, out channels, kh, kw, stride, pad (t, l, b, r), dilation, groups
    (1, 3, 9, 9, 8, 3, 3, 1, (1, 1, 1, 1), 1, 1),
    (2, 6, 10, 7, 4, 3, 3, 2, (1, 0, 1, 2), 1, 2),
    (1, 64, 14, 14, 40, 1, 1, 1, (0, 0, 0, 0), 1, 1),
    (1, 5, 12, 11, 7, 5, 5, 1, (2, 2, 2, 2), 1, 1),
    (1, 4, 13, 13, 9, 3, 3, 2, (0, 0, 0, 0), 2, 1),
    (1, 3, 15, 57, 64, 7, 7, 2, (3, 3, 3, 3), 1, 1),  # stride 2: phase rows of 28, 29
    (2, 8, 10, 9, 12, 3, 3, 1, (1, 0, 2, 1), 1, 2),  # direct: groups, uneven padding
    (1, 7, 17, 40, 20, 3, 3, 1, (2, 2, 2, 2), 2, 1),  # direct: dilation, odd channels
    (1, 600, 5, 6, 9, 1, 1, 1, (0, 0, 0, 0), 1, 1),  # direct: depth past a block (KC2)
    (1, 36, 6, 7, 20, 1, 1, 1, (0, 0, 0, 0), 1, 4),  # small groups side by side (2 threads)
    (1, 5, 6, 9, 11, 3, 1, 1, (1, 0, 2, 0), 1, 1),  # whole rows a pair: rows padded, odd
    (1, 40, 7, 7, 24, 1, 1, 1, (0, 0, 0, 0), 1, 1),  # 49 positions: two tiles of two vectors
    (1, 20, 7, 7, 9, 3, 3, 1, (1, 1, 1, 1), 1, 1),  # 63 wide positions: likewise
    (1, 3, 23, 25, 10, 11, 11, 4, (2, 2, 2, 2), 1, 1),  # column pairs in two column phases
    (1, 3, 23, 25, 10, 5, 4, 3, (2, 1, 2, 3), 2, 1),  # and of a dilated even kernel row
]


def _epilogue(y: np.ndarray, bias: np.ndarray, act: int, res: np.ndarray) -> np.ndarray:
    """``ACTIVATIONS[act](y + bias + res)`` (bias one value a channel, res as y; empty: none),
    float64."""
    y = y + bias.reshape(-1, 1, 1) if bias.size else y
    y = y + res if res.size else y
    if act == 0:
        return y
    if act == 1:
        return np.maximum(y, 0)
    approximate = "tanh" if ACTIVATIONS[act] == "gelu_tanh" else "none"
    return numpy_ref.gelu(y.astype(np.float32), approximate=approximate).astype(np.float64)


def _conv(
    case: tuple,
    seed: int,
    with_bias: bool = False,
    act: int = 0,
    res: bool = False,
    panel: int = 0,
    pairing: str = "channels",
):  # type: ignore[no-untyped-def]  # noqa: E501
    """The case by the direct kernel and, with ``panel``, turned around too (output channels
    along the lanes, the weight in panels of ``panel`` channels: `turn_pairs`); an odd group's
    last channel's taps paired as ``pairing`` says."""
    n, c, h, wd, co, kh, kw, s, pads, d, g = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((co, c // g, kh, kw)).astype(np.float32)
    bias = rng.standard_normal(co if with_bias else 0).astype(np.float32)
    want = numpy_ref.conv2d(
        _rounded(x), _rounded(w), (s, s), pads, (d, d), g
    )  # float64 sums of the rounded operands
    r = rng.standard_normal(want.shape if res else (0, 0, 0, 0)).astype(np.float32)
    want = _epilogue(want, bias, act, r)
    out = np.full(want.shape, np.nan, np.float32)
    index = PAIRINGS.index(pairing)
    bits = bf16_bits(conv_pairs(w, index)).view(np.int16)
    _conv2d(x, bits, out, g, s, d, pads, (kh, kw), bias, act, r, 0, index)
    depth = c // g * kh * kw
    np.testing.assert_allclose(out, want, rtol=RTOL, atol=RTOL * np.sqrt(depth) * 8)
    attrs = dict(strides=(s, s), padding=pads, dilation=(d, d), groups=g, kernel=(kh, kw))
    rest = [bias if with_bias else np.zeros(co, np.float32)] if with_bias or res else []
    reference = numpy_ref.conv2d_bf16(
        x, bits, *rest, *([r] if res else []), **attrs, activation=ACTIVATIONS[act],
        pairing=pairing,
    )  # fmt: skip
    np.testing.assert_allclose(out, reference, rtol=RTOL, atol=RTOL * np.sqrt(depth) * 8)
    if panel:
        turned = np.full(want.shape, np.nan, np.float32)
        _conv2d(x, turn_pairs(bits, g, panel), turned, g, s, d, pads, (kh, kw), bias, act, r,
                panel, index)  # fmt: skip
        np.testing.assert_allclose(turned, want, rtol=RTOL, atol=RTOL * np.sqrt(depth) * 8)


@pytest.mark.parametrize("i", range(len(CONVS)))
def test_conv2d(i: int, blas_threads: int) -> None:
    """Each case once, in turn with no epilogue, a bias and ReLU, or a GELU (no bias), every
    other case with a residual added before the activation: applied to the rows as they are
    summed, wide rows (the residual and activation as they are compacted) and grouped pieces
    alike; and turned around (output channels along the lanes), in panels of a tile's `NR`
    channels, of `LANES` (a tile's vectors from several panels, where the channels fill
    them) or of fewer than two vectors' (a tile's last vector part of a panel). An odd
    group's last channel pairs its taps as `rvm.transform.to_bf16` has it (`conv_pairing`:
    along the kernel's rows, at any stride and dilation), the first case's as its channel
    pairs."""
    case = CONVS[i]
    seed, act = case[1] * case[2] + case[4], (0, 1, 3)[i % 3]
    panel = (bf16gemm.LANES + 3, bf16gemm.NR, bf16gemm.LANES, bf16gemm.NR)[i % 4]
    pairing = conv_pairing(case[1] // case[10], case[6]) if i else "channels"
    _conv(case, seed=seed, with_bias=i % 3 == 1, act=act, res=i % 2 == 1, panel=panel,
          pairing=pairing)  # fmt: skip


@pytest.mark.parametrize("o", [2 * bf16gemm.NR + 3, 2 * bf16gemm.LANES], ids=["odd", "one-tile"])
@pytest.mark.parametrize(
    "panel", [0, bf16gemm.NR, bf16gemm.LANES], ids=["direct", "turned", "turned-spanning"]
)
def test_pair_plane_out_in_pieces(panel: int, o: int, blas_threads: int) -> None:
    """A convolution writing the next one's pair plane (``to``), direct and turned around,
    cut into pieces at two threads (each piece rounds its own channels' rows,
    `bf16planes.rows_to_pairs`; turned, channels that make one tile of panels of `LANES` are
    cut along the output's rows instead): every word is its float32 output's channel pair
    rounded (ties to even), the padding's words 0, and an odd channel count leaves the last
    pair's high half 0."""
    rng = np.random.default_rng(5)
    c, s = 64, 14
    x = rng.standard_normal((1, c, s, s)).astype(np.float32)
    bits = bf16_bits(conv_pairs(rng.standard_normal((o, c, 3, 3)).astype(np.float32) / 20))
    w = turn_pairs(bits.view(np.int16), 1, panel) if panel else bits.view(np.int16)
    bias = rng.standard_normal(o).astype(np.float32)
    y = np.empty((1, o, s, s), np.float32)
    bf16_conv2d(x, w, y, 1, 1, 1, 1, 1, 1, 1, 3, 3, bias, 1, NO_RES, panel)
    wq = bf16planes.pair_width(s, s, 1, 3, 1, 1)
    plane = np.full((1, (o + 1) // 2, s + 3, wq), np.nan, np.float32)
    bf16_conv2d(x, w, plane, 1, 1, 1, 1, 1, 1, 1, 3, 3, bias, 1, NO_RES, panel, (1, 1, s, s))
    half = np.zeros((1, o + o % 2, s, s), np.uint32)
    half[:, :o] = bf16_bits(y)
    want = np.zeros(plane.shape, np.uint32)
    want[:, :, 1 : 1 + s, 1 : 1 + s] = half[:, 0::2] | (half[:, 1::2] << 16)
    np.testing.assert_array_equal(plane.view(np.uint32), want)


@pytest.mark.parametrize("s", [20, 28])
@pytest.mark.parametrize("o", [2 * bf16gemm.NR + 3, 64])
@pytest.mark.parametrize("residual", [False, True], ids=["none", "plane"])
def test_one_by_one_into_a_padded_plane(s: int, o: int, residual: bool, blas_threads: int) -> None:
    """A 1 x 1 writing a 3 x 3's padded pair plane (its rows wider than the image's: each
    tile's runs of positions go out row by row, `rvm.kernels.blockout.block_out`), with ReLU
    and, or not, a residual pair plane laid out as that plane, at one and two threads: every
    word is the float32 output's rounded, the padding's words 0."""
    rng = np.random.default_rng(o + s)
    c = 64
    x = rng.standard_normal((1, c, s, s)).astype(np.float32)
    w = bf16_bits(conv_pairs(rng.standard_normal((o, c, 1, 1)).astype(np.float32) / 8))
    w = w.view(np.int16)
    bias = rng.standard_normal(o).astype(np.float32)
    relu = ACTIVATIONS.index("relu")
    wq = bf16planes.pair_width(s, s, 1, 3, 1, 1)
    shape = (1, (o + 1) // 2, s + 3, wq)
    image = rng.standard_normal((1, o, s, s)).astype(np.float32)
    r_plane = np.ascontiguousarray(pair_plane(image, 1, 1, *shape[2:]).view(np.float32))
    r_image = plane_image(r_plane, o, s, s, 1, 1) if residual else np.empty(0, np.float32)
    res, rof = (r_plane, (1, 1, 1)) if residual else (np.empty(0, np.float32), (0, 0, 0))

    def conv(out, res, to=(0, 0, 0, 0), rof=(0, 0, 0)):  # type: ignore[no-untyped-def]
        bf16_conv2d(x, w, out, 1, 1, 1, 1, 1, 0, 0, 1, 1, bias, relu, res, 0, to,
                    (0, 0, 0), (0, 0), 0, rof)  # fmt: skip
        return out

    y = conv(np.empty((1, o, s, s), np.float32), r_image if residual else NO_RES)
    plane = conv(np.full(shape, np.nan, np.float32), res if residual else NO_RES, (1, 1, s, s), rof)
    np.testing.assert_array_equal(
        plane.view(np.int32), pair_plane(y, 1, 1, *shape[2:]).view(np.int32)
    )


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("o", [64, 2 * bf16gemm.NR + 3])
@pytest.mark.parametrize("act", ["none", "relu", "gelu"])
def test_residuals_in_and_out_of_pair_planes(k: int, o: int, act: str, blas_threads: int) -> None:
    """A residual as a pair plane (``rof``: the plane a convolution wrote for the next, as
    ResNet's shortcut stays bf16; laid out as the plane out or not) or float32, into a float32
    output or a pair plane out (on AMX added, and rounded, with the sums in the walk,
    `amx.BLOCK_OUT`; elsewhere, or with a GELU, through float32 rows): every output is bit
    for bit the float32 output's with the residual's values, rounded into the plane, cut into
    pieces at two threads; a 1 x 1 (the plane's rows the output's) and a 3 x 3 (wider rows, a
    padded plane)."""
    rng = np.random.default_rng(o + k)
    c, s, p = 64, 14, k // 2
    x = rng.standard_normal((1, c, s, s)).astype(np.float32)
    w = bf16_bits(conv_pairs(rng.standard_normal((o, c, k, k)).astype(np.float32) / 8))
    w = w.view(np.int16)
    bias = rng.standard_normal(o).astype(np.float32)
    index = ACTIVATIONS.index(act)
    wq = bf16planes.pair_width(s, s, p, k, 1, 1)
    shape = (1, (o + 1) // 2, s + 2 * p + 1, wq)
    image = rng.standard_normal((1, o, s, s)).astype(np.float32)
    r_plane = np.ascontiguousarray(pair_plane(image, p, p, *shape[2:]).view(np.float32))
    r_image = plane_image(r_plane, o, s, s, p, p)  # the residual's values: bf16
    to, rof = (p, p, s, s), (1, p, p)

    def conv(out, res, to=(0, 0, 0, 0), rof=(0, 0, 0)):  # type: ignore[no-untyped-def]
        bf16_conv2d(x, w, out, 1, 1, 1, 1, 1, p, p, k, k, bias, index, res, 0, to,
                    (0, 0, 0), (0, 0), 0, rof)  # fmt: skip
        return out

    # and a plane laid out for a 1 x 1 (no padding, one row more), whatever the output's
    r_other = np.ascontiguousarray(pair_plane(r_image, 0, 0, s + 1, s).view(np.float32))
    y = conv(np.empty((1, o, s, s), np.float32), r_image)
    want = pair_plane(y, p, p, *shape[2:])
    for res, kind in ((r_plane, rof), (r_other, (1, 0, 0))):
        np.testing.assert_array_equal(conv(np.empty((1, o, s, s), np.float32), res, rof=kind), y)
    for res, kind in ((r_image, (0, 0, 0)), (r_plane, rof), (r_other, (1, 0, 0))):
        plane = np.full(shape, np.nan, np.float32)
        conv(plane, res, to, kind)
        np.testing.assert_array_equal(plane.view(np.int32), want)


@pytest.mark.parametrize(
    "case, panel",
    [
        ((1, 64, 20, 21, 48, 3, 3, 1, (1, 1, 1, 1), 1, 1), 0),  # two steps a tap, an edge block
        ((2, 32, 9, 11, 40, 3, 3, 1, (2, 2, 2, 2), 2, 1), 0),  # dilated, two images
        ((1, 96, 12, 12, 33, 5, 5, 1, (2, 2, 2, 2), 1, 1), 0),  # 5 x 5, three steps a tap
        ((1, 64, 16, 16, 32, 3, 3, 2, (1, 1, 1, 1), 1, 1), 0),  # strided: phases
        ((1, 64, 7, 7, 40, 3, 3, 1, (1, 1, 1, 1), 1, 1), bf16gemm.NR),  # turned around
        ((1, 40, 10, 10, 16, 3, 3, 1, (1, 1, 1, 1), 1, 1), 0),  # a step spans two taps
    ],
)
def test_taps_first(case: tuple, panel: int, blas_threads: int) -> None:
    """A weight in ``"taps"`` order (`PAIRINGS`: tap by tap, each tap's channel pairs in
    turn) against the float64 convolution and the NumPy reference: on AMX each step of 16
    pairs is one tap's, its tiles loaded straight from the plane (`amx.block`'s
    ``b_steps``), where the pairs fill whole steps; else, and elsewhere, through the table."""
    _conv(case, seed=11, with_bias=True, act=1, res=True, panel=panel, pairing="taps")


def test_taps_first_on_a_pair_plane_in() -> None:
    """A ``"taps"`` convolution reading the pair plane another wrote: bit for bit the same
    convolution of the plane's values as float32."""
    rng = np.random.default_rng(3)
    c, o, s = 64, 48, 13
    image = rng.standard_normal((1, c, s, s)).astype(np.float32)
    wq = bf16planes.pair_width(s, s, 1, 3, 1, 1)
    plane = np.ascontiguousarray(pair_plane(image, 1, 1, s + 3, wq).view(np.float32))
    values = plane_image(plane, c, s, s, 1, 1)
    w = rng.standard_normal((o, c, 3, 3)).astype(np.float32) / 8
    bits = bf16_bits(conv_pairs(w, PAIRINGS.index("taps"))).view(np.int16)
    bias = rng.standard_normal(o).astype(np.float32)
    want, got = (np.empty((1, o, s, s), np.float32) for _ in range(2))
    _conv2d(values, bits, want, 1, 1, 1, (1, 1), (3, 3), bias, 1, NO_RES, 0, 2)
    _conv2d(plane, bits, got, 1, 1, 1, (1, 1), (3, 3), bias, 1, NO_RES, 0, 2, (c, s, s))
    np.testing.assert_array_equal(got, want)
    channels = np.full_like(got, np.nan)
    _conv2d(values, bf16_bits(conv_pairs(w)).view(np.int16), channels, 1, 1, 1, (1, 1),
            (3, 3), bias, 1, NO_RES)  # fmt: skip
    np.testing.assert_allclose(got, channels, rtol=RTOL, atol=RTOL * np.sqrt(9 * c) * 8)


def test_conv_pairings() -> None:
    """`conv_pairing` and each pairing's order, `unpair` undoing `conv_pairs`."""
    assert conv_pairing(3, 7) == "columns"
    assert conv_pairing(64, 3, 3) == conv_pairing(64, 1, 1, taps=True) == "channels"
    assert conv_pairing(64, 3, 3, taps=True) == conv_pairing(32, 1, 5, taps=True) == "taps"
    assert conv_pairing(48, 3, 3, taps=True) == "channels"  # a tap's pairs not whole steps
    rng = np.random.default_rng(0)
    for c, pairing in ((5, 0), (5, 1), (6, 2), (64, 2)):
        w = rng.standard_normal((3, c, 3, 2)).astype(np.float32)
        rows = conv_pairs(w, pairing)
        assert rows.shape == (3, pair_depth(c, 3, 2, pairing))
        np.testing.assert_array_equal(unpair(rows, c, 3, 2, pairing), w)
    taps = conv_pairs(w, 2).reshape(3, 3, 2, 32, 2)  # (o, dy, dx, c2, parity)
    np.testing.assert_array_equal(taps[:, 1, 0, 5, 1], w[:, 11, 1, 0])


@pytest.mark.parametrize("k, stride, pad", [(1, 2, 0), (3, 2, 1), (3, 1, 1), (7, 2, 3)])
def test_a_pair_plane_in_copied_into_the_phases(k: int, stride: int, pad: int) -> None:
    """A pair plane laid out for another convolution (``at``: its padding; here a 1 x 1's),
    its words copied into this one's stride phases: bit for bit the convolution of the
    plane's image as float32 (bf16 values, rounded to themselves), odd channels too."""
    rng = np.random.default_rng(k + stride)
    c, o, s = 37, 40, 15
    image = rng.standard_normal((2, c, s, s)).astype(np.float32)
    plane = np.ascontiguousarray(pair_plane(image, 0, 0, s + 1, s).view(np.float32))
    values = plane_image(plane, c, s, s, 0, 0)
    w = bf16_bits(conv_pairs(rng.standard_normal((o, c, k, k)).astype(np.float32) / 8))
    w = w.view(np.int16)
    bias = rng.standard_normal(o).astype(np.float32)
    os_ = (s + 2 * pad - k) // stride + 1
    want, got = (np.empty((2, o, os_, os_), np.float32) for _ in range(2))
    args = (1, stride, stride, 1, 1, pad, pad, k, k, bias, 1, NO_RES, 0, (0, 0, 0, 0))
    bf16_conv2d(values, w, want, *args)
    bf16_conv2d(plane, w, got, *args, (c, s, s), (0, 0), 0, (0, 0, 0), (1, 0, 0))
    np.testing.assert_array_equal(got, want)


def test_conv2d_rounds_inputs_to_nearest_even() -> None:
    """The pair plane rounds each input as `bf16_bits` does (ties to even, NaN kept), the
    vector path and its masked tail alike (no subnormals: `vdpbf16ps` takes them as 0)."""
    values = np.array([1.0, 1.00390625, 1.01171875, -2.5, 3.4e38, 1.5e-38, 0.0], np.float32)
    x = np.tile(values, 5)[:33].reshape(1, 1, 1, 33)
    out = np.empty((1, 1, 1, 33), np.float32)
    one = bf16_bits(conv_pairs(np.ones((1, 1, 1, 1), np.float32))).view(np.int16)
    _conv2d(x, one, out, 1, 1, 1, (0, 0), (1, 1), NO_BIAS, 0, NO_RES)
    np.testing.assert_array_equal(out, x.astype(BF16).astype(np.float32))
    x[0, 0, 0, 31] = np.nan
    _conv2d(x, one, out, 1, 1, 1, (0, 0), (1, 1), NO_BIAS, 0, NO_RES)
    assert np.isnan(out[0, 0, 0, 31]) and not np.isnan(np.delete(out, 31)).any()


def test_scratch_outlives_its_use_in_a_warm_process() -> None:
    """A convolution that writes the next one's pair plane (`bf16conv._pairs_out`) and the
    next that reads it, and one turned around, in a second process loading their code from
    Numba's cache, its allocations from 4 KB on mapped apart (``MALLOC_MMAP_THRESHOLD_``,
    fixed), so that a free unmaps them: a scratch array the code reaches only through its
    address must outlive that code (`rvm.kernels.jitting.alive`). `_direct`'s rows did not,
    and a warm process crashed (s37) where a compiling one, whose compiles had raised glibc's
    threshold, reused the freed memory unseen."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 4, 7, 7)).astype(np.float32)
    one = bf16_bits(conv_pairs(np.ones((16, 4, 1, 1), np.float32))).view(np.int16)
    _conv2d(x, one, np.empty((1, 16, 7, 7), np.float32), 1, 1, 1, (0, 0), (1, 1), NO_BIAS, 0,
            NO_RES)  # fmt: skip  # the signature the process loads, cached here if not yet
    script = (
        "import numpy as np, ml_dtypes\n"
        "from rvm.kernels import bf16conv, bf16gemm\n"
        "from rvm.kernels.bf16planes import pair_width\n"
        "from rvm.op import numpy_ref\n"
        "from rvm.op.bf16 import bf16_bits, conv_pairs, turn_pairs\n"
        "rng = np.random.default_rng(0)\n"
        "r = lambda a: a.astype(ml_dtypes.bfloat16).astype(np.float64)\n"
        "bits = lambda w: bf16_bits(conv_pairs(w, 0)).view(np.int16)\n"
        "b0, r0, none = np.empty(0, np.float32), np.empty((0,) * 4, np.float32), (0, 0, 0, 0)\n"
        "x = rng.standard_normal((1, 4, 16, 16)).astype(np.float32)\n"
        "w1 = rng.standard_normal((16, 4, 1, 1)).astype(np.float32)\n"
        "w2 = rng.standard_normal((8, 16, 3, 3)).astype(np.float32)\n"
        "plane = np.full((1, 8, 19, pair_width(16, 16, 1, 3, 1, 1)), np.nan, np.float32)\n"
        "bf16conv.conv2d(x, bits(w1), plane, 1, 1, 1, 1, 1, 0, 0, 1, 1, b0, 1, r0, 0,\n"
        "                (1, 1, 16, 16), (0, 0, 0), (0, 0), 0)\n"
        "out = np.empty((1, 8, 16, 16), np.float32)\n"
        "bf16conv.conv2d(plane, bits(w2), out, 1, 1, 1, 1, 1, 1, 1, 3, 3, b0, 0, r0, 0,\n"
        "                none, (16, 16, 16), (0, 0), 0)\n"
        "a = np.maximum(numpy_ref.conv2d(r(x), r(w1), (1, 1), none, (1, 1), 1), 0)\n"
        "want = numpy_ref.conv2d(r(a.astype(np.float32)), r(w2), (1, 1), (1,) * 4, (1, 1), 1)\n"
        "np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)\n"
        "x = rng.standard_normal((1, 16, 7, 7)).astype(np.float32)\n"  # turned around
        "want = numpy_ref.conv2d(r(x), r(w2), (1, 1), (1,) * 4, (1, 1), 1)\n"
        "out = np.empty((1, 8, 7, 7), np.float32)\n"
        "bf16conv.conv2d(x, turn_pairs(bits(w2), 1, bf16gemm.NR), out, 1, 1, 1, 1, 1, 1, 1, 3,\n"
        "                3, b0, 0, r0, bf16gemm.NR, none, (0, 0, 0), (0, 0), 0)\n"
        "np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)\n"
    )
    run_warm(script)


def test_shapes_are_checked() -> None:
    x = np.ones((2, 8), np.float32)
    with pytest.raises(ValueError, match="weight's depth is not the input's"):
        bf16.dense(x, np.zeros((3, 10), np.int16), np.empty((2, 3), np.float32), False)
    with pytest.raises(ValueError, match="output's shape is not"):
        bf16.dense(x, np.zeros((3, 8), np.int16), np.empty((2, 4), np.float32), False)
    panels, none = pack_pairs(np.ones((3, 8), np.float32), True, bf16gemm.NR), np.empty(0)
    with pytest.raises(ValueError, match=r"pair-packed weight \(panels, \(k \+ 1\) // 2"):
        bf16dense.dense(np.ones((2, 9), np.float32), panels, np.empty((2, 3), np.float32), 3,
                        none.astype(np.float32), 0)  # fmt: skip
    with pytest.raises(ValueError, match="panels do not cover n columns"):
        bf16dense.dense(x, panels, np.empty((2, 99), np.float32), 99, none.astype(np.float32), 0)
    with pytest.raises(ValueError, match="residual must have out's shape"):
        bf16dense.dense(x, panels, np.empty((2, 3), np.float32), 3, none.astype(np.float32), 0,
                        np.ones((1, 3), np.float32))  # fmt: skip
    img, w = np.ones((1, 4, 5, 5), np.float32), np.zeros((2, 36), np.int16)
    out = np.empty((1, 2, 3, 3), np.float32)  # C-contiguous all: one signature (`_conv2d`)
    with pytest.raises(ValueError, match="channel pairs x kernel"):
        _conv2d(img, np.zeros((2, 35), np.int16), out, 1, 1, 1, (0, 0), (3, 3), NO_BIAS, 0, NO_RES)
    with pytest.raises(ValueError, match="output's batch or channels"):
        _conv2d(
            img, w, np.empty((1, 1, 3, 3), np.float32), 1, 1, 1, (0, 0), (3, 3), NO_BIAS, 0, NO_RES
        )
    with pytest.raises(ValueError, match="one value per output channel"):
        _conv2d(img, w, out, 1, 1, 1, (0, 0), (3, 3), np.ones(3, np.float32), 1, NO_RES)
    with pytest.raises(ValueError, match="unknown activation"):
        _conv2d(img, w, out, 1, 1, 1, (0, 0), (3, 3), NO_BIAS, len(ACTIVATIONS), NO_RES)
    with pytest.raises(ValueError, match="unknown pairing index"):
        _conv2d(img, w, out, 1, 1, 1, (0, 0), (3, 3), NO_BIAS, 0, NO_RES, 0, len(PAIRINGS))
    with pytest.raises(ValueError, match="residual's shape is not the output's"):
        _conv2d(img, w, out, 1, 1, 1, (0, 0), (3, 3), NO_BIAS, 1, np.ones((1, 2, 3, 4), np.float32))
    plane = np.ones((1, 2, 7, 6), np.float32)  # the pair plane of a 3-channel 5 x 5 image
    w30, out5 = np.zeros((2, 30), np.int16), np.empty((1, 2, 5, 5), np.float32)
    with pytest.raises(ValueError, match="a pair plane in pairs its channels, not columns"):
        _conv2d(plane, w30, out5, 1, 1, 1, (1, 1), (3, 3), NO_BIAS, 0, NO_RES, 0, 1, (3, 5, 5))


@pytest.mark.parametrize(
    "cpu,features,lanes",
    [
        pytest.param("haswell", HASWELL, 8, id="haswell"),
        pytest.param(  # AVX-512 without its BF16 instructions: a second cold process (-m slow)
            "skylake-avx512",
            "+64bit,+avx,+avx2,+fma,+avx512f,+avx512bw,+avx512dq,+avx512vl,+sse,+sse2,+sse3,"
            "+sse4.1,+sse4.2,+ssse3,+cmov,-avx512bf16",
            16,
            marks=pytest.mark.slow,
            id="skylake-avx512",
        ),
    ],
)
def test_cpus_without_bf16_instructions(
    tmp_path, haswell_caches, cpu: str, features: str, lanes: int
) -> None:
    """Without AVX512-BF16 (`NUMBA_CPU_NAME`/`NUMBA_CPU_FEATURES`) the kernel widens bf16 to
    float32 and uses FMAs, with the same results (dense, convolution, its odd channel's taps
    paired along columns, its planes of positions turned into pair planes and back; attention
    in the AVX-512 case, -m slow), saying so once at DEBUG;
    `rvm.transform.to_bf16` then takes the rounded way, and says so once at INFO. A host
    without them at the case's lanes runs its own build, loaded from the suite's caches
    (every test here runs that path too): the same checks without building the library again
    for the named CPU."""
    if lanes == 16 and not host_has("avx512f"):
        pytest.skip("the host has no AVX-512")
    script = (
        "import logging, numpy as np, ml_dtypes\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "logging.getLogger('rvm.kernels').setLevel(logging.DEBUG)\n"  # the kernels' own line
        "from rvm.kernels import bf16, bf16gemm\n"
        "from rvm.transform.to_bf16 import bf16_rows\n"
        f"assert not bf16gemm.DPBF16 and bf16gemm.LANES == {lanes}, bf16gemm.LANES\n"
        "rng = np.random.default_rng(0)\n"
        "r = lambda a: a.astype(ml_dtypes.bfloat16).astype(np.float64)\n"
        "for m, n, k in [(1, 1, 1), (7, 17, 3), (13, 40, 600), (25, 9, 70)]:\n"
        "    x = rng.standard_normal((m, k)).astype(np.float32)\n"
        "    w = rng.standard_normal((n, k)).astype(np.float32)\n"
        "    out = np.empty((m, n), np.float32)\n"
        "    bf16.dense(x, bf16_rows(w), out, False)\n"  # as the tests here call it: one build
        "    np.testing.assert_allclose(out, r(x) @ r(w).T, rtol=1e-4, atol=1e-4)\n"
        "from rvm.kernels import bf16conv\n"
        "from rvm.op import numpy_ref\n"
        "from rvm.op.bf16 import bf16_bits, conv_pairs, turn_pairs\n"
        "for s in (1, 2):\n"
        "    x = rng.standard_normal((1, 5, 11, 13)).astype(np.float32)\n"
        "    w = rng.standard_normal((48, 5, 3, 3)).astype(np.float32)\n"
        "    want = numpy_ref.conv2d(r(x), r(w), (s, s), (1, 1, 1, 1), (1, 1), 1)\n"
        "    out = np.empty(want.shape, np.float32)\n"
        "    bits = bf16_bits(conv_pairs(w, 1)).view(np.int16)\n"  # the 5th channel's columns
        "    bias = np.linspace(-1, 1, 48, dtype=np.float32)\n"  # the tile's bias, residual, ReLU
        "    res = rng.standard_normal(want.shape).astype(np.float32)\n"
        "    want = np.maximum(want + bias.reshape(48, 1, 1) + res, 0)\n"
        "    tail = ((0, 0, 0, 0), (0, 0, 0), (0, 0), 1, (0, 0, 0), (0, 0, 0), 0)\n"  # one build
        "    bf16conv.conv2d(x, bits, out, 1, s, s, 1, 1, 1, 1, 3, 3, bias, 1, res, 0, *tail)\n"
        "    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)\n"
        "    for nr in (bf16gemm.NR, bf16gemm.LANES):\n"  # turned around: channels on the lanes
        "        out[...] = np.nan\n"  # in panels of a tile, or of a vector (tiles span them)
        "        wt = turn_pairs(bits, 1, nr)\n"
        "        bf16conv.conv2d(x, wt, out, 1, s, s, 1, 1, 1, 1, 3, 3, bias, 1, res, nr, *tail)\n"
        "        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)\n"
        "from rvm.kernels.reference.bf16 import as_positions, pair_plane\n"  # planes of
        "x = rng.standard_normal((1, 32, 6, 6)).astype(np.float32)\n"  # positions turned
        "bits = bf16_bits(conv_pairs(rng.standard_normal((32, 32, 3, 3)), 3)).view(np.int16)\n"
        "plane = pair_plane(x, 1, 1, 9, 7).view(np.float32)\n"  # into pair planes and back
        "outs = [np.empty(s, np.float32) for s in ((1, 16, 9, 8), (1, 9, 8, 16))]\n"
        "for src, out, orders in ((plane, outs[0], 0), (as_positions(plane), outs[1], 3)):\n"
        "    bf16conv.conv2d(src, bits, out, 1, 1, 1, 1, 1, 1, 1, 3, 3, bias[:32], 1,\n"
        "                    np.empty((0, 0, 0, 0), np.float32), 0, (1, 1, 6, 6), (32, 6, 6),\n"
        "                    (0, 0), 3, (0, 0, 0), (0, 0, 0), orders)\n"
        "words = [o.view(np.int32) for o in outs]\n"
        "np.testing.assert_array_equal(words[1], as_positions(words[0]))\n"
        "from rvm.kernels import bf16dense\n"  # the tile epilogue's GELU at these lanes
        "from rvm.op.bf16 import pack_pairs\n"
        "x = np.linspace(-8, 8, 23, dtype=np.float32)[:, None]\n"
        "out = np.empty((23, 19), np.float32)\n"
        "ones = pack_pairs(np.ones((19, 1), np.float32), True, bf16gemm.NR)\n"
        "bf16dense.dense(x, ones, out, 19, np.zeros(19, np.float32), 2)\n"
        "want = numpy_ref.gelu(np.repeat(r(x), 19, 1).astype(np.float32))\n"
        "np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)\n"
    )
    if lanes == 16:  # attention's products on the same GEMM: -m slow (8 CPU-s cold at 8 lanes)
        script += (
            "from rvm.kernels.attention import attention\n"
            "from rvm.kernels.reference.transformer import attention as ref\n"
            "q, k, v = (rng.standard_normal((1, 2, 9, 11)).astype(np.float32) for _ in range(3))\n"
            "mask = np.zeros((1, 1, 1, 9), np.float32)\n"
            "mask[..., 7:] = -np.inf\n"
            "out = np.empty((1, 2, 9, 11), np.float32)\n"
            "attention(q, k, v, mask, out, 0.3, 0.0, 0.0, False, True)\n"
            "want = ref(q, k, v, mask, 0.3, 'add', 0.0, 0.0, 'bf16')\n"
            "np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)\n"
        )
    script += (  # the pass takes the rounded way and says so once, at INFO
        "from rvm import op\n"
        "from rvm.ir import Builder, Var, const, tensor\n"
        "from rvm.transform.to_bf16 import native_way, to_bf16\n"
        "assert native_way() == 'rounded'\n"
        "v = Var('x', tensor((8, 32), 'float32'))\n"
        "bb = Builder()\n"
        "with bb.function('main', [v]):\n"
        "    bb.emit_output(bb.emit(op.dense(v, const(np.ones((4, 32), np.float32)))))\n"
        "to_bf16(bb.get())\n"
        "to_bf16(bb.get())\n"
    )
    env = dict(os.environ)
    if host_has("avx512bf16") or lanes != bf16gemm.LANES:  # another CPU's build
        env.update(NUMBA_CPU_NAME=cpu, NUMBA_CPU_FEATURES=features, NUMBA_CACHE_DIR=str(tmp_path))
        if cpu == "haswell":  # the library functions the AVX2 path's tests build too
            env.update(NUMBA_CACHE_DIR=haswell_caches["NUMBA_CACHE_DIR"])
    # else the host is such a CPU, at these lanes: its own build, from the suite's caches
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr.count("has no AVX512-BF16") == 1, run.stderr[-2000:]  # DEBUG
    assert run.stderr.count("INFO:rvm.transform:rvm: this CPU has no bf16 dot") == 1, run.stderr


def test_the_dot_products_speed_is_timed_where_it_can_be() -> None:
    """`bf16speed` times ``vdpbf16ps`` against float32 FMAs where the host and the target have
    AVX512-BF16 (their loops sum what they should), and refuses elsewhere."""
    from rvm.kernels import bf16speed

    if not bf16speed.measurable():
        assert bf16speed.measured() is None
        with pytest.raises(RuntimeError, match="no AVX512-BF16"):
            bf16speed.dot_speed()
        return
    # 0.5's bits as a bf16 pair are (0, 0.5): each step adds 0.5 * 0.5 to each lane either way
    want = bf16speed.ACCUMULATORS * bf16gemm.LANES * 3 * 0.25
    assert bf16speed._dots(3, 0.5) == want and bf16speed._fmas(3, 0.5) == want
    dots, fmas = bf16speed.measured()
    assert 1e8 < dots < 1e13 and 1e8 < fmas < 1e13  # multiply-adds a second of one core
    assert bf16speed.measured() == (dots, fmas)  # timed once a process


def test_large_gemv_in_pieces(blas_threads: int) -> None:
    """A batch-1 dense layer with a large weight runs its rows in pieces on the pool."""
    rng = np.random.default_rng(7)
    n, k = 4 * bf16.GEMV_SPLIT_MIN // 1000 + 3, 1001
    x = rng.standard_normal((1, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    out = np.full((1, n), np.nan, np.float32)
    bf16.dense(x, bf16_rows(w), out, False)
    want = _rounded(x) @ _rounded(w).T
    np.testing.assert_allclose(out, want, rtol=RTOL, atol=RTOL * np.sqrt(k) * 4)


@pytest.mark.parametrize(
    "case",
    [
        (1, 64, 48, 48, 32, 3, 3, 2, (1, 1, 1, 1), 1, 1),  # stride 2: phases of a plane in pieces
        (1, 64, 40, 40, 40, 3, 3, 1, (1, 1, 1, 1), 1, 1),  # stride 1: channels by rows
        (1, 512, 46, 46, 8, 1, 1, 1, (0, 0, 0, 0), 1, 1),  # the pair plane in pieces
        (1, 256, 32, 32, 8, 3, 3, 1, (1, 1, 1, 1), 1, 1),  # plane past L2/2: blocks of rows
        (1, 32, 48, 200, 8, 3, 3, 1, (1, 1, 1, 1), 1, 1),  # wide rows in blocks: read ahead
        (1, 16, 40, 400, 8, 3, 3, 2, (1, 1, 1, 1), 1, 1),  # the same in stride phases
        (1, 128, 7, 7, 256, 3, 3, 1, (1, 1, 1, 1), 1, 1),  # turned: panels in pieces
        (1, 256, 14, 14, 32, 3, 3, 1, (1, 1, 1, 1), 1, 1),  # turned, one panel, an epilogue
        (1, 64, 7, 7, 512, 3, 3, 1, (1, 1, 1, 1), 1, 1),  # turned: 8 tiles of 48, 4 of 32
        (1, 96, 13, 13, 208, 3, 3, 1, (1, 1, 1, 1), 1, 1),  # turned: 1 tile of 48, 5 of 32
        (1, 64, 14, 14, 200, 1, 1, 1, (0, 0, 0, 0), 1, 1),  # turned: panels not all full
        (1, 1024, 1, 1, 1000, 1, 1, 1, (0, 0, 0, 0), 1, 1),  # one position: in pieces by its
        # weight's bytes (`conv_pieces`: densenet121's classifier)
    ],
)
@pytest.mark.parametrize("spanning", [False, True], ids=["nr-panels", "lanes-panels"])
def test_large_convolutions_in_pieces(case: tuple, spanning: bool, blas_threads: int) -> None:
    """Large convolutions run in pieces on the pool, with the same results (turned around
    too, the cases at 7 x 7 to 14 x 14, with a bias, a residual and ReLU: the weight in
    panels of `NR` channels, or of `LANES`, tiles then spanning panels where the channels
    fill them and cut for the threads into whole tiles, `bf16turned._short_tiles`)."""
    turned = case[2] in (1, 7, 13, 14)
    if spanning and not turned:
        pytest.skip("the direct method has no panels")
    panel = (bf16gemm.LANES if spanning else bf16gemm.NR) if turned else 0
    _conv(case, seed=8, with_bias=turned, act=int(turned), res=turned, panel=panel)


def test_convolution_pieces_count_each_weight_pair_used_at_least_16_times() -> None:
    """A convolution over few positions is cut by its weight's bytes (`conv_pieces`): one
    position counts as `WEIGHT_USES`, more as themselves."""
    pieces, uses = bf16gemm.conv_pieces.py_func, bf16gemm.WEIGHT_USES
    assert pieces(1000, 1, 512) == pieces(1000, uses, 512) >= bf16gemm.PIECES_PER_THREAD * 2
    assert pieces(32, 49, 576) == 32 * 49 * 576 // bf16gemm.CONV_SPLIT_MIN


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_turned_tiles_give_each_thread_its_share(threads: int) -> None:
    """A turned convolution's channels (a multiple of `LANES`) are cut into tiles of `NR`,
    then of ``2 * LANES`` (`bf16turned._short_tiles`, `_tile_start`): the tiles make the
    channels, and threads taking them in turn get the fewest channels at most that such a
    mix allows, exactly their share where the mix makes one (512 or 256 on two threads)."""
    short_tiles = bf16turned._short_tiles.py_func
    start = bf16turned._tile_start.py_func
    lanes, nr = bf16gemm.LANES, bf16gemm.NR
    for og in range(lanes, 2049, lanes):
        short = short_tiles(og, threads)
        count = -(-(og - short * 2 * lanes) // nr) + short
        edges = [start(i, og, short) for i in range(count + 1)]
        widths = [b - a for a, b in zip(edges, edges[1:])]
        assert edges[0] == 0 and edges[-1] == og and all(w > 0 for w in widths), og
        assert all(w in (nr, 2 * lanes) for w in widths) or short == 0, (og, widths)
        busiest = max(sum(widths[t::threads]) for t in range(threads))
        for n in range(og // (2 * lanes) + 1):  # no other mix of the two loads it less
            rest = og - n * 2 * lanes
            if rest % nr == 0:
                mix = [nr] * (rest // nr) + [2 * lanes] * n
                assert busiest <= max(sum(mix[t::threads]) for t in range(threads)), og
    if threads == 2 and nr == 3 * lanes:
        for og in (256, 512, 1024, 2048):
            short = short_tiles(og, 2)
            count = (og - short * 2 * lanes) // nr + short
            widths = [start(i + 1, og, short) - start(i, og, short) for i in range(count)]
            assert sum(widths[0::2]) == sum(widths[1::2]) == og // 2, og


def test_piece_grids_balance_the_threads() -> None:
    """A product is cut into the grid of pieces whose busiest thread (each piece to the
    thread that frees up first) has the fewest cells (`bf16gemm.piece_grid`; returns step
    and count along each axis): of grids that load it alike, the fewest cuts along the second
    axis, then the most pieces; one part or one thread, one piece."""
    grid = bf16gemm.piece_grid.py_func  # the rule alone, nothing built
    # 28 rows first: 4 pieces of 7, not 7 of 4 (16 rows the busiest)
    assert grid(28, 1, 512, 8, 8, 2) == (7, 4, 64, 1)
    assert grid(224, 1, 64, 8, 8, 2) == (28, 8, 8, 1)
    # 256 channels (5 panels of 48, one of 16) in at most 5 parts: 2 pieces of 144 and 112
    assert grid(256, 48, 1, 1, 5, 2) == (3, 2, 1, 1)
    assert grid(320, 48, 1, 1, 3, 2) == (3, 3, 1, 1)  # 176 the busiest either way
    assert grid(32, 48, 25, 1, 8, 2) == (1, 1, 13, 2)  # one unit along a: cut along b
    assert grid(256, 48, 1, 1, 1, 2) == grid(256, 48, 1, 1, 5, 1) == (6, 1, 1, 1)


def test_kernels_check_a_depth_known_only_at_run_time() -> None:
    """dense_bf16 and conv2d_bf16 kernels call the library's entry points
    (`rvm.kernels.bf16entry`), which check nothing: the kernel checks the weight's depth
    against an input whose depth is a symbol (the convolution's odd channel's taps paired
    along columns), and agrees with the numpy kernel."""
    x, w = var("x", ("n", "k")), var("w", (5, "kp"), "int16")
    func = prim([x, w], op.tanh(op.dense_bf16(x, w)))
    a = np.random.default_rng(3).standard_normal((3, 7)).astype(np.float32)
    bits = bf16_rows(np.random.default_rng(4).standard_normal((5, 7)).astype(np.float32))
    kernel = Jit(func)
    check(func, a, bits, kernel=kernel)
    with pytest.raises(ValueError, match="the weight's depth is not x's"):
        kernel(np.ascontiguousarray(a[:, :5]), bits)
    x = var("x", (1, "c", 6, 6))
    w = var("w", (4, "kp"), "int16")
    conv = op.conv2d_bf16(x, w, kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1),
                          dilation=(1, 1), groups=1, pairing="columns")  # fmt: skip
    func = prim([x, w], conv)
    img = np.random.default_rng(5).standard_normal((1, 3, 6, 6)).astype(np.float32)
    bits = bf16_bits(conv_pairs(np.ones((4, 3, 3, 3), np.float32), 1)).view(np.int16)
    kernel = Jit(func)
    check(func, img, bits, kernel=kernel, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="the weight's depth is not x's"):
        kernel(np.ones((1, 5, 6, 6), np.float32), bits)
