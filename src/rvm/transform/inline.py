"""Inlining of small module functions.

Needs: lifted module (`lambda_lift`: no nested functions) in normal form.

Guarantees: a call ``x = g(a, b)`` of a module function ``g`` that is not recursive (directly
or mutually), not primitive, not marked ``noinline``, and small (at most ``max_bindings``
bindings, no If or Match) is replaced by g's bindings with fresh variables and g's parameters
replaced by the arguments; the result is bound to ``x``. The caller stays in normal form. Every
function stays in the module (`dead_code` removes unreferenced private ones).

Algorithm: functions in a cycle of the call graph are never inlined. Functions are rewritten
callees first (post-order over the call graph), so a callee is judged, and copied, after its own
calls were inlined: chains of small functions collapse in one pass.
"""

from __future__ import annotations

import logging

from rvm.ir import expr as E
from rvm.ir.analysis import bound_vars, called_globals
from rvm.ir.functor import ExprMutator
from rvm.ir.module import IRModule
from rvm.ir.types import TensorType, TupleType, Type

logger = logging.getLogger("rvm.transform")


def inline(mod: IRModule, *, max_bindings: int = 8) -> IRModule:
    """Return ``mod`` with calls of small non-recursive functions replaced by their bodies."""
    graph = {name: [c for c in called_globals(f) if c in mod] for name, f in mod.items()}
    recursive = _recursive(graph)
    funcs = mod.functions
    count = 0
    for name in _post_order(graph):
        func = funcs[name]
        if func.is_primitive:
            continue
        inliner = _Inliner(funcs, recursive, max_bindings, func)
        body = inliner.visit(func.body)
        if body is not func.body:
            funcs[name] = E.Function(func.params, body, func.ret_type, func.attrs)
            count += inliner.count
    if count:
        logger.debug("inline: %d calls inlined", count)
    return IRModule(funcs, mod.adts, mod.global_vars, mod.attrs)


def _recursive(graph: dict[str, list[str]]) -> set[str]:
    """Functions that can reach themselves through calls."""
    out = set()
    for start in graph:
        seen: set[str] = set()
        stack = list(graph[start])
        while stack:
            name = stack.pop()
            if name == start:
                out.add(start)
                break
            if name not in seen:
                seen.add(name)
                stack.extend(graph[name])
    return out


def _post_order(graph: dict[str, list[str]]) -> list[str]:
    """Every function after the functions it calls (cycles broken arbitrarily)."""
    order: list[str] = []
    seen: set[str] = set()
    for root in graph:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(graph[root]))]
        while stack:
            name, children = stack[-1]
            child = next(children, None)
            if child is None:
                order.append(name)
                stack.pop()
            elif child not in seen:
                seen.add(child)
                stack.append((child, iter(graph[child])))
    return order


def inlinable(func: E.Function, max_bindings: int) -> bool:
    """Small, straight-line, not primitive, not marked ``noinline``."""
    if func.is_primitive or func.attrs.get("noinline") or not isinstance(func.body, E.SeqExpr):
        return False
    bindings = list(func.body.bindings)
    if len(bindings) > max_bindings or isinstance(func.body.body, (E.If, E.Match, E.Function)):
        return False
    return not any(isinstance(b.value, (E.If, E.Match, E.Function, E.SeqExpr)) for b in bindings)


class _Inliner(ExprMutator):
    """Replaces eligible call bindings in one caller."""

    def __init__(
        self,
        funcs: dict[str, E.Function],
        recursive: set[str],
        max_bindings: int,
        caller: E.Function,
    ) -> None:
        super().__init__()
        self.funcs = funcs
        self.recursive = recursive
        self.max_bindings = max_bindings
        self.names = {v.name for v in bound_vars(caller)}
        self.count = 0

    def visit_binding(self, b: E.VarBinding) -> list[E.VarBinding]:
        value = b.value
        if isinstance(value, E.Call) and isinstance(value.callee, E.GlobalVar):
            callee = self.funcs.get(value.callee.name)
            if (
                callee is not None
                and value.callee.name not in self.recursive
                and len(callee.params) == len(value.args)
                and inlinable(callee, self.max_bindings)
            ):
                self.count += 1
                args = [self.visit(a) for a in value.args]
                return self._expand(b.var, callee, args)
        return super().visit_binding(b)

    def _expand(self, var: E.Var, callee: E.Function, args: list[E.Expr]) -> list[E.VarBinding]:
        """Callee's bindings renamed, the last one (or its result) bound to ``var``."""
        rename = _Renamer(dict(zip(callee.params, args)), self.names)
        body = callee.body
        assert isinstance(body, E.SeqExpr)
        bindings = list(body.bindings)
        last = bindings[-1] if bindings else None
        out = []
        for b in bindings:
            value = rename.visit(b.value)
            value = _fresh_node(value) if value is b.value else value
            if b is last and body.body is b.var:
                out.append(E.VarBinding(var, value))
            else:
                out.append(E.VarBinding(rename.define(b.var), value))
        if last is None or body.body is not last.var:
            out.append(E.VarBinding(var, rename.visit(body.body)))
        return out


class _Renamer(ExprMutator):
    """Substitutes parameters by arguments and callee variables by fresh caller variables."""

    def __init__(self, subst: dict[E.Var, E.Expr], names: set[str]) -> None:
        super().__init__()
        self.var_map = subst
        self.names = names

    def define(self, v: E.Var) -> E.Var:
        name, i = v.name, 1
        while name in self.names:
            name, i = f"{v.name}_{i}", i + 1
        self.names.add(name)
        new = E.Var(name, v.annotation if _concrete(v.annotation) else None)
        self.var_map[v] = new
        return new


def _concrete(ty: Type | None) -> bool:
    """False for a type naming symbolic dimensions, which mean the callee's own dimensions."""
    stack = [ty]
    while stack:
        t = stack.pop()
        if isinstance(t, TensorType) and t.shape is not None:
            if any(isinstance(d, str) for d in t.shape):
                return False
        elif isinstance(t, TupleType):
            stack.extend(t.fields)
    return True


def _fresh_node(value: E.Expr) -> E.Expr:
    """A new top-level node, so that no expression is shared between two functions."""
    if isinstance(value, E.Call):
        return E.Call(value.callee, value.args, value.attrs)
    if isinstance(value, E.Tuple):
        return E.Tuple(value.fields)
    if isinstance(value, E.TupleGetItem):
        return E.TupleGetItem(value.tuple_value, value.index)
    return value
