"""ONNX If, Loop and Scan: imported control flow against ONNX Runtime, nested, and long."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_helpers import check_ort, run_rvm

import rvm
from rvm.errors import OnnxImportError

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vinfo(name: str, dtype: int, shape) -> object:
    return helper.make_tensor_value_info(name, dtype, shape)


def make_model(nodes, inputs, outputs, out_type: int = F) -> onnx.ModelProto:
    """A checked opset-17 model; its float outputs have dynamic dimensions."""
    graph = helper.make_graph(
        nodes,
        "test",
        [vinfo(*i) for i in inputs],
        [helper.make_tensor_value_info(o, out_type, [None] * r) for o, r in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # ONNX Runtime's supported IR versions
    onnx.checker.check_model(model)
    return model


def if_node(cond: str, out: str, then_nodes, then_out: str, else_nodes, else_out: str, shape):
    then_g = helper.make_graph(then_nodes, "then", [], [vinfo(then_out, F, shape)])
    else_g = helper.make_graph(else_nodes, "else", [], [vinfo(else_out, F, shape)])
    return helper.make_node("If", [cond], [out], then_branch=then_g, else_branch=else_g)


def loop_body(nodes, carried: list[tuple[str, str, int, list]], scans=()) -> object:
    """A Loop body: (iter, cond_in, carried_in...) -> (cond_out, carried_out..., scans...)."""
    inputs = [vinfo("i", I64, []), vinfo("c_in", B, [])]
    inputs += [vinfo(n_in, t, s) for n_in, _, t, s in carried]
    outputs = [vinfo("c_out", B, [])] + [vinfo(n_out, t, s) for _, n_out, t, s in carried]
    outputs += [vinfo(n, t, s) for n, t, s in scans]
    return helper.make_graph(nodes, "body", inputs, outputs)


def test_if_runs_the_taken_branch_with_outer_values(exec_mode: str, kernels: str) -> None:
    branch = if_node(
        "c",
        "y",
        [helper.make_node("Add", ["x", "w"], ["t"])],
        "t",
        [helper.make_node("Mul", ["x", "w"], ["e"])],
        "e",
        [3],
    )
    model = make_model([branch], [("c", B, []), ("x", F, [3]), ("w", F, [3])], [("y", 1)])
    x, w = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)
    for c in (True, False):
        check_ort(model, [np.array(c), x, w], kernels=kernels, exec_modes=(exec_mode,))


def test_if_on_a_constant_imports_the_taken_branch_only() -> None:
    branch = if_node(
        "c",
        "y",
        [helper.make_node("Neg", ["x"], ["t"])],
        "t",
        [helper.make_node("Abs", ["x"], ["e"])],
        "e",
        [2],
    )
    cond = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", B, [], [False]))
    model = make_model([cond, branch], [("x", F, [2])], [("y", 1)])
    mod = rvm.from_onnx(model)
    assert "if " not in str(mod) and "abs" in str(mod) and "negative" not in str(mod)
    (y,) = run_rvm(model, [np.array([-1.0, 2.0], np.float32)])
    np.testing.assert_array_equal(y, [1.0, 2.0])


def _accumulate_loop(trip: bool, cond: bool) -> object:
    """sum += x * i while i < trip and sum < limit; scan output of every sum."""
    body = loop_body(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Mul", ["x", "fi"], ["xi"]),
            helper.make_node("Add", ["s_in", "xi"], ["s_out"]),
            helper.make_node("ReduceSum", ["s_out"], ["tot"], keepdims=0),
            helper.make_node("Less", ["tot", "limit"], ["c_out"]),
            helper.make_node("Identity", ["s_out"], ["scan"]),
        ],
        [("s_in", "s_out", F, [2])],
        [("scan", F, [2])],
    )
    names = ["m" if trip else "", "c0" if cond else "", "s0"]
    node = helper.make_node("Loop", names, ["s", "scans"], body=body)
    inputs = [("m", I64, []), ("c0", B, []), ("s0", F, [2]), ("x", F, [2]), ("limit", F, [])]
    return make_model([node], inputs, [("s", 1), ("scans", 2)])


@pytest.mark.parametrize(("trip", "cond"), [(True, True), (True, False), (False, True)])
def test_loop_carried_values_and_scan_outputs(trip: bool, cond: bool, exec_mode: str) -> None:
    model = _accumulate_loop(trip, cond)
    inputs = [
        np.array(6, np.int64),
        np.array(True),
        np.array([0.0, 1.0], np.float32),
        np.array([1.0, 2.0], np.float32),
        np.array(30.0, np.float32),
    ]
    for kernels in ("numpy", "jit"):
        check_ort(model, inputs, kernels=kernels, exec_modes=(exec_mode,))


def test_loop_of_100000_iterations_runs_in_constant_stack(exec_mode: str, kernels: str) -> None:
    body = loop_body(
        [
            helper.make_node("Add", ["s_in", "one"], ["s_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        [("s_in", "s_out", F, [])],
    )
    one = helper.make_node("Constant", [], ["one"], value_float=1.0)
    node = helper.make_node("Loop", ["m", "", "s0"], ["s"], body=body)
    model = make_model([one, node], [("m", I64, []), ("s0", F, [])], [("s", 1)])
    (s,) = run_rvm(
        model, [np.array(100_000, np.int64), np.array(0.0, np.float32)], kernels, exec_mode
    )
    assert float(s) == 100_000.0


def test_nested_if_in_loop_captures_a_value_two_levels_up(exec_mode: str, kernels: str) -> None:
    # the If inside the loop body reads "w", an input of the main graph
    inner = if_node(
        "odd",
        "v",
        [helper.make_node("Add", ["s_in", "w"], ["t"])],
        "t",
        [helper.make_node("Sub", ["s_in", "w"], ["e"])],
        "e",
        [2],
    )
    body = loop_body(
        [
            helper.make_node("Mod", ["i", "two"], ["r"]),
            helper.make_node("Cast", ["r"], ["odd"], to=B),
            inner,
            helper.make_node("Mul", ["v", "v"], ["s_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        [("s_in", "s_out", F, [2])],
    )
    two = helper.make_node("Constant", [], ["two"], value_int=2)
    loop = helper.make_node("Loop", ["m", "", "s0"], ["s"], body=body)
    model = make_model([two, loop], [("m", I64, []), ("s0", F, [2]), ("w", F, [2])], [("s", 1)])
    inputs = [
        np.array(3, np.int64),
        np.array([0.5, 1.0], np.float32),
        np.array([0.25, -0.5], np.float32),
    ]
    check_ort(model, inputs, kernels=kernels, exec_modes=(exec_mode,))


def test_loop_inside_if(exec_mode: str) -> None:
    body = loop_body(
        [
            helper.make_node("Mul", ["s_in", "x"], ["s_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        [("s_in", "s_out", F, [2])],
    )
    loop = helper.make_node("Loop", ["m", "", "x"], ["p"], body=body)
    branch = if_node("c", "y", [loop], "p", [helper.make_node("Neg", ["x"], ["n"])], "n", [2])
    model = make_model([branch], [("c", B, []), ("m", I64, []), ("x", F, [2])], [("y", 1)])
    x = np.array([1.5, -2.0], np.float32)
    for c in (True, False):
        check_ort(model, [np.array(c), np.array(3, np.int64), x], exec_modes=(exec_mode,))


@pytest.mark.parametrize(
    ("in_axis", "in_dir", "out_axis", "out_dir"), [(0, 0, 0, 0), (1, 1, 1, 0), (1, 0, 0, 1)]
)
def test_scan_directions_and_axes(in_axis, in_dir, out_axis, out_dir, exec_mode: str) -> None:
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "xt"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "xt"], ["y"]),
        ],
        "body",
        [vinfo("s_in", F, [3]), vinfo("xt", F, [3])],
        [vinfo("s_out", F, [3]), vinfo("y", F, [3])],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "x"],
        ["s", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[in_axis],
        scan_input_directions=[in_dir],
        scan_output_axes=[out_axis],
        scan_output_directions=[out_dir],
    )
    shape = [4, 3] if in_axis == 0 else [3, 4]
    model = make_model([node], [("s0", F, [3]), ("x", F, shape)], [("s", 1), ("ys", 2)])
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    check_ort(model, [np.zeros(3, np.float32), x], exec_modes=(exec_mode,))


def test_an_unsupported_op_inside_a_loop_body_is_listed_before_import() -> None:
    body = loop_body(
        [
            helper.make_node("Det", ["s_in"], ["d"], name="det_in_body"),
            helper.make_node("Identity", ["s_in"], ["s_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        [("s_in", "s_out", F, [2, 2])],
    )
    node = helper.make_node("Loop", ["m", "", "s0"], ["s"], body=body)
    model = make_model([node], [("m", I64, []), ("s0", F, [2, 2])], [("s", 1)])
    with pytest.raises(OnnxImportError, match="Det-.*det_in_body"):
        rvm.from_onnx(model)


def test_loop_slicing_at_run_time_positions(kernels: str) -> None:
    # x[i : i + 2] in iteration i: Slice bounds computed in the body (rvm's dynamic_slice);
    # the scan output's length is unknown at import
    body = loop_body(
        [
            helper.make_node("Constant", [], ["two"], value_ints=[2]),
            helper.make_node("Unsqueeze", ["i", "zero"], ["start"]),
            helper.make_node("Add", ["start", "two"], ["end"]),
            helper.make_node("Slice", ["x", "start", "end"], ["part"]),
            helper.make_node("ReduceSum", ["part"], ["tot"], keepdims=1),
            helper.make_node("Add", ["s_in", "tot"], ["s_out"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Identity", ["part"], ["scan"]),
        ],
        [("s_in", "s_out", F, [1])],
        [("scan", F, [None])],
    )
    nodes = [
        helper.make_node("Constant", [], ["zero"], value_ints=[0]),
        helper.make_node("Loop", ["m", "", "s0"], ["s", "parts"], body=body),
    ]
    model = make_model(
        nodes, [("m", I64, []), ("s0", F, [1]), ("x", F, [5])], [("s", 1), ("parts", 2)]
    )
    x = np.arange(5, dtype=np.float32) + 1
    check_ort(model, [np.array(3, np.int64), np.zeros(1, np.float32), x], kernels=kernels)


def test_scan_8_with_a_batch_axis(exec_mode: str) -> None:
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "xt"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "xt"], ["y"]),
        ],
        "body",
        [vinfo("s_in", F, [3]), vinfo("xt", F, [3])],
        [vinfo("s_out", F, [3]), vinfo("y", F, [3])],
    )
    node = helper.make_node(
        "Scan", ["", "s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1, directions=[1]
    )
    graph = helper.make_graph(
        [node],
        "scan8",
        [vinfo("s0", F, [2, 3]), vinfo("x", F, [2, 4, 3])],
        [vinfo("s", F, [2, 3]), vinfo("ys", F, [2, 4, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    model.ir_version = 8
    rng = np.random.default_rng(1)
    s0, x = rng.standard_normal((2, 3)), rng.standard_normal((2, 4, 3))
    check_ort(model, [s0.astype(np.float32), x.astype(np.float32)], exec_modes=(exec_mode,))
