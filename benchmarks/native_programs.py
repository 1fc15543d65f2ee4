"""The programs of the native section of `exec_modes.py`, each three ways: rvm script, a
hand-written whole-function Numba function of the same computation, and an ONNX model (run by
ONNX Runtime, and imported by rvm's ONNX importer).

- ``mlp``: the MLP 784-128-10 at batch 1 (`rvm.testing.programs.MLP`): relu(x @ w1 + b1) @ w2
  + b2, softmax. Kernel-bound: three kernels.
- ``tiny50``: 50 elementwise ops on a (4,) tensor (exp, * 0.5, + 1, tanh, - 0.25, repeated),
  compiled without fusion (``opt_level=0``) so each op is its own kernel: all dispatch. The
  Numba baseline writes the same 50 array expressions in one function.
- ``rnn100``: 100 steps of an RNN cell, ``h = tanh(h @ W + x @ U + b)`` with H = 32, as a
  ``while`` loop in rvm script, a ``for`` loop in Numba, and an ONNX ``Loop``.

`adt_programs` are programs of non-recursive data types (`rvm.testing.programs.DataTypes`) and
of closures passed to other functions, timed in the compiled and native modes only (no Numba or
ONNX form of them).
"""

from __future__ import annotations

from typing import Any

import numba as nb
import numpy as np

import rvm
from rvm.testing.programs import MLP, DataTypes, HigherOrder

H = 32
STEPS = 100
TINY_OPS = 50
# (rvm script expression, numpy expression, ONNX op, its constant operand or None)
_TINY = [
    ("op.exp(h)", "np.exp(h)", "Exp", None),
    ("h * 0.5", "h * np.float32(0.5)", "Mul", 0.5),
    ("h + 1.0", "h + np.float32(1.0)", "Add", 1.0),
    ("op.tanh(h)", "np.tanh(h)", "Tanh", None),
    ("h - 0.25", "h - np.float32(0.25)", "Sub", 0.25),
]

RNN_TEXT = f"""
@module
class RNNCell:
    @func
    def main(h: T[(1, {H}), "float32"], x: T[(1, {H}), "float32"], w: T[({H}, {H}), "float32"],
             u: T[({H}, {H}), "float32"], b: T[({H},), "float32"], steps: T[(), "int64"]):
        i = rvm.const(0, "int64")
        while i < steps:
            h = op.tanh(op.matmul(h, w) + op.matmul(x, u) + b)
            i = i + 1
        return h
"""


# -- whole-function Numba ---------------------------------------------------------------------


@nb.njit(cache=True, nogil=True)
def mlp_numba(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    h = np.maximum(x @ w1 + b1, np.float32(0))
    z = h @ w2 + b2
    e = np.exp(z - z.max())
    return e / e.sum()


@nb.njit(cache=True, nogil=True)
def rnn_numba(h, x, w, u, b, steps):  # type: ignore[no-untyped-def]
    for _ in range(steps[()]):
        h = np.tanh(h @ w + x @ u + b)
    return h


@nb.njit(cache=True, nogil=True)
def numba_identity(h):  # type: ignore[no-untyped-def]
    """An empty Numba function: its call is the floor of Numba's dispatcher."""
    return h


def _tiny_numba() -> Any:
    lines = ["def tiny_numba(h):"]
    lines += [f"    h = {_TINY[i % len(_TINY)][1]}" for i in range(TINY_OPS)]
    lines.append("    return h")
    namespace: dict[str, Any] = {"np": np}
    exec("\n".join(lines), namespace)  # noqa: S102 - the 50 statements written out
    return nb.njit(nogil=True)(namespace["tiny_numba"])


# -- rvm script -------------------------------------------------------------------------------


def _tiny_module() -> rvm.IRModule:
    lines = ["@module", "class Tiny:", "    @func", '    def main(h: T[(4,), "float32"]):']
    lines += [f"        h = {_TINY[i % len(_TINY)][0]}" for i in range(TINY_OPS)]
    lines.append("        return h")
    return rvm.script.parse("\n".join(lines))


# -- ONNX -------------------------------------------------------------------------------------


def _value(name: str, shape: tuple[int, ...], dtype: Any = None) -> Any:
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, dtype or TensorProto.FLOAT, list(shape))


def _model(graph: Any) -> Any:
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def mlp_onnx() -> Any:
    from onnx import helper

    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["t1"]),
        helper.make_node("Add", ["t1", "b1"], ["t2"]),
        helper.make_node("Relu", ["t2"], ["t3"]),
        helper.make_node("MatMul", ["t3", "w2"], ["t4"]),
        helper.make_node("Add", ["t4", "b2"], ["t5"]),
        helper.make_node("Softmax", ["t5"], ["y"], axis=-1),
    ]
    shapes = {"x": (1, 784), "w1": (784, 128), "b1": (128,), "w2": (128, 10), "b2": (10,)}
    inputs = [_value(n, s) for n, s in shapes.items()]
    graph = helper.make_graph(nodes, "mlp", inputs, [_value("y", (1, 10))])
    return _model(graph)


def tiny_onnx() -> Any:
    from onnx import helper, numpy_helper

    nodes, inits, h = [], [], "h"
    for i in range(TINY_OPS):
        _, _, op_type, operand = _TINY[i % len(_TINY)]
        out = f"h{i}" if i < TINY_OPS - 1 else "y"
        if operand is None:
            nodes.append(helper.make_node(op_type, [h], [out]))
        else:
            name = f"c{i}"
            inits.append(numpy_helper.from_array(np.array(operand, "float32"), name))
            nodes.append(helper.make_node(op_type, [h, name], [out]))
        h = out
    graph = helper.make_graph(nodes, "tiny", [_value("h", (4,))], [_value("y", (4,))], inits)
    return _model(graph)


