"""fold_batch_norm: an inference batch norm after a convolution folds into its weights.

Needs: an inlined module in A-normal form whose op calls are not yet legalized (run before
`legalize`).

Guarantees: the same program, where a chain ``y = conv(x, W)``, optionally ``y = add(y, b)``,
then ``z = batch_norm(y, gamma, beta, mean, var)`` over the channel axis, with ``W``, ``b`` and
the four statistics constants and each intermediate used only by the next step, is
``y = conv(x, W * s)``, ``z = add(y, (b - mean) * s + beta)`` with ``s = gamma /
sqrt(var + epsilon)`` per output channel (computed in float64, stored in the weight's dtype).
``b`` is a per-channel constant (all its axes 1 but the channel axis); conv is conv1d or
conv2d of float dtype. The kernel then computes a convolution with a bias, the pattern that
convolutions without batch norm have, instead of normalizing every output element.

The same holds for a batch norm that arrives as arithmetic (ONNX exports write it as Mul and
Add, as inception_v2's does): ``z = multiply(y, s)`` of a chain with a per-channel constant
``s`` becomes ``z = add(conv(x, W * s), b * s)``, and a further per-channel ``add`` of the
result joins that bias, so the convolution keeps one bias add.

Algorithm: one walk over each straight-line region (`map_regions`), remembering the
convolutions with constant weights and single-use results and their bias adds; a batch norm
of one of them rewrites the chain in place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from rvm import op
from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.op import ops
from rvm.transform.legalize import const_of, count_uses, rewrite_counted

logger = logging.getLogger("rvm.transform")

_CONVS = (ops.conv1d, ops.conv2d)
_FLOATS = ("float32", "float64")


@dataclass
class _Chain:
    """A convolution with constant weights, and the per-channel bias added to it if any."""

    conv: int  # index of the conv binding in the region
    weight: np.ndarray
    add: int | None = None  # index of the bias add binding
    bias: np.ndarray | None = None  # (channels,) float64


def fold_batch_norm(mod: IRModule) -> IRModule:
    """Fold every batch norm of a convolution into the convolution's weights."""

    def regions(func: E.Function):  # type: ignore[no-untyped-def]
        uses = count_uses(func.body)
        consts: dict[E.Var, np.ndarray] = {}
        return lambda bindings: _fold_region(bindings, uses, consts)

    out, folded = rewrite_counted(mod, regions)
    if folded:
        logger.debug("fold_batch_norm: %d batch norms folded into convolutions", folded)
    return out


def _fold_region(
    bindings: list[E.VarBinding], uses: dict[E.Var, int], consts: dict[E.Var, np.ndarray]
) -> tuple[list[E.VarBinding], int]:
    out: list[E.VarBinding | None] = list(bindings)
    chains: dict[E.Var, _Chain] = {}
    folded = 0
    for i, b in enumerate(bindings):
        value = b.value
        if isinstance(value, E.Constant):
            consts[b.var] = value.data
        if not isinstance(value, E.Call) or not isinstance(value.callee, E.Op):
            continue
        if value.callee in _CONVS:
            weight = const_of(value.args[1], consts)
            if weight is not None and weight.dtype.name in _FLOATS and uses.get(b.var) == 1:
                chains[b.var] = _Chain(i, weight)
        elif value.callee is ops.add:
            _bias_add(b, i, chains, uses, consts, out)
        elif value.callee is ops.multiply and _scale(b, i, chains, uses, consts, out):
            folded += 1
        elif value.callee is ops.batch_norm and _fold(b, i, chains, uses, out, consts):
            folded += 1
    return [b for b in out if b is not None], folded


def _per_channel(
    c: np.ndarray | None, ndim: int, channels: int, axis: int = 1
) -> np.ndarray | None:
    """``c`` as a (channels,) float64 vector when it broadcasts along ``axis`` of an
    ``ndim``-d tensor only, else None."""
    if c is None or c.ndim > ndim or c.dtype.name not in _FLOATS:
        return None
    shape = (1,) * (ndim - c.ndim) + c.shape
    if shape[axis] != channels or any(d != 1 for k, d in enumerate(shape) if k != axis):
        return None
    return c.reshape(channels).astype(np.float64)


