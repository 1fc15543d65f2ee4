"""A tiny GPT-like decoder in optimum's with-past layout, written with onnx.helper.

It spells attention the way exported graphs do (MatMul, Mul by the scale, Where on a causal
and padding mask, Softmax, MatMul with V) but builds its masks from the inputs with
elementwise ops and CumSum only, so it imports with symbolic dimensions (batch, sequence,
past) without run-time shape computations. ONNX Runtime runs the same file: the oracle. The
generation tests and ``examples/generate.py`` use it; its weights are random (seeded).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB = 32
WIDTH = 16
HEADS = 2
HEAD_DIM = WIDTH // HEADS
LAYERS = 2
POSITIONS = 40


def tiny_decoder(seed: int = 0, *, layers: int = LAYERS, positions: int = POSITIONS) -> bytes:
    """The serialized model: inputs ``input_ids``, ``past_key_values.N.key/value``,
    ``attention_mask``, ``position_ids`` (optimum's order); outputs ``logits``,
    ``present.N.key/value``."""
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def weight(name: str, shape: tuple[int, ...], scale: float = 0.5) -> str:
        data = rng.standard_normal(shape).astype(np.float32) * scale
        inits.append(numpy_helper.from_array(data, name))
        return name

    def const(name: str, value: object, dtype: object = np.float32) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    const("one_i", 1, np.int64)
    const("scale", 1.0 / np.sqrt(HEAD_DIM))
    const("neg", -1e4)
    const("heads_shape", [0, 0, HEADS, HEAD_DIM], np.int64)
    const("width_shape", [0, 0, WIDTH], np.int64)
    const("axis1", 1, np.int64)
    const("ax12", [1, 2], np.int64)
    const("ax13", [1, 3], np.int64)
    tok = node("Gather", [weight("wte", (VOCAB, WIDTH)), "input_ids"], "tok")
    pos = node("Gather", [weight("wpe", (positions, WIDTH)), "position_ids"], "pos")
    x = node("Add", [tok, pos], "x0")
    # key positions 0..past+seq-1 from the mask's shape; a key is visible to a query when it
    # is not after the query's position and its mask entry is 1
    ones = node(
        "Add",
        [node("Mul", ["attention_mask", const("zero_i", 0, np.int64)], "m0"), "one_i"],
        "ones",
    )
    kpos = node("Sub", [node("CumSum", [ones, "axis1"], "csum"), "one_i"], "kpos")
    kpos4 = node("Unsqueeze", [kpos, "ax12"], "kpos4")  # (b, 1, 1, past+seq)
    qpos4 = node("Unsqueeze", ["position_ids", "ax13"], "qpos4")  # (b, 1, seq, 1)
    causal = node("LessOrEqual", [kpos4, qpos4], "causal")
    padded = node(
        "Cast",
        [node("Unsqueeze", ["attention_mask", "ax12"], "mask4")],
        "maskb",
        to=TensorProto.BOOL,
    )
    visible = node("And", [causal, padded], "visible")
    outputs = []
    for i in range(layers):
        p = f"l{i}."
        h = node(
            "LayerNormalization",
            [x, weight(p + "ln1_g", (WIDTH,)), weight(p + "ln1_b", (WIDTH,))],
            p + "h",
            axis=-1,
            epsilon=1e-5,
        )

        def heads(name: str, h: str = h, p: str = p) -> str:
            y = node("MatMul", [h, weight(p + "w" + name, (WIDTH, WIDTH))], p + name)
            y = node("Reshape", [y, "heads_shape"], p + name + "_r")
            return node("Transpose", [y], p + name + "_t", perm=[0, 2, 1, 3])

        q, k, v = heads("q"), heads("k"), heads("v")
        k = node("Concat", [f"past_key_values.{i}.key", k], f"present.{i}.key", axis=2)
        v = node("Concat", [f"past_key_values.{i}.value", v], f"present.{i}.value", axis=2)
        outputs += [k, v]
        kt = node("Transpose", [k], p + "kt", perm=[0, 1, 3, 2])
        s = node("Mul", [node("MatMul", [q, kt], p + "qk"), "scale"], p + "scores")
        s = node("Where", [visible, s, "neg"], p + "masked")
        a = node("MatMul", [node("Softmax", [s], p + "probs", axis=-1), v], p + "ctx")
        a = node(
            "Reshape",
            [node("Transpose", [a], p + "ctx_t", perm=[0, 2, 1, 3]), "width_shape"],
            p + "ctx_r",
        )
        x = node(
            "Add", [x, node("MatMul", [a, weight(p + "wo", (WIDTH, WIDTH))], p + "attn")], p + "x1"
        )
        h2 = node(
            "LayerNormalization",
            [x, weight(p + "ln2_g", (WIDTH,)), weight(p + "ln2_b", (WIDTH,))],
            p + "h2",
            axis=-1,
            epsilon=1e-5,
        )
        m = node("MatMul", [h2, weight(p + "w1", (WIDTH, 4 * WIDTH))], p + "m1")
        half = const(p + "half", 0.5)
        erf = node("Erf", [node("Div", [m, const(p + "sqrt2", np.sqrt(2.0))], p + "gd")], p + "ge")
        erf1 = node("Add", [erf, const(p + "onef", 1.0)], p + "ga")
        g = node("Mul", [node("Mul", [m, half], p + "gh"), erf1], p + "gelu")  # erf GELU
        x = node(
            "Add",
            [x, node("MatMul", [g, weight(p + "w2", (4 * WIDTH, WIDTH))], p + "m2")],
            p + "x2",
        )
    hf = node(
        "LayerNormalization",
        [x, weight("lnf_g", (WIDTH,)), weight("lnf_b", (WIDTH,))],
        "hf",
        axis=-1,
        epsilon=1e-5,
    )
    node("MatMul", [hf, weight("head", (WIDTH, VOCAB), 2.0)], "logits")

    def value(name: str, elem: int, dims: list) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, elem, dims)

    kv = ["batch", HEADS, "past", HEAD_DIM]
    inputs = [value("input_ids", TensorProto.INT64, ["batch", "seq"])]
    for i in range(layers):
        inputs += [
            value(f"past_key_values.{i}.{n}", TensorProto.FLOAT, kv) for n in ("key", "value")
        ]
    inputs += [
        value("attention_mask", TensorProto.INT64, ["batch", "past + seq"]),
        value("position_ids", TensorProto.INT64, ["batch", "seq"]),
    ]
    outs = [value("logits", TensorProto.FLOAT, ["batch", "seq", VOCAB])]
    outs += [value(o, TensorProto.FLOAT, ["batch", HEADS, "past + seq", HEAD_DIM]) for o in outputs]
    graph = helper.make_graph(nodes, "tiny_decoder", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()
