"""Random valid ONNX networks, for checking the importer and the library's kernels against ONNX
Runtime at the sizes and in the patterns real models have (`rvm.testing.onnx_random` builds
small graphs of single ops).

- `random_cnn(seed)`: 2-5 layers or blocks over an image batch (`_cnn_block`: convolutions of
  random geometry, depthwise ones, fire modules, residual blocks, branches joined by Concat,
  squeeze-excitations, channel shuffles, upsamplings, pools), perhaps a classifier head, at
  sizes that take the library's convolution methods (direct, Winograd's, the GEMMs), pools,
  in-place Concats and fused epilogues.
- `random_transformer(seed)`: attention and feed-forward blocks over a sequence of symbolic
  length, its heads split and joined by Reshapes of shapes computed from ``Shape(x)`` as
  exporters write them, perhaps a causal mask built by ``Range``, learned positions, and a
  cache of past keys and values as decoders export it.

Weights keep unit scale, so float32 results agree with ONNX Runtime's to rtol 1e-4. Each model
passes ``onnx.checker`` and strict shape inference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rvm.testing.onnx_random import GraphBuilder


def _fan(b: GraphBuilder, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    """A weight of ``shape`` whose sums over ``fan_in`` inputs keep unit scale."""
    return (b.rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))).astype(np.float32)


def _conv(b: GraphBuilder, x: str, o: int, k: int, stride: int = 1, groups: int = 1,
          dilation: int = 1, same: bool = True) -> str:  # fmt: skip
    """A Conv of ``o`` output channels, a k x k kernel, optionally its bias, then perhaps a
    BatchNormalization and an activation; the map's size kept (``same``, at stride 1) or
    some convolutions padded at random."""
    n, c, h, w = b.shapes[x]
    span = dilation * (k - 1) + 1
    pads = [span // 2] * 4
    if not same and b.rng.random() < 0.3:
        pads = [int(p) for p in b.rng.integers(0, span, size=4)]
    out_h = (h + pads[0] + pads[2] - span) // stride + 1
    out_w = (w + pads[1] + pads[3] - span) // stride + 1
    if out_h < 1 or out_w < 1:
        return x
    weight = b.const(_fan(b, (o, c // groups, k, k), c // groups * k * k))
    inputs = [x, weight]
    if b.rng.random() < 0.7:
        inputs.append(b.const((b.rng.standard_normal(o) * 0.1).astype(np.float32)))
    shape = (n, o, out_h, out_w)
    y = b.node("Conv", inputs, shape, kernel_shape=[k, k], strides=[stride] * 2, pads=pads,
               dilations=[dilation] * 2, group=groups)  # fmt: skip
    if b.rng.random() < 0.3:
        scale, bias, mean = (b.const((b.rng.random(o) + 0.5).astype(np.float32)) for _ in "sbm")
        var = b.const((b.rng.random(o) + 0.5).astype(np.float32))
        y = b.node("BatchNormalization", [y, scale, bias, mean, var], shape)
    act = b.pick(["Relu", "Relu", "Relu", "none", "Clip", "LeakyRelu", "Swish", "HardSwish"])
    if act == "LeakyRelu" and b.rng.random() < 0.5:  # half of them PReLUs: a slope a channel
        slope = b.const((b.rng.random((o, 1, 1)) * 0.3).astype(np.float32))
        return b.node("PRelu", [y, slope], shape)
    if act == "Clip":
        lo, hi = (b.const(np.array(v, np.float32)) for v in (0.0, 6.0))
        return b.node("Clip", [y, lo, hi], shape)
    if act == "Swish":
        return b.node("Mul", [y, b.node("Sigmoid", [y], shape)], shape)
    return y if act == "none" else b.node(act, [y], shape)


def _cnn_block(b: GraphBuilder, x: str) -> str:
    """A layer or block of a CNN: a convolution of random geometry, a fire module (squeeze,
    two expansions, Concat), a residual block, branches joined by Concat, a squeeze-excitation
    (channel weights from the global pool), a channel shuffle, an upsampling (Resize or a
    ConvTranspose), or a pool."""
    n, c, h, w = b.shapes[x]
    choice = b.pick(["conv", "conv", "fire", "residual", "branches", "depthwise", "pool"]
                    + ["excite", "shuffle", "upsample"])  # fmt: skip
    widths = [8, 12, 16, 20, 24, 32, 40, 48, 64, 72, 96, 128]
    if choice == "conv":
        k = b.pick([1, 1, 3, 3, 3, 5, 7])
        stride, dilation = b.pick([1, 1, 1, 2]), b.pick([1, 1, 1, 1, 2])
        groups = b.pick([g for g in (1, 1, 1, 2, 4) if c % g == 0])
        o = b.pick([v for v in widths if v % groups == 0])
        return _conv(b, x, o, k, stride, groups, dilation, same=False)
    if choice == "excite":  # MobileNetV3's and EfficientNet's: x * sigmoid(W2 relu(W1 gap(x)))
        mid = max(c // 4, 4)
        pooled = b.node("GlobalAveragePool", [x], (n, c, 1, 1))
        w1, w2 = b.const(_fan(b, (mid, c, 1, 1), c)), b.const(_fan(b, (c, mid, 1, 1), mid))
        squeezed = b.node("Relu", [b.node("Conv", [pooled, w1], (n, mid, 1, 1))], (n, mid, 1, 1))
        gate = b.node(b.pick(["Sigmoid", "HardSigmoid"]),
                      [b.node("Conv", [squeezed, w2], (n, c, 1, 1))], (n, c, 1, 1))  # fmt: skip
        return b.node("Mul", [x, gate], (n, c, h, w))
    if choice == "shuffle" and c % 2 == 0:  # ShuffleNet's: (n, g, c/g, h, w) transposed
        split = b.node("Reshape", [x, b.const(np.array([n, 2, c // 2, h, w], np.int64))],
                       (n, 2, c // 2, h, w))  # fmt: skip
        moved = b.node("Transpose", [split], (n, c // 2, 2, h, w), perm=[0, 2, 1, 3, 4])
        return b.node("Reshape", [moved, b.const(np.array([n, c, h, w], np.int64))], (n, c, h, w))
    if choice == "upsample" and h * w <= 400:
        if b.rng.random() < 0.5:
            mode = b.pick(["nearest", "linear"])
            scales = b.const(np.array([1, 1, 2, 2], np.float32))
            extra = {"coordinate_transformation_mode": "half_pixel"} if mode == "linear" else {}
            return b.node("Resize", [x, "", scales], (n, c, 2 * h, 2 * w), mode=mode, **extra)
        o = b.pick(widths)
        weight = b.const(_fan(b, (c, o, 2, 2), c))
        return b.node("ConvTranspose", [x, weight], (n, o, 2 * h, 2 * w), strides=[2, 2])
    if choice in ("depthwise", "shuffle", "upsample"):  # the last two where they do not fit
        return _conv(b, x, c, b.pick([3, 3, 5]), b.pick([1, 2]), groups=c, same=False)
    if choice == "fire":
        s = _conv(b, x, b.pick([8, 16, 24]), 1)
        e1, e3 = _conv(b, s, b.pick(widths), 1), _conv(b, s, b.pick(widths), 3)
        o = b.shapes[e1][1] + b.shapes[e3][1]
        return b.node("Concat", [e1, e3], (n, o, h, w), axis=1)
    if choice == "residual":
        y = _conv(b, _conv(b, x, b.pick(widths), b.pick([1, 3])), c, 3)
        return b.node(b.pick(["Relu", "Identity"]), [b.node("Add", [y, x], (n, c, h, w))],
                      (n, c, h, w))  # fmt: skip
    if choice == "branches":
        parts = [_conv(b, x, b.pick(widths), k) for k in b.rng.choice([1, 3, 5], 2, replace=False)]
        if b.rng.random() < 0.5:
            pooled = b.node("MaxPool", [x], (n, c, h, w), kernel_shape=[3, 3], pads=[1] * 4)
            parts.append(_conv(b, pooled, b.pick(widths), 1))
        o = sum(b.shapes[p][1] for p in parts)
        return b.node("Concat", parts, (n, o, h, w), axis=1)
    k, stride = b.pick([2, 3]), b.pick([1, 2, 2])
    pad, ceil = (int(b.rng.integers(0, k // 2 + 1)), int(b.rng.integers(2)))
    size = [(d + 2 * pad - k) / stride + 1 for d in (h, w)]
    out = [int(np.ceil(s) if ceil else np.floor(s)) for s in size]
    if ceil and any((o - 1) * stride >= d + pad for o, d in zip(out, (h, w))):
        # A last window that starts in the right padding: ONNX's shape inference keeps it,
        # ONNX Runtime and rvm drop it (as PyTorch does). Not this generator's question.
        ceil, out = 0, [int(np.floor(s)) for s in size]
    if min(out) < 1:
        return x
    op_type = b.pick(["MaxPool", "AveragePool"])
    extra = {"count_include_pad": int(b.rng.integers(2))} if op_type == "AveragePool" else {}
    return b.node(op_type, [x], (n, c, *out), kernel_shape=[k, k], strides=[stride] * 2,
                  pads=[pad] * 4, ceil_mode=ceil, **extra)  # fmt: skip


def random_cnn(seed: int) -> tuple[Any, list[np.ndarray]]:
    """A random valid CNN and an input for it: 2-5 layers or blocks (`_cnn_block`) over an
    image batch of 1-2, 3-32 channels, maps of 5-40, at sizes that take the library's
    convolution methods (direct, Winograd's, the GEMMs, depthwise), its pools, in-place
    Concats, merged 1 x 1 convolutions, folded batch norms and fused activations; then perhaps
    a classifier head (global pool, Flatten, Gemm). Weights keep unit scale, so results
    agree to rtol 1e-4."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    b = GraphBuilder(rng, 17)
    shape = (int(rng.choice([1, 1, 2, 3])), int(rng.choice([3, 8, 16, 17, 32, 64])),
             int(rng.integers(5, 57)), int(rng.integers(5, 57)))  # fmt: skip
    b.shapes["x"] = shape
    x = "x"
    for _ in range(int(rng.integers(2, 6))):
        x = _cnn_block(b, x)
    if rng.random() < 0.4:
        n, c = b.shapes[x][:2]
        x = b.node("Flatten", [b.node("GlobalAveragePool", [x], (n, c, 1, 1))], (n, c))
        x = b.node("Gemm", [x, b.const(_fan(b, (10, c), c))], (n, 10), transB=1)
    graph = helper.make_graph(
        b.nodes,
        f"cnn_{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, list(b.shapes[x]))],
        b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", b.opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.shape_inference.infer_shapes(model, strict_mode=True, check_type=True)
    return model, [rng.standard_normal(shape).astype(np.float32)]


def _shape_of(b: GraphBuilder, x: str, dims: list[int | str]) -> str:
    """An int64 shape for Reshape, with the sequence's length read from ``x`` at run time:
    each ``"S"`` (or ``"B"``) of ``dims`` a Gather of Shape(x), the rest constants, in one of
    the forms exporters write (Concat of Unsqueezes, or 0 to copy a dimension, or -1)."""
    form = b.pick(["concat", "zero", "minus"])
    if form != "concat":
        fill = {"zero": 0, "minus": -1}[form]
        picked = [fill if d == "S" else d for d in dims]
        if form == "minus" or dims.index("S") == 1:  # 0 copies x's dimension at that place
            return b.const(np.array([1 if d == "B" else d for d in picked], np.int64))
    shape = b.node("Shape", [x], (3,))
    parts = []
    for d in dims:
        if d in ("S", "B"):
            at = b.const(np.array(1 if d == "S" else 0, np.int64))
            scalar = b.node("Gather", [shape, at], ())
            parts.append(b.node("Unsqueeze", [scalar, b.const(np.array([0], np.int64))], (1,)))
        else:
            parts.append(b.const(np.array([d], np.int64)))
    return b.node("Concat", parts, (len(dims),), axis=0)


def _length(b: GraphBuilder, v: str, axis: int, rank: int) -> str:
    """Dimension ``axis`` of ``v`` (of ``rank`` dimensions) read at run time, a scalar."""
    shape = b.node("Shape", [v], (rank,))
    return b.node("Gather", [shape, b.const(np.array(axis, np.int64))], ())


def _attention(b: GraphBuilder, x: str, d: int, cache: list[Any] | None = None) -> str:
    """Multi-head self-attention over ``x`` (1, S, d): projections, heads split by a Reshape of
    a shape read at run time, scaled scores, perhaps a causal mask, Softmax, heads joined.
    With ``cache`` (a list), the keys and values follow a cache's as decoders export them:
    ``past_key`` and ``past_value`` inputs of P positions before them (Concat), T = P + S
    positions out; the causal mask's queries then start at P. The heads, their size and the
    present keys' and values' names go into ``cache``."""
    heads = b.pick([h for h in (1, 2, 4) if d % h == 0])
    dh = d // heads
    shape3, shape4 = (1, "S", d), (1, "S", heads, dh)

    def project(v: str) -> str:
        y = b.node("MatMul", [v, b.const(_fan(b, (d, d), d))], shape3)
        return b.node("Add", [y, b.const((b.rng.standard_normal(d) * 0.1).astype(np.float32))],
                      shape3)  # fmt: skip

    def split(v: str, perm: list[int]) -> str:
        v = b.node("Reshape", [v, _shape_of(b, x, ["B", "S", heads, dh])], shape4)
        return b.node("Transpose", [v], tuple(shape4[p] for p in perm), perm=perm)

    q, k, v = (project(x) for _ in range(3))
    q, v = split(q, [0, 2, 1, 3]), split(v, [0, 2, 1, 3])
    if cache is None:
        keys = "S"
        k = split(k, [0, 2, 3, 1])
    else:
        k = b.node("Concat", ["past_key", split(k, [0, 2, 1, 3])], (1, heads, "T", dh), axis=2)
        v = b.node("Concat", ["past_value", v], (1, heads, "T", dh), axis=2)
        cache += [heads, dh, k, v]
        keys = "T"
        k = b.node("Transpose", [k], (1, heads, dh, "T"), perm=[0, 1, 3, 2])
    scores = b.node("MatMul", [q, k], (1, heads, "S", keys))
    op_type = b.pick(["Mul", "Div"])  # by 1 / sqrt(dh), or by sqrt(dh)
    scale = b.const(np.array(np.sqrt(dh) ** (1 if op_type == "Div" else -1), np.float32))
    scores = b.node(op_type, [scores, scale], (1, heads, "S", keys))
    if b.rng.random() < 0.5:  # causal: the keys after each query's position masked
        one = b.const(np.array(1, np.int64))
        start = b.const(np.array(0, np.int64)) if cache is None else _length(b, "past_key", 2, 4)
        end = b.node("Add", [start, _length(b, x, 1, 3)], ())
        rows = b.node("Unsqueeze", [b.node("Range", [start, end, one], ("S",)),
                                    b.const(np.array([1], np.int64))], ("S", 1))  # fmt: skip
        zero = b.const(np.array(0, np.int64))
        span = b.node("Range", [zero, _length(b, v, 2, 4), one], (keys,))
        later = b.node("Greater", [span, rows], ("S", keys))
        low = b.const(np.array(-1e9, np.float32))
        scores = b.node("Where", [later, low, scores], (1, heads, "S", keys))
    probs = b.node("Softmax", [scores], (1, heads, "S", keys), axis=-1)
    out = b.node("MatMul", [probs, v], (1, heads, "S", dh))
    out = b.node("Transpose", [out], shape4, perm=[0, 2, 1, 3])
    out = b.node("Reshape", [out, _shape_of(b, x, ["B", "S", d])], shape3)
    return project(out)


def _layer_norm(b: GraphBuilder, x: str, d: int) -> str:
    """LayerNormalization, or its decomposition as older exporters write it."""
    scale = b.const((b.rng.random(d) + 0.5).astype(np.float32))
    shift = b.const((b.rng.standard_normal(d) * 0.1).astype(np.float32))
    if b.rng.random() < 0.5:
        return b.node("LayerNormalization", [x, scale, shift], (1, "S", d), axis=-1)
    centred = b.node("Sub", [x, b.reduce("ReduceMean", x, [-1], (1, "S", 1), 1)], (1, "S", d))
    two = b.const(np.array(2.0, np.float32))
    var = b.reduce("ReduceMean", b.node("Pow", [centred, two], (1, "S", d)), [-1], (1, "S", 1), 1)
    eps = b.const(np.array(1e-5, np.float32))
    norm = b.node("Div", [centred, b.node("Sqrt", [b.node("Add", [var, eps], (1, "S", 1))],
                                          (1, "S", 1))], (1, "S", d))  # fmt: skip
    return b.node("Add", [b.node("Mul", [norm, scale], (1, "S", d)), shift], (1, "S", d))


def _feed_forward(b: GraphBuilder, x: str, d: int) -> str:
    """Two products around a GELU (erf's form or tanh's) or a ReLU."""
    inner = b.pick([2 * d, 4 * d])
    h = b.node("MatMul", [x, b.const(_fan(b, (d, inner), d))], (1, "S", inner))
    act = b.pick(["erf", "tanh", "Relu"])
    if act == "erf":
        half = b.const(np.array(0.5, np.float32))
        root = b.const(np.array(1 / np.sqrt(2), np.float32))
        one = b.const(np.array(1.0, np.float32))
        e = b.node("Erf", [b.node("Mul", [h, root], (1, "S", inner))], (1, "S", inner))
        h = b.node("Mul", [b.node("Mul", [h, half], (1, "S", inner)),
                           b.node("Add", [e, one], (1, "S", inner))], (1, "S", inner))  # fmt: skip
    elif act == "tanh" and b.opset >= 20:
        h = b.node("Gelu", [h], (1, "S", inner), approximate="tanh")
    else:
        h = b.node("Relu", [h], (1, "S", inner))
    return b.node("MatMul", [h, b.const(_fan(b, (inner, d), inner))], (1, "S", d))


def random_transformer(seed: int) -> tuple[Any, list[np.ndarray]]:
    """A random valid transformer encoder or decoder stack over ``x`` of shape (1, S, d), S
    a symbolic dimension: 1-2 blocks of attention (`_attention`: heads split and joined by
    Reshapes of shapes computed from Shape(x), perhaps a causal mask built by Range) and a
    feed-forward layer, each pre- or post-normalized with a residual Add; then the sequence
    kept, its mean, its first position or its last (a Slice); perhaps learned positions added
    first (a table's rows gathered by ``Range(0, S)``); perhaps a cache of past keys and values
    in and out of the first attention (`_attention`). The input's length is drawn (1-12), the
    cache's (0-8): rvm compiles the symbolic lengths without knowing them."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)
    b = GraphBuilder(rng, int(rng.choice([17, 18, 20])))
    d = int(rng.choice([8, 16, 24, 32, 48]))
    x = "x"
    b.shapes[x] = (1, "S", d)  # type: ignore[assignment]
    if rng.random() < 0.5:  # learned positions: a table's rows 0..S-1, Range(0, S) gathered
        size = _length(b, x, 1, 3)
        zero, one = (b.const(np.array(v, np.int64)) for v in (0, 1))
        span = b.node("Range", [zero, size, one], ("S",))
        table = b.const((rng.standard_normal((32, d)) * 0.5).astype(np.float32))
        x = b.node("Add", [x, b.node("Gather", [table, span], ("S", d))], (1, "S", d))
    pre = rng.random() < 0.5
    cache: list[Any] | None = [] if rng.random() < 0.4 else None
    for block in range(int(rng.integers(1, 3))):
        for layer in (_attention, _feed_forward):
            first = layer is _attention and block == 0 and cache is not None
            extra = {"cache": cache} if first else {}
            y = layer(b, _layer_norm(b, x, d) if pre else x, d, **extra)
            x = b.node("Add", [x, y], (1, "S", d))
            if not pre:
                x = _layer_norm(b, x, d)
    out_shape: list[Any] = [1, "S", d]
    end = rng.choice(["sequence", "mean", "first", "last"])
    if end == "mean":
        x, out_shape = b.reduce("ReduceMean", x, [1], (1, d), 0), [1, d]
    elif end == "first":
        x, out_shape = b.node("Gather", [x, b.const(np.array(0, np.int64))], (1, d), axis=1), [1, d]
    elif end == "last":  # the next token's: Slice from -1 to past the end
        bounds = [b.const(np.array([v], np.int64)) for v in (-1, 1 << 62, 1)]
        x, out_shape = b.node("Slice", [x, *bounds], (1, 1, d)), [1, 1, d]
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", f32, [1, "S", d])]
    outputs = [helper.make_tensor_value_info(x, f32, out_shape)]
    data = [rng.standard_normal((1, int(rng.integers(1, 13)), d)).astype(np.float32)]
    if cache:  # past keys and values in (of 0-8 positions), present ones out
        heads, dh, present_key, present_value = cache
        past = int(rng.integers(0, 9))
        for name in ("past_key", "past_value"):
            inputs.append(helper.make_tensor_value_info(name, f32, [1, heads, "P", dh]))
            data.append(rng.standard_normal((1, heads, past, dh)).astype(np.float32))
        for name in (present_key, present_value):
            outputs.append(helper.make_tensor_value_info(name, f32, [1, heads, "T", dh]))
    graph = helper.make_graph(b.nodes, f"transformer_{seed}", inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", b.opset)])
    model.ir_version = 8 if b.opset < 20 else 9
    onnx.checker.check_model(model)
    onnx.shape_inference.infer_shapes(model, strict_mode=True, check_type=True)
    return model, data