def rnn_onnx() -> Any:
    """The RNN cell loop as an ONNX ``Loop`` over the trip count ``steps``."""
    from onnx import TensorProto, helper

    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("MatMul", ["h_in", "w"], ["hw"]),
            helper.make_node("MatMul", ["x", "u"], ["xu"]),
            helper.make_node("Add", ["hw", "xu"], ["s"]),
            helper.make_node("Add", ["s", "b"], ["t"]),
            helper.make_node("Tanh", ["t"], ["h_out"]),
        ],
        "cell",
        [
            _value("i", (), TensorProto.INT64),
            _value("cond_in", (), TensorProto.BOOL),
            _value("h_in", (1, H)),
        ],
        [_value("cond_out", (), TensorProto.BOOL), _value("h_out", (1, H))],
    )
    nodes = [
        helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("c", 9, [], [True])),
        helper.make_node("Loop", ["steps", "cond", "h"], ["y"], body=body),
    ]
    inputs = [
        _value("h", (1, H)),
        _value("x", (1, H)),
        _value("w", (H, H)),
        _value("u", (H, H)),
        _value("b", (H,)),
        _value("steps", (), TensorProto.INT64),
    ]
    graph = helper.make_graph(nodes, "rnn", inputs, [_value("y", (1, H))])
    return _model(graph)


# -- the programs -----------------------------------------------------------------------------


def programs() -> list[dict[str, Any]]:
    """name, rvm module, opt_level, arguments, the Numba baseline and the ONNX model."""
    rng = np.random.default_rng(0)

    def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype("float32")

    mlp_args = (f32(1, 784), f32(784, 128, scale=0.05), f32(128), f32(128, 10, scale=0.1))
    rnn_args = (f32(1, H), f32(1, H), f32(H, H, scale=0.2), f32(H, H, scale=0.2), f32(H))
    return [
        {
            "name": "mlp",
            "mod": MLP,
            "opt_level": 2,
            "args": (*mlp_args, f32(10)),
            "numba": mlp_numba,
            "onnx": mlp_onnx,
        },
        {
            "name": "tiny50",
            "mod": _tiny_module(),
            "opt_level": 0,
            "args": (f32(4, scale=0.5),),
            "numba": _tiny_numba(),
            "onnx": tiny_onnx,
        },
        {
            "name": "rnn100",
            "mod": rvm.script.parse(RNN_TEXT),
            "opt_level": 2,
            "args": (*rnn_args, np.array(STEPS, "int64")),
            "numba": rnn_numba,
            "onnx": rnn_onnx,
        },
    ]


# -- large work: native code calling kernels on big tensors -----------------------------------

LARGE_N = 1 << 24
_LARGE_TEXT = """
@module
class Large:
    @func
    def gelu(x: T[("n",), "float32"]):
        t = x * 0.75 + 0.1
        return x + t * op.sigmoid(t * 1.702)

    @func
    def arith6(x: T[("n",), "float32"]):
        return ((x * 1.5 + 0.5) * x - 0.25) * 0.5 + x
"""


def large_programs() -> list[dict[str, Any]]:
    """Kernel-bound work for the native mode against the compiled mode (issue 27): the two
    16M-element float32 chains (``x + t * sigmoid(t * 1.702)`` with ``t = x * 0.75 + 0.1``,
    and 6 arithmetic ops) and the MLP 784-128-10 at batch 1, 8 and 256. name, module, function
    name and arguments."""
    rng = np.random.default_rng(1)

    def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype("float32")

    large = rvm.script.parse(_LARGE_TEXT)
    x = f32(LARGE_N)
    weights = (f32(784, 128, scale=0.05), f32(128), f32(128, 10, scale=0.1), f32(10))
    rows = [
        {"name": "gelu16M", "mod": large, "fname": "gelu", "args": (x,)},
        {"name": "arith16M", "mod": large, "fname": "arith6", "args": (x,)},
    ]
    for batch in (1, 8, 256):
        args = (f32(batch, 784), *weights)
        rows.append({"name": f"mlp_b{batch}", "mod": MLP, "fname": "main", "args": args})
    return rows


# -- data types: values of non-recursive data types in native code ----------------------------


def adt_programs() -> list[dict[str, Any]]:
    """Programs of data type values (`rvm.testing.programs.DataTypes`): ``adt_loop100``, 100
    steps of a loop that builds one of three constructors (fields of float32, float64 and
    int64) and matches it (``total``); ``adt_option``, an ``Option`` built, returned from one
    function and matched in another (``main``); ``adt_return``, an ``Option`` returned to
    Python (``find``, its value converted at the boundary); ``closure_loop``, two closures
    (one capturing a tensor) each passed to a function that calls it in a 50-step loop
    (`rvm.testing.programs.HigherOrder`). name, module, function name and arguments."""
    rng = np.random.default_rng(2)
    x2, y3 = rng.standard_normal(2).astype("float32"), rng.standard_normal(3).astype("float32")
    x4 = np.abs(rng.standard_normal(4)).astype("float32")
    return [
        {
            "name": "adt_loop100",
            "mod": DataTypes,
            "fname": "total",
            "args": (np.array(100, "int64"), x2, y3 * 4),
        },
        {"name": "adt_option", "mod": DataTypes, "fname": "main", "args": (x4, -x4)},
        {"name": "adt_return", "mod": DataTypes, "fname": "find", "args": (x4,)},
        {
            "name": "closure_loop",
            "mod": HigherOrder,
            "fname": "main",
            "args": (x4, -x4, np.array(50, "int64")),
            "fallbacks": ("make",),  # returns a closure to Python: a VM object
        },
    ]
