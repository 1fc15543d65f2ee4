"""pack_weights: float32 products with a constant 2-d weight read it packed in column panels.

Needs: an inlined module in A-normal form whose op calls are not yet legalized (run before
`legalize`, after `to_bf16`, which takes the products it converts first).

Guarantees: the same program, where each float32 ``dense(x, W)`` and ``matmul(x, W)`` whose
weight ``W`` is a 2-d float32 constant (``matmul``: ``x`` of rank 2 or more) is
``dense_packed(x, P, units=units)`` (`rvm.op.packed`), ``P`` being ``W`` as B ``(k, units)``
(``dense``'s transposed) packed once, here, into panels of the GEMM's width
(`rvm.kernels.packed.pack`, `rvm.kernels.packed.panel_width`: the micro-kernel's tile, from
the CPU's vector width). ``W``'s own binding is then unused unless something else reads it,
and `dead_code` drops it: the executable keeps the packed copy only.

The product's epilogue joins it where the product has no other use (the same for a
``dense_packed_bf16`` that `to_bf16` made): a following ``add`` of a
constant bias of ``units`` values (broadcast along the last axis only), then ``relu`` or
``gelu`` (either form), then an ``add`` of a computed float32 tensor of the same rank (a
transformer's residual), become the op's ``bias``, ``activation`` and ``residual``, which the
GEMM applies to each tile as it is done, on the thread that computed it
(`rvm.kernels.packed`).

Products too small to gain (fewer than `MIN_DEPTH` or `MIN_UNITS`) stay as they are, as do
products of two computed tensors (attention's), weights of other dtypes and batched
(3-d and more) weights.

Algorithm: one walk over each straight-line region (`map_regions`), remembering constants
bound to variables and the packed products whose epilogue may still grow; each matching
call is replaced in place, and a product whose epilogue joined a later call is dropped. A
weight bound once and used by several products is packed once.
"""

from __future__ import annotations

import logging
from collections import Counter

import numpy as np

from rvm import op
from rvm.ir import expr as E
from rvm.ir.analysis import walk
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.op import ops
from rvm.op.packed import default_panel, pack_weight
from rvm.transform.legalize import const_of, map_functions, map_regions

logger = logging.getLogger("rvm.transform")

MIN_DEPTH = 16
"""Products of a smaller depth stay as they are (a few multiply-adds per output)."""
MIN_UNITS = 16
"""Products with fewer output columns stay as they are (a panel would be mostly padding)."""


def pack_weights(mod: IRModule, panel: int | None = None) -> IRModule:
    """Rewrite every float32 dense and matmul with a constant 2-d weight to ``dense_packed``,
    its weight packed in panels ``panel`` wide (default: `panel_width`)."""
    width = panel or default_panel()
    packed: dict[tuple[int, bool], E.Constant] = {}  # (id of W's array, transposed) -> P
    count = folded = 0

    def rewrite(name: str, func: E.Function) -> E.Function:
        consts: dict[E.Var, np.ndarray] = {}
        uses = Counter(n for n in walk(func.body) if isinstance(n, E.Var))

        def region(bindings: list[E.VarBinding], body: E.Expr, depth: int):
            nonlocal count, folded
            out: list[E.VarBinding | None] = []
            products: dict[E.Var, int] = {}  # a packed product's var -> its place in out
            for b in bindings:
                if isinstance(b.value, E.Constant):
                    consts[b.var] = b.value.data
                new = _convert(b.value, consts, width, packed)
                if new is not None:
                    count += 1
                elif _bare_bf16(b.value):  # packed by `to_bf16`: its epilogue may join
                    products[b.var] = len(out)
                else:
                    joined = _join_epilogue(b.value, products, out, consts, uses)
                    if joined is not None:
                        folded += 1
                        product, new = joined
                        out[products.pop(product)] = None
                if new is not None:
                    b = E.VarBinding(b.var, new)
                    products[b.var] = len(out)
                out.append(b)
            return [b for b in out if b is not None], body

        body = map_regions(func.body, region)
        if body is func.body:
            return func
        return E.Function(func.params, body, func.ret_type, func.attrs)

    funcs = map_functions(mod, rewrite)
    if not count and not folded:
        return mod
    size = sum(c.data.nbytes for c in packed.values())
    logger.debug(
        "pack_weights: %d products (%d epilogues joined), %d weights, %.2f MB",
        count, folded, len(packed), size / 1e6,
    )  # fmt: skip
    return mod.with_functions({n: f for n, f in funcs.items() if f is not mod[n]})


def _input_rank(value: E.Call) -> int | None:
    """The rank of a float32 product's input, None when it is not one."""
    t = getattr(value.args[0], "type", None)
    if getattr(t, "dtype", None) != "float32" or getattr(t, "shape", None) is None:
        return None
    return len(t.shape)


