"""QDQ models to integer kernels: ``DequantizeLinear -> Conv/MatMul/Gemm [-> Relu] ->
QuantizeLinear`` chains become one `rvm.op.qconv2d` / `rvm.op.qdense`.

ONNX Runtime's quantizer (``quantize_static`` in QDQ format) writes every quantized op as the
float op between DequantizeLinear nodes (its input, its weight, its bias) and a QuantizeLinear
of its output. Converted node by node, the weights' DequantizeLinear folds into float weights
and the op runs in float. `fuse_qdq` finds the chains in the graph before conversion (the
integer weights, scales and zero points are still initializers there) and replaces the anchor
and its QuantizeLinear by a `FusedQDQ` entry, which `convert_fused` turns into the integer op:

- the input's DequantizeLinear stays (other consumers may read it; unused, it is dead code):
  the integer op reads its quantized input (uint8 or int8) with its per-tensor scale and zero
  point;
- the weight is an int8/uint8 initializer dequantized per tensor or per output channel with
  zero points 0; the bias, when there is one, is the DequantizeLinear of an initializer,
  requantized to the accumulator's scale ``x_scale * w_scale`` (ONNX Runtime quantizes it in
  that scale, so this is exact);
- a Relu between the anchor and the QuantizeLinear clamps at the output zero point;
- the QuantizeLinear's scale and zero point are per tensor initializers.

``DequantizeLinear(a), DequantizeLinear(b) -> Add [-> Relu] -> QuantizeLinear`` (a residual;
or a Sum of the two),
every scale and zero point per tensor, becomes `rvm.op.qadd` (a `FusedQAdd`, converted by
`convert_add`: the op when the two quantized inputs have one shape, else the nodes).

``DequantizeLinear -> MaxPool/Concat/Flatten/Reshape/Transpose/... -> QuantizeLinear`` with
one scale and zero point throughout becomes the op on the integers (it commutes with both);
an input at another scale made by a fused chain for it alone (a concat of branches) is
requantized to the output's scale in that chain's epilogue.

Anything else (a weight computed at run time, non-zero weight zero points, Gemm with alpha,
beta or transA) is left alone and runs in float, as ONNX defines it. At conversion, an input
that turns out not to be uint8/int8 falls back to the original nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rvm import op
from rvm.ir import Constant, Expr
from rvm.ir.infer import infer_type
from rvm.ir.types import TensorType

ArrayOf = Callable[[str], "np.ndarray | None"]
_INT8 = (np.dtype(np.uint8), np.dtype(np.int8))


@dataclass
class FusedQDQ:
    """A quantized anchor found by `fuse_qdq`, with the nodes it replaces."""

    anchor: Any  # the Conv, MatMul or Gemm node
    nodes: list[Any]  # anchor [, Relu], QuantizeLinear: converted as they are on fallback
    x: str  # the quantized input's value name
    x_scale: float
    x_zero: int
    weight: np.ndarray  # int8/uint8: (O, C/g, kh, kw) for Conv, (N, K) for MatMul/Gemm
    w_scale: np.ndarray  # per output channel (float64)
    bias: np.ndarray | None  # float, per output channel
    relu: bool
    y_scale: float
    y_zero: np.ndarray  # 0-d, uint8 or int8
    output: str
    op_type: str = field(init=False)

    def __post_init__(self) -> None:
        self.op_type = f"fused {self.anchor.op_type}"


@dataclass
class FusedQAdd:
    """A quantized residual found by `fuse_qdq`, with the nodes it replaces."""

    nodes: list[Any]  # Add (or Sum) [, Relu], QuantizeLinear: converted as they are on fallback
    a: str  # the quantized inputs' value names
    b: str
    a_quant: tuple[float, np.ndarray]  # (scale, zero point) of each
    b_quant: tuple[float, np.ndarray]
    relu: bool
    y_scale: float
    y_zero: np.ndarray  # 0-d, uint8 or int8
    output: str
    op_type: str = "fused Add"


def fuse_qdq(nodes: Sequence[Any], array_of: ArrayOf, outputs: set[str]) -> list[Any]:
    """``nodes`` with each quantized chain replaced by a `FusedQDQ` (at its QuantizeLinear's
    place); ``array_of`` gives an initializer's array by name (None for other values);
    ``outputs`` are the graph's output names (a chain's float value must not be one)."""
    producer = {o: n for n in nodes for o in n.output if o}
    uses: dict[str, int] = {}
    for n in nodes:
        for i in n.input:
            uses[i] = uses.get(i, 0) + 1
    replaced: dict[int, Any] = {}
    dropped: set[int] = set()
    for q in nodes:
        if q.op_type != "QuantizeLinear":
            continue
        fused = _match(q, producer, uses, array_of, outputs)
        if fused is None:
            fused = _match_add(q, producer, uses, array_of, outputs)
        if fused is not None:
            replaced[id(q)] = fused
            dropped.update(id(n) for n in fused.nodes[:-1])
            continue
        moved = _transparent(q, producer, uses, array_of, outputs, replaced)
        if moved is not None:
            replaced[id(q)] = moved
            dropped.add(id(producer[q.input[0]]))
    return [replaced.get(id(n), n) for n in nodes if id(n) not in dropped]


# Ops that commute with (de)quantization at one scale and zero point: they move, select or
# take the maximum of values, so ``Q(op(DQ(x)))`` is ``op(x)`` on the integers.
_TRANSPARENT = {
    "MaxPool": (0,),
    "Concat": None,  # every input
    "Flatten": (0,),
    "Reshape": (0,),
    "Transpose": (0,),
    "Squeeze": (0,),
    "Unsqueeze": (0,),
    "Identity": (0,),
}


def _transparent(q, producer, uses, array_of, outputs, fused) -> Any | None:  # noqa: ANN001
    """``op(x_q)`` for ``Q(op(DQ(x_q)))`` with one scale and zero point throughout (ONNX
    Runtime's quantizer writes MaxPool, Concat and reshapes so), as a copy of the op's node
    reading the quantized inputs and writing the QuantizeLinear's output; else None.

    An input at another scale that an integer op (``fused``: the `FusedQDQ` of each
    QuantizeLinear replaced so far) makes for this DequantizeLinear alone is requantized to
    the output's scale in that op's epilogue instead (a concat of branches, as in
    SqueezeNet's fire modules): one rounding where the float chain has two, the values
    kept in the integers throughout."""
    import onnx

    node = producer.get(q.input[0])
    if node is None or node.op_type not in _TRANSPARENT or q.input[0] in outputs:
        return None
    if uses.get(q.input[0]) != 1 or len([o for o in node.output if o]) != 1:
        return None
    y = _per_tensor(q, array_of)
    if y is None:
        return None
    data = _TRANSPARENT[node.op_type]
    positions = range(len(node.input)) if data is None else data
    inputs, retarget = list(node.input), []
    for i in positions:
        dq = producer.get(node.input[i])
        x = None if dq is None or dq.op_type != "DequantizeLinear" else _per_tensor(dq, array_of)
        if x is None or x[1].dtype != y[1].dtype:
            return None
        if x[0] != y[0] or x[1] != y[1]:
            chain = _retargetable(dq, x, producer, uses, outputs, fused)
            if chain is None:
                return None
            retarget.append(chain)
        inputs[i] = dq.input[0]
    for chain in retarget:
        chain.y_scale, chain.y_zero = y
    moved = onnx.NodeProto()
    moved.CopyFrom(node)
    del moved.input[:]
    moved.input.extend(inputs)
    moved.output[0] = q.output[0]
    return moved


def _retargetable(dq, x, producer, uses, outputs, fused) -> FusedQDQ | None:  # noqa: ANN001
    """The `FusedQDQ` whose output only ``dq`` reads, at ``dq``'s scale and zero point ``x``."""
    value = dq.input[0]
    made = producer.get(value)
    chain = None if made is None else fused.get(id(made))
    if not isinstance(chain, FusedQDQ) or value in outputs or uses.get(value) != 1:
        return None
    if uses.get(dq.output[0]) != 1 or dq.output[0] in outputs:
        return None
    if chain.y_scale != x[0] or chain.y_zero != x[1]:
        return None
    return chain


def _tail(q, producer, uses, outputs):  # noqa: ANN001, ANN202
    """The chain a fused op ends with, walked back from the QuantizeLinear ``q``: ([Relu,] q),
    the node before it (None if none) and whether a Relu is in it; None where a value inside
    the chain is a graph output or read elsewhere."""
    if q.input[0] in outputs or uses.get(q.input[0]) != 1:
        return None
    chain = [q]
    anchor = producer.get(q.input[0])
    relu = anchor is not None and anchor.op_type == "Relu"
    if relu:
        chain.insert(0, anchor)
        if anchor.input[0] in outputs or uses.get(anchor.input[0]) != 1:
            return None
        anchor = producer.get(anchor.input[0])
    return chain, anchor, relu


def _match(q, producer, uses, array_of, outputs) -> FusedQDQ | None:  # noqa: ANN001
    y = _per_tensor(q, array_of)
    tail = _tail(q, producer, uses, outputs) if y is not None else None
    if tail is None:
        return None
    chain, anchor, relu = tail
    if anchor is None or anchor.op_type not in ("Conv", "MatMul", "Gemm"):
        return None
    if not _plain(anchor):
        return None
    dq_x = producer.get(anchor.input[0])
    dq_w = producer.get(anchor.input[1]) if len(anchor.input) > 1 else None
    if dq_x is None or dq_w is None or "DequantizeLinear" not in (dq_x.op_type, dq_w.op_type):
        return None
    if dq_x.op_type != "DequantizeLinear" or dq_w.op_type != "DequantizeLinear":
        return None
    x = _per_tensor(dq_x, array_of)
    w = _weight(anchor, dq_w, array_of)
    if x is None or w is None:
        return None
    bias = None
    if len(anchor.input) > 2 and anchor.input[2]:
        bias = _dequantized(producer.get(anchor.input[2]), array_of)
        if bias is None or bias.ndim > 1:
            return None
    weight, w_scale = w
    channels = weight.shape[0]
    if bias is not None and bias.size not in (1, channels):
        return None
    return FusedQDQ(
        anchor, [anchor, *chain], dq_x.input[0], x[0], int(x[1]), weight, w_scale, bias,
        relu, y[0], y[1], q.output[0],
    )  # fmt: skip


def _match_add(q, producer, uses, array_of, outputs) -> FusedQAdd | None:  # noqa: ANN001
    """``Q([Relu](DQ(a) + DQ(b)))`` (an Add, or a Sum of two), every scale and zero point per
    tensor, as a `FusedQAdd`."""
    y = _per_tensor(q, array_of)
    tail = _tail(q, producer, uses, outputs) if y is not None else None
    if tail is None:
        return None
    chain, add, relu = tail
    if add is None or add.op_type not in ("Add", "Sum") or len(add.input) != 2:
        return None
    quants = []
    for value in add.input:
        dq = producer.get(value)
        quant = (
            None if dq is None or dq.op_type != "DequantizeLinear" else _per_tensor(dq, array_of)
        )
        if quant is None:
            return None
        quants.append((dq.input[0], quant))
    (a, a_quant), (b, b_quant) = quants
    return FusedQAdd([add, *chain], a, b, a_quant, b_quant, relu, y[0], y[1], q.output[0])


def _plain(anchor: Any) -> bool:
    """A Gemm without alpha, beta or transA (they would need float arithmetic)."""
    if anchor.op_type != "Gemm":
        return True
    attrs = {a.name: a for a in anchor.attribute}
    alpha = attrs["alpha"].f if "alpha" in attrs else 1.0
    beta = attrs["beta"].f if "beta" in attrs else 1.0
    trans_a = attrs["transA"].i if "transA" in attrs else 0
    return alpha == 1.0 and beta == 1.0 and trans_a == 0


def _per_tensor(node: Any, array_of: ArrayOf) -> tuple[float, np.ndarray] | None:
    """(scale, zero point) of a per-tensor Q/DQ with an 8-bit zero point initializer."""
    if len(node.input) < 3:
        return None
    scale, zero = array_of(node.input[1]), array_of(node.input[2])
    if scale is None or zero is None or scale.size != 1 or zero.size != 1:
        return None
    if zero.dtype not in _INT8 or scale.dtype != np.float32 or _blocked(node):
        return None
    return float(scale.reshape(())), zero.reshape(())


def _blocked(node: Any) -> bool:
    return any(a.name in ("block_size", "output_dtype") and a.i for a in node.attribute)


def _weight(anchor: Any, dq: Any, array_of: ArrayOf) -> tuple[np.ndarray, np.ndarray] | None:
    """The anchor's 8-bit weight in its integer op's layout and its scale per output channel."""
    if len(dq.input) < 2 or _blocked(dq):
        return None
    w, scale = array_of(dq.input[0]), array_of(dq.input[1])
    zero = array_of(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
    if w is None or scale is None or w.dtype not in _INT8 or scale.dtype != np.float32:
        return None
    if (zero is None and len(dq.input) > 2 and dq.input[2]) or (zero is not None and zero.any()):
        return None
    axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
    axis %= max(w.ndim, 1)
    if anchor.op_type == "Conv":
        out_axis = 0
    else:
        if w.ndim != 2:
            return None
        trans_b = any(a.name == "transB" and a.i for a in anchor.attribute)
        out_axis = 0 if trans_b else 1
        if not trans_b:
            w = np.ascontiguousarray(w.T)
            axis = 1 - axis
            out_axis = 0
    if scale.size != 1 and (scale.ndim != 1 or axis != out_axis or scale.size != w.shape[0]):
        return None
    return w, np.broadcast_to(scale.astype(np.float64), (w.shape[0],)).copy()


def _dequantized(dq: Any, array_of: ArrayOf) -> np.ndarray | None:
    """The float value of a DequantizeLinear of initializers (a bias), or None."""
    if dq is None or dq.op_type != "DequantizeLinear" or _blocked(dq):
        return None
    q, scale = array_of(dq.input[0]), array_of(dq.input[1])
    zero = array_of(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
    if q is None or scale is None or (len(dq.input) > 2 and dq.input[2] and zero is None):
        return None
    if q.ndim > 1 or scale.ndim > 1 or (zero is not None and zero.ndim > 1):
        return None
    centered = q.astype(np.float64) - (0.0 if zero is None else zero.astype(np.float64))
    return centered * scale.astype(np.float64)


def convert_fused(fused: FusedQDQ, x: Expr, convolve_attrs: Callable[[Expr], dict]) -> Expr | None:
    """The integer op computing ``fused`` from its quantized input ``x``; None when ``x`` is
    not uint8/int8 (the caller converts the original nodes instead).

    ``convolve_attrs(x)`` gives a convolution's window attributes (strides, padding,
    dilation, groups) from the Conv node's attributes."""
    ty = infer_type(x)
    if not isinstance(ty, TensorType) or ty.dtype not in ("uint8", "int8"):
        return None
    if fused.anchor.op_type != "Conv" and (ty.shape is None or len(ty.shape) < 1):
        return None
    acc_scale = fused.x_scale * fused.w_scale
    multiplier = (acc_scale / fused.y_scale).astype(np.float32)
    bias = np.zeros(fused.weight.shape[0], np.int32)
    if fused.bias is not None:
        bias[:] = np.round(fused.bias / acc_scale).astype(np.int32)
    args = (x, Constant(fused.weight), Constant(bias), Constant(multiplier))
    quant = {
        "x_zero": fused.x_zero,
        "y_zero": int(fused.y_zero),
        "dtype": fused.y_zero.dtype.name,
        "relu": fused.relu,
    }
    if fused.anchor.op_type == "Conv":
        if fused.weight.ndim != 4:
            return None
        ohwi = Constant(np.ascontiguousarray(fused.weight.transpose(0, 2, 3, 1)))
        return op.qconv2d(*args[:1], ohwi, *args[2:], **quant, **convolve_attrs(x),
                          weight_layout="OHWI")  # fmt: skip
    return op.qdense(*args, **quant)


def convert_add(fused: FusedQAdd, a: Expr, b: Expr) -> Expr | None:
    """`rvm.op.qadd` computing ``fused`` from its quantized inputs ``a`` and ``b``; None when
    they are not uint8/int8 of one known shape (the caller converts the original nodes)."""
    ta, tb = infer_type(a), infer_type(b)
    for t in (ta, tb):
        if not isinstance(t, TensorType) or t.dtype not in ("uint8", "int8") or t.shape is None:
            return None
    if ta.shape != tb.shape:
        return None
    return op.qadd(
        a, b, a_scale=fused.a_quant[0], b_scale=fused.b_quant[0], y_scale=fused.y_scale,
        a_zero=int(fused.a_quant[1]), b_zero=int(fused.b_quant[1]), y_zero=int(fused.y_zero),
        dtype=fused.y_zero.dtype.name, relu=fused.relu,
    )  # fmt: skip
