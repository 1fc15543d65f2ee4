"""Small ONNX models built with onnx.helper, and their check against ONNX Runtime."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

import rvm
from rvm.dtypes import NARROW_DTYPES
from rvm.testing.onnx_models import run_ort

OPSET = 17


def tensor_info(name: str, dtype: int, shape: Sequence[int | str | None]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, list(shape))


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[tuple[str, int, Sequence]],
    outputs: Sequence[str],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = OPSET,
) -> onnx.ModelProto:
    """A checked model of ``nodes`` importing the default domain at ``opset``; output types
    come from ONNX shape inference."""
    graph = helper.make_graph(
        list(nodes),
        "test",
        [tensor_info(*i) for i in inputs],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 8)  # ONNX Runtime's supported IR versions
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


# Every exec mode: the per-op checks run the native mode too (its functions that call numpy
# kernels or do what Numba cannot stay in the compiled mode, `VirtualMachine.native_report`).
EXEC_MODES = ("bytecode", "compiled", "native")


def run_rvm(model, inputs, kernels="numpy", exec_mode="bytecode", **kwargs):
    """Import ``model``, compile, run ``main`` on ``inputs``; outputs as a list."""
    ex = rvm.compile(rvm.from_onnx(model, **kwargs), kernels=kernels)
    out = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](*inputs)
    return list(out) if isinstance(out, tuple) else [out]


def check_ort(model, inputs, kernels="numpy", exec_modes=EXEC_MODES, rtol=1e-5):
    """rvm's outputs equal ONNX Runtime's (dtype, shape, values) in each exec mode."""
    _check_outputs(model, inputs, run_ort(model, inputs), kernels, exec_modes, rtol)


def check_reference(model, inputs, kernels="numpy", exec_modes=EXEC_MODES, rtol=1e-5):
    """rvm's outputs equal ``onnx.reference``'s: the oracle for the types ONNX Runtime's
    Python API cannot pass (bfloat16, float8e5m2, int4... inputs and outputs)."""
    from onnx.reference import ReferenceEvaluator

    with np.errstate(all="ignore"):
        expected = ReferenceEvaluator(model).run(None, dict(zip(_input_names(model), inputs)))
    _check_outputs(model, inputs, expected, kernels, exec_modes, rtol)


def _input_names(model) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def _check_outputs(model, inputs, expected, kernels, exec_modes, rtol):
    ex = rvm.compile(rvm.from_onnx(model), kernels=kernels)
    for mode in exec_modes:
        out = rvm.VirtualMachine(ex, exec_mode=mode)["main"](*inputs)
        out = list(out) if isinstance(out, tuple) else [out]
        assert len(out) == len(expected)
        for a, e in zip(out, expected):
            a, e = np.asarray(a), np.asarray(e)
            if a.dtype.name in NARROW_DTYPES and e.dtype == np.uint8 and a.dtype.itemsize == 1:
                a = a.view(np.uint8)  # ONNX Runtime returns float8 tensors as their bytes
            assert a.dtype == e.dtype, (mode, a.dtype, e.dtype)
            assert a.shape == e.shape, (mode, a.shape, e.shape)
            if a.dtype.name in NARROW_DTYPES:  # exactly, NaN where NaN
                a, e = a.astype(np.float32), e.astype(np.float32)
                np.testing.assert_array_equal(a, e, err_msg=mode)
            elif e.dtype.kind == "f":
                np.testing.assert_allclose(a, e, rtol=rtol, atol=1e-5, err_msg=mode)
            else:
                np.testing.assert_array_equal(a, e, err_msg=mode)


def single_op(
    op_type: str,
    inputs: dict[str, np.ndarray],
    *,
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = OPSET,
    n_outputs: int = 1,
    input_names: Sequence[str] | None = None,
    **attrs,
):
    """A model of one node: graph inputs ``inputs`` (name: sample array), constants
    ``initializers``; returns (model, sample input list)."""
    names = list(input_names) if input_names is not None else [*inputs, *(initializers or {})]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, name=f"{op_type.lower()}_0", **attrs)
    info = [(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for k, v in inputs.items()]
    model = make_model([node], info, outs, initializers, opset)
    return model, list(inputs.values())
