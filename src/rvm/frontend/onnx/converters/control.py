"""Control-flow ONNX ops: If, Loop and Scan.

Subgraphs (If branches, Loop and Scan bodies) are converted in a child `Scope` of the node's
scope, so they refer to the values of every enclosing graph by name; in the IR such a value is
a free variable of the branch or loop function, which lambda lifting turns into a captured one.

- ``If`` becomes an IR ``If`` whose branches are SeqExprs, so only the taken branch runs. A
  condition known at import converts the taken branch alone, inline.
- ``Loop`` becomes a local tail-recursive function, as rvm script's ``while`` does::

      def loop(i, cond, v..., acc...):
          if i < M and cond:
              <body>
              return loop(i + 1, cond_out, v_out..., concat(acc, [scan_out])...)
          else:
              return (i, cond, v..., acc...)

  The self call is in tail position, so the VM runs it as a jump: constant stack space at any
  trip count. The trip count may be absent; an absent condition starts true. Scan outputs
  grow by one concat per iteration, which copies O(n^2) elements over n iterations: fine for
  short scans, slow for long loops that produce scan outputs (loops without them are not
  affected).
- ``Scan`` (opset 9 semantics) is the same loop over the slices of its scan inputs, which are
  moved to axis 0 (and reversed) first; its scan outputs are moved back after. Scan-8 has a
  batch axis first: one such loop per batch entry (a static batch), results stacked.

A loop's parameter types start from the initial values and widen (to unknown dimensions) until
the body gives back values of the same types.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm import op
from rvm.frontend.onnx.context import NodeContext, Scope
from rvm.frontend.onnx.converters.optional import like
from rvm.frontend.onnx.converters.subgraph import as_scalar, block, convert_graph, tail_loop
from rvm.frontend.onnx.registry import converter
from rvm.ir import (
    Expr,
    If,
    Tuple,
    TupleGetItem,
    infer_type,
)
from rvm.ir import const as ir_const

_VERSIONS = (1, 11, 13, 16, 19, 21, 23, 24, 25)


def _pack(values: Sequence[Expr]) -> Expr:
    return values[0] if len(values) == 1 else Tuple(tuple(values))


def _unpack(ctx: NodeContext, value: Expr, count: int) -> list[Expr]:
    if count == 1:
        return [value]
    return [ctx.emit(TupleGetItem(value, k)) for k in range(count)]


@converter("If", since=_VERSIONS)
def _if(ctx: NodeContext) -> list[Expr]:
    then_graph, else_graph = ctx.attr("then_branch"), ctx.attr("else_branch")
    known = ctx.const(0)
    if known is not None:  # only the taken branch exists
        taken = then_graph if bool(known.item()) else else_graph
        return convert_graph(ctx, taken, Scope(ctx.scope))
    cond = as_scalar(ctx, ctx.input(0), "bool")

    def branch(graph: object) -> Expr:
        return block(ctx, lambda: _pack(convert_graph(ctx, graph, Scope(ctx.scope))))

    out = ctx.emitter.builder.emit(If(cond, branch(then_graph), branch(else_graph)))
    return _unpack(ctx, out, len(then_graph.output))


@converter("Loop", since=_VERSIONS)
def _loop(ctx: NodeContext) -> list[Expr]:
    body = ctx.attr("body")
    trip, cond = ctx.optional(0), ctx.optional(1)
    inits = [ctx.input(k) for k in range(2, len(ctx.inputs))]
    n_scan = len(body.output) - 1 - len(inits)
    names = [i.name for i in body.input]
    if len(names) != 2 + len(inits) or n_scan < 0:
        ctx.fail(
            f"the body takes {len(names)} inputs and gives {len(body.output)} outputs; "
            f"with {len(inits)} loop-carried values it must take {2 + len(inits)} and give "
            f"at least {1 + len(inits)}"
        )

    def step(i: Expr, cond_in: Expr | None, carried: list[Expr]):
        scope = Scope(ctx.scope)
        scope.bind(names[0], i)
        scope.bind(names[1], cond_in if cond_in is not None else ir_const(True, "bool"))
        for name, value in zip(names[2:], carried):
            scope.bind(name, value)
        outs = convert_graph(ctx, body, scope)
        # a body may give back the element of a loop-carried optional: wrapped again
        carried_out = [like(ctx, v, infer_type(c)) for v, c in zip(outs[1:], carried)]
        return outs[0], carried_out, outs[1 + len(inits) :]

    trip = None if trip is None else as_scalar(ctx, trip, "int64")
    # An absent condition starts true; the body's condition still ends the loop (as ONNX
    # Runtime and onnx.reference run it).
    cond = ir_const(True, "bool") if cond is None else as_scalar(ctx, cond, "bool")
    return tail_loop(ctx, trip, cond, inits, n_scan, step)


# -- Scan ---------------------------------------------------------------------------------------
def _reverse0(x: Expr) -> Expr:
    return op.strided_slice(x, [-1], [-(2**63)], [-1], [0])


def _to_front(ctx: NodeContext, x: Expr, axis: int, reverse: bool) -> Expr:
    rank = len(ctx.shape(x))
    axis %= rank
    if axis:
        x = ctx.emit(op.transpose(x, [axis, *(a for a in range(rank) if a != axis)]))
    return ctx.emit(_reverse0(x)) if reverse else x


def _from_front(ctx: NodeContext, y: Expr, axis: int, reverse: bool) -> Expr:
    if reverse:
        y = ctx.emit(_reverse0(y))
    rank = len(ctx.shape(y))
    axis %= rank
    if axis:
        perm = [*range(1, axis + 1), 0, *range(axis + 1, rank)]
        y = ctx.emit(op.transpose(y, perm))
    return y


@converter("Scan", since=(9, 11, 16, 19, 21, 23, 24, 25))
def _scan(ctx: NodeContext) -> list[Expr]:
    body = ctx.attr("body")
    m = ctx.attr("num_scan_inputs")
    n_state = len(ctx.inputs) - m
    states = [ctx.input(k) for k in range(n_state)]
    n_out = len(body.output) - n_state
    in_dirs = ctx.attr("scan_input_directions", [0] * m)
    in_axes = ctx.attr("scan_input_axes", [0] * m)
    out_dirs = ctx.attr("scan_output_directions", [0] * n_out)
    out_axes = ctx.attr("scan_output_axes", [0] * n_out)
    xs = [_to_front(ctx, ctx.input(n_state + k), in_axes[k], bool(in_dirs[k])) for k in range(m)]
    results = _scan_loop(ctx, body, states, xs)
    scans = [
        _from_front(ctx, y, out_axes[k], bool(out_dirs[k])) for k, y in enumerate(results[n_state:])
    ]
    return [*results[:n_state], *scans]


@converter("Scan", since=8)
def _scan_v8(ctx: NodeContext) -> list[Expr]:
    """Scan-8: every input has a batch axis 0 (scanned along axis 1); the batch is unrolled."""
    body = ctx.attr("body")
    if ctx.optional(0) is not None:
        ctx.fail("sequence_lens is not supported (every batch entry scans its whole length)")
    m = ctx.attr("num_scan_inputs")
    states = [ctx.input(k) for k in range(1, len(ctx.inputs) - m)]
    scanned = [ctx.input(k) for k in range(len(ctx.inputs) - m, len(ctx.inputs))]
    dirs = ctx.attr("directions", [0] * m)
    batch = ctx.shape(scanned[0])[0]
    if not isinstance(batch, int):
        ctx.fail(f"needs a static batch size, got shape {ctx.shape(scanned[0])}")
    per_entry = []
    for b in range(batch):
        index = ir_const(b, "int64")
        entry = [ctx.emit(op.take(x, index, axis=0)) for x in states]
        xs = [
            _to_front(ctx, ctx.emit(op.take(x, index, axis=0)), 0, bool(d))
            for x, d in zip(scanned, dirs)
        ]
        per_entry.append(_scan_loop(ctx, body, entry, xs))
    return [ctx.emit(op.stack(list(outs), axis=0)) for outs in zip(*per_entry)]


def _scan_loop(ctx: NodeContext, body: object, states: list[Expr], xs: list[Expr]) -> list[Expr]:
    """The final states and the stacked scan outputs of ``body`` over axis 0 of ``xs``."""
    n_state = len(states)
    n_out = len(body.output) - n_state  # type: ignore[attr-defined]
    trip = ctx.emit(op.take(op.shape_of(xs[0]), ir_const(0, "int64")))
    names = [i.name for i in body.input]  # type: ignore[attr-defined]

    def step(i: Expr, _cond: Expr | None, carried: list[Expr]):
        scope = Scope(ctx.scope)
        slices = [ctx.emit(op.take(x, i, axis=0)) for x in xs]
        for name, value in zip(names, [*carried, *slices]):
            scope.bind(name, value)
        outs = convert_graph(ctx, body, scope)
        return None, outs[:n_state], outs[n_state:]

    return tail_loop(ctx, trip, None, states, n_out, step)
