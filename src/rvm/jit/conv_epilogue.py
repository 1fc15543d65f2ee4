"""The epilogues float32 convolutions hand to the kernel library: `conv_epilogues`.

A fused convolution kernel is ``conv2d`` (or ``conv2d_packed``) followed by a per-channel bias
(batch norm folded into one), an activation, maybe more. Run after the library's call, that
epilogue was one serial pass over the whole output: on two threads it ran on one core (vgg19
about 2 ms). The library applies ``act(conv + bias)`` itself, piece by piece on its pool while
each piece is in cache (`rvm.kernels.epilogue.channels`). This module finds which bindings of a
primitive function are such an epilogue, from the IR, and records it as a `ConvEpilogue`:
the lowering passes the bias and the activation's index to the library's entry point
(`rvm.jit.stages`) and binds the absorbed values to the convolution's result. What follows the
activation (a residual add) would need the kernel's own pass over the output, so such a chain
stays the kernel's whole, one pass as before.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rvm.ir import expr as E
from rvm.ir.types import TensorType
from rvm.kernels import cblas
from rvm.kernels.reference.packed import ACTIVATIONS
from rvm.op import ops

__all__ = ["ConvEpilogue", "conv_epilogues"]

# The activation ops the library's epilogue applies, by their name in `ACTIVATIONS`.
_ACTIVATION_OPS = {ops.relu: "relu"}


@dataclass(frozen=True)
class ConvEpilogue:
    """``act(conv + bias)`` applied by the kernel library to a convolution's output.

    Attributes:
        bias: The per-output-channel bias (a parameter or constant of shape (..., o, 1, 1)),
            or None.
        activation: One of `ACTIVATIONS`.
        absorbed: The bindings whose value the convolution's result now is (the add, the
            activation), in order.
    """

    bias: E.Expr | None
    activation: str
    absorbed: tuple[E.Var, ...]

    @property
    def act(self) -> int:
        """The activation's index (the library's ``act``)."""
        return ACTIVATIONS.index(self.activation)

    def describe(self) -> str:
        """``bias,relu``, ``relu``...: what the library applies (a kernel record's meta)."""
        parts = ("bias" if self.bias is not None else "none", self.activation)
        return ",".join(p for p in parts if p != "none")


def conv_epilogues(bindings: list[E.VarBinding], result: E.Expr) -> dict[E.Var, ConvEpilogue]:
    """The epilogue of each float32 convolution of ``bindings`` (a primitive function's body,
    ``result`` its value) that the library can apply: the convolution's only use an add of a
    per-channel bias, or an activation of `_ACTIVATION_OPS`, or the first then the second,
    each value in the chain used once, the last the result. Where more follows (a residual
    add), the kernel keeps the whole epilogue: its pass over the output is needed anyway, and
    the bias in the same pass costs nothing more (the library's would be a second pass)."""
    uses = _uses(bindings, result)
    value = {b.var: b.value for b in bindings}
    users: dict[E.Var, E.Var] = {}
    for b in bindings:
        if isinstance(b.value, E.Call):
            for a in b.value.args:
                if isinstance(a, E.Var):
                    users.setdefault(a, b.var)
    out: dict[E.Var, ConvEpilogue] = {}
    for b in bindings:
        if not _fusable_conv(b):
            continue
        bias, act, absorbed, last = None, "none", [], b.var
        nxt = _only_user(last, uses, users)
        if nxt is not None:
            bias = _bias_of(value[nxt], last, b.var.type)
            if bias is not None:
                absorbed.append(nxt)
                last = nxt
        nxt = _only_user(last, uses, users)
        if nxt is not None:
            call = value[nxt]
            if isinstance(call, E.Call) and call.callee in _ACTIVATION_OPS:
                act = _ACTIVATION_OPS[call.callee]
                absorbed.append(nxt)
        if absorbed and absorbed[-1] is result:
            out[b.var] = ConvEpilogue(bias, act, tuple(absorbed))
    return out


def _uses(bindings: list[E.VarBinding], result: E.Expr) -> Counter:
    """How many times each variable is an argument (or part of the result)."""
    count: Counter = Counter()

    def add(e: E.Expr) -> None:
        if isinstance(e, E.Var):
            count[e] += 1
        elif isinstance(e, E.Tuple):
            for f in e.fields:
                add(f)
        elif isinstance(e, E.TupleGetItem):
            add(e.tuple_value)

    for b in bindings:
        for a in b.value.args if isinstance(b.value, E.Call) else (b.value,):
            add(a)
    add(result)
    return count


def _only_user(var: E.Var, uses: Counter, users: dict[E.Var, E.Var]) -> E.Var | None:
    """The binding that is ``var``'s only use, if it has one use and that is a binding's."""
    return users.get(var) if uses[var] == 1 else None


def _fusable_conv(b: E.VarBinding) -> bool:
    """A float32 2-d convolution that calls the library's entry point (with BLAS reachable
    for ``conv2d``: `rvm.kernels.conv.conv2d_dot` takes no epilogue)."""
    v, ty = b.value, b.var.type
    if not (isinstance(v, E.Call) and isinstance(ty, TensorType) and ty.dtype == "float32"):
        return False
    if v.callee is ops.conv2d_packed:
        return True
    return v.callee is ops.conv2d and cblas.AVAILABLE and len(ty.shape or ()) == 4


def _bias_of(call: E.Expr, conv: E.Var, ty: object) -> E.Expr | None:
    """The bias of ``call`` if it is ``conv + bias`` (either order) with ``bias`` one float32
    value per output channel, of shape (o, 1, 1) or (1, o, 1, 1), and the sum of ``conv``'s
    type ``ty``."""
    if not (isinstance(call, E.Call) and call.callee is ops.add and len(call.args) == 2):
        return None
    a, b = call.args
    other = b if a is conv else a if b is conv else None
    if other is None or other is conv:
        return None
    bt = other.type if isinstance(other, E.Var) else getattr(other, "checked_type", None)
    if isinstance(other, E.Constant):
        bt = TensorType(tuple(other.data.shape), other.data.dtype.name)
    if not (isinstance(bt, TensorType) and isinstance(ty, TensorType) and bt.shape is not None):
        return None
    shape, o = tuple(bt.shape), ty.shape[1]  # type: ignore[index]
    per_channel = shape in ((o, 1, 1), (1, o, 1, 1))
    return other if bt.dtype == "float32" and per_channel else None
