"""Subgraphs as rvm code, shared by the control-flow, sequence and optional converters.

- `convert_graph`: a subgraph's nodes converted in a child scope; `block`: the SeqExpr of
  what a builder function emits; `as_scalar`: a value as a 0-d tensor of a dtype.
- `tail_loop`: a loop as a local tail-recursive function (the VM runs the self call as a
  jump), its parameter types widened until the body agrees, scan outputs stacked.

It registers no converter and imports none of the converter modules, so they all build on it.
"""

from __future__ import annotations

from collections.abc import Callable

from rvm import op
from rvm.frontend.onnx.context import NodeContext, Scope
from rvm.frontend.onnx.weights import tensor_to_array
from rvm.ir import (
    Call,
    Constant,
    Expr,
    Function,
    If,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
    infer_type,
)
from rvm.ir import const as ir_const
from rvm.ir.infer import join_types
from rvm.ir.types import Type

_INT64 = TensorType((), "int64")
_BOOL = TensorType((), "bool")

# step(i, cond, carried) -> (cond_out or None, carried_out, scan_elements), emitting the body
StepFn = Callable[[Expr, Expr | None, list[Expr]], tuple[Expr | None, list[Expr], list[Expr]]]


def convert_graph(ctx: NodeContext, graph: object, scope: Scope) -> list[Expr]:
    """Convert a subgraph's initializers and nodes in ``scope``; its outputs, in order."""
    for t in graph.initializer:  # type: ignore[attr-defined]
        scope.bind(t.name, Constant(tensor_to_array(t, f"initializer {t.name!r}")))
    ctx.importer.convert_nodes(graph.node, scope)  # type: ignore[attr-defined]
    outs = []
    for o in graph.output:  # type: ignore[attr-defined]
        value = scope.lookup(o.name)
        if value is None:
            ctx.fail(f"subgraph output {o.name!r} is not defined by any input or node")
        outs.append(value)
    return outs


def block(ctx: NodeContext, build: Callable[[], Expr]) -> Expr:
    """The SeqExpr of the bindings ``build`` emits and the expression it returns."""
    return ctx.emitter.builder.block(build)


def as_scalar(ctx: NodeContext, value: Expr, dtype: str) -> Expr:
    """``value`` as a 0-d tensor of ``dtype`` (ONNX allows a one-element 1-d tensor)."""
    ty = ctx.type(value)
    if ty.shape != ():
        value = ctx.emit(op.reshape(value, ()))
    if ty.dtype != dtype:
        value = ctx.emit(op.cast(value, dtype))
    return value


def tail_loop(
    ctx: NodeContext,
    trip: Expr | None,
    cond: Expr | None,
    inits: list[Expr],
    n_scan: int,
    step: StepFn,
) -> list[Expr]:
    """Emit a loop as a tail-recursive local function; its final carried values and its
    scan outputs stacked along a new axis 0."""
    types = [infer_type(v) for v in inits]
    scan_types: list[Type] | None = None
    for _ in range(4):  # widen the parameter types until the body agrees
        func, fvar, end_types, elem_types = _loop_function(ctx, trip, cond, types, scan_types, step)
        joined = [join_types(a, b) for a, b in zip(types, end_types)]
        stacked = [_stacked_type(ctx, t) for t in elem_types]
        if joined == types and stacked == scan_types:
            break
        types, scan_types = joined, stacked
    else:
        ctx.fail(f"the loop-carried types do not settle: {types} then {end_types}")
    builder = ctx.emitter.builder
    builder.bind(fvar, func)
    # (a dimension unknown at import is 0 here: only a loop that never runs returns this)
    empty = []
    for t in scan_types:  # type: ignore[union-attr]
        dims = [0 if d is None else d for d in t.shape[1:]]  # type: ignore[union-attr]
        empty.append(ctx.emit(op.zeros((0, *dims), t.dtype)))  # type: ignore[union-attr]
    flag = [] if cond is None else [cond]
    args = [ir_const(0, "int64"), *flag, *inits, *empty]
    result = builder.emit(Call(fvar, tuple(args)))
    first = 1 + len(flag)
    return [ctx.emit(TupleGetItem(result, first + k)) for k in range(len(inits) + n_scan)]


def _grow(ctx: NodeContext, i: Expr, acc: Expr, elem: Expr) -> Expr:
    """``acc`` with ``elem`` stacked after it. When ``elem`` has dimensions unknown at import,
    the first iteration starts the stack from it (the initial empty stack guessed them)."""
    row = ctx.emit(op.expand_dims(elem, 0))

    def grown() -> Expr:
        return ctx.emit(op.concat([acc, row], axis=0))

    if None not in ctx.shape(elem):
        return grown()
    first = ctx.emit(op.equal(i, ir_const(0, "int64")))
    return ctx.emitter.builder.emit(If(first, block(ctx, lambda: row), block(ctx, grown)))


def _stacked_type(ctx: NodeContext, elem: Type) -> TensorType:
    if not isinstance(elem, TensorType) or elem.shape is None:
        ctx.fail(f"a scan output must be a tensor of known rank, got {elem}")
    return TensorType((None, *elem.shape), elem.dtype)


def _loop_function(
    ctx: NodeContext,
    trip: Expr | None,
    cond: Expr | None,
    types: list[Type],
    scan_types: list[Type] | None,
    step: StepFn,
) -> tuple[Function, Var, list[Type], list[Type]]:
    """One build of the loop function for the given parameter types."""
    names = ctx.importer.names
    i = Var(names("iter"), _INT64)
    flag = [] if cond is None else [Var(names("cond"), _BOOL)]
    carried = [Var(names("carried"), t) for t in types]
    accs = [Var(names("scan"), t) for t in scan_types or []]
    params = (i, *flag, *carried, *accs)
    fvar = Var(names("loop"))
    end_types: list[Type] = []
    elem_types: list[Type] = []

    def again() -> Expr:
        cond_out, outs, elems = step(i, flag[0] if flag else None, carried)
        end_types.extend(infer_type(v) for v in outs)
        elem_types.extend(infer_type(v) for v in elems)
        grown = [_grow(ctx, i, a, e) for a, e in zip(accs, elems)]
        nxt = [ctx.emit(op.add(i, ir_const(1, "int64")))]
        if flag:
            nxt.append(as_scalar(ctx, cond_out, "bool"))  # type: ignore[arg-type]
        return ctx.emitter.builder.emit(Call(fvar, (*nxt, *outs, *grown)))

    def body() -> Expr:
        keep: Expr = ir_const(True, "bool")
        if trip is not None:
            keep = ctx.emit(op.less(i, trip))
        if flag:
            keep = flag[0] if trip is None else ctx.emit(op.logical_and(keep, flag[0]))
        return If(keep, block(ctx, again), block(ctx, lambda: Tuple(params)))

    return Function(params, block(ctx, body)), fvar, end_types, elem_types