def _convert(
    value: E.Expr,
    consts: dict[E.Var, np.ndarray],
    panel: int,
    packed: dict[tuple[int, bool], E.Constant],
) -> E.Call | None:
    """The ``dense_packed`` call computing ``value``, or None when it stays as it is."""
    if not isinstance(value, E.Call) or value.callee not in (ops.dense, ops.matmul):
        return None
    rank, w = _input_rank(value), const_of(value.args[1], consts)
    if rank is None or w is None or w.dtype != np.float32 or w.ndim != 2:
        return None
    transposed = value.callee is ops.dense
    if not transposed and rank < 2:  # matmul of a vector drops a dimension
        return None
    units, depth = (w.shape[0], w.shape[1]) if transposed else (w.shape[1], w.shape[0])
    if depth < MIN_DEPTH or units < MIN_UNITS:
        return None
    key = (id(w), transposed)
    if key not in packed:
        packed[key] = E.Constant(pack_weight(w, transposed, panel))
    new = op.dense_packed(value.args[0], packed[key], units=units)
    infer_type(new)
    return new


def _bare_bf16(value: E.Expr) -> bool:
    """Whether ``value`` is a ``dense_packed_bf16`` (`rvm.transform.to_bf16`'s) with no
    epilogue yet."""
    return (
        isinstance(value, E.Call)
        and value.callee is ops.dense_packed_bf16
        and len(value.args) == 2
        and value.attrs["activation"] == "none"
    )


def _product(prod: E.Call, *args: E.Expr | None, **attrs: object) -> E.Call:
    """A call of ``prod``'s op (``dense_packed`` or ``dense_packed_bf16``: the same operands
    and attributes) on ``args``."""
    build = op.dense_packed_bf16 if prod.callee is ops.dense_packed_bf16 else op.dense_packed
    return build(*args, **attrs)


def _join_epilogue(
    value: E.Expr,
    products: dict[E.Var, int],
    out: list[E.VarBinding | None],
    consts: dict[E.Var, np.ndarray],
    uses: Counter,
) -> tuple[E.Var, E.Call] | None:
    """(``p``, the one ``dense_packed`` computing ``value``) when ``value`` is ``add(p, bias)``,
    ``relu(p)`` or ``gelu(p)`` of a packed product ``p`` that ``value`` alone uses; else
    None."""
    if not isinstance(value, E.Call) or not isinstance(value.callee, E.Op):
        return None
    args = [a for a in value.args if isinstance(a, E.Var) and a in products]
    if len(args) != 1 or uses[args[0]] != 1:
        return None
    product = out[products[args[0]]]
    assert product is not None
    prod = product.value
    units, activation = prod.attrs["units"], prod.attrs["activation"]
    x, w, bias = prod.args[0], prod.args[1], prod.args[2:]
    if len(bias) == 2:  # a residual joined: it is the last step
        return None
    if value.callee is ops.add and len(value.args) == 2:
        other = value.args[1] if value.args[0] is args[0] else value.args[0]
        if activation == "none" and not bias:
            new = _with_bias(prod, other, consts)
            if new is not None:
                infer_type(new)
                return args[0], new
        return _with_residual(prod, other, consts, args[0])
    if activation != "none":
        return None
    if value.callee is ops.relu:
        new = _product(prod, x, w, *bias, units=units, activation="relu")
    elif value.callee is ops.gelu:
        form = "gelu_tanh" if value.attrs.get("approximate") == "tanh" else "gelu"
        new = _product(prod, x, w, *bias, units=units, activation=form)
    else:
        return None
    infer_type(new)
    return args[0], new


def _with_bias(prod: E.Call, other: E.Expr, consts: dict[E.Var, np.ndarray]) -> E.Call | None:
    """The product with ``other`` as its bias, when it is a float32 constant of ``units``
    values broadcast along the last axis only; else None."""
    x, w, units = prod.args[0], prod.args[1], prod.attrs["units"]
    b = const_of(other, consts)
    rank = len(x.type.shape)
    if b is None or b.dtype != np.float32 or b.size != units or b.ndim > rank:
        return None
    if b.ndim and b.shape[-1] != units:
        return None
    return _product(prod, x, w, E.Constant(b.reshape(units)), units=units)


def _with_residual(
    prod: E.Call, other: E.Expr, consts: dict[E.Var, np.ndarray], product: E.Var
) -> tuple[E.Var, E.Call] | None:
    """(``product``, the product with ``other`` added after its activation as its residual),
    when ``other`` is a computed float32 tensor of the product's rank; else None. A product
    without a bias takes zeros (the op's operands: x, w, bias, residual)."""
    t = getattr(other, "type", None)
    shape = getattr(prod.type, "shape", None)
    if not isinstance(other, E.Var) or other in consts or getattr(t, "dtype", None) != "float32":
        return None
    if shape is None or t.shape is None or len(t.shape) != len(shape):
        return None
    x, w, bias = prod.args[0], prod.args[1], prod.args[2:]
    attrs = prod.attrs
    new = _product(
        prod, x, w, *(bias or (None,)), other, units=attrs["units"], activation=attrs["activation"]
    )
    infer_type(new)
    return product, new
