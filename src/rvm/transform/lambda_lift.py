"""Lambda lifting: every nested Function becomes a module function.

Needs: normal form (a Function literal only as the value of its own binding, ``f = Function``)
with types inferred (`infer_shapes`), so captured variables and closures have types.

Guarantees: no Function literal is left except module-level functions. A local function ``f``
defined in ``outer`` becomes the private module function ``{outer}_{f}`` (attrs
``{"lifted": True}``) whose parameters are fresh copies of the variables it captures, then its
own parameters. A call of a variable known to hold a local function (in its scope, including
its own recursive calls and calls from other local functions) becomes a direct call
``{outer}_{f}(*captured, *args)``, so a desugared while loop becomes a direct tail-recursive
module function. If ``f`` is used any other way (returned, stored, passed), its binding becomes
``f = vm.make_closure({outer}_{f}, *captured)`` (attrs ``{"type": <f's FuncType>}``); a call of
any other variable (a parameter or a closure read out of a value) becomes
``vm.invoke_closure(var, *args)``.

Algorithm: top-down, one rewriter per function body. At ``f = Function(...)`` the captured
variables are f's free variables, where a known local function ``g`` that f calls contributes
g's own captured variables instead (and ``g`` itself too when f also uses it as a value). The
lifted body is rewritten with the captured variables renamed to the new parameters, which is
where functions nested deeper are lifted in turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from rvm.errors import IRError
from rvm.ir import expr as E
from rvm.ir.analysis import free_vars
from rvm.ir.functor import ExprMutator, ExprVisitor
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.ir.types import FuncType
from rvm.transform.vm_ops import invoke_closure, make_closure


def lambda_lift(mod: IRModule) -> IRModule:
    """Return ``mod`` with every nested function lifted to the module."""
    state = _State(set(mod))
    funcs: dict[str, E.Function] = {}
    for name, func in mod.items():
        uses = _Uses()
        uses.visit(func)
        state.escaping = uses.values
        body = _Rewriter(state, name, {}).visit(func.body)
        funcs[name] = (
            func if body is func.body else E.Function(func.params, body, func.ret_type, func.attrs)
        )
        funcs.update(state.lifted)
        state.lifted.clear()
    gvars = {**mod.global_vars, **state.gvars}
    return IRModule(funcs, mod.adts, gvars, mod.attrs)


@dataclass
class _Local:
    """What is known of a local function variable: its lifted name and captured variables."""

    gv: E.GlobalVar
    captured: tuple[E.Var, ...]


class _State:
    """Shared by the rewriters of one module: names taken, lifted functions, known locals."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.gvars: dict[str, E.GlobalVar] = {}
        self.lifted: dict[str, E.Function] = {}
        self.known: dict[E.Var, _Local] = {}
        self.escaping: set[E.Var] = set()

    def global_var(self, hint: str) -> E.GlobalVar:
        name, i = hint, 1
        while name in self.names:
            name, i = f"{hint}_{i}", i + 1
        self.names.add(name)
        gv = self.gvars[name] = E.GlobalVar(name)
        return gv


class _Uses(ExprVisitor):
    """Variables used as a callee and variables used as values (anything else)."""

    def __init__(self) -> None:
        super().__init__()
        self.callees: set[E.Var] = set()
        self.values: set[E.Var] = set()

    def visit_var(self, v: E.Var) -> None:
        self.values.add(v)

    def visit_call(self, c: E.Call) -> None:
        if isinstance(c.callee, E.Var):
            self.callees.add(c.callee)
        elif isinstance(c.callee, E.Expr):
            self.visit(c.callee)
        for a in c.args:
            self.visit(a)


class _Rewriter(ExprMutator):
    """Rewrites one function body; ``subst`` renames captured variables to parameters."""

    def __init__(self, state: _State, outer: str, subst: dict[E.Var, E.Expr]) -> None:
        super().__init__()
        self.state = state
        self.outer = outer
        self.var_map = subst

    def visit_binding(self, b: E.VarBinding) -> list[E.VarBinding]:
        if not isinstance(b.value, E.Function):
            return super().visit_binding(b)
        local = self._lift(b.var, b.value)
        if b.var not in self.state.escaping:
            return []
        return [E.VarBinding(b.var, self._closure(local, _func_type(b.var, b.value)))]

    def visit_function(self, f: E.Function) -> E.Expr:
        raise IRError("lambda_lift needs normal form: a function literal outside a binding")

    def visit_call(self, c: E.Call) -> E.Expr:
        args = tuple(self.visit(a) for a in c.args)
        callee = c.callee
        if isinstance(callee, E.Var):
            local = self.state.known.get(callee)
            if local is not None:
                captured = tuple(self.visit(v) for v in local.captured)
                return E.Call(local.gv, (*captured, *args), c.attrs)
            return E.Call(invoke_closure, (self.visit(callee), *args), c.attrs)
        new_callee = self.visit(callee) if isinstance(callee, E.Expr) else callee
        if new_callee is callee and all(a is b for a, b in zip(args, c.args)):
            return c
        return E.Call(new_callee, args, c.attrs)

    def _closure(self, local: _Local, ty: FuncType) -> E.Call:
        captured = tuple(self.visit(v) for v in local.captured)
        return E.Call(make_closure, (local.gv, *captured), {"type": ty})

    def _lift(self, var: E.Var, func: E.Function) -> _Local:
        """Lift ``var = func`` to a module function and return what calls of it need."""
        known = self.state.known
        uses = _Uses()
        uses.visit(func)
        captured: dict[E.Var, None] = {}
        for v in free_vars(func):
            if v is var:
                continue
            inner = known.get(v)
            if inner is None or v in uses.values:
                captured[v] = None
            if inner is not None and v in uses.callees:
                captured.update(dict.fromkeys(inner.captured))
        gv = self.state.global_var(f"{self.outer}_{var.name}")
        local = known[var] = _Local(gv, tuple(captured))
        params = tuple(E.Var(v.name, v.type) for v in local.captured)
        subst: dict[E.Var, E.Expr] = dict(zip(local.captured, params))
        prologue: list[E.VarBinding] = []
        if var in uses.values:  # the function refers to itself as a value: rebuild its closure
            self_var = E.Var(var.name, var.type)
            subst[var] = self_var
            prologue.append(
                E.VarBinding(
                    self_var,
                    E.Call(make_closure, (local.gv, *params), {"type": _func_type(var, func)}),
                )
            )
        inner_rewriter = _Rewriter(self.state, local.gv.name, subst)
        body = inner_rewriter.visit(func.body)
        if prologue:
            body = _prepend(prologue, body)
        attrs = {**func.attrs, "lifted": True}
        self.state.lifted[local.gv.name] = E.Function(
            (*params, *func.params), body, func.ret_type, attrs
        )
        return local


def _func_type(var: E.Var, func: E.Function) -> FuncType:
    ty = var.type if isinstance(var.type, FuncType) else infer_type(func)
    if not isinstance(ty, FuncType):
        raise IRError(f"local function {var.name} has no function type")
    return ty


def _prepend(bindings: list[E.VarBinding], body: E.Expr) -> E.SeqExpr:
    if isinstance(body, E.SeqExpr):
        return E.SeqExpr((E.BindingBlock(tuple(bindings)), *body.blocks), body.body)
    return E.seq(bindings, body)
