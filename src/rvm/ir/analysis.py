"""Analyses: free variables, called global functions, bound variables."""

from __future__ import annotations

from rvm.ir import expr as E
from rvm.ir.functor import ExprVisitor


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
