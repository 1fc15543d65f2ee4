"""legalize: every op call becomes a call of a primitive function holding that op.

Needs: a lambda-lifted module in A-normal form: function bodies are SeqExprs of bindings, If and
Match branches are SeqExprs, call arguments are atoms.

Guarantees: outside primitive functions no binding calls an `rvm.op` op (``vm.*`` ops stay).
Each ``y = op.X(args, attrs)`` is now ``y = fused_X(inputs)``, a call of a private module
function with ``attrs["primitive"]``, ``attrs["pattern"]`` (the op's `OpPattern`) and
``attrs["ops"] = ("X",)`` whose body is ``z = op.X(...); z``. 0-d constant arguments move into
the primitive; every other argument (once per distinct argument) becomes a parameter typed as
the argument (symbolic dimensions keep the caller's names: kernels read dimensions from their
arrays). An op whose attributes or result type name a dimension its arguments do not carry
(``full(("n", 4))``, ``broadcast_to(x, ("n", 4))``, ``dynamic_arange(..., length="seq")``)
also gets, as an extra parameter, the enclosing function's first parameter whose shape has
that dimension (else the first value bound before the call that has it: a dimension a packed
call's result or `rvm.dim` bound): the kernel reads the dimension from it, and the caller
knows the result's shape. Structurally equal primitive functions are
one module function. An op call in result position is bound to a variable first. An
avg_pool2d whose one window is its whole static map is held as ``global_avg_pool2d``.

Algorithm: walk each straight-line region (`map_regions`) and rewrite op-call bindings; new
functions go through a `PrimitiveTable`, which finds an equal function by structural hash.

This module also holds what the lowering passes (fuse_ops, fold_constant, memory_plan, kill)
share: `map_regions`, `PrimitiveTable`, `primitive_callee`, `count_uses`, `Namer`, `const_of`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rvm import op
from rvm.ir import expr as E
from rvm.ir.analysis import bound_vars
from rvm.ir.dims import DimExpr, symbols
from rvm.ir.functor import ExprVisitor
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.ir.structural import structural_equal, structural_hash
from rvm.ir.types import TensorType
from rvm.op.pool import whole_map_average

RegionFn = Callable[[list[E.VarBinding], E.Expr, int], tuple[list[E.VarBinding], E.Expr]]


# ---------------------------------------------------------------------------------------------
# Shared helpers of the lowering passes.


def map_regions(expr: E.Expr, fn: RegionFn, depth: int = 0) -> E.Expr:
    """Rewrite every straight-line region of ``expr`` with ``fn(bindings, result, depth)``.

    A region is a SeqExpr's bindings and result; branches of If and Match (and nested
    SeqExprs) are regions of their own, rewritten before the region that holds them. ``depth``
    is 0 for ``expr`` itself. A branch that is not a SeqExpr is a region without bindings.
    """
    if isinstance(expr, E.SeqExpr):
        bindings = [_rebind(b, _map_nested(b.value, fn, depth + 1)) for b in expr.bindings]
    else:
        bindings = []
    body = _map_nested(expr.body if isinstance(expr, E.SeqExpr) else expr, fn, depth + 1)
    new_bindings, new_body = fn(bindings, body, depth)
    if not new_bindings and not isinstance(expr, E.SeqExpr):
        return new_body
    if isinstance(expr, E.SeqExpr) and new_body is expr.body and _same(new_bindings, expr):
        return expr
    return E.seq(new_bindings, new_body)


def _same(bindings: list[E.VarBinding], seq: E.SeqExpr) -> bool:
    old = list(seq.bindings)
    return len(old) == len(bindings) and all(a is b for a, b in zip(old, bindings))


def _rebind(b: E.VarBinding, value: E.Expr) -> E.VarBinding:
    return b if value is b.value else E.VarBinding(b.var, value)


def _map_nested(value: E.Expr, fn: RegionFn, depth: int) -> E.Expr:
    """``value`` with the regions inside it (branches) rewritten."""
    if isinstance(value, E.If):
        t = map_regions(value.true_branch, fn, depth)
        f = map_regions(value.false_branch, fn, depth)
        if t is value.true_branch and f is value.false_branch:
            return value
        return E.If(value.cond, t, f)
    if isinstance(value, E.Match):
        clauses = [E.Clause(c.pattern, map_regions(c.body, fn, depth)) for c in value.clauses]
        if all(a.body is b.body for a, b in zip(clauses, value.clauses)):
            return value
        return E.Match(value.data, tuple(clauses))
    if isinstance(value, E.SeqExpr):
        return map_regions(value, fn, depth)
    return value


def const_of(arg: E.Expr, consts: dict[E.Var, np.ndarray]) -> np.ndarray | None:
    """The array ``arg`` is: its data when a constant, the constant ``consts`` binds it to
    when a variable (a region's bindings of constants, as a pass walks them), else None."""
    if isinstance(arg, E.Constant):
        return arg.data
    return consts.get(arg) if isinstance(arg, E.Var) else None


def map_functions(mod: IRModule, fn: Callable[[str, E.Function], E.Function]) -> dict:
    """``{name: fn(name, func)}`` for every non-primitive function of ``mod``."""
    return {name: fn(name, f) for name, f in mod.items() if not f.is_primitive}


def map_function_regions(func: E.Function, fn: RegionFn) -> E.Function:
    """``func`` with every region of its body rewritten by ``fn`` (`map_regions`); ``func``
    itself when nothing changed."""
    body = map_regions(func.body, fn)
    if body is func.body:
        return func
    return E.Function(func.params, body, func.ret_type, func.attrs)


CountedRegionFn = Callable[[list[E.VarBinding]], tuple[list[E.VarBinding], int]]


def rewrite_counted(
    mod: IRModule, regions: Callable[[E.Function], CountedRegionFn]
) -> tuple[IRModule, int]:
    """``mod`` with the bindings of every region of its non-primitive functions rewritten by
    ``regions(func)`` (which returns them and how many rewrites it made), and the rewrites in
    all; ``mod`` itself when there were none."""
    total = 0

    def rewrite(name: str, func: E.Function) -> E.Function:
        fn = regions(func)

        def region(bindings: list[E.VarBinding], body: E.Expr, depth: int):  # type: ignore[no-untyped-def]
            nonlocal total
            out, n = fn(bindings)
            total += n
            return out, body

        return map_function_regions(func, region)

    funcs = map_functions(mod, rewrite)
    return (replace_changed(mod, funcs) if total else mod), total


def rewrite_with_uses(
    mod: IRModule, region: Callable[[list[E.VarBinding], dict[E.Var, int]], tuple[list, int]]
) -> tuple[IRModule, int]:
    """`rewrite_counted` by ``region(bindings, uses)``, ``uses`` the use counts of the
    function that holds the region (`count_uses`)."""

    def regions(func: E.Function) -> CountedRegionFn:
        uses = count_uses(func.body)
        return lambda bindings: region(bindings, uses)

    return rewrite_counted(mod, regions)


def splice(
    kept: list[E.VarBinding | None], extra: dict[int, list[E.VarBinding]]
) -> list[E.VarBinding]:
    """A region's bindings rewritten in place: ``kept`` (None where one goes) in order, the
    bindings ``extra[i]`` before position ``i``."""
    result: list[E.VarBinding] = []
    for i, b in enumerate(kept):
        result.extend(extra.get(i, ()))
        if b is not None:
            result.append(b)
    return result


def replace_changed(mod: IRModule, funcs: dict[str, E.Function]) -> IRModule:
    """``mod`` with those of ``funcs`` (`map_functions`' result) that are not its own."""
    return mod.with_functions({n: f for n, f in funcs.items() if f is not mod[n]})


def primitive_callee(value: E.Expr, funcs: dict[str, E.Function]) -> E.Function | None:
    """The primitive function ``value`` calls directly, or None."""
    if isinstance(value, E.Call) and isinstance(value.callee, E.GlobalVar):
        f = funcs.get(value.callee.name)
        if f is not None and f.is_primitive:
            return f
    return None


def is_op_call(value: E.Expr) -> bool:
    """True for a call of an `rvm.op` op (not a ``vm.*`` op)."""
    return (
        isinstance(value, E.Call)
        and isinstance(value.callee, E.Op)
        and not value.callee.name.startswith("vm.")
    )


class _UseCounter(ExprVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.uses: dict[E.Var, int] = {}

    def visit_var(self, v: E.Var) -> None:
        self.uses[v] = self.uses.get(v, 0) + 1


def count_uses(expr: E.Expr) -> dict[E.Var, int]:
    """How many times each variable occurs as a use in ``expr`` (nested regions included)."""
    counter = _UseCounter()
    counter.visit(expr)
    return counter.uses


class Namer:
    """Fresh variable names that do not clash with the names already in a function."""

    def __init__(self, func: E.Function | None = None) -> None:
        self.taken = {v.name for v in bound_vars(func)} if func is not None else set()

    def __call__(self, hint: str) -> str:
        i = 0
        name = hint
        while name in self.taken:
            i += 1
            name = f"{hint}{i}"
        self.taken.add(name)
        return name


class PrimitiveTable:
    """The functions of a module being rewritten: unique names, shared equal primitives."""

    def __init__(self, mod: IRModule) -> None:
        self.mod = mod
        self.funcs: dict[str, E.Function] = mod.functions
        self.gvars: dict[str, E.GlobalVar] = mod.global_vars
        self._by_hash: dict[int, list[str]] = {}
        for name, f in self.funcs.items():
            if f.is_primitive:
                self._by_hash.setdefault(structural_hash(f), []).append(name)

    def add(self, base: str, func: E.Function) -> E.GlobalVar:
        """The GlobalVar of a function equal to ``func``, adding ``func`` if there is none."""
        key = structural_hash(func)
        for name in self._by_hash.get(key, []):
            if structural_equal(self.funcs[name], func):
                return self.gvars[name]
        name, i = base, 0
        while name in self.funcs:
            i += 1
            name = f"{base}_{i}"
        gv = E.GlobalVar(name)
        gv.with_type(infer_type(func))  # callers' types infer before the module records it
        self.funcs[name], self.gvars[name] = func, gv
        self._by_hash.setdefault(key, []).append(name)
        return gv

    def module(self, replaced: dict[str, E.Function], drop: set[str] = frozenset()) -> IRModule:
        """The module with ``replaced`` functions, the added primitives, without ``drop``."""
        funcs = {n: replaced.get(n, f) for n, f in self.funcs.items() if n not in drop}
        gvars = {n: self.gvars[n] for n in funcs}
        return IRModule(funcs, self.mod.adts, gvars, self.mod.attrs)


def primitive_attrs(pattern: int, ops: tuple[str, ...]) -> dict:
    """The attributes every primitive function carries."""
    return {"primitive": True, "pattern": int(pattern), "ops": ops, "private": True}


def hoist_result(
    bindings: list[E.VarBinding], body: E.Expr, pred: Callable[[E.Expr], bool], name: str
) -> tuple[list[E.VarBinding], E.Expr]:
    """Bind a region result satisfying ``pred`` to a variable, so it is a binding too."""
    if not pred(body):
        return bindings, body
    var = E.Var(name)
    var.with_type(infer_type(body))
    return [*bindings, E.VarBinding(var, body)], var


# ---------------------------------------------------------------------------------------------
# The pass.


def legalize(mod: IRModule) -> IRModule:
    """Wrap every op call of ``mod`` in a primitive function (see the module docstring)."""
    table = PrimitiveTable(mod)

    def rewrite(name: str, func: E.Function) -> E.Function:
        params = _dim_binders(func.params)
        binders = dict(params)
        if isinstance(func.body, E.SeqExpr):  # values of the function's own scope, visible
            for b in func.body.bindings:  # in every nested region after them
                for d in _shape_names(b.var.type):
                    binders.setdefault(d, b.var)

        def region(
            bindings: list[E.VarBinding], body: E.Expr, depth: int
        ) -> tuple[list[E.VarBinding], E.Expr]:
            bindings, body = hoist_result(bindings, body, is_op_call, "out")
            # and this region's values, after each is bound (the function's own region sees
            # its values only once bound: a later one has no value yet)
            local = dict(params if depth == 0 else binders)
            out = []
            for b in bindings:
                if is_op_call(b.value):
                    value = _canonical(b.value)  # type: ignore[arg-type]
                    gv, args = _wrap_op_call(value, table, local)
                    out.append(E.VarBinding(b.var, E.Call(gv, tuple(args))))
                else:
                    out.append(b)
                for d in _shape_names(b.var.type):
                    local.setdefault(d, b.var)
            return out, body

        return map_function_regions(func, region)

    return table.module(map_functions(mod, rewrite))


def _canonical(call: E.Call) -> E.Call:
    """``call``, or the call of another op that computes the same faster: an average pool
    whose one window is the whole map is ``global_avg_pool2d`` (`rvm.op.pool.whole_map_average`;
    its float32 mean instead of the pool library's float64 window sums)."""
    if whole_map_average(call):
        new = op.global_avg_pool2d(call.args[0])
        infer_type(new)
        return new
    return call


def _dim_binders(params: tuple[E.Var, ...]) -> dict[str, E.Var]:
    """Each symbolic dimension of a function's tensor parameters: the first one that has it."""
    out: dict[str, E.Var] = {}
    for p in params:
        for d in _shape_names(p.type):
            out.setdefault(d, p)
    return out


def _shape_names(ty: object) -> list[str]:
    if isinstance(ty, TensorType) and ty.shape is not None:
        return [d for d in ty.shape if isinstance(d, str)]
    return []


def _attr_dims(attrs: dict) -> list[str]:
    """The symbolic dimensions a call's shape-like attributes name (``shape=("n", 4)``); its
    result's (`_wrap_op_call`) cover the rest (``dynamic_arange(..., length="seq")``)."""
    return [d for v in attrs.values() if isinstance(v, tuple) for d in v if isinstance(d, str)]


def _wrap_op_call(
    call: E.Call, table: PrimitiveTable, binders: dict[str, E.Var]
) -> tuple[E.GlobalVar, list[E.Expr]]:
    """The primitive function holding ``call`` (added to ``table``) and its call's arguments.

    ``binders`` gives, per symbolic dimension, a variable of the caller that carries it: one
    is passed in for every dimension the attributes name and no argument carries.
    """
    params: dict[E.Expr, E.Var] = {}
    inner: list[E.Expr] = []

    def param(a: E.Expr) -> E.Var:
        p = params.get(a)
        if p is None:
            p = params[a] = E.Var(f"p{len(params)}", a.type or infer_type(a))
        return p

    for a in call.args:
        if isinstance(a, E.Constant) and a.data.ndim == 0:
            inner.append(a)
        else:
            inner.append(param(a))

    def carry(d: str) -> bool:
        """Pass in a variable carrying ``d`` when no argument does: the kernel reads its
        shape."""
        if any(d in _shape_names(p.type) for p in params.values()):
            return True
        if d in binders:
            param(binders[d])
            return True
        return False

    for d in _attr_dims(call.attrs) + _shape_names(call.type or infer_type(call)):
        if not carry(d) and isinstance(d, DimExpr):  # past + seq: carry past and seq
            for name in sorted(symbols(d)):
                carry(name)
    op: E.Op = call.callee
    result = E.Var("lv0")
    body = E.seq([E.VarBinding(result, E.Call(op, tuple(inner), call.attrs))], result)
    func = E.Function(tuple(params.values()), body, None, primitive_attrs(op.pattern, (op.name,)))
    infer_type(func)
    return table.add(f"fused_{op.name}", func), list(params)
