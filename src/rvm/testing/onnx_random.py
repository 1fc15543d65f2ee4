"""Random valid ONNX models, for checking the importer against ONNX Runtime.

`random_model(seed)` builds a model of 3-10 nodes over one or two float32 graph inputs of
random static shapes: unary and binary elementwise ops (broadcasting a suffix of the shape),
MatMul and Gemm with a weight, Transpose, Reshape, Flatten, Concat, Split, Softmax and
LogSoftmax, the reductions (ReduceLogSumExp among them) with random axes and keepdims, Gather,
Slice (steps of -2 to 3, bounds past either end), Unsqueeze, Clip, Where, CumSum, ArgMax and
ArgMin of rounded values (cast back to float32), Pad, Tile, Expand, variadic Sum/Mean/Max/Min,
Pow, LayerNormalization, and a Conv or pool over the value reshaped to (1, C, H, W), at opset
13, 17 or 18 (where reductions take their axes as an input, `GraphBuilder.reduce`). Values
stay in a range where float32 results agree to rtol 1e-4: division, logarithms and Pow take
``abs(x) + 1``, ``exp`` takes ``tanh(x)``. The model passes ``onnx.checker`` and strict shape
inference.

Larger valid networks, CNNs and transformers, are `rvm.testing.onnx_nets`'.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_UNARY = (
    "Relu",
    "Sigmoid",
    "Tanh",
    "Abs",
    "Neg",
    "Floor",
    "Ceil",
    "Erf",
    "Sin",
    "Identity",
    "Softplus",
    "Selu",
    "Elu",
    "LeakyRelu",
    "HardSigmoid",
)
_BINARY = ("Add", "Sub", "Mul", "Max", "Min")
_REDUCE = (
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSumExp",
)


class GraphBuilder:
    """A growing graph: nodes, initializers, and each value's shape."""

    def __init__(self, rng: np.random.Generator, opset: int) -> None:
        self.rng = rng
        self.opset = opset
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.count = 0

    def name(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def const(self, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self.name()
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op_type: str, inputs: list[str], shape: tuple[int, ...], **attrs: Any) -> str:
        from onnx import helper

        out = self.name()
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"n{self.count}", **attrs))
        self.shapes[out] = shape
        return out

    def reduce(self, op_type: str, x: str, axes: list[int], shape: tuple[Any, ...],
               keepdims: int) -> str:  # fmt: skip
        """A reduction over ``axes`` (none: all): its axes an input from opset 18 (ReduceSum's
        from 13), an attribute before."""
        if axes and (self.opset >= 18 or op_type == "ReduceSum"):
            axes_in = self.const(np.array(axes, np.int64))
            return self.node(op_type, [x, axes_in], shape, keepdims=keepdims)
        if axes:
            return self.node(op_type, [x], shape, axes=axes, keepdims=keepdims)
        return self.node(op_type, [x], shape, keepdims=keepdims)

    def pick(self, items: Any) -> Any:
        items = list(items)
        return items[int(self.rng.integers(len(items)))]


def _unary(b: GraphBuilder, x: str) -> str:
    shape = b.shapes[x]
    op_type = b.pick(_UNARY + ("Exp", "Log", "Sqrt", "Div"))
    if op_type == "Exp":
        return b.node("Exp", [b.node("Tanh", [x], shape)], shape)
    if op_type in ("Log", "Sqrt", "Div"):
        one = b.const(np.array(1.0, np.float32))
        safe = b.node("Add", [b.node("Abs", [x], shape), one], shape)
        if op_type == "Div":
            return b.node("Div", [x, safe], shape)
        return b.node(op_type, [safe], shape)
    return b.node(op_type, [x], shape)


def _binary(b: GraphBuilder, x: str, values: list[str]) -> str:
    shape = b.shapes[x]
    same = [v for v in values if b.shapes[v] == shape]
    if same and b.rng.random() < 0.6:
        y = b.pick(same)
    else:  # a constant of a suffix of x's shape, some of its dims 1
        k = int(b.rng.integers(len(shape) + 1))
        sub = tuple(d if b.rng.random() < 0.7 else 1 for d in shape[len(shape) - k :])
        y = b.const(b.rng.standard_normal(sub).astype(np.float32))
        b.shapes[y] = sub
    args = [x, y] if b.rng.random() < 0.5 else [y, x]
    return b.node(b.pick(_BINARY), args, shape)


def _reduce(b: GraphBuilder, x: str) -> str:
    shape = b.shapes[x]
    op_type = b.pick(_REDUCE)
    axes = sorted({int(a) for a in b.rng.integers(0, len(shape), size=2)}) if shape else []
    keep = int(b.rng.integers(2))
    out = tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)
    if not axes:
        out = tuple(1 for _ in shape) if keep else ()
    return b.reduce(op_type, x, axes, out, keep)


