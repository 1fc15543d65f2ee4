"""Higher-order ops: ``torch.cond`` and ``torch.while_loop``.

Their subgraphs (FX graph modules under the program's module) are converted in place, their
placeholders bound to the operands; they see outer values only through those operands.

- ``cond(pred, true_graph, false_graph, operands)`` becomes an IR ``If`` whose branches are
  the two subgraphs as SeqExprs, so only the taken branch runs. A predicate known at export
  (a specialized size test) converts the taken branch alone.
- ``while_loop(cond_graph, body_graph, carried, additional)`` becomes a local tail-recursive
  function, as rvm script's ``while`` does::

      def loop(carried...):
          if cond_graph(carried..., additional...):
              return loop(*body_graph(carried..., additional...))
          else:
              return (carried...)

  The self call is in tail position, so the VM runs it as a jump: constant stack space at any
  trip count. ``additional`` operands are free variables of the function (lambda lifting
  captures them). The carried types start from the initial values and widen until the body
  gives back values of the same types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rvm.frontend.torch.context import NodeContext, SymInt
from rvm.frontend.torch.registry import converter
from rvm.ir import Call, Expr, Function, If, Tuple, TupleGetItem, Var, infer_type
from rvm.ir.infer import join_types
from rvm.ir.types import TensorType


def subgraph(ctx: NodeContext, module: Any, operands: list[Any]) -> list[Any]:
    """Convert ``module``'s graph with its placeholders bound to ``operands``; its outputs."""
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(operands):
        ctx.fail(f"a subgraph takes {len(placeholders)} inputs, given {len(operands)}")
    env = dict(zip(placeholders, operands))
    outs = ctx.importer.convert_graph(module.graph, env)
    return outs if isinstance(outs, list) else [outs]


def block(ctx: NodeContext, build: Callable[[], Expr]) -> Expr:
    """The SeqExpr of the bindings ``build`` emits and the expression it returns."""
    return ctx.importer.builder.block(build)


def _values(ctx: NodeContext, outs: list[Any]) -> Tuple:
    from rvm.frontend.torch.importer import output_expr

    return Tuple(tuple(output_expr(ctx.importer, o) for o in outs))


@converter("higher_order.cond")
def _cond(
    ctx: NodeContext, pred: Any, true_graph: Any, false_graph: Any, operands: list[Any]
) -> list[Expr]:
    operands = list(operands)
    if isinstance(pred, SymInt) and pred.static is None:
        pred = ctx.importer.sym_tensor(pred.expr)
    if not isinstance(pred, Expr):  # known at export: only the taken branch exists
        taken = true_graph if bool(pred) else false_graph
        return list(_values(ctx, subgraph(ctx, taken, operands)).fields)
    if ctx.shape(pred) != ():
        pred = ctx.emit(_scalar_bool(ctx, pred))
    pred = ctx.cast(pred, "bool")
    (output,) = [n for n in true_graph.graph.nodes if n.op == "output"]
    single = len(output.args[0]) == 1  # then the branches give the value, not a 1-tuple

    def branch(graph: Any) -> Callable[[], Expr]:
        def build() -> Expr:
            values = _values(ctx, subgraph(ctx, graph, operands))
            return values.fields[0] if single else values

        return build

    out = ctx.importer.builder.emit(
        If(pred, block(ctx, branch(true_graph)), block(ctx, branch(false_graph)))
    )
    if single:
        return [out]
    count = len(infer_type(out).fields)  # type: ignore[attr-defined]
    return [ctx.emit(TupleGetItem(out, k)) for k in range(count)]


def _scalar_bool(ctx: NodeContext, pred: Expr) -> Expr:
    from rvm import op

    return op.reshape(pred, [])


@converter("higher_order.while_loop")
def _while_loop(
    ctx: NodeContext, cond_graph: Any, body_graph: Any, carried: list[Any], additional: list[Any]
) -> list[Expr]:
    inits = [ctx.scalar(v) if not isinstance(v, Expr) else v for v in carried]
    extra = list(additional)
    types = [infer_type(v) for v in inits]
    for _ in range(4):  # widen the parameter types until the body agrees
        func, fvar, end_types = _loop_function(ctx, cond_graph, body_graph, types, extra)
        joined = [join_types(a, b) for a, b in zip(types, end_types)]
        if joined == types:
            break
        types = joined
    else:
        ctx.fail(f"the loop-carried types do not settle: {types} then {end_types}")
    builder = ctx.importer.builder
    builder.bind(fvar, func)
    result = builder.emit(Call(fvar, tuple(inits)))
    return [ctx.emit(TupleGetItem(result, k)) for k in range(len(inits))]


def _loop_function(
    ctx: NodeContext, cond_graph: Any, body_graph: Any, types: list[Any], extra: list[Any]
) -> tuple[Function, Var, list[Any]]:
    """One build of the loop function for the given carried types."""
    name = ctx.importer.name
    params = [Var(name("carried"), t) for t in types]
    fvar = Var(name("while_loop"))
    end_types: list[Any] = []

    def again() -> Expr:
        outs = [ctx.scalar(v) for v in subgraph(ctx, body_graph, [*params, *extra])]
        outs = [_like(ctx, v, t) for v, t in zip(outs, types)]
        end_types.extend(infer_type(v) for v in outs)
        return ctx.importer.builder.emit(Call(fvar, tuple(outs)))

    def body() -> Expr:
        (test,) = subgraph(ctx, cond_graph, [*params, *extra])
        test = ctx.scalar(test)
        if ctx.shape(test) != ():
            test = ctx.emit(_scalar_bool(ctx, test))
        test = ctx.cast(test, "bool")
        return If(test, block(ctx, again), block(ctx, lambda: Tuple(tuple(params))))

    return Function(tuple(params), block(ctx, body)), fvar, end_types


def _like(ctx: NodeContext, value: Expr, ty: Any) -> Expr:
    """``value`` in the dtype of the carried type ``ty`` (torch keeps a carried dtype)."""
    if isinstance(ty, TensorType) and ty.dtype is not None:
        return ctx.cast(value, ty.dtype)
    return value
