"""The epilogue a float32 convolution's library call runs itself: `conv_epilogues`.

A fused kernel ``relu(conv2d(x, w) + b)`` used to call the convolution library and then run
the bias and activation as a pass over the output. The library applies them itself, block by
block while each is in cache (`rvm.kernels.epilogue`), when they come as data: this module
reads, from the kernel's bindings (the compiler's facts, not generated text), which ops after
a float32 ``conv2d`` or ``conv2d_packed`` form such an epilogue, and the convolution's stage
(`rvm.jit.stages`) passes them to the library; the ops then lower to nothing.

The epilogue is, in order: a per-channel bias add (an operand of shape ``(o, 1, 1)`` or ``(1,
o, 1, 1)``), a residual add (an operand of the output's shape), ``relu``, and a residual add
after it if there was none before. Each op must be the only use of the value before it, of
the convolution's output type, and its other operand must be known before the convolution
(a parameter, a constant or an earlier binding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.types import TensorType
from rvm.kernels.reference.packed import ACTIVATIONS

__all__ = ["ConvEpilogue", "conv_epilogues"]

_CONVS = ("conv2d", "conv2d_packed")


@dataclass(frozen=True)
class ConvEpilogue:
    """A convolution's epilogue: ``act(conv + bias + residual)`` (the residual after the
    activation unless ``res_first``); ``absorbed`` the bindings it stands for, in order, and
    ``steps`` what each is ("bias", "residual" or the activation's name)."""

    bias: E.Expr | None
    act: int  # an index of ACTIVATIONS
    residual: E.Expr | None
    res_first: bool
    absorbed: tuple[E.Var, ...]
    steps: tuple[str, ...]

    @property
    def res_mode(self) -> int:
        """The library's residual code: 0 none, 1 before the activation, 2 after it."""
        if self.residual is None:
            return 0
        return 1 if self.res_first else 2


def conv_epilogues(
    bindings: Sequence[E.VarBinding], result: E.Expr, params: Sequence[E.Var]
) -> dict[E.Var, ConvEpilogue]:
    """The epilogue of each float32 2-d convolution among ``bindings`` that has one, by the
    convolution's variable (``result``: the function's result, ``params`` its parameters)."""
    bindings = list(bindings)
    uses = _uses(bindings, result)
    user = {}
    for k, b in enumerate(bindings):
        for a in _operands(b.value):
            user.setdefault(a, k)
    known = set(params)
    plans = {}
    for b in bindings:
        known.add(b.var)
        v = b.value
        if not (isinstance(v, E.Call) and isinstance(v.callee, E.Op)):
            continue
        if v.callee.name not in _CONVS or not _float32_4d(b.var):
            continue
        plan = _chain(b.var, bindings, user, uses, known - {b.var})
        if plan is not None:
            plans[b.var] = plan
    return plans


def _chain(conv, bindings, user, uses, known) -> ConvEpilogue | None:  # type: ignore[no-untyped-def]
    ty = _type(conv)
    bias = residual = None
    act, res_first, absorbed, steps, cur = 0, False, [], [], conv
    while uses.get(cur, 0) == 1 and cur in user:
        b = bindings[user[cur]]
        v = b.value
        if not (isinstance(v, E.Call) and isinstance(v.callee, E.Op)) or not _same(b.var, ty):
            break
        name, args = v.callee.name, list(v.args)
        other = [a for a in args if a is not cur]
        if name == "relu" and act == 0 and len(args) == 1:
            act, step = ACTIVATIONS.index("relu"), "relu"
        elif name == "add" and len(args) == 2 and len(other) == 1 and _known(other[0], known):
            shape = _type(other[0])
            if bias is None and residual is None and act == 0 and _per_channel(shape, ty):
                bias, step = other[0], "bias"
            elif residual is None and _same_type(shape, ty):
                residual, res_first, step = other[0], act == 0, "residual"
            else:
                break
        else:
            break
        absorbed.append(b.var)
        steps.append(step)
        cur = b.var
    if not absorbed:
        return None
    return ConvEpilogue(bias, act, residual, res_first, tuple(absorbed), tuple(steps))


def _operands(v: E.Expr) -> list[E.Var]:
    """The variables an expression reads (a call's arguments, through tuples)."""
    stack, out = [v], []
    while stack:
        e = stack.pop()
        if isinstance(e, E.Var):
            out.append(e)
        elif isinstance(e, E.Call):
            stack.extend(e.args)
        elif isinstance(e, E.Tuple):
            stack.extend(e.fields)
        elif isinstance(e, E.TupleGetItem):
            stack.append(e.tuple_value)
    return out


def _uses(bindings: Sequence[E.VarBinding], result: E.Expr) -> dict[E.Var, int]:
    counts: dict[E.Var, int] = {}
    for e in [*(b.value for b in bindings), result]:
        for a in _operands(e):
            counts[a] = counts.get(a, 0) + 1
    return counts


def _type(e: E.Expr) -> TensorType | None:
    ty = e.type if e.type is not None else infer_type(e)
    return ty if isinstance(ty, TensorType) else None


def _float32_4d(v: E.Var) -> bool:
    ty = _type(v)
    return ty is not None and ty.dtype == "float32" and len(ty.shape or ()) == 4


def _same(v: E.Var, ty: TensorType | None) -> bool:
    return _same_type(_type(v), ty)


def _same_type(a: TensorType | None, b: TensorType | None) -> bool:
    return (
        a is not None
        and b is not None
        and a.dtype == b.dtype
        and a.shape is not None
        and tuple(a.shape) == tuple(b.shape or ())
    )


def _per_channel(a: TensorType | None, conv: TensorType | None) -> bool:
    """Whether ``a`` is one float32 value per output channel of ``conv``, broadcast over the
    map: ``(o, 1, 1)`` or ``(1, o, 1, 1)``."""
    if a is None or conv is None or a.dtype != "float32" or a.shape is None:
        return False
    o = conv.shape[1]  # type: ignore[index]
    return tuple(a.shape) in ((o, 1, 1), (1, o, 1, 1))


def _known(e: E.Expr, known: set) -> bool:
    """Whether ``e`` is a constant or a variable bound before the convolution."""
    return isinstance(e, E.Constant) or (isinstance(e, E.Var) and e in known)