def _layout(b: GraphBuilder, x: str) -> str:
    shape = b.shapes[x]
    rank = len(shape)
    choice = b.pick(
        ["Transpose", "Reshape", "Concat", "Split", "Softmax", "Gather", "Slice", "Stepped"]
        + ["LogSoftmax", "Flatten"]
    )
    if rank == 0 or choice == "Reshape":
        target = (int(np.prod(shape)),) if rank != 1 else (1, shape[0])
        return b.node("Reshape", [x, b.const(np.array(target, np.int64))], target)
    axis = int(b.rng.integers(rank))
    if choice == "Transpose":
        perm = [int(p) for p in b.rng.permutation(rank)]
        return b.node("Transpose", [x], tuple(shape[p] for p in perm), perm=perm)
    if choice == "Concat":
        out = tuple(d * 2 if i == axis else d for i, d in enumerate(shape))
        return b.node("Concat", [x, x], out, axis=axis)
    if choice == "Split" and shape[axis] >= 2:
        first = int(b.rng.integers(1, shape[axis]))
        sizes = b.const(np.array([first, shape[axis] - first], np.int64))
        out = tuple(first if i == axis else d for i, d in enumerate(shape))
        node = b.node("Split", [x, sizes], out, axis=axis)
        b.nodes[-1].output.append(b.name())  # the second piece, unused
        return node
    if choice == "Gather":
        idx = b.rng.integers(-shape[axis], shape[axis], size=3).astype(np.int64)
        out = tuple(3 if i == axis else d for i, d in enumerate(shape))
        return b.node("Gather", [x, b.const(idx)], out, axis=axis)
    if choice == "Slice":
        start = int(b.rng.integers(shape[axis]))
        out = tuple(d - start if i == axis else d for i, d in enumerate(shape))
        bounds = [b.const(np.array([v], np.int64)) for v in (start, 2**62, axis)]
        return b.node("Slice", [x, *bounds], out)
    if choice == "Stepped":  # a step other than 1, backwards too; bounds past the ends
        n = shape[axis]
        step = b.pick([-1, -2, 2, 3])
        start = int(b.rng.integers(-n - 1, n + 1))
        end = b.pick([int(b.rng.integers(-n - 1, n + 1)), -(2**62), 2**62])
        size = np.arange(n)[start:end:step].size
        if size == 0:  # an empty slice ends the chain: take the whole axis backwards
            start, end, step, size = -1, -(2**62), -1, n
        out = tuple(size if i == axis else d for i, d in enumerate(shape))
        bounds = [b.const(np.array([v], np.int64)) for v in (start, end, axis, step)]
        return b.node("Slice", [x, *bounds], out)
    if choice == "Flatten":
        cut = int(b.rng.integers(rank + 1))
        out = (int(np.prod(shape[:cut])), int(np.prod(shape[cut:])))
        return b.node("Flatten", [x], out, axis=cut)
    return b.node(choice if choice == "LogSoftmax" else "Softmax", [x], shape, axis=axis - rank)


