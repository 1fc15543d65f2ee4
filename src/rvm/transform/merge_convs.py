"""merge_convs: convolutions of one input with the same geometry are one wider convolution, its
result cut by channel slices that the memory plan makes views.

Needs: an inlined module in A-normal form whose op calls are not yet legalized, types inferred,
batch norms folded (`fold_batch_norm`: a convolution's chain is ``conv``, a per-channel bias
``add``, an activation), before the weight-packing passes.

Guarantees: the same values, where two or more ``conv2d`` calls of one region with the same
input variable, the same attributes (strides, padding, dilation, one group) and constant
weights of the same (C, kh, kw) and dtype, each followed by the same single-use chain (a
per-channel constant bias ``add``, then a ``relu``, either or both absent), are one
convolution whose weight holds theirs one after the other along the output channels, with the
joined bias and the chain once. Each member's result is then a ``strided_slice`` of the merged
result along the channels. Only where the input has one image (every axis before the channels
has size 1): each slice is then one contiguous run of the merged result, which `memory_plan`
gives its readers as a view, no copy (`rvm.transform.concat_plan.slice_offset`); a slice that
is a piece of a concatenation written in place is copied there.

Why: inception's branches start with 1x1 convolutions of the block's input (576 -> 224, 64 and
96 channels on a 14 x 14 map; the pool branch's projection, whose ReLU follows its pool, stays
apart): merged, the GEMM copies its input into panels once instead of once a branch (~30 us
of a 576-channel 14 x 14 input on a Zen 3 core, ~10% of a 96-channel branch's time), and the
pool splits one larger job instead of starting several small ones. On that core, one thread:
the 1x1 convolutions' time 2.4% less (slice copies included), inception_v2 within the noise
of whole-model runs; two threads, with the GEMM's split of such products
(`rvm.kernels.blas.packed_cut`): 1-9% less CPU in all (pool pieces and the caller).

The merged chain takes the place of the first member's convolution, the slices follow it; the
members' own bindings go. Algorithm: one walk over each straight-line region (`map_regions`):
each convolution's chain followed through its single uses, grouped by (input, attributes,
weight shape, chain), then each group of two or more rewritten.
"""

from __future__ import annotations

import logging

import numpy as np

from rvm import op
from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.op import ops
from rvm.transform.legalize import rewrite_with_uses, splice

logger = logging.getLogger("rvm.transform")

_FLOATS = ("float16", "bfloat16", "float32", "float64")


def merge_convs(mod: IRModule) -> IRModule:
    """Merge the convolutions of each region that share their input (see above)."""

    out, merged = rewrite_with_uses(mod, _merge_region)
    if merged:
        logger.debug("merge_convs: %d convolutions merged", merged)
    return out


def _merge_region(
    bindings: list[E.VarBinding], uses: dict[E.Var, int]
) -> tuple[list[E.VarBinding], int]:
    users: dict[E.Var, int] = {}  # a variable's one user in this region, by index
    for i, b in enumerate(bindings):
        if isinstance(b.value, E.Call):
            for a in b.value.args:
                if isinstance(a, E.Var):
                    users[a] = i
    groups: dict[tuple, list[list[int]]] = {}
    for i, b in enumerate(bindings):
        key = _conv_key(b.value)
        if key is None:
            continue
        chain, kinds = _chain(i, bindings, users, uses)
        if chain is not None:
            groups.setdefault((*key, kinds), []).append(chain)
    out: list[E.VarBinding | None] = list(bindings)
    extra: dict[int, list[E.VarBinding]] = {}
    merged = 0
    for chains in groups.values():
        if len(chains) < 2:
            continue
        merged += len(chains)
        extra[chains[0][0]] = _merge([[bindings[i] for i in c] for c in chains])
        for c in chains:
            for i in c:
                out[i] = None
    if not merged:
        return bindings, 0
    return splice(out, extra), merged


def _conv_key(value: E.Expr) -> tuple | None:
    """What the convolutions of one merge share, or None when ``value`` cannot be merged."""
    if not isinstance(value, E.Call) or value.callee is not ops.conv2d:
        return None
    x, w = value.args[0], value.args[1]
    if not isinstance(x, E.Var) or not isinstance(w, E.Constant):
        return None
    shape = getattr(x.type, "shape", None)
    if shape is None or len(shape) != 4 or shape[0] != 1 or w.data.dtype.name not in _FLOATS:
        return None  # an image a call: the channel slices are runs of the merged result
    attrs = value.attrs
    if attrs.get("groups", 1) != 1:
        return None
    geometry = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items()))
    return (x, geometry, w.data.shape[1:], w.data.dtype.name)


def _chain(
    i: int, bindings: list[E.VarBinding], users: dict[E.Var, int], uses: dict[E.Var, int]
) -> tuple[list[int] | None, tuple[str, ...]]:
    """The bindings of the convolution at ``i`` and its chain (its single-use per-channel
    bias add, then its relu, each optional), and the chain's kinds."""
    chain, kinds = [i], []
    channels = bindings[i].value.args[1].data.shape[0]  # type: ignore[attr-defined]
    var = bindings[i].var
    for kind in ("add", "relu"):
        at = users.get(var)
        if uses.get(var) != 1 or at is None:
            break
        value = bindings[at].value
        if kind == "add" and _bias(value, var, channels) is None:
            continue
        if kind == "relu" and not (
            isinstance(value, E.Call) and value.callee is ops.relu and value.args[0] is var
        ):
            break
        chain.append(at)
        kinds.append(kind)
        var = bindings[at].var
    return chain, tuple(kinds)


def _bias(value: E.Expr, var: E.Var, channels: int) -> np.ndarray | None:
    """The (channels,) bias ``value`` adds to ``var``, a per-channel constant, or None."""
    if not isinstance(value, E.Call) or value.callee is not ops.add:
        return None
    lhs, rhs = value.args
    c = rhs if lhs is var else lhs if rhs is var else None
    if not isinstance(c, E.Constant) or value.type != var.type:
        return None
    data = c.data
    shape = (1,) * (4 - data.ndim) + data.shape
    if data.ndim > 4 or shape[1] != channels or any(d != 1 for k, d in enumerate(shape) if k != 1):
        return None
    return data.reshape(channels)


def _merge(members: list[list[E.VarBinding]]) -> list[E.VarBinding]:
    """The merged chain's bindings, then each member's result as a channel slice of it."""
    convs = [m[0].value for m in members]
    first = convs[0]
    counts = [c.args[1].data.shape[0] for c in convs]  # type: ignore[attr-defined]
    weight = np.concatenate([c.args[1].data for c in convs])  # type: ignore[attr-defined]
    value = E.Call(first.callee, (first.args[0], E.Constant(weight)), first.attrs)
    infer_type(value)
    name = members[0][-1].var.name
    var = E.Var(f"{name}_merged_conv", value.type)
    out = [E.VarBinding(var, value)]
    for step in range(1, len(members[0])):
        if members[0][step].value.callee is ops.add:
            bias = np.concatenate(
                [_bias(m[step].value, m[step - 1].var, n) for m, n in zip(members, counts)]
            )
            value = op.add(var, E.Constant(bias.astype(weight.dtype).reshape(-1, 1, 1)))
        else:
            value = op.relu(var)
        infer_type(value)
        var = E.Var(f"{name}_merged_{step}", value.type)
        out.append(E.VarBinding(var, value))
    start = 0
    for m, n in zip(members, counts):
        cut = op.strided_slice(var, begin=[start], end=[start + n], axes=[1])
        infer_type(cut)
        out.append(E.VarBinding(m[-1].var, cut))
        start += n
    return out