def _chain_operand(b, chains, consts):  # type: ignore[no-untyped-def]
    """``(y, chain, c)`` when ``b`` (a binary call) applies the per-channel constant ``c`` to
    the chain ``y`` without changing its type, else None."""
    lhs, rhs = b.value.args
    for y, c in ((lhs, rhs), (rhs, lhs)):
        chain = chains.get(y) if isinstance(y, E.Var) else None
        if chain is None or b.var.type != y.type:
            continue
        vec = _per_channel(const_of(c, consts), len(y.type.shape), chain.weight.shape[0])
        if vec is not None:
            return y, chain, vec
    return None


def _bias_add(b, i, chains, uses, consts, out) -> None:  # type: ignore[no-untyped-def]
    """Record ``b`` (an add) as the bias add of a convolution chain, when it is one; a second
    bias add replaces the first by one of their sum."""
    found = _chain_operand(b, chains, consts)
    if found is None or uses.get(b.var) != 1:
        return
    y, chain, bias = found
    if chain.add is None:
        chains[b.var] = _Chain(chain.conv, chain.weight, i, bias)
    else:
        _rewrite(b, i, chains.pop(y), None, bias, uses, chains, out)


def _scale(b, i, chains, uses, consts, out) -> bool:  # type: ignore[no-untyped-def]
    """Fold ``b`` (a multiply of a chain by a per-channel constant) into the convolution's
    weights and bias; True when it did."""
    found = _chain_operand(b, chains, consts)
    if found is None:
        return False
    y, chain, scale = found
    _rewrite(b, i, chains.pop(y), scale, np.zeros_like(scale), uses, chains, out)
    return True


def _fold(b, i, chains, uses, out, consts) -> bool:  # type: ignore[no-untyped-def]
    """Rewrite the chain that ``b`` (a batch norm, binding ``i``) normalizes, if any; True
    when it did."""
    x, *stats = b.value.args
    chain = chains.get(x) if isinstance(x, E.Var) else None
    if chain is None:
        return False
    ndim, channels = len(x.type.shape), chain.weight.shape[0]
    gamma, beta, mean, var = (_per_channel(const_of(s, consts), 1, channels, 0) for s in stats)
    if b.value.attrs["axis"] % ndim != 1 or any(s is None for s in (gamma, beta, mean, var)):
        return False
    scale = gamma / np.sqrt(var + b.value.attrs["epsilon"])
    _rewrite(b, i, chains.pop(x), scale, beta - mean * scale, uses, chains, out)
    return True


def _rewrite(b, i, chain, scale, shift, uses, chains, out) -> None:  # type: ignore[no-untyped-def]
    """Binding ``i`` (``b``) becomes ``add(conv, bias * scale + shift)`` of the chain's
    convolution, whose weights are multiplied by ``scale`` (None: kept); the chain's bias add
    goes. ``b``'s value continues the chain when it has one use."""
    bias = chain.bias if chain.bias is not None else np.zeros(chain.weight.shape[0])
    weight, conv_b = chain.weight, out[chain.conv]
    if scale is not None:
        bias = bias * scale
        weight = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        weight = weight.astype(chain.weight.dtype)
        conv = E.Call(conv_b.value.callee, (conv_b.value.args[0], E.Constant(weight)),
                      conv_b.value.attrs)  # fmt: skip
        infer_type(conv)
        out[chain.conv] = E.VarBinding(conv_b.var, conv)
    bias = bias + shift
    if chain.add is not None:
        out[chain.add] = None
    channels = bias.reshape((-1,) + (1,) * (len(b.var.type.shape) - 2))
    call = op.add(conv_b.var, E.Constant(channels.astype(weight.dtype)))
    infer_type(call)
    out[i] = E.VarBinding(b.var, call)
    if uses.get(b.var) == 1:  # a scale or shift after it may fold too
        chains[b.var] = _Chain(chain.conv, weight, i, bias)
