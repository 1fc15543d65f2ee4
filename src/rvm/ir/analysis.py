"""Analyses: sub-expression walks, free variables, called global functions, bound variables."""

from __future__ import annotations

from collections.abc import Iterator

from rvm.ir import expr as E
from rvm.ir.functor import ExprVisitor


def children(node: E.Expr) -> list[E.Expr]:
    """The direct sub-expressions of ``node``, in evaluation order (a Function: its body)."""
    if isinstance(node, E.Call):
        callee = [node.callee] if isinstance(node.callee, E.Expr) else []
        return callee + list(node.args)
    if isinstance(node, E.Tuple):
        return list(node.fields)
    if isinstance(node, E.TupleGetItem):
        return [node.tuple_value]
    if isinstance(node, E.If):
        return [node.cond, node.true_branch, node.false_branch]
    if isinstance(node, E.Match):
        return [node.data, *(c.body for c in node.clauses)]
    if isinstance(node, E.SeqExpr):
        return [*(b.value for b in node.bindings), node.body]
    if isinstance(node, E.Function):
        return [node.body]
    return []


def walk(expr: E.Expr, *, into_functions: bool = True) -> Iterator[E.Expr]:
    """Every expression inside ``expr`` (itself included), with an explicit stack.

    With ``into_functions=False`` a Function literal is yielded but not entered.
    """
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if into_functions or not isinstance(node, E.Function):
            stack.extend(reversed(children(node)))


class _FreeVars(ExprVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.bound: set[E.Var] = set()
        self.free: dict[E.Var, None] = {}

    def visit_var_def(self, v: E.Var) -> None:
        self.bound.add(v)

    def visit_binding(self, b: E.VarBinding) -> None:
        self.visit_var_def(b.var)  # before the value: a local function may call itself
        self.visit(b.value)

    def visit_var(self, v: E.Var) -> None:
        if v not in self.bound:
            self.free[v] = None


def free_vars(expr: E.Expr) -> list[E.Var]:
    """Variables used in ``expr`` but bound outside it, in order of first use."""
    fv = _FreeVars()
    fv.visit(expr)
    return list(fv.free)


class _GlobalCalls(ExprVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, None] = {}

    def visit_global_var(self, gv: E.GlobalVar) -> None:
        self.found[gv.name] = None


def called_globals(expr: E.Expr) -> list[str]:
    """Names of module functions referenced in ``expr``, in order of first use."""
    v = _GlobalCalls()
    v.visit(expr)
    return list(v.found)


class _BoundVars(ExprVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.vars: list[E.Var] = []

    def visit_var_def(self, v: E.Var) -> None:
        self.vars.append(v)


def bound_vars(expr: E.Expr) -> list[E.Var]:
    """Every variable defined inside ``expr`` (parameters, bindings, pattern variables)."""
    v = _BoundVars()
    v.visit(expr)
    return v.vars
