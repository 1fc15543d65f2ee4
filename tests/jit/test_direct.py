"""The direct convolution vectorized along output channels (`rvm.kernels.direct`) against the
NumPy reference: packing, the kernel on odd shapes (channels that fill no vector, strides,
pads, groups, dilations, batches, panels of other widths), the rule that picks it, and models
that take it through `rvm.kernels.conv` in every exec mode."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest
from jit_helpers import rand, var

import rvm
from rvm import op
from rvm.ir import expr as E
from rvm.ir.builder import Builder
from rvm.kernels import conv, convmethod, direct, direct_tile, parfor, sgemm, workpool
from rvm.kernels.cpu import cpu
from rvm.op import numpy_ref

# (batch, channels, height, width, out channels, kernel (h, w), strides, dilation, groups,
#  pads (top, left, bottom, right))
CASES = [
    (1, 16, 9, 9, 32, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),
    (2, 6, 10, 7, 48, (3, 3), (2, 1), (1, 1), 2, (1, 0, 2, 1)),  # groups, asymmetric pads
    (1, 5, 8, 8, 20, (3, 3), (1, 1), (2, 2), 1, (2, 2, 2, 2)),  # dilated, 20 channels
    (1, 3, 11, 9, 17, (2, 3), (1, 1), (1, 1), 1, (0, 1, 0, 1)),  # 17: a lane of a vector
    (1, 64, 7, 7, 512, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # resnet50's last stage
    (1, 8, 6, 6, 8, (3, 3), (1, 1), (1, 1), 8, (1, 1, 1, 1)),  # depthwise
    (1, 7, 13, 11, 50, (5, 5), (3, 2), (1, 2), 1, (2, 1, 0, 3)),  # stride 3, 50 channels
    (3, 12, 5, 5, 99, (1, 1), (1, 1), (1, 1), 3, (0, 0, 0, 0)),  # 1x1, 3 groups of 33
    (1, 4, 2, 3, 16, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # fewer positions than a tile
    (0, 4, 5, 5, 16, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # an empty batch
    (1, 0, 5, 5, 16, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # no input channels
    # The NHWC copy's vector tiles (8 channels by a vector of columns) and their tails: 20
    # channels, rows of 37, the second image.
    (2, 20, 4, 37, 16, (3, 3), (1, 1), (1, 1), 1, (1, 2, 0, 1)),
]


def _operands(case):
    n, c, h, w, o, (kh, kw), _, _, groups, _ = case
    return rand((n, c, h, w)), rand((o, c // groups, kh, kw), seed=1)


def _reference(case, x, w):
    return numpy_ref.conv2d(x, w, case[6], case[9], case[7], case[8])


@pytest.mark.parametrize("panel", [direct.NB, 16, 2 * direct.NB])
@pytest.mark.parametrize("case", CASES)
def test_packed_convolution_matches_reference(case, panel) -> None:
    """Panels of the kernel's tile and of other widths (a weight packed on another CPU)."""
    x, w = _operands(case)
    want = _reference(case, x, w)
    packed = direct.pack(w, case[8], panel)
    np.testing.assert_array_equal(direct.unpack(packed, w.shape[0]), w)
    out = np.full(want.shape, np.nan, np.float32)
    (sh, sw), (dh, dw), pads = case[6], case[7], case[9]
    direct.conv2d_packed(x, packed, out, sh, sw, dh, dw, pads[0], pads[1])
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


def test_deep_panels_run_in_depth_blocks() -> None:
    """A panel and an input plane larger than half of one core's L2 run the bands over depth
    blocks of taps (`rvm.kernels.direct_tile.tap_block`), each band's sums finished after
    (`direct_tile.finish`): with a bias, a ReLU, a partial tile and a narrow last panel, the
    reference's answers, the same bits at one thread and at two."""
    c = cpu().l2 // 2 // (4 * 9 * direct.NB) + 9
    assert direct_tile.tap_block(9, c, direct.NB, 81 * c) < 9
    assert direct_tile.tap_block(9, 8, direct.NB, 81 * 8) == 9  # small: one block
    case = (1, c, 7, 7, 2 * direct.NB + 5, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1))
    x, w = _operands(case)
    bias = rand((w.shape[0],), seed=2)
    want = np.maximum(_reference(case, x, w) + bias[None, :, None, None], 0)
    packed, outs = direct.pack(w, 1), []
    before = rvm.get_num_threads()
    try:
        for threads in (1, 2):
            rvm.set_num_threads(threads)
            out = np.full(want.shape, np.nan, np.float32)
            direct.conv2d_packed_fused(x, packed, out, 1, 1, 1, 1, 1, 1, bias, 1)
            outs.append(out)
    finally:
        rvm.set_num_threads(before)
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-3)


