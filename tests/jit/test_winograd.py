"""Winograd's F(2x2, 3x3) convolution (`rvm.kernels.winograd`) against the NumPy reference:
odd and tiny maps (edge tiles cut), padding 0, 1 and asymmetric, batches, channels not in
whole vectors, its fused epilogue (a bias per channel or one for all, a residual, a ReLU),
pieces on one and two threads; the library's choice of it (`rvm.kernels.conv.winograd_pays`)
through `conv2d`, the build-time pass leaving its weights unpacked, and an ONNX model whose
3x3 layers take it against ONNX Runtime in every exec mode."""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import rand, var

from rvm.kernels import conv, sgemm, winograd
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


# Shapes the rule takes, at its floor of channels on this CPU (a batch of 3 on two threads:
# blocks and channel ranges as pieces).
C = conv.WINOGRAD_MIN_CHANNELS * sgemm.LANES
TAKEN = [(1, C, 32, 33, C, (1, 1, 1, 1)), (3, C, 33, 34, C + 8, (1, 0, 2, 1))]


@pytest.mark.parametrize("shape", TAKEN, ids=[str(s[:5]) for s in TAKEN])
def test_conv2d_takes_winograd(blas_threads, shape) -> None:
    x, w, pads, want = _case(shape)
    (_, c, h, wd), o, (oh, ow) = x.shape, w.shape[0], want.shape[2:]
    how = conv.method.py_func(c, o, 1, 3, 3, 1, 1, 1, 1, oh, ow, h, wd, False, True)
    assert how == conv.WINOGRAD
    # Not with a dilation nor a stride: the rule is Winograd's shapes only.
    assert not conv.winograd_pays.py_func(c, o, 1, 3, 3, 1, 1, 2, 2, oh, ow)
    assert not conv.winograd_pays.py_func(c, o, 1, 3, 3, 2, 2, 1, 1, oh, ow)
    out = np.full(want.shape, np.nan, dtype=np.float32)
    conv.conv2d(x, w, out, 1, 1, 1, 1, 1, *pads)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)
    bias, res = rand((o,), seed=2), rand(want.shape, seed=3)
    fused = np.full(want.shape, np.nan, dtype=np.float32)
    epilogue = (bias.ctypes.data, 1, 1, res.ctypes.data)
    assert conv._conv2d_blas(x, w, fused, 1, 1, 1, 1, 1, *pads, epilogue) == 1  # in the store
    expect = np.maximum(want + bias.reshape(1, -1, 1, 1) + res, 0)
    np.testing.assert_allclose(fused, expect, rtol=1e-4, atol=2e-3)


def test_pack_leaves_winograd_weights() -> None:
    """The build-time pass packs no weight of a convolution Winograd's rule takes: the
    library transforms it at the call (`rvm.op.conv.pack_conv2d`); the model computes the
    same."""
    from rvm.ir import expr as E
    from rvm.ir.builder import Builder
    from rvm.op import conv2d
    from rvm.transform.pack_conv_weights import pack_conv_weights

    assert conv.winograd_pays.py_func(C, C, 1, 3, 3, 1, 1, 1, 1, 32, 32)
    # The direct method would take it by its rule alone, its weight packed at build time.
    assert conv.channels_pay.py_func(C, C, 1, 3, 3, 1, 1, 32, 32, 32, 32, True)
    x = var("x", (1, C, 32, 32))
    b = Builder()
    with b.function("main", [x]):
        w = E.Constant(rand((C, C, 3, 3), seed=1))
        b.emit_output(b.emit(conv2d(x, w, (1, 1), (1, 1, 1, 1))))
    assert "conv2d_packed" not in str(pack_conv_weights(b.get()))


def test_onnx_model_against_onnxruntime(exec_mode) -> None:
    """Two 3x3 layers the rule takes (bias and ReLU, then a residual add) in a model, jit
    kernels, against ONNX Runtime."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    import rvm

    c, h, w = C, 32, 33
    assert conv.winograd_pays.py_func(c, c, 1, 3, 3, 1, 1, 1, 1, h, w)
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
        nodes, "wino", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, c, h, w])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = rand((2, c, h, w), seed=4)
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
