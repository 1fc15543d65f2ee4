"""fuse_ops: merge chains of primitive calls into fused primitive functions (TVM's FuseOps).

Needs: a legalized module (`legalize`): op calls only inside primitive functions, whose
``attrs["pattern"]`` and body ops give their fusion kinds.

Guarantees: the same program, where each straight-line region's producer -> consumer chains of
primitive calls are one call of a fused primitive function. Its body is the group's ops in
order, its parameters the group's external inputs (0-d constants stay inside); it is named
``fused_`` + the op names joined by ``_`` (unique), with attrs ``primitive``, ``pattern`` (the
largest kind) and ``ops``; equal fused functions are one function. Primitive functions no call
uses any more are removed. ``opt_level=0`` returns the module unchanged.

Algorithm: walk each region's bindings in order; every primitive call starts a group. A
consumer call absorbs the group producing one of its arguments when that value is used by the
consumer only (not elsewhere: not returned, not in a tuple, not in a branch) and the kinds allow
it (`_can_merge`): elementwise/broadcast/injective chains fuse; a REDUCTION absorbs
elementwise/broadcast/injective producers (a prologue) and elementwise/broadcast consumers (an
epilogue); OUT_ELEMWISE_FUSABLE (matmul, conv) takes an elementwise/broadcast epilogue but
absorbs no producer; a group holds at most one anchor (REDUCTION or OUT_ELEMWISE_FUSABLE) and
at most `MAX_GROUP_OPS` ops; OPAQUE never fuses; a group whose inputs are all constants does not
join a group that has other inputs, so that `fold_constant` can still evaluate it; a lone
concat whose pieces are runs of its output (`rvm.transform.concat_plan.placeable`) joins no
consumer, so that `memory_plan` can write it in place, nor does a lone slice that is one run of
its input (`rvm.transform.concat_plan.slice_offset`), which `memory_plan` makes a view.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from rvm.ir import expr as E
from rvm.ir.functor import ExprMutator
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.ir.op import OpPattern
from rvm.transform.concat_plan import concat_axis, placeable, slice_offset
from rvm.transform.legalize import (
    PrimitiveTable,
    count_uses,
    map_functions,
    map_regions,
    primitive_attrs,
    primitive_callee,
)

logger = logging.getLogger("rvm.transform")

MAX_GROUP_OPS = 16
_ANCHORS = (OpPattern.REDUCTION, OpPattern.OUT_ELEMWISE_FUSABLE)


@dataclass
class _Group:
    """Bindings (region indices, ascending) fused into one kernel and their ops' kinds."""

    members: list[int]
    patterns: list[int]
    ops: list[str]
    anchor: int | None = None
    consumer_anchor: int | None = field(default=None)  # the anchor of the group's last call
    constant: bool = False  # every input is a constant: fold_constant will evaluate it

    @property
    def max_pattern(self) -> int:
        return max(self.patterns, default=int(OpPattern.ELEMWISE))


def fuse_ops(mod: IRModule, *, opt_level: int = 2) -> IRModule:
    """Fuse chains of primitive calls of ``mod`` (see the module docstring)."""
    if opt_level <= 0:
        return mod
    table = PrimitiveTable(mod)
    before = _count_calls(mod)

    def rewrite(name: str, func: E.Function) -> E.Function:
        uses = count_uses(func.body)

        def region(bindings: list[E.VarBinding], body: E.Expr, depth: int):
            return _fuse_region(bindings, table, uses), body

        body = map_regions(func.body, region)
        if body is func.body:
            return func
        return E.Function(func.params, body, func.ret_type, func.attrs)

    replaced = map_functions(mod, rewrite)
    out = table.module(replaced, drop=_unused_primitives(table.funcs, replaced))
    after = _count_calls(out)
    logger.debug(
        "fuse_ops: %d kernel calls -> %d (%d primitive functions -> %d)",
        before[0],
        after[0],
        before[1],
        after[1],
    )
    return out


