"""Mutated ONNX models for fuzzing the importer: small valid models, changed one way at random.

`mutant(kind, seed)` builds one case, deterministically: a model (a ``ModelProto``, its bytes,
or a path whose external data was changed) made from one of the `SEEDS` by a mutation of
``kind``:

- ``graph``: a node removed, duplicated or moved; an input rewired to another value or to a
  name nothing defines; a graph output dropped or renamed;
- ``attribute``: an attribute set to an extreme or wrong-typed value, removed, or added;
- ``type``: the element type of a graph input, output or initializer changed;
- ``shape``: a dimension of a graph input or an initializer changed (0, -1, huge, a name);
- ``opset``: the model's opset version changed;
- ``bytes``: the serialized model truncated or bit-flipped;
- ``external``: the model saved with external data, then its location, offset or length
  entries, or the data file itself, changed (truncated, hard-linked, replaced by a symlink).

Each case is for `rvm.testing.onnx_fuzz`, which imports, compiles and runs it beside ONNX
Runtime and classifies what happened.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

KINDS = ("graph", "attribute", "type", "shape", "opset", "bytes", "external")

_EXTREME_INTS = (-(2**63), -(2**31), -3, -1, 0, 1, 2, 3, 7, 2**31, 2**62)
_EXTREME_FLOATS = (float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e30)


def _vi(name: str, elem: int, shape: list) -> Any:
    from onnx import helper

    return helper.make_tensor_value_info(name, elem, shape)


def _cnn(rng: np.random.Generator) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    f32 = TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([0, -1], np.int64), "s"),
        numpy_helper.from_array(rng.standard_normal((64, 5)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p", "s"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w2"], ["g"], alpha=0.5, name="gemm"),
        helper.make_node("Softmax", ["g"], ["y"], axis=-1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [_vi("x", f32, ["N", 3, 8, 8])], [_vi("y", f32, ["N", 5])], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _tensor_ops(rng: np.random.Generator) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    f32 = TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(rng.standard_normal((6, 4)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([1, 3], np.int64), "sizes"),
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
        numpy_helper.from_array(np.array([2, 0, 1], np.int64), "idx"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        helper.make_node("Tanh", ["m"], ["t"], name="tanh"),
        helper.make_node("Split", ["t", "sizes"], ["a", "b"], axis=1, name="split"),
        helper.make_node("Concat", ["b", "a"], ["c"], axis=1, name="concat"),
        helper.make_node("Transpose", ["c"], ["ct"], perm=[1, 0], name="transpose"),
        helper.make_node("Gather", ["ct", "idx"], ["gt"], axis=0, name="gather"),
        helper.make_node("ReduceSum", ["gt", "axes"], ["rs"], keepdims=1, name="reduce"),
        helper.make_node("Add", ["gt", "rs"], ["y"], name="add"),
        helper.make_node("Cast", ["y"], ["z"], to=TensorProto.DOUBLE, name="cast"),
    ]
    graph = helper.make_graph(
        nodes,
        "tensor_ops",
        [_vi("x", f32, [3, 6])],
        [_vi("y", f32, [3, 3]), _vi("z", TensorProto.DOUBLE, [3, 3])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _shapes(rng: np.random.Generator) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    f32 = TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "bias"),
    ]
    value = helper.make_tensor("v", f32, [1], [0.25])
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"], name="shape"),
        helper.make_node("Gather", ["sh", "zero"], ["n"], axis=0, name="batch"),
        helper.make_node("Concat", ["n", "minus"], ["target"], axis=0, name="target"),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("Add", ["flat", "bias"], ["biased"], name="bias_add"),
        helper.make_node("ConstantOfShape", ["two"], ["fill"], value=value, name="fill"),
        helper.make_node("Slice", ["biased", "zero", "two", "minus"], ["sl"], name="slice"),
        helper.make_node("Mul", ["sl", "fill"], ["y"], name="mul"),
        helper.make_node("Unsqueeze", ["y", "zero"], ["u"], name="unsqueeze"),
        helper.make_node("Where", ["cond", "u", "u"], ["out"], name="where"),
    ]
    graph = helper.make_graph(
        nodes,
        "shapes",
        [_vi("x", f32, ["N", 2, 4]), _vi("cond", TensorProto.BOOL, [1, 1, 2])],
        [_vi("out", f32, [1, "N", 2])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


SEEDS: dict[str, Callable[[np.random.Generator], Any]] = {
    "cnn": _cnn,
    "tensor_ops": _tensor_ops,
    "shapes": _shapes,
}


def seed_model(name: str) -> Any:
    """The unmutated seed model ``name``; its weights are the same on every call."""
    model = SEEDS[name](np.random.default_rng(0))
    model.ir_version = 8  # one ONNX Runtime reads
    return model


def mutant(kind: str, seed: int, workdir: str | None = None) -> tuple[str, Any]:
    """Case ``seed`` of mutation ``kind``: a description and the model (ModelProto, bytes or
    a path under ``workdir``, a fresh temporary directory when None)."""
    rng = np.random.default_rng([KINDS.index(kind), seed])
    base = list(SEEDS)[int(rng.integers(len(SEEDS)))]
    model = seed_model(base)
    if kind == "bytes":
        what, data = _spoil_bytes(model, rng)
        return f"{base}: {what}", data
    if kind == "external":
        what, path = _spoil_external(model, rng, workdir or tempfile.mkdtemp(prefix="rvmfuzz"))
        return f"{base}: {what}", path
    what = _MUTATORS[kind](model, rng)
    return f"{base}: {what}", model


def _pick(rng: np.random.Generator, items: Any) -> Any:
    items = list(items)
    return items[int(rng.integers(len(items)))]


def _mutate_graph(model: Any, rng: np.random.Generator) -> str:
    g = model.graph
    nodes = g.node
    i = int(rng.integers(len(nodes)))
    choice = int(rng.integers(6))
    if choice == 0:
        del nodes[i]
        return f"node {i} removed"
    if choice == 1:
        nodes.add().CopyFrom(nodes[i])
        return f"node {i} duplicated"
    if choice == 2:
        j = int(rng.integers(len(nodes)))
        node = type(nodes[i])()
        node.CopyFrom(nodes[i])
        del nodes[i]
        nodes.insert(j, node)
        return f"node {i} moved to {j}"
    names = [o for n in nodes for o in n.output] + [v.name for v in g.input]
    names += [t.name for t in g.initializer] + ["nowhere", ""]
    if choice == 3 and nodes[i].input:
        k = int(rng.integers(len(nodes[i].input)))
        nodes[i].input[k] = _pick(rng, names)
        return f"node {i} input {k} rewired to {nodes[i].input[k]!r}"
    if choice == 4:
        g.output[0].name = _pick(rng, names)
        return f"output 0 renamed {g.output[0].name!r}"
    del g.output[int(rng.integers(len(g.output)))]
    return "an output dropped"


def _mutate_attribute(model: Any, rng: np.random.Generator) -> str:
    from onnx import AttributeProto, helper

    nodes = [n for n in model.graph.node if n.attribute] or list(model.graph.node)
    node = _pick(rng, nodes)
    choice = int(rng.integers(4))
    if choice == 0 or not node.attribute:
        name = _pick(rng, ["axis", "perm", "pads", "alpha", "to", "keepdims", "bogus"])
        value = _pick(rng, [_pick(rng, _EXTREME_INTS), [int(rng.integers(-3, 4))] * 3, "s", 0.5])
        node.attribute.append(helper.make_attribute(name, value))
        return f"{node.name}: attribute {name}={value!r} added"
    k = int(rng.integers(len(node.attribute)))
    attr = node.attribute[k]
    if choice == 1:
        del node.attribute[k]
        return f"{node.name}: attribute {attr.name} removed"
    if attr.type == AttributeProto.INT:
        attr.i = _pick(rng, _EXTREME_INTS)
        return f"{node.name}: {attr.name}={attr.i}"
    if attr.type == AttributeProto.INTS and attr.ints:
        j = int(rng.integers(len(attr.ints) + 1))
        if j == len(attr.ints):
            attr.ints.append(_pick(rng, _EXTREME_INTS))
        else:
            attr.ints[j] = _pick(rng, _EXTREME_INTS)
        return f"{node.name}: {attr.name}={list(attr.ints)}"
    if attr.type == AttributeProto.FLOAT:
        attr.f = _pick(rng, _EXTREME_FLOATS)
        return f"{node.name}: {attr.name}={attr.f}"
    replaced = helper.make_attribute(attr.name, _pick(rng, [1.5, "text", [1, 2], -1]))
    node.attribute[k].CopyFrom(replaced)
    return f"{node.name}: {attr.name} retyped {replaced.type}"


def _mutate_type(model: Any, rng: np.random.Generator) -> str:
    from onnx import TensorProto

    elem = _pick(rng, [t for t in TensorProto.DataType.values() if t != 0] + [0, 99])
    g = model.graph
    where = _pick(rng, ["input", "output", "initializer"])
    if where == "initializer":
        t = _pick(rng, g.initializer)
        t.data_type = elem
        return f"initializer {t.name} typed {elem}"
    value = _pick(rng, g.input if where == "input" else g.output)
    value.type.tensor_type.elem_type = elem
    return f"{where} {value.name} typed {elem}"


def _mutate_shape(model: Any, rng: np.random.Generator) -> str:
    g = model.graph
    new = _pick(rng, [0, -1, 1, 2, 3, 2**31, 2**40, "M"])
    if rng.random() < 0.5:
        t = _pick(rng, g.initializer)
        if t.dims and rng.random() < 0.7:
            t.dims[int(rng.integers(len(t.dims)))] = new if isinstance(new, int) else 5
        else:
            t.dims.append(2)
        return f"initializer {t.name} dims {list(t.dims)}"
    value = _pick(rng, g.input)
    dims = value.type.tensor_type.shape.dim
    if not dims or rng.random() < 0.2:
        dims.add().dim_value = 3
        return f"input {value.name} given an extra dim"
    d = dims[int(rng.integers(len(dims)))]
    if isinstance(new, str):
        d.dim_param = new
    else:
        d.dim_value = new
    return f"input {value.name} dim set to {new}"


def _mutate_opset(model: Any, rng: np.random.Generator) -> str:
    version = int(_pick(rng, [1, 6, 7, 9, 10, 11, 12, 14, 18, 21, 28, 29, 99]))
    model.opset_import[0].version = version
    return f"opset {version}"


_MUTATORS: dict[str, Callable[[Any, np.random.Generator], str]] = {
    "graph": _mutate_graph,
    "attribute": _mutate_attribute,
    "type": _mutate_type,
    "shape": _mutate_shape,
    "opset": _mutate_opset,
}


def _spoil_bytes(model: Any, rng: np.random.Generator) -> tuple[str, bytes]:
    data = bytearray(model.SerializeToString())
    if rng.random() < 0.5:
        cut = int(rng.integers(len(data)))
        return f"truncated at {cut}", bytes(data[:cut])
    flips = [(int(rng.integers(len(data))), int(rng.integers(8))) for _ in range(3)]
    for pos, bit in flips:
        data[pos] ^= 1 << bit
    return f"bits flipped {flips}", bytes(data)


def _spoil_external(model: Any, rng: np.random.Generator, workdir: str) -> tuple[str, str]:
    import onnx

    folder = os.path.join(workdir, "model")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "m.onnx")
    onnx.save(model, path, save_as_external_data=True, location="w.bin", size_threshold=0)
    data = os.path.join(folder, "w.bin")
    choice = int(rng.integers(6))
    if choice == 0:
        os.truncate(data, int(rng.integers(os.path.getsize(data))))
        return "data file truncated", path
    if choice == 1:
        os.link(data, os.path.join(workdir, "alias"))
        return "data file hard-linked", path
    if choice == 2:
        secret = os.path.join(workdir, "secret")
        with open(secret, "wb") as f:
            f.write(os.urandom(os.path.getsize(data)))
        os.remove(data)
        os.symlink(secret, data)
        return "data file a symlink out of the folder", path
    proto = onnx.load(path, load_external_data=False)
    tensor = _pick(rng, [t for t in proto.graph.initializer if t.external_data])
    key = ("location", "offset", "length")[choice - 3]
    value = {
        "location": _pick(rng, ["../secret", "/etc/passwd", "missing.bin", "w.bin\x00x", "."]),
        "offset": _pick(rng, ["-8", "3", "99999999", "x"]),
        "length": _pick(rng, ["0", "4", "-1", "99999999999"]),
    }[key]
    for entry in tensor.external_data:
        if entry.key == key:
            entry.value = value
            break
    else:
        tensor.external_data.add(key=key, value=value)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
    return f"{tensor.name}: {key}={value!r}", path
