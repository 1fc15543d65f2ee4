"""ONNX models for tests and benchmarks: the light CNNs, random weights, ONNX Runtime.

The "light" CNNs shipped in the onnx package (``onnx/backend/test/data/light``) carry every
weight as ``ConstantOfShape(shape, 0.02)``, which makes their outputs nearly constant.
`randomize_weights` turns each such weight, and every float initializer, into seeded random
values scaled so activations stay O(1); `compare_with_ort` runs a model in rvm and in ONNX
Runtime and reports the relative error and whether the top-1 classes agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

LIGHT_MODELS = (
    "squeezenet",
    "shufflenet",
    "bvlc_alexnet",
    "zfnet512",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "densenet121",
    "vgg19",
)


def light_model_path(name: str) -> str:
    """The path of onnx's light model ``name`` (``"squeezenet"``, ``"resnet50"``...)."""
    import onnx

    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return os.path.join(root, f"light_{name}.onnx")


def _fan_in(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape[1:])) if len(shape) > 1 else 0


def _batch_norm_roles(graph: Any) -> dict[str, str]:
    """BatchNormalization inputs by name: scale, bias, mean, var."""
    roles = {}
    for node in graph.node:
        if node.op_type == "BatchNormalization":
            for name, role in zip(node.input[1:5], ("scale", "bias", "mean", "var")):
                roles[name] = role
    return roles


def _random(shape: tuple[int, ...], role: str | None, rng: np.random.Generator) -> np.ndarray:
    if role in ("scale", "var"):
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    fan_in = _fan_in(shape)
    if fan_in:  # He initialization: relu networks keep activations O(1)
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    return (rng.standard_normal(shape) * 0.1).astype(np.float32)


def randomize_weights(model: Any, seed: int = 0) -> Any:
    """A copy of ``model`` whose float weights are seeded random values.

    ``ConstantOfShape`` nodes with a constant shape (the light models' weights) become float
    initializers; every float initializer is redrawn. Batch-norm scales and variances are
    drawn from [0.5, 1.5]; tensors with a fan-in get He-scaled normals; others normal * 0.1.
    """
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    rng = np.random.default_rng(seed)
    roles = _batch_norm_roles(graph)
    inits = {t.name: t for t in graph.initializer}
    keep_nodes = []
    new = {}
    for node in graph.node:
        shape_init = inits.get(node.input[0]) if node.op_type == "ConstantOfShape" else None
        if shape_init is None:
            keep_nodes.append(node)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(shape_init))
        new[node.output[0]] = _random(shape, roles.get(node.output[0]), rng)
    used = {name for node in keep_nodes for name in node.input}
    used |= {o.name for o in graph.output}
    kept_inits = []
    for t in graph.initializer:
        if t.name not in used:
            continue
        if t.data_type == onnx.TensorProto.FLOAT:
            arr = _random(tuple(t.dims), roles.get(t.name), rng)
            kept_inits.append(numpy_helper.from_array(arr, t.name))
        else:
            kept_inits.append(t)
    kept_inits += [numpy_helper.from_array(a, n) for n, a in new.items()]
    inputs = [i for i in graph.input if i.name in used or i.name not in inits]
    if model.ir_version < 4:  # initializers must also be graph inputs before IR version 4
        inputs += [
            onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, a.shape)
            for n, a in new.items()
        ]
    for field, values in (("node", keep_nodes), ("initializer", kept_inits), ("input", inputs)):
        del getattr(graph, field)[:]
        getattr(graph, field).extend(values)
    onnx.checker.check_model(model)
    return model


def expose_logits(model: Any) -> Any:
    """A copy of ``model`` with the input of its final Softmax as an extra, last output.

    Softmax saturates on random weights (every probability 0 or 1); the logits before it are
    what a comparison should look at.
    """
    import onnx

    model = onnx.ModelProto.FromString(model.SerializeToString())
    outputs = {o.name: o for o in model.graph.output}
    for node in reversed(model.graph.node):
        if node.op_type == "Softmax" and node.output[0] in outputs:
            info = onnx.ValueInfoProto()  # softmax keeps the shape: the probabilities' type
            info.CopyFrom(outputs[node.output[0]])
            info.name = node.input[0]
            model.graph.output.append(info)
            return model
    return model


def graph_inputs(model: Any) -> list[Any]:
    """The graph inputs that are not initializers, in order."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def random_inputs(model: Any, seed: int = 0, batch: int | None = None) -> list[np.ndarray]:
    """Seeded standard-normal float inputs of the model's input shapes.

    A symbolic dimension takes ``batch`` (default 1).
    """
    import onnx

    rng = np.random.default_rng(seed)
    out = []
    for inp in graph_inputs(model):
        tt = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (batch or 1) for d in tt.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        out.append(rng.standard_normal(shape).astype(dtype))
    return out


def run_ort(model: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The model's outputs from ONNX Runtime on the CPU."""
    import onnxruntime

    sess = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = [i.name for i in sess.get_inputs()]
    return sess.run(None, dict(zip(names, inputs)))


@dataclass
class Comparison:
    """How rvm's first output compares with ONNX Runtime's."""

    rel_err: float  # max |a - b| / max |b|
    top1_equal: bool  # argmax over the last axis, per row

    def __str__(self) -> str:
        return f"max rel err {self.rel_err:.2e}, top-1 {'equal' if self.top1_equal else 'DIFFER'}"


def compare(actual: np.ndarray, expected: np.ndarray) -> Comparison:
    """The relative error and top-1 agreement of two logit arrays."""
    a, b = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if a.shape != b.shape:
        raise AssertionError(f"shape {a.shape}, expected {b.shape}")
    scale = np.max(np.abs(b)) if b.size else 1.0
    rel = float(np.max(np.abs(a - b)) / scale) if b.size else 0.0
    top1 = bool(
        np.array_equal(
            np.argmax(a.reshape(-1, a.shape[-1]), -1), np.argmax(b.reshape(-1, b.shape[-1]), -1)
        )
    )
    return Comparison(rel, top1)


def compare_with_ort(
    vm_main: Any, model: Any, inputs: list[np.ndarray], output: int = -1
) -> Comparison:
    """Run ``vm_main(*inputs)`` (an rvm VM function) and ONNX Runtime; compare ``output``."""
    out = vm_main(*inputs)
    ours = out[output] if isinstance(out, tuple) else out
    return compare(np.asarray(ours), run_ort(model, inputs)[output])