def _spatial(b: GraphBuilder, x: str) -> str:
    """A convolution or pool over ``x`` viewed as (1, channels, height, width)."""
    shape = b.shapes[x]
    size = int(np.prod(shape))
    c = b.pick([d for d in (1, 2, 3) if size % d == 0])
    h = b.pick([d for d in range(1, size // c + 1) if (size // c) % d == 0])
    w = size // c // h
    x = b.node("Reshape", [x, b.const(np.array([1, c, h, w], np.int64))], (1, c, h, w))
    kh, kw = int(b.rng.integers(1, min(h, 3) + 1)), int(b.rng.integers(1, min(w, 3) + 1))
    pads = [int(b.rng.integers(0, k)) for k in (kh, kw)] * 2
    out_hw = (h + 2 * pads[0] - kh + 1, w + 2 * pads[1] - kw + 1)
    choice = b.pick(["Conv", "MaxPool", "AveragePool", "GlobalAveragePool"])
    if choice == "Conv":
        k = int(b.rng.integers(1, 4))
        weight = b.const(b.rng.standard_normal((k, c, kh, kw)).astype(np.float32) * 0.5)
        bias = b.const(b.rng.standard_normal(k).astype(np.float32))
        return b.node("Conv", [x, weight, bias], (1, k, *out_hw), pads=pads)
    if choice == "GlobalAveragePool":
        return b.node(choice, [x], (1, c, 1, 1))
    extra = {"count_include_pad": int(b.rng.integers(2))} if choice == "AveragePool" else {}
    return b.node(choice, [x], (1, c, *out_hw), kernel_shape=[kh, kw], pads=pads, **extra)


def _grow(b: GraphBuilder, x: str, values: list[str]) -> str:
    """Pad, Tile, Expand, a variadic Sum/Mean/Max, Pow, LayerNormalization or Gemm."""
    shape = b.shapes[x]
    rank = len(shape)
    choice = b.pick(["Pad", "Tile", "Expand", "Variadic", "Pow", "LayerNorm", "Gemm"])
    if choice == "Pad" and rank:
        pads = [int(v) for v in b.rng.integers(0, 3, size=2 * rank)]
        mode = b.pick(["constant", "edge", "reflect"])
        if mode == "reflect":
            pads = [min(p, d - 1) for p, d in zip(pads, shape * 2)]
        out = tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(shape))
        return b.node("Pad", [x, b.const(np.array(pads, np.int64))], out, mode=mode)
    if choice == "Tile" and rank:
        reps = [int(v) for v in b.rng.integers(1, 3, size=rank)]
        out = tuple(d * r for d, r in zip(shape, reps))
        return b.node("Tile", [x, b.const(np.array(reps, np.int64))], out)
    if choice == "Expand":
        target = (int(b.rng.integers(1, 3)), *shape)
        return b.node("Expand", [x, b.const(np.array(target, np.int64))], target)
    if choice == "Variadic":
        same = [v for v in values if b.shapes[v] == shape] or [x]
        args = [x, *(b.pick(same) for _ in range(int(b.rng.integers(1, 3))))]
        return b.node(b.pick(["Sum", "Mean", "Max", "Min"]), args, shape)
    if choice == "Pow":
        base = b.node("Add", [b.node("Abs", [x], shape), b.const(np.array(1, np.float32))], shape)
        return b.node("Pow", [base, b.const(np.array(b.pick([0.5, 2.0, 3.0]), np.float32))], shape)
    if choice == "LayerNorm" and rank and b.opset >= 17:
        scale = b.const(b.rng.standard_normal(shape[-1]).astype(np.float32))
        return b.node("LayerNormalization", [x, scale], shape, axis=-1)
    if rank == 2:
        w = b.const(b.rng.standard_normal((shape[1], 3)).astype(np.float32))
        return b.node("Gemm", [x, w], (shape[0], 3), alpha=0.5)
    return _spatial(b, x)


def _other(b: GraphBuilder, x: str, values: list[str]) -> str:
    shape = b.shapes[x]
    choice = b.pick(["MatMul", "Unsqueeze", "Clip", "Where", "CumSum", "ArgMax"])
    if choice == "MatMul" and shape:
        k = int(b.rng.integers(1, 5))
        w = b.const(b.rng.standard_normal((shape[-1], k)).astype(np.float32) * 0.5)
        return b.node("MatMul", [x, w], (*shape[:-1], k))
    if choice == "Unsqueeze" or not shape:
        axis = int(b.rng.integers(len(shape) + 1))
        out = (*shape[:axis], 1, *shape[axis:])
        return b.node("Unsqueeze", [x, b.const(np.array([axis], np.int64))], out)
    if choice == "Clip":
        lo, hi = (b.const(np.array(v, np.float32)) for v in (-0.5, 0.75))
        return b.node("Clip", [x, lo, hi], shape)
    if choice == "Where":
        y = b.pick([v for v in values if b.shapes[v] == shape] or [x])
        cond = b.node("Greater", [x, y], shape)
        return b.node("Where", [cond, x, y], shape)
    if choice == "ArgMax":  # an index, back to float32
        from onnx import TensorProto

        # Of rounded values: their ties are exact, so the first or the last index is the
        # model's (``select_last_index``) and not a last bit's (the values' own near-ties went
        # either way between runtimes 1 ulp apart).
        four = b.const(np.array(4.0, np.float32))
        steps = b.node("Round", [b.node("Mul", [x, four], shape)], shape)
        at, keep = int(b.rng.integers(len(shape))), int(b.rng.integers(2))
        out = tuple(1 if i == at else d for i, d in enumerate(shape) if keep or i != at)
        op_type = b.pick(["ArgMax", "ArgMin"])
        last = int(b.rng.integers(2))
        index = b.node(op_type, [steps], out, axis=at, keepdims=keep, select_last_index=last)
        return b.node("Cast", [index], out, to=TensorProto.FLOAT)
    axis = b.const(np.array(int(b.rng.integers(len(shape))), np.int64))
    return b.node("CumSum", [x, axis], shape, reverse=int(b.rng.integers(2)))


def random_model(seed: int) -> tuple[Any, list[np.ndarray]]:
    """A random valid model and inputs for it."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    b = GraphBuilder(rng, int(rng.choice([13, 17, 18])))
    shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 4))))
    inputs = ["x"] + (["x2"] if rng.random() < 0.4 else [])
    for name in inputs:
        b.shapes[name] = shape
    values = list(inputs)
    for _ in range(int(rng.integers(3, 11))):
        x = b.pick(values[-3:])
        kind = rng.random()
        if kind < 0.25:
            y = _unary(b, x)
        elif kind < 0.5:
            y = _binary(b, x, values)
        elif kind < 0.65:
            y = _reduce(b, x)
        elif kind < 0.77:
            y = _layout(b, x)
        elif kind < 0.88:
            y = _grow(b, x, values)
        else:
            y = _other(b, x, values)
        values.append(y)
    outputs = [values[-1]] + ([values[-2]] if rng.random() < 0.3 and len(values) > 2 else [])
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        b.nodes,
        f"random_{seed}",
        [helper.make_tensor_value_info(n, f32, list(shape)) for n in inputs],
        [helper.make_tensor_value_info(n, f32, list(b.shapes[n])) for n in outputs],
        b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", b.opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.shape_inference.infer_shapes(model, strict_mode=True, check_type=True)
    data = [rng.standard_normal(shape).astype(np.float32) for _ in inputs]
    return model, data