def _count_calls(mod: IRModule) -> tuple[int, int]:
    """(primitive call sites, primitive functions) of ``mod``."""
    funcs = mod.functions
    calls = 0
    for f in funcs.values():
        if not f.is_primitive:
            calls += sum(n for v, n in _callee_uses(f, funcs).items())
    return calls, sum(1 for f in funcs.values() if f.is_primitive)


def _callee_uses(func: E.Function, funcs: dict[str, E.Function]) -> dict[str, int]:
    out: dict[str, int] = {}
    stack: list[E.Expr] = [func.body]
    while stack:
        e = stack.pop()
        if isinstance(e, E.SeqExpr):
            stack.extend(b.value for b in e.bindings)
            stack.append(e.body)
        elif isinstance(e, E.If):
            stack.extend((e.true_branch, e.false_branch))
        elif isinstance(e, E.Match):
            stack.extend(c.body for c in e.clauses)
        elif primitive_callee(e, funcs) is not None:
            out[e.callee.name] = out.get(e.callee.name, 0) + 1  # type: ignore[attr-defined]
    return out


def _unused_primitives(funcs: dict[str, E.Function], replaced: dict[str, E.Function]) -> set:
    """Private primitive functions that no non-primitive function calls."""
    used: set[str] = set()
    for name, f in funcs.items():
        if not f.is_primitive:
            used.update(_callee_uses(replaced.get(name, f), funcs))
    return {
        n for n, f in funcs.items() if f.is_primitive and f.attrs.get("private") and n not in used
    }


def _prim_info(func: E.Function) -> tuple[list[int], list[str]]:
    """The kinds and names of the ops in a primitive function's body."""
    patterns, names = [], []
    for b in _prim_bindings(func)[0]:
        if isinstance(b.value, E.Call) and isinstance(b.value.callee, E.Op):
            patterns.append(int(b.value.callee.pattern))
            names.append(b.value.callee.name)
    if not patterns:
        patterns.append(int(func.attrs.get("pattern", OpPattern.OPAQUE)))
    return patterns, list(func.attrs.get("ops", names))


def _prim_bindings(func: E.Function) -> tuple[list[E.VarBinding], E.Expr]:
    if isinstance(func.body, E.SeqExpr):
        return list(func.body.bindings), func.body.body
    result = E.Var("lv0")
    return [E.VarBinding(result, func.body)], result


def _anchor(patterns: list[int]) -> int | None:
    found = [p for p in patterns if p in _ANCHORS]
    return found[0] if found else None


def _can_merge(p: _Group, c: _Group) -> bool:
    """Whether producer group ``p`` may join the group ``c`` of the call consuming it."""
    if max(p.max_pattern, c.max_pattern) >= OpPattern.OPAQUE:
        return False
    if len(p.ops) + len(c.ops) > MAX_GROUP_OPS or (p.constant and not c.constant):
        return False  # (a group on constants stays apart so that it folds)
    if p.anchor is not None and c.anchor is not None:
        return False
    if p.anchor is not None:  # c is p's epilogue
        return c.max_pattern <= OpPattern.BROADCAST
    if c.consumer_anchor == OpPattern.OUT_ELEMWISE_FUSABLE:  # matmul/conv take no prologue
        return False
    if c.consumer_anchor == OpPattern.REDUCTION:  # a reduction's prologue
        return p.max_pattern <= OpPattern.INJECTIVE
    if c.anchor is not None:  # a side input of an anchor's epilogue
        return p.max_pattern <= OpPattern.BROADCAST
    return p.max_pattern <= OpPattern.INJECTIVE and c.max_pattern <= OpPattern.INJECTIVE


