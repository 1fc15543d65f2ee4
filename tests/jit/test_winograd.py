"""Winograd's F(2x2, 3x3) convolution (`rvm.kernels.winograd`) against the NumPy reference:
odd and tiny maps (edge tiles cut), padding 0, 1 and asymmetric, batches, channels not in
whole vectors, its fused epilogue (a bias per channel or one for all, a residual, a ReLU),
pieces on one and two threads; the library's choice of it (`rvm.kernels.convmethod.winograd_pays`)
through `conv2d`, the build-time pass transforming constant weights once (the same bits as
the call's transform; saved and loaded), and an ONNX model whose 3x3 layers take it against
ONNX Runtime in every exec mode."""

from __future__ import annotations

import math

import numba as nb
import numpy as np
import pytest
from jit_helpers import rand, var

import rvm
from rvm.kernels import conv, convmethod, parfor, sgemm, winograd
from rvm.op import numpy_ref

# (n, c, h, w, o, (pt, pl, pb, pr)): 1 x 1 and 2 x 2 maps, 7 x 7, 13 x 13 (a cut edge tile
# each way), a non-square map with asymmetric padding, no padding; 3 and 11 channels.
SHAPES = [
    (1, 3, 1, 1, 5, (1, 1, 1, 1)),
    (3, 11, 2, 2, 4, (1, 1, 1, 1)),
    (1, 8, 7, 7, 16, (1, 1, 1, 1)),
    (3, 11, 13, 13, 9, (1, 1, 1, 1)),
    (1, 5, 9, 14, 7, (0, 2, 1, 0)),
    (2, 16, 10, 9, 8, (0, 0, 0, 0)),
    (8, 5, 6, 7, 6, (1, 1, 1, 1)),  # a block an image, enough for two threads: not cut apart
]


def _case(shape):  # type: ignore[no-untyped-def]
    n, c, h, w, o, pads = shape
    x, wt = rand((n, c, h, w)), rand((o, c, 3, 3), seed=1)
    want = numpy_ref.conv2d(x, wt, (1, 1), pads, (1, 1), 1)
    return x, wt, pads, want


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s[:5]}-pads{s[5]}" for s in SHAPES])
def test_winograd_matches_reference(blas_threads, shape) -> None:
    x, w, (pt, pl, _, _), want = _case(shape)
    out = np.full(want.shape, np.nan, dtype=np.float32)
    winograd.conv2d(x, w, out, pt, pl, sgemm.NO_EPILOGUE)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("per_channel", [True, False], ids=["bias", "scalar-bias"])
def test_winograd_fused_epilogue(blas_threads, per_channel) -> None:
    """Bias (a channel's or one for all), residual and ReLU in the output transform, on a
    map whose last tiles are cut both ways."""
    x, w, (pt, pl, _, _), want = _case((2, 11, 13, 11, 9, (1, 1, 1, 1)))
    bias = rand((want.shape[1] if per_channel else 1,), seed=2)
    res = rand(want.shape, seed=3)
    out = np.full(want.shape, np.nan, dtype=np.float32)
    epilogue = (bias.ctypes.data, 1 if per_channel else 0, 1, res.ctypes.data)
    winograd.conv2d(x, w, out, pt, pl, epilogue)
    expect = np.maximum(want + bias.reshape(1, -1, 1, 1) + res, 0)
    np.testing.assert_allclose(out, expect, rtol=1e-4, atol=2e-3)


