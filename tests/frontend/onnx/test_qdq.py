"""QDQ models (ONNX Runtime's ``quantize_static``) import as integer ops (`rvm.op.qconv2d`,
`rvm.op.qdense`) and agree with ONNX Runtime's int8 run, in every exec mode with numpy and
jit kernels. rvm's quantized outputs may differ from ORT's by one step (a rounding tie broken
the other way, float32 requantization in another order); the tests allow one step, and the
dequantized logits then differ by at most one output scale."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as oh  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

import rvm  # noqa: E402
from rvm.testing.onnx_models import run_ort  # noqa: E402
from rvm.testing.quantized_models import ort_saturates, quantize_with_ort  # noqa: E402

EXEC_MODES = ("bytecode", "compiled", "native")
RNG = np.random.default_rng(3)
# 7-bit weights where ONNX Runtime's int8 products would saturate (no VNNI): an exact oracle
REDUCE = ort_saturates()


def _float_model(head: str) -> onnx.ModelProto:
    """Conv (3x3, padded) -> Relu -> MaxPool -> Conv (grouped, strided) -> Relu -> Flatten ->
    a Gemm (bias, transB) or a MatMul head: every QDQ chain the quantizer writes for a CNN."""
    w1 = RNG.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    w2 = RNG.normal(0, 0.3, (8, 4, 3, 3)).astype(np.float32)
    head_w = RNG.normal(0, 0.3, (10, 8 * 3 * 3)).astype(np.float32)
    inits = [
        nh.from_array(w1, "w1"),
        nh.from_array(RNG.normal(0, 0.1, 8).astype(np.float32), "b1"),
        nh.from_array(w2, "w2"),
        nh.from_array(RNG.normal(0, 0.1, 10).astype(np.float32), "b3"),
    ]
    nodes = [
        oh.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c1"], ["r1"]),
        oh.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        oh.make_node("Conv", ["p1", "w2"], ["c2"], group=2, strides=[2, 2], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c2"], ["r2"]),
        oh.make_node("Flatten", ["r2"], ["f"]),
    ]
    if head == "gemm":
        inits.append(nh.from_array(head_w, "w3"))
        nodes.append(oh.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1))
    else:
        inits.append(nh.from_array(np.ascontiguousarray(head_w.T), "w3"))
        nodes.append(oh.make_node("MatMul", ["f", "w3"], ["y"]))
    graph = oh.make_graph(
        nodes,
        "qdq",
        [oh.make_tensor_value_info("x", TP.FLOAT, [1, 3, 12, 12])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [1, 10])],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def _ops(mod: rvm.IRModule) -> list[str]:
    from rvm.ir import expr as E

    out = []
    for func in mod.functions.values():
        for block in func.body.blocks:
            for b in block.bindings:
                if isinstance(b.value, E.Call) and isinstance(b.value.callee, E.Op):
                    out.append(b.value.callee.name)
    return out


def _output_scale(model: onnx.ModelProto) -> float:
    inits = {t.name: nh.to_array(t) for t in model.graph.initializer}
    last_q = [n for n in model.graph.node if n.op_type == "QuantizeLinear"][-1]
    return float(inits[last_q.input[1]])


@pytest.fixture(scope="module")
def quantize():
    """``quantize(head)``: the model with that head quantized by ORT, once per module."""
    models: dict[str, onnx.ModelProto] = {}

    def get(head: str) -> onnx.ModelProto:
        if head not in models:
            models[head] = quantize_with_ort(_float_model(head), reduce_range=REDUCE)
        return models[head]

    return get


@pytest.mark.parametrize(  # the MatMul head's jit kernels under -m slow: the Gemm head's
    ("head", "kernels"),  # compile the same integer ops (seconds of compiling each)
    [("gemm", "numpy"), ("gemm", "jit"), ("matmul", "numpy"),
     pytest.param("matmul", "jit", marks=pytest.mark.slow)],
)  # fmt: skip
def test_qdq_model_runs_integer_ops_and_matches_ort(quantize, head, kernels):
    quantized = quantize(head)
    mod = rvm.from_onnx(quantized)
    ops = _ops(mod)
    assert ops.count("qconv2d") == 2, ops
    assert ops.count("qdense") == 1, ops
    assert "conv2d" not in ops and "matmul" not in ops and "dense" not in ops, ops
    ex = rvm.compile(mod, kernels=kernels)
    step = _output_scale(quantized)
    for seed in range(3):
        x = np.random.default_rng(seed).normal(size=(1, 3, 12, 12)).astype(np.float32)
        (expected,) = run_ort(quantized, [x])
        for mode in EXEC_MODES:
            y = rvm.VirtualMachine(ex, exec_mode=mode)["main"](x)
            assert y.dtype == np.float32 and y.shape == expected.shape
            np.testing.assert_allclose(y, expected, rtol=0, atol=step * 1.001, err_msg=mode)
    ref = rvm.interpret(mod, "main", x)
    np.testing.assert_allclose(ref, expected, rtol=0, atol=step * 1.001)


def test_asymmetric_weights_stay_float_and_match_ort():
    """uint8 weights with non-zero zero points are not fused (the integer ops take symmetric
    weights): they run as ONNX defines them, in float."""
    import onnxruntime.quantization as oq

    model = _float_model("gemm")
    x = np.random.default_rng(0).normal(size=(1, 3, 12, 12)).astype(np.float32)

    class Reader(oq.CalibrationDataReader):
        def __init__(self):
            self.rest = iter([{"x": x}])

        def get_next(self):
            return next(self.rest, None)

    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "a.onnx"), os.path.join(tmp, "b.onnx")
        onnx.save(model, src)
        oq.quantize_static(src, dst, Reader(), quant_format=oq.QuantFormat.QDQ,
                           per_channel=False, activation_type=oq.QuantType.QUInt8,
                           weight_type=oq.QuantType.QUInt8)  # fmt: skip
        quantized = onnx.load(dst)
    mod = rvm.from_onnx(quantized)
    assert "qconv2d" not in _ops(mod)
    (expected,) = run_ort(quantized, [x])
    y = rvm.VirtualMachine(rvm.compile(mod, kernels="numpy"))["main"](x)
    np.testing.assert_allclose(y, expected, rtol=0, atol=_output_scale(quantized) * 1.001)


def test_qconv2d_reference_against_numpy():
    """The op's reference: integer sums in int64 NumPy, requantized as documented."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (2, 4, 5, 5)).astype(np.uint8)
    w = rng.integers(-127, 128, (6, 2, 3, 3)).astype(np.int8)
    bias = rng.integers(-500, 500, 6).astype(np.int32)
    scale = rng.uniform(1e-4, 1e-3, 6).astype(np.float32)
    call = rvm.op.qconv2d(x, w, bias, scale, x_zero=7, y_zero=3, relu=True, padding=1, groups=2)
    got = rvm.op.reference[rvm.op.ops.qconv2d](x, w, bias, scale, **call.attrs)
    xp = np.pad(x.astype(np.int64) - 7, [(0, 0), (0, 0), (1, 1), (1, 1)])
    acc = np.zeros((2, 6, 5, 5), np.int64)
    for o in range(6):
        g = o // 3
        for i in range(5):
            for j in range(5):
                patch = xp[:, 2 * g : 2 * g + 2, i : i + 3, j : j + 3]
                acc[:, o, i, j] = (patch * w[o].astype(np.int64)).sum(axis=(1, 2, 3))
    acc += bias[None, :, None, None]
    want = np.round(acc.astype(np.float32) * scale[None, :, None, None]) + 3
    want = np.clip(want, 3, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, want)