def test_every_partial_tile_size() -> None:
    """Maps of ``MR * k + r`` positions for every ``r``: a band's last tile runs the loop of
    the fewest rows of `rvm.kernels.direct_tile.PARTS` that hold it, by 1 to 3 vectors."""
    from rvm.kernels.direct_tile import PARTS

    assert PARTS[0] == direct.MR and list(PARTS) == sorted(PARTS, reverse=True)
    for width in range(direct.MR + 1, 2 * direct.MR):
        for o in (16, 40):
            case = (1, 8, 1, width, o, (1, 3), (1, 1), (1, 1), 1, (0, 1, 0, 1))
            x, w = _operands(case)
            out = np.full((1, o, 1, width), np.nan, np.float32)
            direct.conv2d_packed(x, direct.pack(w, 1), out, 1, 1, 1, 1, 0, 1)
            np.testing.assert_allclose(out, _reference(case, x, w), rtol=1e-4, atol=1e-3)


def test_partial_tiles_in_interleaved_sums() -> None:
    """A band's last, partial tile splits each tap's channels over interleaved sums
    (`rvm.kernels.direct_tile.sums`), added after the loop: channels a group that fill the
    sums unevenly (the rest in the first), fewer channels than sums, channels that take rounds
    of `rvm.kernels.direct_tile.STEPS` steps and then rounds of one step a sum (13, 20), groups,
    1 and 2 vectors of output channels, 3 x 3 and 1 x 1 kernels, every partial tile size."""
    from rvm.kernels.direct_tile import MR, PARTS, sums

    assert any(sums(mr, 1) > 1 for mr in PARTS[1:]) and sums(MR, 1) == 1
    for cg in (1, 3, 5, 9, 13, 20):
        for groups, og, k in ((1, 16, 3), (2, 8, 3), (1, 24, 1)):
            for width in range(MR + 1, 2 * MR):
                pad = k // 2
                case = (1, cg * groups, 1, width, og * groups, (k, k), (1, 1), (1, 1), groups,
                        (pad,) * 4)  # fmt: skip
                x, w = _operands(case)
                out = np.full((1, og * groups, 1, width), np.nan, np.float32)
                direct.conv2d_packed(x, direct.pack(w, groups), out, 1, 1, 1, 1, pad, pad)
                np.testing.assert_allclose(out, _reference(case, x, w), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "case",
    [
        (1, 16, 129, 131, 16, (3, 3), (1, 1), (1, 1), 1, (1, 2, 0, 1)),
        (1, 64, 13, 15, 64, (3, 3), (1, 1), (1, 1), 1, (1, 2, 0, 1)),  # under MIN_WORK
    ],
    ids=["large", "small"],
)
def test_input_copied_by_rows_on_the_threads(blas_threads, case) -> None:
    """The input plane is copied to NHWC by rows on the pool (two threads) whenever the
    convolution's pieces go there, a plane of `rvm.kernels.parfor.MIN_WORK` elements or more
    and a smaller one alike, with ragged row pieces and padding: the same answer, for each of
    two inputs in turn (the plane's memory is kept across calls). The copy's pieces and the
    bands are one job of the pool (the bands wait for the copy), none on one thread."""
    x, w = _operands(case)
    assert (x[0].size >= parfor.MIN_WORK) == (case[2] > 100)
    packed = direct.pack(w, 1)
    for image in (x, np.ascontiguousarray(x[:, ::-1] - 0.5)):
        want = _reference(case, image, w)
        assert want[0, 0].size * w.size >= 4 * parfor.MIN_WORK  # its pieces go to the pool
        out = np.full(want.shape, np.nan, np.float32)
        start = workpool.jobs()
        direct.conv2d_packed(image, packed, out, 1, 1, 1, 1, 1, 2)
        assert workpool.jobs() - start == (1 if blas_threads > 1 else 0)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("act", [0, 1])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("panel", [direct.NB, 2 * direct.NB])
@pytest.mark.parametrize("case", CASES)
def test_the_epilogue_in_the_tiles_matches_the_pass(case, panel, with_bias, act) -> None:
    """`conv2d_packed_fused`'s bias and ReLU, applied in the tiles' registers (whole tiles,
    partial ones through the buffer, panels wider than a tile, groups, batches), equal the
    convolution followed by the pass's arithmetic; a NaN in the input stays NaN."""
    x, w = _operands(case)
    if x.size:
        x[0, 0, 0, 0] = np.nan
    o = w.shape[0]
    bias = rand((o,), seed=5) if with_bias else np.empty(0, np.float32)
    with np.errstate(invalid="ignore"):
        want = _reference(case, x, w)
        if with_bias:
            want = want + bias[:, None, None]
        if act:
            want = np.where(want < 0, 0, want)
    packed = direct.pack(w, case[8], panel)
    out = np.full(want.shape, np.nan, np.float32)
    (sh, sw), (dh, dw), pads = case[6], case[7], case[9]
    direct.conv2d_packed_fused(x, packed, out, sh, sw, dh, dw, pads[0], pads[1], bias, act)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


