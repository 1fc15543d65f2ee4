"""Weights read in place from a model file's bytes, and the memory an import holds."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_helpers import make_model  # noqa: E402

import rvm  # noqa: E402
from rvm.frontend.onnx.weights import split_weights, weight_views  # noqa: E402
from rvm.ir import Constant  # noqa: E402

RNG = np.random.default_rng(3)
INITS = {
    "w": RNG.standard_normal((3, 4)).astype(np.float32),
    "h": RNG.standard_normal((4,)).astype(np.float16),
    "i": np.array([5, -7, 9], np.int64),
    "u": np.array([[1, 2], [3, 255]], np.uint8),
    "e": np.zeros((0, 4), np.float32),
    "s": np.array(2.5, np.float64),
}


TYPED = np.array([1.5, -2.0], np.float32)  # stored as float_data, not raw_data


def _model() -> onnx.ModelProto:
    """One output per initializer (Identity)."""
    arrays = {**INITS, "typed": TYPED}
    inits = [numpy_helper.from_array(v, k) for k, v in INITS.items()]
    inits.append(helper.make_tensor("typed", TensorProto.FLOAT, [2], TYPED.tolist()))
    graph = helper.make_graph(
        [helper.make_node("Identity", [k], [f"y_{k}"]) for k in arrays],
        "weights",
        [],
        [
            helper.make_tensor_value_info(
                f"y_{k}", helper.np_dtype_to_tensor_dtype(v.dtype), v.shape
            )
            for k, v in arrays.items()
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def test_split_cuts_exactly_the_raw_data_and_the_views_equal_the_arrays():
    model = _model()
    data = model.SerializeToString()
    stripped, cuts = split_weights(data)
    assert len(stripped) < len(data) - sum(a.nbytes for a in INITS.values()) + 64
    assert cuts[-1] is None  # the float_data initializer keeps its data
    proto = onnx.ModelProto.FromString(stripped)
    assert [t.name for t in proto.graph.initializer] == [*INITS, "typed"]
    assert list(proto.graph.node) == list(model.graph.node)
    views = weight_views(data, cuts, proto.graph.initializer)
    assert set(views) == set(INITS)
    for name, expected in INITS.items():
        assert views[name].dtype == expected.dtype and views[name].shape == expected.shape
        np.testing.assert_array_equal(views[name], expected)
        assert not views[name].flags.writeable


def test_bytes_that_do_not_parse_are_left_to_protobuf():
    data = _model().SerializeToString()
    assert split_weights(data[:-3]) is None  # truncated inside a field
    assert split_weights(b"\x0b\x00") is None  # a group: not read here


@pytest.mark.parametrize("source", ["path", "bytes", "proto"])
def test_every_source_imports_the_same_weights(source, tmp_path):
    model = _model()
    if source == "path":
        onnx.save(model, tmp_path / "m.onnx")
        arg = str(tmp_path / "m.onnx")
    else:
        arg = model.SerializeToString() if source == "bytes" else model
    out = rvm.from_onnx(arg)["main"].body.body
    values = [f.data for f in out.fields]
    for got, expected in zip(values, [*INITS.values(), TYPED]):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
    ex = rvm.compile(rvm.from_onnx(arg), kernels="numpy")
    for got, expected in zip(rvm.VirtualMachine(ex)["main"](), values):
        np.testing.assert_array_equal(got, expected)


def test_a_weight_of_the_wrong_size_is_an_import_error(tmp_path):
    model = _model()
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:-4]
    with pytest.raises(rvm.OnnxImportError, match="'w'"):
        rvm.from_onnx(model.SerializeToString())


MEMORY = textwrap.dedent(
    """
    import sys
    import numpy as np
    import onnx
    import rvm

    def peak_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024

    base = peak_mb()
    mod = rvm.from_onnx(sys.argv[1])
    ex = rvm.compile(mod, kernels="numpy")
    print(peak_mb() - base)
    """
)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM (Linux)")
def test_import_and_compile_hold_the_weights_once(tmp_path):
    """A model with 96 MB of weights, imported from its file in a fresh process."""
    w = np.random.default_rng(0).standard_normal((6, 2048, 2048)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["w", "i"], ["y"], axis=0)]
    model = make_model(nodes, [("i", TensorProto.INT64, [1])], ["y"], {"w": w})
    onnx.save(model, tmp_path / "big.onnx")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", MEMORY, str(tmp_path / "big.onnx")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    held_mb = float(proc.stdout.split()[-1])
    weights_mb = w.nbytes / 2**20
    assert held_mb < 1.5 * weights_mb, f"{held_mb:.0f} MB held for {weights_mb:.0f} MB of weights"


def test_weights_from_a_file_are_constants_without_a_copy(tmp_path):
    onnx.save(_model(), tmp_path / "m.onnx")
    out = rvm.from_onnx(str(tmp_path / "m.onnx"))["main"].body.body
    w = out.fields[0]
    assert isinstance(w, Constant) and w.data.base is not None  # a view of the file's bytes