def _fire_model() -> onnx.ModelProto:
    """Conv -> Relu, then two branches (1x1 and 3x3 Conv -> Relu) concatenated (as in
    SqueezeNet's fire modules: each branch at its own scale), then a 1x1 Conv head."""
    inits = [
        nh.from_array(RNG.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w0"),
        nh.from_array(RNG.normal(0, 0.3, (6, 8, 1, 1)).astype(np.float32), "wa"),
        nh.from_array(RNG.normal(0, 0.6, (10, 8, 3, 3)).astype(np.float32), "wb"),
        nh.from_array(RNG.normal(0, 0.3, (5, 16, 1, 1)).astype(np.float32), "wh"),
    ]
    nodes = [
        oh.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["c0"], ["r0"]),
        oh.make_node("Conv", ["r0", "wa"], ["ca"]),
        oh.make_node("Relu", ["ca"], ["ra"]),
        oh.make_node("Conv", ["r0", "wb"], ["cb"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["cb"], ["rb"]),
        oh.make_node("Concat", ["ra", "rb"], ["cat"], axis=1),
        oh.make_node("Conv", ["cat", "wh"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "fire",
        [oh.make_tensor_value_info("x", TP.FLOAT, [1, 3, 10, 10])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [1, 5, 10, 10])],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def _concat_inputs(mod: rvm.IRModule) -> list[str]:
    """The ops making each concat's inputs."""
    from rvm.ir import expr as E

    made, out = {}, []
    for func in mod.functions.values():
        for block in func.body.blocks:
            for b in block.bindings:
                value = b.value
                if isinstance(value, E.Call) and isinstance(value.callee, E.Op):
                    made[b.var] = value.callee.name
                    if value.callee.name == "concat":
                        (parts,) = value.args
                        out += [made.get(f) for f in parts.fields]
    return out


def test_branches_at_other_scales_requantize_into_the_concat():
    """Each branch's integer op requantizes straight to the concat's scale (no float concat
    between DequantizeLinear and QuantizeLinear); one rounding where ORT rounds twice, so
    the head's outputs are within two output steps of ORT's (one measured)."""
    quantized = quantize_with_ort(_fire_model(), reduce_range=REDUCE)
    scales = {t.name: float(nh.to_array(t)) for t in quantized.graph.initializer
              if t.name.endswith("_scale") and nh.to_array(t).size == 1}  # fmt: skip
    assert len(set(scales.values())) > 3, scales  # the branches' scales differ
    mod = rvm.from_onnx(quantized)
    assert _concat_inputs(mod) == ["qconv2d", "qconv2d"]
    ex = rvm.compile(mod)
    step = _output_scale(quantized)
    for seed in range(3):
        x = np.random.default_rng(seed).normal(size=(1, 3, 10, 10)).astype(np.float32)
        (expected,) = run_ort(quantized, [x])
        for mode in EXEC_MODES:
            y = rvm.VirtualMachine(ex, exec_mode=mode)["main"](x)
            np.testing.assert_allclose(y, expected, rtol=0, atol=step * 2.001, err_msg=mode)


def _residual_model() -> onnx.ModelProto:
    """Two convolutions of one input, added and rectified (a ResNet block's end), then a
    third convolution: QDQ puts dequantize, add, relu and quantize in float between them."""
    inits = [
        nh.from_array(RNG.normal(0, 0.3, (8, 4, 3, 3)).astype(np.float32), "wa"),
        nh.from_array(RNG.normal(0, 0.3, (8, 4, 1, 1)).astype(np.float32), "wb"),
        nh.from_array(RNG.normal(0, 0.3, (6, 8, 1, 1)).astype(np.float32), "wc"),
    ]
    nodes = [
        oh.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["a"], ["ra"]),
        oh.make_node("Conv", ["x", "wb"], ["b"]),
        oh.make_node("Add", ["ra", "b"], ["s"]),
        oh.make_node("Relu", ["s"], ["rs"]),
        oh.make_node("Conv", ["rs", "wc"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "residual",
        [oh.make_tensor_value_info("x", TP.FLOAT, [1, 4, 7, 7])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [1, 6, 7, 7])],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def test_residual_requantizes_in_one_kernel_and_matches_ort():
    """Dequantize both inputs, add and quantize (the relu is the quantized range's: ORT
    drops it) become one `rvm.op.qadd` (its own kernel, the library's pass over the bytes:
    `rvm.kernels.qadd`), with no kernel that only converts a value; within one output step
    of ORT's in every exec mode, and the same bits at two threads as at one."""
    quantized = quantize_with_ort(_residual_model(), reduce_range=REDUCE)
    mod = rvm.from_onnx(quantized)
    assert _ops(mod).count("qadd") == 1
    ex = rvm.compile(mod, kernels="jit")
    ops = [k.meta["ops"].split(",") for k in ex.kernels.values()]
    assert ["qadd"] in ops, ops
    assert all(set(o) - {"cast", "clip"} for o in ops), ops  # no kernel only converts
    step = _output_scale(quantized)
    before = rvm.get_num_threads()
    try:
        for seed in range(3):
            x = np.random.default_rng(seed).normal(size=(1, 4, 7, 7)).astype(np.float32)
            (expected,) = run_ort(quantized, [x])
            for mode in EXEC_MODES:
                f = rvm.VirtualMachine(ex, exec_mode=mode)["main"]
                rvm.set_num_threads(1)
                y = f(x)
                rvm.set_num_threads(2)
                np.testing.assert_array_equal(f(x), y, err_msg=mode)
                np.testing.assert_allclose(y, expected, rtol=0, atol=step * 1.001, err_msg=mode)
    finally:
        rvm.set_num_threads(before)


def _wide_fire_model() -> onnx.ModelProto:
    """A fire module on a 41 x 41 map (squeezenet's shape of block): a 1 x 1 squeeze to 16
    channels, then a 1 x 1 and a padded 3 x 3 expansion to 64 each, concatenated, and a
    1 x 1 head: products large enough to be split at two threads."""
    inits = [
        nh.from_array(RNG.normal(0, 0.3, (16, 24, 1, 1)).astype(np.float32), "ws"),
        nh.from_array(RNG.normal(0, 0.3, (64, 16, 1, 1)).astype(np.float32), "wa"),
        nh.from_array(RNG.normal(0, 0.1, (64, 16, 3, 3)).astype(np.float32), "wb"),
        nh.from_array(RNG.normal(0, 0.1, (8, 128, 1, 1)).astype(np.float32), "wh"),
    ]
    nodes = [
        oh.make_node("Conv", ["x", "ws"], ["cs"]),
        oh.make_node("Relu", ["cs"], ["rs"]),
        oh.make_node("Conv", ["rs", "wa"], ["ca"]),
        oh.make_node("Relu", ["ca"], ["ra"]),
        oh.make_node("Conv", ["rs", "wb"], ["cb"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["cb"], ["rb"]),
        oh.make_node("Concat", ["ra", "rb"], ["cat"], axis=1),
        oh.make_node("Conv", ["cat", "wh"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "wide_fire",
        [oh.make_tensor_value_info("x", TP.FLOAT, [1, 24, 41, 41])],
        [oh.make_tensor_value_info("y", TP.FLOAT, [1, 8, 41, 41])],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


def test_two_threads_give_one_threads_bits():
    """A fire module whose products split at two threads (their pieces making the image and
    panels they read, `rvm.kernels.qsplit.prepare`) gives the same bits at two threads as at
    one in every exec mode, within two output steps of ORT's."""
    from rvm.kernels import workpool

    quantized = quantize_with_ort(_wide_fire_model(), reduce_range=REDUCE)
    ex = rvm.compile(rvm.from_onnx(quantized))
    step = _output_scale(quantized)
    before = rvm.get_num_threads()
    try:
        for seed in range(2):
            x = np.random.default_rng(seed).normal(size=(1, 24, 41, 41)).astype(np.float32)
            (expected,) = run_ort(quantized, [x])
            for mode in EXEC_MODES:
                f = rvm.VirtualMachine(ex, exec_mode=mode)["main"]
                rvm.set_num_threads(1)
                one = f(x)
                rvm.set_num_threads(2)
                jobs = workpool.jobs()
                two = f(x)
                assert workpool.jobs() > jobs, mode  # split on the pool
                np.testing.assert_array_equal(two, one, err_msg=mode)
                np.testing.assert_allclose(one, expected, rtol=0, atol=step * 2.001, err_msg=mode)
    finally:
        rvm.set_num_threads(before)