@nb.njit
def _fused_entry(x, w4, out, bias, res, params):  # type: ignore[no-untyped-def]
    return direct.conv2d_packed_fused_call((x, w4, out, bias, res), params)


@pytest.mark.parametrize("what", ["channels", "one", "none", "residual"])
def test_the_fused_entry_point_applies_the_epilogue(blas_threads, what) -> None:
    """Bias of a value a channel or one for all, none (ReLU alone), or a residual (then by
    the pass after the convolution, the residual added before the ReLU): as the reference;
    a bias of another channel count is refused, nothing written."""
    x, w = rand((2, 16, 9, 7)), rand((32, 16, 3, 3), seed=1)
    packed = direct.pack(w, 1)
    w4 = packed.reshape(packed.shape[0] * packed.shape[1], 3, 3, -1)
    want = numpy_ref.conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    bias = rand((1, 32 if what != "one" else 1, 1, 1), seed=2)
    res = rand(want.shape, seed=3)
    out = np.full(want.shape, np.nan, np.float32)
    with_bias, with_res = int(what != "none"), int(what == "residual")
    params = (1, 1, 1, 1, 1, 1, 1, 1, 1, packed.shape[5], 1, with_bias, with_res)
    assert _fused_entry(x, w4, out, bias if with_bias else out, res if with_res else out,
                        params) == 0  # fmt: skip
    want = want + (bias if with_bias else 0) + (res if with_res else 0)
    np.testing.assert_allclose(out, np.maximum(want, 0), rtol=1e-4, atol=1e-3)
    out[...] = 0
    refused = (*params[:11], 1, with_res)
    assert _fused_entry(x, w4, out, rand((1, 31, 1, 1)), res, refused) == 1
    assert not out.any()


def test_a_bias_of_one_value_in_a_warm_process() -> None:
    """A bias of one value for all channels, spread over them in a scratch array the call's
    task reaches by address, outlives the call in a process loading the kernels from the
    caches (`jit_helpers.run_warm`): 4096 channels, 16 KB of scratch mapped apart there."""
    from jit_helpers import run_warm

    script = (
        "import numba as nb\n"
        "import numpy as np\n"
        "from rvm.kernels import direct\n"
        "from rvm.op import numpy_ref\n"
        "@nb.njit\n"
        "def call(x, w4, out, bias, params):\n"
        "    return direct.conv2d_packed_fused_call((x, w4, out, bias, out), params)\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.standard_normal((1, 16, 3, 3)).astype(np.float32)\n"
        "w = rng.standard_normal((4096, 16, 1, 1)).astype(np.float32)\n"
        "packed = direct.pack(w, 1)\n"
        "w4 = packed.reshape(packed.shape[0] * packed.shape[1], 1, 1, -1)\n"
        "bias = np.full((1, 1, 1, 1), -0.5, np.float32)\n"
        "want = np.maximum(numpy_ref.conv2d(x, w, (1, 1), (0, 0, 0, 0), (1, 1), 1) - 0.5, 0)\n"
        "params = (1, 1, 1, 1, 1, 0, 0, 0, 0, packed.shape[5], 1, 1, 0)\n"
        "for _ in range(20):\n"
        "    out = np.full(want.shape, np.nan, np.float32)\n"
        "    assert call(x, w4, out, bias, params) == 0\n"
        "    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)\n"
    )
    exec(script, {})  # compiled here, cached for the warm process
    run_warm(script)


@pytest.mark.parametrize("case", CASES[:4])
def test_pack_in_jitted_code_is_pack(case) -> None:
    x, w = _operands(case)
    want = direct.pack(w, case[8])
    got = np.full(want.shape, np.nan, np.float32)
    direct.pack_into(w, case[8], got)
    np.testing.assert_array_equal(got, want)


def test_pack_refuses_channels_that_do_not_divide() -> None:
    with pytest.raises(ValueError, match="10 output channels, 3 groups"):
        direct.pack(rand((10, 2, 3, 3)), 3)


def _pays(c, o, groups, k, stride, out, size, packed=True) -> bool:
    return convmethod.channels_pay(c, o, groups, k, k, stride, stride, out, out, size, size, packed)