def test_winograd_blocks_of_rows_at_two_threads() -> None:
    """A map whose image takes more than one block (`winograd.block_rows`: a position's
    operands spill a core's L2) but too few for the pool's pieces: at two threads it is cut
    into blocks of whole rows, a multiple of the threads (not its phases apart), and gives
    one thread's bits, which the reference matches -- unless a block's GEMM at either thread
    count ends in a panel of `sgemm.TAIL_DOTS` columns or fewer (AVX2: 2 of 16), which runs
    as reassociated dot products (`rvm.kernels.microkernel.tail_dots`) on columns the other
    cut computes in a tile: then within rounding."""
    c = o = 64
    side = 2 * math.isqrt(winograd.L2_FLOATS // (c + o)) + 4  # tiles beyond one block
    th = tw = side // 2
    per, blocks, parts, ranges = winograd.cut.py_func(c, o, 1, tw, th, 2, 0)
    assert winograd.block_rows.py_func(c, o, tw, th) < th  # more than one block an image
    assert ranges == 0 and parts == 1 and blocks % 2 == 0 and blocks >= 4
    assert per * blocks >= th and th * tw >= blocks * winograd.ROW_BLOCK_TILES
    # Blocks that would be narrower than that (vgg19's 512 channels on 28 x 28, more than one
    # block an image where L2 is 512 KB): the phases cut apart.
    if winograd.block_rows.py_func(512, 512, 14, 14) < 14:
        assert 14 * 14 < 4 * winograd.ROW_BLOCK_TILES
        assert winograd.cut.py_func(512, 512, 1, 14, 14, 2, 0)[3] > 0
    _rows_match_one_thread(
        c, o, side, not (_dot_tails(c, o, tw, th, 1) | _dot_tails(c, o, tw, th, 2))
    )


def _dot_tails(c: int, o: int, tw: int, th: int, threads: int) -> set[int]:
    """The first rows of `winograd.cut`'s blocks (at ``threads``) whose GEMM ends in a panel
    of `sgemm.TAIL_DOTS` columns or fewer (`rvm.kernels.microkernel.tail_dots`)."""
    per = winograd.cut.py_func(c, o, 1, tw, th, threads, 0)[0]
    return {r for r in range(0, th, per) if 0 < min(per, th - r) * tw % sgemm.NR <= sgemm.TAIL_DOTS}


def test_bf16_blocks_of_rows_fit_l2() -> None:
    """With bf16 pair words (`winograd.cut`'s ``words``), blocks of rows are cut until a
    block's transformed input (words) and products at all 16 positions fit one core's L2,
    a multiple of the threads; float32's cut is unchanged by it."""
    c, o, tw, th = 64, 192, 28, 28  # inception_v2's 64 -> 192 on 56 x 56
    per, blocks, parts, ranges = winograd.cut.py_func(c, o, 1, tw, th, 2, 1)
    plain = winograd.cut.py_func(c, o, 1, tw, th, 2, 0)
    assert (parts, ranges) == (1, 0) and blocks % 2 == 0 and blocks > plain[1]
    assert 16 * per * tw * ((c + 1) // 2 + o) <= winograd.L2_FLOATS
    assert -(-th // blocks) == per
    assert winograd.cut.py_func(512, 512, 1, 14, 14, 2, 1)[3] > 0  # phases apart: as before


def test_winograd_small_weight_cut_in_rows_at_two_threads() -> None:
    """An image of one block (`winograd.block_rows`) whose transformed weight fits one core's
    L2 (each block reads it all again) is cut into blocks of rows at two threads from half
    `winograd.ROW_BLOCK_TILES` tiles a block (one thread's GEMMs are as wide as the image, so
    their last columns' sums may round otherwise: `sgemm.TAIL_DOTS`)."""
    c = o = 32
    assert winograd.POSITIONS * c * o <= winograd.L2_FLOATS
    th = tw = math.isqrt(2 * winograd.ROW_BLOCK_TILES) + 1  # four blocks of half the floor
    assert winograd.block_rows.py_func(c, o, tw, th) == th  # one block an image
    per, blocks, parts, ranges = winograd.cut.py_func(c, o, 1, tw, th, 2, 0)
    assert ranges == 0 and parts == 1 and blocks == 4 and per * blocks >= th
    # Too few tiles for those blocks: the phases apart.
    assert winograd.cut.py_func(c, o, 1, th // 2, th // 2, 2, 0)[3] > 0
    _rows_match_one_thread(c, o, 2 * th, bits=False)


def _rows_match_one_thread(c: int, o: int, side: int, bits: bool = True) -> None:
    """`winograd.conv2d` on one ``side`` x ``side`` image at two threads gives one thread's
    bits (or, not ``bits``, its result within rounding), which the reference matches."""
    x, w, (pt, pl, _, _), want = _case((1, c, side, side, o, (1, 1, 1, 1)))
    outs = []
    before = rvm.get_num_threads()
    try:
        for threads in (1, 2):
            rvm.set_num_threads(threads)
            outs.append(np.full(want.shape, np.nan, dtype=np.float32))
            winograd.conv2d(x, w, outs[-1], pt, pl, sgemm.NO_EPILOGUE)
    finally:
        rvm.set_num_threads(before)
    if bits:
        np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("n", [1, 2])
def test_winograd_phases_apart_give_one_threads_bits(n) -> None:
    """A small map at two and four threads (more than the cores: late helpers, whose units
    others take, `rvm.kernels.parfor.affine_unit`) is cut into its phases apart, and gives one
    thread's bits at every call, its units by thread or not (`parfor.set_affine`)."""
    shape = (n, 64, 14, 14, 96, (1, 1, 1, 1))
    x, w, (pt, pl, _, _), want = _case(shape)
    assert winograd.cut.py_func(64, 96, n, 7, 7, 2, 0)[3] > 0  # apart
    outs = []
    before = rvm.get_num_threads()
    try:
        for threads, by_thread in ((1, True), (2, True), (4, True), (2, False)):
            rvm.set_num_threads(threads)
            parfor.set_affine(by_thread)
            for _ in range(5):
                outs.append(np.full(want.shape, np.nan, dtype=np.float32))
                winograd.conv2d(x, w, outs[-1], pt, pl, sgemm.NO_EPILOGUE)
    finally:
        rvm.set_num_threads(before)
        parfor.set_affine(True)
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=2e-3)


# Shapes the rule takes, at its floor of channels on this CPU (on two threads: their phases cut
# apart, `winograd.cut`).
C = math.ceil(convmethod.WINOGRAD_MEAN_CHANNELS * sgemm.LANES)
TAKEN = [(1, C, 32, 33, C, (1, 1, 1, 1)), (3, C, 33, 34, C + 8, (1, 0, 2, 1))]
# Channels both Winograd's rule and the direct method's take (`_model`, in and out: the
# latter in whole vectors): on AVX-512 the former's floor is below the latter's
# (`convmethod.winograd_floors`).
BOTH = max(C, 8 * sgemm.LANES)


@pytest.mark.parametrize("shape", TAKEN, ids=[str(s[:5]) for s in TAKEN])
def test_conv2d_takes_winograd(blas_threads, shape) -> None:
    x, w, pads, want = _case(shape)
    (_, c, h, wd), o, (oh, ow) = x.shape, w.shape[0], want.shape[2:]
    how = convmethod.method.py_func(c, o, 1, 3, 3, 1, 1, 1, 1, oh, ow, h, wd, False, True)
    assert how == convmethod.WINOGRAD
    # Each at its floor (`convmethod.WINOGRAD_MIN_CHANNELS`), on a map too large for the small
    # maps' mean (`convmethod.WINOGRAD_SMALL_MAP`): as the channels' mean says (below it on
    # AVX-512, at it on AVX2); on a small one, from that mean (`convmethod.WINOGRAD_SMALL_MEAN`).
    floor = convmethod.WINOGRAD_MIN_CHANNELS * sgemm.LANES
    side = 2 * math.isqrt(convmethod.WINOGRAD_SMALL_MAP // (2 * floor)) + 2  # tiles beyond it
    at_mean = convmethod.WINOGRAD_MEAN_CHANNELS <= convmethod.WINOGRAD_MIN_CHANNELS
    pays = convmethod.winograd_pays.py_func(floor, floor, 1, 3, 3, 1, 1, 1, 1, side, side)
    assert pays == at_mean
    small = 2 * floor * ((oh + 1) // 2) * ((ow + 1) // 2) <= convmethod.WINOGRAD_SMALL_MAP
    at_floor = small and convmethod.WINOGRAD_SMALL_MEAN <= convmethod.WINOGRAD_MIN_CHANNELS
    assert convmethod.winograd_pays.py_func(floor, floor, 1, 3, 3, 1, 1, 1, 1, oh, ow) == at_floor
    # Not with a dilation nor a stride: the rule is Winograd's shapes only.
    assert not convmethod.winograd_pays.py_func(c, o, 1, 3, 3, 1, 1, 2, 2, oh, ow)
    assert not convmethod.winograd_pays.py_func(c, o, 1, 3, 3, 2, 2, 1, 1, oh, ow)
    out = np.full(want.shape, np.nan, dtype=np.float32)
    conv.conv2d(x, w, out, 1, 1, 1, 1, 1, *pads)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)
    bias, res = rand((o,), seed=2), rand(want.shape, seed=3)
    fused = np.full(want.shape, np.nan, dtype=np.float32)
    epilogue = (bias.ctypes.data, 1, 1, res.ctypes.data)
    assert conv._conv2d_blas(x, w, fused, 1, 1, 1, 1, 1, *pads, epilogue) == 1  # in the store
    expect = np.maximum(want + bias.reshape(1, -1, 1, 1) + res, 0)
    np.testing.assert_allclose(fused, expect, rtol=1e-4, atol=2e-3)


# (c, o, output side, Winograd's bf16 where the CPU has bf16 dot products, no AMX): the
# models' layers the rule was measured on (`convmethod.winograd_bf16_pays`, sessions 86, 90).
BF16_LAYERS = [
    (64, 192, 56, True),  # inception_v2's first 3 x 3: a large map
    (96, 96, 28, True),  # 28 x 28: 196 tiles, not a small map
    (96, 128, 14, True),  # inception_v2's 14 x 14 layers (session 90's transforms)
    (192, 256, 14, True),
    (160, 320, 13, True),  # inception_v1's largest at 13 x 13
    (128, 32, 28, True),  # densenet121's growth layers: 32 output channels
    (32, 128, 27, False),  # squeezenet's: too few input channels
    (256, 256, 14, True),  # resnet50's, and the deeper layers of small maps
    (256, 384, 12, True),  # bvlc_alexnet's
    (512, 512, 12, True),  # zfnet512's
    (48, 192, 13, False),  # squeezenet's: too few channels on any map
]


@pytest.mark.parametrize("c, o, side, taken", BF16_LAYERS)
def test_winograd_bf16_rule_on_the_models_layers(c, o, side, taken) -> None:
    """Winograd's bf16 form from `convmethod.WINOGRAD_BF16_CHANNELS` input and
    `convmethod.WINOGRAD_BF16_OUTPUTS` output channels on maps of any size Winograd's float32
    rule takes; never without bf16 dot products, nor on AMX (the direct convolution's
    tiles)."""
    from rvm.kernels import amx, bf16gemm

    got = convmethod.winograd_bf16_pays(c, o, 1, 3, 3, 1, 1, 1, 1, side, side)
    assert got == (taken and bf16gemm.DPBF16 and not amx.AMX)


# A layer both rules take, Winograd's and the direct method's (`convmethod.channels_pay`: at or
# above both floors, its output channels whole vectors of the direct method's).
DEEP, DEEP_OUT = BOTH, BOTH + sgemm.LANES


def _model(pads=(1, 0, 2, 1)):  # type: ignore[no-untyped-def]
    """A 3x3 layer the rules take (`DEEP`), its constant weight, a bias and a ReLU."""
    from rvm.ir import expr as E
    from rvm.ir.builder import Builder
    from rvm.op import add, conv2d, relu

    x, w = var("x", (2, DEEP, 33, 32)), rand((DEEP_OUT, DEEP, 3, 3), seed=1)
    b = Builder()
    with b.function("main", [x]):
        y = b.emit(conv2d(x, E.Constant(w), (1, 1), pads))
        y = b.emit(add(y, E.Constant(rand((1, DEEP_OUT, 1, 1), seed=2))))
        b.emit_output(b.emit(relu(y)))
    return b.get(), w, rand((2, DEEP, 33, 32), seed=4)


@nb.njit
def _entry(x, u4, out, params):  # type: ignore[no-untyped-def]
    return conv.conv2d_winograd_call((x, u4, out, out, out), params)


@pytest.mark.parametrize("o, c", [(1, 1), (3, 130), (64, 64)])
def test_transform_gives_the_calls_bits(o: int, c: int) -> None:
    """The build-time transform (NumPy) and the one a call runs on its weight (jitted,
    `_weights`) are one arithmetic (`winograd.kernel_transform`): the same bits, also across
    a block of `_PAIRS` kernels and for values far apart in size."""
    rng = np.random.default_rng(o * 1000 + c)
    w = rng.standard_normal((o, c, 3, 3)) * 10.0 ** rng.integers(-20, 20, (o, c, 3, 3))
    w = w.astype(np.float32)
    u = winograd.transform(w)
    assert u.dtype == np.float32 and u.shape == (16, o, c)
    per_call = np.full(16 * o * c, np.nan, dtype=np.float32)
    winograd._weights(w.reshape(-1), per_call, o * c, 0, o * c)
    np.testing.assert_array_equal(u.reshape(-1), per_call)
    g = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    want = np.einsum("ia,ocab,jb->ijoc", g, w.astype(np.float64), g).reshape(16, o, c)
    np.testing.assert_allclose(u, want, rtol=1e-5, atol=1e-30 + 1e-6 * np.abs(want).max())


def test_pack_transforms_winograd_weights(blas_threads) -> None:
    """The build-time pass transforms the constant weight of a convolution Winograd's rule
    takes, once (`rvm.op.conv2d_winograd`; not packed for the direct method, which its rule
    would take too): the entry point on it computes what the call on the OIHW weight does
    (the weight transformed there: the same bits), and the reference the same as conv2d's."""
    from rvm.ir import expr as E
    from rvm.transform.pack_conv_weights import pack_conv_weights

    mod, w, x = _model()
    assert convmethod.channels_pay.py_func(DEEP, DEEP_OUT, 1, 3, 3, 1, 1, 33, 32, 33, 32, True)
    packed = pack_conv_weights(mod)
    assert "conv2d_packed" not in str(packed)
    calls = [b.value for b in packed["main"].body.bindings if isinstance(b.value, E.Call)]
    (taken,) = [v for v in calls if v.callee.name == "conv2d_winograd"]
    frozen = w.copy()  # read-only, as the pass's constant
    frozen.flags.writeable = False
    u = winograd.transform(frozen)
    np.testing.assert_array_equal(taken.args[1].data, u)
    pads = (1, 0, 2, 1)
    want = numpy_ref.conv2d(x, w, (1, 1), pads, (1, 1), 1)
    np.testing.assert_allclose(numpy_ref.conv2d_winograd(x, u, pads), want, rtol=1e-5, atol=1e-4)
    per_call = np.full(want.shape, np.nan, dtype=np.float32)
    winograd.conv2d(x, w, per_call, 1, 0, sgemm.NO_EPILOGUE)
    got = np.full(want.shape, np.nan, dtype=np.float32)
    u4 = u.reshape(*u.shape, 1)
    assert _entry(x, u4, got, (*pads, 0, 0, 0, 0)) == 0
    np.testing.assert_array_equal(got, per_call)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-3)
    # Shapes that disagree with the geometry are refused, not read.
    assert _entry(x, u4, got, (1, 1, 2, 1, 0, 0, 0, 0)) == 1
    # The weight in bf16 pairs (bf16 flag): its products in bf16, as the reference sums them;
    # a float32 U's depth is not its pairs'.
    words = winograd.transform_bf16(frozen)
    assert words.dtype == np.int32 and words.shape == (16, DEEP_OUT, (DEEP + 1) // 2)
    assert _entry(x, u4, got, (*pads, 0, 0, 0, 1)) == 1
    got = np.full(want.shape, np.nan, dtype=np.float32)
    assert _entry(x, words.reshape(*words.shape, 1), got, (*pads, 0, 0, 0, 1)) == 0
    exact = numpy_ref.conv2d_winograd(x, words, pads, "bf16")
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5 * np.abs(exact).max())
    assert np.abs(got - want).max() < 2e-2 * np.abs(want).max()


def test_saved_executable_with_transformed_weights(tmp_path) -> None:
    """The transformed weight is a constant like any other: saved, loaded back, read in
    place."""
    import rvm

    mod, _, x = _model()
    path = str(tmp_path / "wino.rvmx")
    rvm.compile(mod, kernels="jit").save(path)
    back = rvm.load_executable(path)
    want = rvm.interpret(mod, "main", x)
    np.testing.assert_allclose(rvm.VirtualMachine(back)["main"](x), want, rtol=1e-4, atol=2e-3)


# (images, height, width): a small batch; one image on a map of more than one block (at two
# threads, on a 512 KB L2: blocks of rows, `winograd.cut`).
MODEL_MAPS = [(2, 32, 33), (1, 70, 70)]


@pytest.mark.parametrize("n, h, w", MODEL_MAPS, ids=[f"{n}x{h}x{w}" for n, h, w in MODEL_MAPS])
def test_onnx_model_against_onnxruntime(exec_mode, n, h, w) -> None:
    """Two 3x3 layers the rule takes (bias and ReLU, then a residual add) in a model, jit
    kernels, against ONNX Runtime."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    import rvm

    c = C
    assert convmethod.winograd_pays.py_func(c, c, 1, 3, 3, 1, 1, 1, 1, h, w)
    inits = [
        numpy_helper.from_array(rand((c, c, 3, 3), seed=s) * 0.1, name)
        for s, name in ((1, "w1"), (2, "w2"))
    ] + [numpy_helper.from_array(rand((c,), seed=3), "b1")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["b", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "wino", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, c, h, w])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = rand((n, c, h, w), seed=4)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expect = want.run(None, {"x": x})[0]
    ex = rvm.compile(rvm.from_onnx(model), kernels="jit")
    got = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](x)
    np.testing.assert_allclose(np.asarray(got), expect, rtol=1e-4, atol=1e-3)
    assert onnx is not None


def test_winograd_in_a_warm_process() -> None:
    """The transformed weight and a block's scratch, reached by address from the pool's
    pieces, outlive their use in a process loading the kernels from the caches
    (`jit_helpers.run_warm`: its scratch mapped apart, so a block freed early crashes)."""
    from jit_helpers import run_warm

    script = (
        "import numpy as np\n"
        "from rvm.kernels import conv\n"
        "from rvm.op import numpy_ref\n"
        "rng = np.random.default_rng(0)\n"
        f"c = {C}\n"
        "x = rng.standard_normal((2, c, 12, 13)).astype(np.float32)\n"
        "w = rng.standard_normal((c, c, 3, 3)).astype(np.float32)\n"
        "want = numpy_ref.conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)\n"
        "for _ in range(5):\n"
        "    out = np.full(want.shape, np.nan, np.float32)\n"
        "    conv.conv2d(x, w, out, 1, 1, 1, 1, 1, 1, 1, 1, 1)\n"
        "    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)\n"
    )
    exec(script, {})  # compiled here, cached for the warm process
    run_warm(script)


@pytest.mark.parametrize(
    ("n", "c", "o", "h", "w"),
    [(1, 39, 33, 14, 13), (2, 40, 48, 30, 29), (1, 64, 64, 56, 56)],
    ids=["small-odd", "batch", "rows"],
)
def test_bf16_products_every_cut(blas_threads, n: int, c: int, o: int, h: int, w: int) -> None:
    """`winograd.conv2d_transformed_bf16` against the reference of the same sums, however
    `winograd.cut` cuts the call: a small map's phases apart (its input transform by ranges
    of whole channel pairs, an odd last one), a batch's blocks, an image in blocks of rows;
    with a bias, a residual and a ReLU in the output transform."""
    rng = np.random.default_rng(n + c + h)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    words = winograd.transform_bf16(wt)
    bias = rng.standard_normal(o).astype(np.float32)
    res = rng.standard_normal((n, o, h, w)).astype(np.float32)
    got = np.full((n, o, h, w), np.nan, dtype=np.float32)
    epilogue = (bias.ctypes.data, 1, 1, res.ctypes.data)
    winograd.conv2d_transformed_bf16(x, words, got, 1, 1, epilogue)
    plain = numpy_ref.conv2d_winograd(x, words, (1, 1, 1, 1), "bf16")
    want = np.maximum(plain + bias[:, None, None] + res, 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    full = numpy_ref.conv2d(x, wt, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert np.abs(plain - full).max() < 2e-2 * np.abs(full).max()
