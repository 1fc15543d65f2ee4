"""merge_products: packed products of one input are one wider product, its result cut by slices.

Needs: `pack_weights` has run (products with constant weights are ``dense_packed`` calls with
their packed weight, and bias if any, as constants), before `legalize`.

Guarantees: the same program, where two or more ``dense_packed`` calls (or two or more
``dense_packed_bf16``) of one region with the same input variable, the same activation and
constant weights (attention's query, key and value projections: three 768 -> 768 products of
one hidden state in BERT), either all with a bias or all without, are one product whose
weight holds theirs side by side (768 -> 2304), packed once here, and whose bias is theirs
joined. Each member's binding is then a ``strided_slice`` of the merged result along the
last axis, which `fuse_ops` joins to whatever reads it next (or attention reads its heads
there in place: `rvm.transform.fuse_attention.attention_heads`). The pool splits one larger
job instead of starting three, and the input is read by one product.

The merged call takes the place of the first member (the input is bound before it); the
others become slices where they were. The members' weights are then unused and `dead_code`
drops them.

Algorithm: one walk over each straight-line region (`map_regions`): group the bindings by
(op, input, activation, panel width, whether a bias), then rewrite each group of two or more.
"""

from __future__ import annotations

import logging

import numpy as np

from rvm import op
from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.op import ops
from rvm.op.packed import pack_weight
from rvm.transform.legalize import map_function_regions, map_functions, replace_changed

logger = logging.getLogger("rvm.transform")

PAIRS = ops.dense_packed_bf16
"""The bf16 product on pair panels (`rvm.transform.to_bf16`), merged as ``dense_packed`` is:
its panels hold B's pair words, one column's apart from another's."""

MAX_UNITS = 1 << 14
"""A merged product has at most this many output columns (a vocabulary projection, tied to
another product of the same hidden state, is left alone: its panels need no help)."""


def merge_products(mod: IRModule) -> IRModule:
    """Merge the ``dense_packed`` calls of each region that share their input (see above)."""
    merged = 0

    def rewrite(name: str, func: E.Function) -> E.Function:
        def region(bindings: list[E.VarBinding], body: E.Expr, depth: int):
            nonlocal merged
            groups: dict[tuple, list[int]] = {}
            for i, b in enumerate(bindings):
                key = _key(b.value)
                if key is not None:
                    groups.setdefault(key, []).append(i)
            out: list[E.VarBinding] = list(bindings)
            extra: dict[int, E.VarBinding] = {}  # a merged product, bound before index
            for places in groups.values():
                places = _within_limit(places, bindings)
                if len(places) < 2:
                    continue
                merged += len(places)
                product, slices = _merge([bindings[i] for i in places])
                extra[places[0]] = product
                for i, s in zip(places, slices):
                    out[i] = s
            if not extra:
                return bindings, body
            result: list[E.VarBinding] = []
            for i, b in enumerate(out):
                if i in extra:
                    result.append(extra[i])
                result.append(b)
            return result, body

        return map_function_regions(func, region)

    funcs = map_functions(mod, rewrite)
    if not merged:
        return mod
    logger.debug("merge_products: %d products merged", merged)
    return replace_changed(mod, funcs)


def _key(value: E.Expr) -> tuple | None:
    """What members of one merged product share, or None when ``value`` is no member."""
    if not isinstance(value, E.Call) or value.callee not in (ops.dense_packed, PAIRS):
        return None
    x, w, rest = value.args[0], value.args[1], value.args[2:]
    if not isinstance(x, E.Var) or not isinstance(w, E.Constant):
        return None
    if getattr(x.type, "shape", None) is None or not x.type.shape:
        return None  # the slices need the result's rank
    if any(not isinstance(b, E.Constant) for b in rest):
        return None
    return (value.callee, x, value.attrs["activation"], w.data.shape[1:], bool(rest))


def _within_limit(places: list[int], bindings: list[E.VarBinding]) -> list[int]:
    """The first members of ``places`` whose units add up to `MAX_UNITS` at most."""
    kept, total = [], 0
    for i in places:
        total += bindings[i].value.attrs["units"]
        if total > MAX_UNITS:
            break
        kept.append(i)
    return kept


def _unpack(w: np.ndarray, units: int) -> np.ndarray:
    """B ``(k, units)`` back from its panels ``(panels, k, panel)`` (``dense_packed_bf16``'s:
    B's pair words ``(k2, units)``)."""
    panels, k, panel = w.shape
    return w.transpose(1, 0, 2).reshape(k, panels * panel)[:, :units]


def _pack(b: np.ndarray, panel: int, pairs: bool) -> np.ndarray:
    """`_unpack`'s inverse: B's columns in panels ``panel`` wide, the last padded with zeros
    (float32 values by `rvm.op.packed.pack_weight`; bf16 pair words as they are)."""
    if not pairs:
        return pack_weight(b, False, panel)
    k, n = b.shape
    out = np.zeros((k, -(-n // panel) * panel), dtype=b.dtype)
    out[:, :n] = b
    return np.ascontiguousarray(out.reshape(k, -1, panel).transpose(1, 0, 2))


def _merge(members: list[E.VarBinding]) -> tuple[E.VarBinding, list[E.VarBinding]]:
    """The merged product's binding, and each member's binding as a slice of it."""
    calls = [b.value for b in members]
    first = calls[0]
    units = [c.attrs["units"] for c in calls]
    panel = first.args[1].data.shape[2]
    b = np.concatenate([_unpack(c.args[1].data, u) for c, u in zip(calls, units)], axis=1)
    bias = () if len(first.args) == 2 else (np.concatenate([c.args[2].data for c in calls]),)
    pairs = first.callee is PAIRS
    value = (op.dense_packed_bf16 if pairs else op.dense_packed)(
        first.args[0],
        E.Constant(_pack(b, panel, pairs)),
        *(E.Constant(v.astype(np.float32)) for v in bias),
        units=sum(units),
        activation=first.attrs["activation"],
    )
    var = E.Var(f"{members[0].var.name}_merged", infer_type(value))
    axis = len(first.args[0].type.shape) - 1
    slices, start = [], 0
    for member, n in zip(members, units):
        cut = op.strided_slice(var, begin=[start], end=[start + n], axes=[axis])
        infer_type(cut)
        slices.append(E.VarBinding(member.var, cut))
        start += n
    return E.VarBinding(var, value), slices