def test_the_rule_follows_the_shape_and_the_cpu() -> None:
    """Where the direct method runs (`convmethod.prefers`, through `convmethod.channels_pay`)."""
    lanes = direct.LANES
    deep = 8 * lanes  # 3x3 taps of these channels: deep enough
    # Where a tile's row of the GEMM's B is one cache line (AVX2), its taps read in place lose
    # to the direct method from `BUILT_DEPTH` vectors deep; else from 36 (48 on small maps).
    narrow = bool(sgemm.PACK_B)
    # Large maps: many output channels, stride 1, no groups; packed at the call too.
    assert _pays(deep, 8 * lanes, 1, 3, 1, 4 * lanes, 4 * lanes, packed=False)
    assert not _pays(deep, 8 * lanes, 1, 3, 2, 4 * lanes, 8 * lanes)  # strided
    assert not _pays(deep, 8 * lanes, 2, 3, 1, 4 * lanes, 4 * lanes)  # grouped
    assert _pays(2 * lanes, 8 * lanes, 1, 3, 1, 55, 55) == narrow  # squeezenet's 16 channels
    assert not _pays(lanes, 8 * lanes, 1, 3, 1, 55, 55)  # 9 vectors deep: shallow
    assert not _pays(deep, 8 * lanes + 1, 1, 3, 1, 4 * lanes, 4 * lanes)  # ragged channels
    # Two vectors of output channels on maps of twice `PACK_MIN_POSITIONS` (resnet50's 64,
    # densenet121's 32 at 56 x 56), not smaller; one vector only when the input plane
    # outgrows a quarter of the last level cache (vgg19's first layers).
    assert _pays(deep, 2 * lanes, 1, 3, 1, 56, 56)
    assert not _pays(deep, 2 * lanes, 1, 3, 1, 32, 32)
    side = 4 * lanes * (1 + int((cpu().l3 / (16 * deep)) ** 0.5) // (4 * lanes) + 1)
    assert _pays(deep, lanes, 1, 3, 1, side, side)
    assert not _pays(deep, lanes, 1, 3, 1, 2 * lanes, 2 * lanes)
    # Small maps: where the GEMM's vectors of positions leave a fifth of their lanes idle,
    # on weights packed at build time only.
    idle = 3 * lanes + 1  # positions of a map whose GEMM runs over all of them
    side = int(idle**0.5)
    if side * side == idle and side < convmethod.TAPS_MIN_WIDTH:  # 7 x 7 on 16 lanes
        assert _pays(deep, 2 * lanes, 1, 3, 1, side, side)
        assert not _pays(deep, 2 * lanes, 1, 3, 1, side, side, packed=False)
        assert _pays(deep, 2 * lanes, 1, 3, 2, side, 2 * side)  # strided too
    assert _pays(5 * lanes, 2 * lanes, 1, 3, 1, lanes, lanes) == narrow  # whole vectors
    # Small maps, deeper still (vgg19's 28 x 28 and 14 x 14 layers, densenet121's 32 channels).
    assert _pays(deep, 6 * lanes, 1, 3, 1, 28, 28)
    assert not _pays(deep, 6 * lanes, 1, 3, 1, 28, 28, packed=False)
    assert _pays(4 * lanes, 8 * lanes, 1, 3, 1, 28, 28) == narrow  # 36 * lanes deep
    assert not _pays(lanes, 8 * lanes, 1, 3, 1, 28, 28)  # 9 * lanes deep: too shallow
    assert _pays(deep, 2 * lanes, 1, 3, 1, 28, 28)
    assert not _pays(deep, lanes, 1, 3, 1, 28, 28)  # one vector of output channels
    # In groups alike, a group's channels deep enough (alexnet's 5 x 5 layer in two groups).
    assert _pays(2 * deep, 8 * lanes, 2, 3, 1, 28, 28)
    assert _pays(deep, 8 * lanes, 2, 3, 1, 28, 28) == narrow  # 36 * lanes deep a group
    assert not _pays(2 * lanes, 8 * lanes, 2, 3, 1, 28, 28)  # 9 * lanes deep a group
    assert not _pays(2 * deep, 2 * lanes, 2, 3, 1, 28, 28)  # one vector a group
    # Strided on such maps too (resnet50's stride-2 3x3 layers), not on large ones.
    assert _pays(deep, 8 * lanes, 1, 3, 2, 28, 56)
    assert not _pays(deep, 8 * lanes, 1, 3, 2, 28, 56, packed=False)
    assert _pays(4 * lanes, 8 * lanes, 1, 3, 2, 28, 56) == narrow  # 36 * lanes deep
    assert not _pays(lanes, 8 * lanes, 1, 3, 2, 28, 56)  # too shallow
    # Rows of 12 of a 3x3 convolution leave a quarter of the GEMM's lanes idle; a deep 1x1
    # convolution pays only where its whole map does (7 x 7), or where the GEMM copies its B
    # on maps of four of its tiles or fewer, not on maps that fill the GEMM's vectors (12 x
    # 12: 144 positions, 9 vectors), nor shallow, nor on a large map.
    assert _pays(deep, 2 * lanes, 1, 3, 1, 12, 12)
    assert _pays(9 * deep, 8 * lanes, 1, 1, 1, 12, 12) == (narrow and 144 <= 4 * sgemm.NR)
    idle = 5 * 49 < 4 * -(-49 // lanes) * lanes  # 7 x 7: 49 of 64 lanes; of 56 on AVX2
    idle = idle or narrow and 49 <= 4 * sgemm.NR
    assert _pays(64 * deep, 8 * lanes, 1, 1, 1, 7, 7) == idle
    assert _pays(64 * deep, 8 * lanes, 1, 1, 2, 7, 14) == idle
    assert not _pays(2 * deep, 8 * lanes, 1, 1, 1, 7, 7)  # 16 * lanes deep: too shallow
    assert _pays(4 * deep, 8 * lanes, 1, 1, 1, 7, 7) == idle  # 32 * lanes (resnet50's 512)
    assert not _pays(4 * deep - lanes, 8 * lanes, 1, 1, 1, 7, 7)
    assert not _pays(64 * deep, 3 * lanes, 1, 1, 1, 7, 7)  # few output channels
    assert _pays(64 * deep, 4 * lanes, 1, 1, 1, 7, 7) == narrow  # the GEMM copies its B too
    assert not _pays(64 * deep, 8 * lanes, 1, 1, 1, 4 * lanes + 1, 4 * lanes + 1)
    assert not _pays(64 * deep, 8 * lanes, 1, 1, 1, 56, 56)


# Convolutions `rvm.kernels.conv` runs by the direct method, its weight packed at the call:
# padded, dilated, odd sizes, a batch of 2. Dilated: a plain 3x3 stride-1 one deep enough for
# the direct method is Winograd's where its floor is 16 channels (`convmethod.winograd_pays`).
CHANNELS_CASES = [
    (1, 64, 32, 33, 128, (3, 3), (1, 1), (2, 2), 1, (2, 2, 2, 2)),
    (2, 72, 35, 31, 144, (3, 3), (1, 1), (2, 2), 1, (2, 1, 2, 3)),
]


@pytest.mark.parametrize("case", CHANNELS_CASES)
def test_library_convolution_takes_the_direct_method(case) -> None:
    x, w = _operands(case)
    want = _reference(case, x, w)
    out = np.full(want.shape, np.nan, np.float32)
    (_, c, ih, iw), (o, _, kh, kw), (oh, ow) = x.shape, w.shape, want.shape[2:]
    unpadded = not any(case[9])
    how = convmethod.method(
        c, o, case[8], kh, kw, *case[6], *case[7], oh, ow, ih, iw, unpadded, True
    )
    assert how == convmethod.CHANNELS  # the case tests what it means to
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = case[6], case[7], case[9]
    conv.conv2d(x, w, out, case[8], sh, sw, dh, dw, pt, pl, pb, pr)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("case", CHANNELS_CASES)
def test_the_library_applies_a_bias_and_relu_in_the_direct_tiles(case, residual) -> None:
    """`conv._conv2d_blas` on the direct method takes a bias a channel and a ReLU into its
    tiles (1 back); with a residual it leaves all three to the caller's pass (0 back)."""
    from rvm.kernels import epipass

    x, w = _operands(case)
    conv_out = _reference(case, x, w)
    bias = rand((w.shape[0],), seed=3)
    res = rand(conv_out.shape, seed=4) if residual else np.empty(0, np.float32)
    want = np.maximum(conv_out + bias[None, :, None, None] + (res if residual else 0), 0)
    out = np.full(want.shape, np.nan, np.float32)
    epilogue = (bias.ctypes.data, 1, 1, res.ctypes.data if residual else 0)
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = case[6], case[7], case[9]
    done = conv._conv2d_blas(x, w, out, case[8], sh, sw, dh, dw, pt, pl, pb, pr, epilogue)
    assert done == (0 if residual else 1)
    if done == 0:
        epipass.epilogue_rows(out, bias, 1, res)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


def _model(case, weight_param: bool = False):
    """conv2d + bias + relu of ``case``, its weight a constant (as models bring them) or a
    parameter; the module and its inputs."""
    x_np, w_np = _operands(case)
    bias = rand((case[4], 1, 1), seed=2)
    x, w = var("x", x_np.shape), var("w", w_np.shape)
    b = Builder()
    with b.function("main", [x, w] if weight_param else [x]):
        attrs = dict(strides=case[6], dilation=case[7], groups=case[8], padding=case[9])
        y = b.emit(op.conv2d(x, w if weight_param else E.Constant(w_np), **attrs))
        b.emit_output(b.emit(op.relu(op.add(y, E.Constant(bias)))))
    return b.get(), (x_np, w_np) if weight_param else (x_np,)


# A densenet121 layer on a 7 x 7 map (packed at build time: the GEMM would leave lanes idle on
# AVX-512), and one the library packs at the call.
MODEL_CASES = [
    (1, 128, 7, 7, 32, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),
    CHANNELS_CASES[0],
]


@pytest.mark.parametrize("case", MODEL_CASES)
def test_a_model_on_the_direct_method_in_every_exec_mode(exec_mode, case) -> None:
    """Against the interpreter, in every exec mode; with the weight a parameter too (no
    packing at build time: the library's own choice at the call)."""
    for weight_param in (False, True):
        mod, inputs = _model(case, weight_param)
        want = rvm.interpret(mod, "main", *inputs)
        vm = rvm.VirtualMachine(rvm.compile(mod), exec_mode=exec_mode)
        np.testing.assert_allclose(vm["main"](*inputs), want, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("bias_shape", ["channels", "one", "residual"])
def test_a_packed_convolution_with_its_epilogue_in_every_exec_mode(exec_mode, bias_shape) -> None:
    """A convolution on weights packed at build time and its kernel's epilogue
    (``conv2d_packed_fused``): a bias a channel or one for all and a ReLU in the tiles, no
    pass after; with a residual too; against the interpreter, in every exec mode."""
    case = MODEL_CASES[0]
    x_np, w_np = _operands(case)
    bias = rand((case[4] if bias_shape != "one" else 1, 1, 1), seed=2)
    x, r = var("x", x_np.shape), var("r", (1, case[4], 7, 7))
    inputs = (x_np, rand((1, case[4], 7, 7), seed=4))
    b = Builder()
    with b.function("main", [x, r]):
        attrs = dict(strides=case[6], dilation=case[7], groups=case[8], padding=case[9])
        y = b.emit(op.conv2d(x, E.Constant(w_np), **attrs))
        y = op.add(y, E.Constant(bias))
        if bias_shape == "residual":
            y = op.add(y, r)
        b.emit_output(b.emit(op.relu(y)))
    mod = b.get()
    want = rvm.interpret(mod, "main", *inputs)
    ex = rvm.compile(mod)
    if bias_shape != "residual":  # (a residual here stays the kernel's own loop)
        sources = [ex.kernel_source(k) for k in ex.kernels]
        assert sum("conv2d_packed_fused" in text for text in sources) == 1
        assert not any("conv_epilogue" in text for text in sources)
    vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
    np.testing.assert_allclose(vm["main"](*inputs), want, rtol=1e-4, atol=2e-3)


def test_constant_weights_are_packed_where_the_rule_says() -> None:
    from rvm.transform.pack_conv_weights import pack_conv_weights

    # A stride-2 layer (resnet50's 256 x 28 x 28 to 14 x 14, narrower) is packed too.
    strided = (1, 128, 14, 14, 128, (3, 3), (2, 2), (1, 1), 1, (1, 1, 1, 1))
    for case in [*MODEL_CASES, CASES[0], strided]:
        mod, _ = _model(case)
        o, c, k, s = case[4], case[1], case[5][0], case[6][0]
        size = case[2]
        want = _pays(c, o, 1, k, s, (size + 2 - k) // s + 1, size)
        assert want or case is not strided
        text = str(pack_conv_weights(mod))
        assert ("conv2d_packed" in text) == want, (case, want)
        assert ("conv2d(" in text) == (not want)


# A shallow 3x3 convolution's output channels on small maps (dilated where its map takes
# Winograd's: `convmethod.winograd_pays` takes no dilation).
_SHALLOW_OUT = 4 * direct.LANES


def test_a_module_that_builds_the_method_packs_its_shallower_small_maps() -> None:
    """A shallow 3x3 convolution on a 14 x 14 map (`convmethod.pays_once_built`, not `prefers`)
    stays a GEMM in a module of its own (which then builds nothing of the method), and takes
    the direct method beside a deep one that does (both dilated: Winograd's rule takes a 3x3
    one undilated there); the packed module computes the same."""
    from rvm.transform.pack_conv_weights import pack_conv_weights

    lanes, out = direct.LANES, _SHALLOW_OUT
    shallow = (1, 2 * lanes, 14, 14, out, (3, 3), (1, 1), (2, 2), 1, (2, 2, 2, 2))
    assert not _pays(2 * lanes, out, 1, 3, 1, 14, 14)
    assert convmethod.pays_once_built(2 * lanes, out, 1, 3, 3, 1, 1, 14, 14)
    assert not convmethod.pays_once_built(2 * lanes, out, 1, 3, 3, 2, 2, 14, 14)  # strided
    assert not convmethod.pays_once_built(2 * lanes, out, 1, 3, 3, 1, 1, 32, 32)  # large
    assert not convmethod.pays_once_built(lanes, out, 1, 3, 3, 1, 1, 14, 14)  # shallower
    assert not convmethod.winograd_pays(2 * lanes, out, 1, 3, 3, 1, 1, 2, 2, 14, 14)
    alone, _ = _model(shallow)
    assert "conv2d_packed" not in str(pack_conv_weights(alone))
    assert _pays(8 * lanes, 2 * lanes, 1, 3, 1, 14, 14)
    x = var("x", (1, 8 * lanes, 14, 14))
    deep, wide = rand((2 * lanes, 8 * lanes, 3, 3)), rand((out, 2 * lanes, 3, 3), seed=3)
    b = Builder()
    with b.function("main", [x]):
        y = b.emit(op.conv2d(x, E.Constant(deep), (1, 1), (2, 2, 2, 2), (2, 2)))
        b.emit_output(b.emit(op.conv2d(y, E.Constant(wide), (1, 1), (2, 2, 2, 2), (2, 2))))
    mod = b.get()
    packed = pack_conv_weights(mod)
    assert str(packed).count("conv2d_packed") == 2 and "conv2d(" not in str(packed)
    inputs = (rand((1, 8 * lanes, 14, 14), seed=4),)
    want = rvm.interpret(mod, "main", *inputs)
    np.testing.assert_allclose(rvm.interpret(packed, "main", *inputs), want, rtol=1e-4, atol=2e-3)


def test_a_batched_module_packs_its_shallower_small_maps() -> None:
    """The same shallow convolution alone takes the direct method at a static batch of
    `BATCH_BUILDS` images (its build repaid that many times sooner), not at one image nor
    at a batch known only at run time; the packed module computes the same."""
    from rvm.transform.pack_conv_weights import BATCH_BUILDS, pack_conv_weights

    lanes = direct.LANES
    w = rand((_SHALLOW_OUT, 2 * lanes, 3, 3), seed=3)

    def module(batch):  # type: ignore[no-untyped-def]
        x = var("x", (batch, 2 * lanes, 10, 10))
        b = Builder()
        with b.function("main", [x]):
            b.emit_output(b.emit(op.conv2d(x, E.Constant(w), (1, 1), (1, 1, 1, 1))))
        return b.get()

    assert "conv2d_packed" not in str(pack_conv_weights(module(BATCH_BUILDS - 1)))
    assert "conv2d_packed" not in str(pack_conv_weights(module("n")))
    mod = module(BATCH_BUILDS)
    packed = pack_conv_weights(mod)
    assert "conv2d_packed" in str(packed) and "conv2d(" not in str(packed)
    x = rand((BATCH_BUILDS, 2 * lanes, 10, 10), seed=4)
    want = rvm.interpret(mod, "main", x)
    np.testing.assert_allclose(rvm.interpret(packed, "main", x), want, rtol=1e-4, atol=2e-3)


def test_an_int8_convolution_turned_around_does_not_widen_the_rule(monkeypatch) -> None:
    """Only a float32 convolution on the direct method builds it: a module whose one packed
    convolution is an int8 one (turned around: `rvm.op.turn_qconv2d`) keeps its shallow float
    convolution on small maps a GEMM (`convmethod.pays_once_built` holds for it)."""
    from rvm.transform import pack_conv_weights as pcw

    lanes = direct.LANES
    turned = []
    monkeypatch.setattr(pcw, "turn_qconv2d", lambda call, weight: turned.append(call) or call)
    xq, xf = var("xq", (1, 4, 8, 8), "uint8"), var("xf", (1, 2 * lanes, 14, 14))
    wq = np.ones((6, 4, 3, 3), np.int8)
    bq, sq = np.zeros(6, np.int32), np.ones(6, np.float32)
    wf = rand((_SHALLOW_OUT, 2 * lanes, 3, 3), seed=3)
    assert convmethod.pays_once_built(2 * lanes, _SHALLOW_OUT, 1, 3, 3, 1, 1, 14, 14)
    b = Builder()
    with b.function("main", [xq, xf]):
        q = b.emit(op.qconv2d(xq, E.Constant(wq), E.Constant(bq), E.Constant(sq)))
        y = b.emit(op.conv2d(xf, E.Constant(wf), (1, 1), (1, 1, 1, 1)))
        b.emit_output(E.Tuple([q, y]))
    text = str(pcw.pack_conv_weights(b.get()))
    assert len(turned) == 1 and "conv2d_packed" not in text and "conv2d(" in text


@nb.njit
def _entry(x, w4, out, params):  # type: ignore[no-untyped-def]
    return direct.entry_call((x, w4, out), params)


# Each disagrees with a 3x3, pad-1 convolution of (1, 16, 9, 7) into 32 channels in one way.
BAD_ENTRY = [
    ("out", (1, 32, 10, 7)),
    ("out", (1, 32, 9, 6)),
    ("out", (2, 32, 9, 7)),
    ("out", (1, 200, 9, 7)),  # more channels than the panels hold
    ("x", (1, 15, 9, 7)),
    ("groups", 2),
    ("groups", 0),
    ("panel", 0),
    ("panel", 7),
    ("stride", 0),
]


@pytest.mark.parametrize(("what", "value"), BAD_ENTRY)
def test_the_entry_point_refuses_operands_that_disagree(what, value) -> None:
    """The library's own check: nothing read or written, status 1."""
    x, w = rand((1, 16, 9, 7)), rand((32, 16, 3, 3), seed=1)
    packed = direct.pack(w, 1)
    out = np.zeros((1, 32, 9, 7), np.float32)
    groups, stride, panel = 1, 1, packed.shape[5]
    if what == "out":
        out = np.zeros(value, np.float32)
    elif what == "x":
        x = rand(value)
    elif what == "groups":
        groups = value
    elif what == "stride":
        stride = value
    else:
        panel = value
    w4 = packed.reshape(packed.shape[0] * packed.shape[1], 3, 3, -1)
    params = (groups, stride, stride, 1, 1, 1, 1, 1, 1, panel)
    assert _entry(x, w4, out, params) == 1
    assert not out.any()


def test_the_entry_point_computes_what_agrees() -> None:
    x, w = rand((1, 16, 9, 7)), rand((32, 16, 3, 3), seed=1)
    packed = direct.pack(w, 1)
    out = np.full((1, 32, 9, 7), np.nan, np.float32)
    w4 = packed.reshape(packed.shape[0] * packed.shape[1], 3, 3, -1)
    assert _entry(x, w4, out, (1, 1, 1, 1, 1, 1, 1, 1, 1, packed.shape[5])) == 0
    want = numpy_ref.conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


def test_a_saved_executable_with_packed_weights_loads_and_runs(tmp_path) -> None:
    """The packed weight is a constant like any other: saved, memory-mapped back, read by the
    kernel in place."""
    mod, inputs = _model(MODEL_CASES[0])
    ex = rvm.compile(mod)
    path = str(tmp_path / "packed.rvmx")
    ex.save(path)
    back = rvm.load_executable(path)
    want = rvm.interpret(mod, "main", *inputs)
    np.testing.assert_allclose(
        rvm.VirtualMachine(back)["main"](*inputs), want, rtol=1e-4, atol=2e-3
    )


@pytest.mark.parametrize(
    "case",
    [
        (1, 16, 55, 55, 64, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # squeezenet's expand
        (1, 32, 28, 29, 96, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # 3 panels
        (1, 24, 30, 30, 48, (3, 3), (2, 2), (1, 1), 2, (0, 1, 0, 1)),  # groups, a stride
        (1, 64, 7, 7, 240, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),  # 5 panels of 7 bands
    ],
    ids=["expand", "panels", "groups", "small-map"],
)
def test_same_bits_at_every_thread_count(case) -> None:
    """Bands cut on the pool in guided ranges (`parfor.guided_range`: each panel's last
    ranges the smallest) give the very sums one thread gives: the ranges are whole bands."""
    x, w = _operands(case)
    want = _reference(case, x, w)
    packed = direct.pack(w, case[8])
    (sh, sw), pads = case[6], case[9]
    before = rvm.get_num_threads()
    outs = []
    try:
        for threads in (1, 2, 3):
            rvm.set_num_threads(threads)
            out = np.full(want.shape, np.nan, np.float32)
            direct.conv2d_packed(x, packed, out, sh, sw, 1, 1, pads[0], pads[1])
            outs.append(out)
    finally:
        rvm.set_num_threads(before)
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-3)
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])


def test_small_maps_split_whole_panels_and_cut_the_last() -> None:
    """On few bands a panel (`direct._split`), the threads take whole panels and only the
    last ``units % threads`` are cut, a chunk a thread; on many, every panel is cut into
    enough pieces to even out the threads."""
    split = direct._split.py_func
    per = direct.PIECES_PER_THREAD
    assert split(11, 7, 2) == (2, 10)  # resnet50's 512 channels on 7 x 7: one panel cut
    assert split(5, 7, 3) == (3, 3)
    assert split(4, 7, 2) == (2, 4)  # as many whole panels a thread: none cut
    assert split(1, 7, 2) == (7, 0)  # fewer panels than threads: cut as before
    assert split(43, 7, 2) == (1, 0)  # panels enough: none cut
    many = per * 2
    assert split(2, many, 2) == (per, 0)  # a large map: every panel cut, as before
    for units, bands, threads in ((11, 7, 2), (5, 7, 3), (2, 100, 2), (3, 5, 4)):
        chunks, whole = split(units, bands, threads)
        assert 0 <= whole <= units and 1 <= chunks <= bands