def _group_region(
    bindings: list[E.VarBinding], funcs: dict[str, E.Function], uses: dict[E.Var, int]
) -> dict[int, _Group]:
    """The group of each primitive-call binding (by region index) after greedy merging."""
    group_of: dict[int, _Group] = {}
    producer: dict[E.Var, int] = {}  # a primitive call's result -> its binding index
    constants: set[E.Expr] = set()  # variables bound to constants or to constant groups
    for i, b in enumerate(bindings):
        if isinstance(b.value, E.Constant):
            constants.add(b.var)
        prim = primitive_callee(b.value, funcs)
        if prim is None:
            continue
        patterns, ops = _prim_info(prim)
        anchor = _anchor(patterns)
        group = _Group([i], patterns, ops, anchor, anchor)
        args: list[E.Expr] = list(b.value.args)  # type: ignore[attr-defined]
        group.constant = all(isinstance(a, E.Constant) or a in constants for a in args)
        if group.constant:
            constants.add(b.var)
        for a in dict.fromkeys(args):
            j = producer.get(a) if isinstance(a, E.Var) else None
            if j is None or uses.get(a, 0) != sum(1 for x in args if x is a):
                continue
            p = group_of[j]
            if p.members[-1] != j or p is group or not _can_merge(p, group):
                continue
            if p.ops == ["concat"] and _placed_concat(bindings[j], funcs):
                continue  # the memory plan may drop it (`rvm.transform.concat_plan`)
            if p.ops == ["strided_slice"] and slice_offset(bindings[j].value, funcs) is not None:
                continue  # a run of its input: the memory plan makes it a view
            group.members = sorted(p.members + group.members)
            group.patterns = p.patterns + group.patterns
            group.ops = p.ops + group.ops
            group.anchor = p.anchor if p.anchor is not None else group.anchor
            for m in p.members:
                group_of[m] = group
        group_of[i] = group
        producer[b.var] = i
    return group_of


def _placed_concat(b: E.VarBinding, funcs: dict[str, E.Function]) -> bool:
    """Whether binding ``b`` calls a lone concat that the memory plan could write in place."""
    prim = primitive_callee(b.value, funcs)
    axis = concat_axis(prim) if prim is not None else None
    return axis is not None and placeable(b.var.type, axis)


def _fuse_region(
    bindings: list[E.VarBinding], table: PrimitiveTable, uses: dict[E.Var, int]
) -> list[E.VarBinding]:
    group_of = _group_region(bindings, table.funcs, uses)
    if all(len(g.members) == 1 for g in group_of.values()):
        return bindings
    out = []
    for i, b in enumerate(bindings):
        group = group_of.get(i)
        if group is None or len(group.members) == 1:
            out.append(b)
        elif group.members[-1] == i:
            members = [bindings[m] for m in group.members]
            out.append(_fused_binding(members, group, table))
    return out


def _fused_binding(
    members: list[E.VarBinding], group: _Group, table: PrimitiveTable
) -> E.VarBinding:
    """``y = fused_f(external inputs)`` for a group, adding ``fused_f`` to the table."""
    params: dict[E.Expr, E.Var] = {}
    local: dict[E.Var, E.Expr] = {}
    body: list[E.VarBinding] = []
    mutator = ExprMutator()
    ops: list[str] = []  # in binding order
    for b in members:
        call: E.Call = b.value  # type: ignore[assignment]
        prim = table.funcs[call.callee.name]
        ops.extend(_prim_info(prim)[1])
        env = mutator.var_map
        for p, a in zip(prim.params, call.args):
            env[p] = _input(a, local, params)
        prim_bindings, prim_result = _prim_bindings(prim)
        for pb in prim_bindings:
            var = E.Var(f"lv{len(body)}")
            body.append(E.VarBinding(var, mutator.visit(pb.value)))
            env[pb.var] = var
        local[b.var] = mutator.visit(prim_result)
    result = local[members[-1].var]
    attrs = primitive_attrs(group.max_pattern, tuple(ops))
    func = E.Function(tuple(params.values()), E.seq(body, result), None, attrs)
    infer_type(func)
    name = "fused_" + "_".join(ops)
    gv = table.add(name[:80], func)
    return E.VarBinding(members[-1].var, E.Call(gv, tuple(params)))


def _input(a: E.Expr, local: dict[E.Var, E.Expr], params: dict[E.Expr, E.Var]) -> E.Expr:
    """What argument ``a`` of a group member is inside the fused function."""
    if isinstance(a, E.Var) and a in local:
        return local[a]
    if isinstance(a, E.Constant) and a.data.ndim == 0:
        return a
    p = params.get(a)
    if p is None:
        p = params[a] = E.Var(f"p{len(params)}", a.type or infer_type(a))
    return p
