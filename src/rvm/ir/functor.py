"""Visitors and mutators over expressions, dispatching on a dict built once per class.

`ExprVisitor.visit(e)` calls ``visit_<node>`` through a ``{type: method}`` table (no isinstance
ladders). `ExprMutator` rebuilds a node only when a child changed, so unchanged subtrees are
shared. Flat bodies keep the recursion shallow: a SeqExpr's bindings are a loop, not a chain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rvm.ir import expr as E

_NAMES: dict[type, str] = {
    E.Var: "var",
    E.GlobalVar: "global_var",
    E.Constant: "constant",
    E.Tuple: "tuple",
    E.TupleGetItem: "tuple_getitem",
    E.Call: "call",
    E.Function: "function",
    E.If: "if",
    E.SeqExpr: "seq_expr",
    E.Match: "match",
    E.Constructor: "constructor",
}


def _dispatch_table(obj: object) -> dict[type, Callable[[Any], Any]]:
    return {cls: getattr(obj, f"visit_{name}") for cls, name in _NAMES.items()}


class ExprVisitor:
    """Walks an expression; override ``visit_*`` methods and call super to keep walking."""

    def __init__(self) -> None:
        self._table = _dispatch_table(self)

    def visit(self, expr: E.Expr) -> None:
        self._table[type(expr)](expr)

    def visit_var(self, v: E.Var) -> None:
        pass

    def visit_global_var(self, gv: E.GlobalVar) -> None:
        pass

    def visit_constant(self, c: E.Constant) -> None:
        pass

    def visit_constructor(self, c: E.Constructor) -> None:
        pass

    def visit_tuple(self, t: E.Tuple) -> None:
        for f in t.fields:
            self.visit(f)

    def visit_tuple_getitem(self, t: E.TupleGetItem) -> None:
        self.visit(t.tuple_value)

    def visit_call(self, c: E.Call) -> None:
        if isinstance(c.callee, E.Expr):
            self.visit(c.callee)
        for a in c.args:
            self.visit(a)

    def visit_function(self, f: E.Function) -> None:
        for p in f.params:
            self.visit_var_def(p)
        self.visit(f.body)

    def visit_if(self, e: E.If) -> None:
        self.visit(e.cond)
        self.visit(e.true_branch)
        self.visit(e.false_branch)

    def visit_seq_expr(self, s: E.SeqExpr) -> None:
        for block in s.blocks:
            for b in block.bindings:
                self.visit_binding(b)
        self.visit(s.body)

    def visit_binding(self, b: E.VarBinding) -> None:
        self.visit_var_def(b.var)
        self.visit(b.value)

    def visit_var_def(self, v: E.Var) -> None:
        pass

    def visit_match(self, m: E.Match) -> None:
        self.visit(m.data)
        for clause in m.clauses:
            for v in E.pattern_vars(clause.pattern):
                self.visit_var_def(v)
            self.visit(clause.body)


class ExprMutator:
    """Rewrites an expression bottom-up; returns the same node when nothing changed.

    ``var_map`` lets a subclass substitute variables (``visit_var`` looks it up).
    """

    def __init__(self) -> None:
        self._table = _dispatch_table(self)
        self.var_map: dict[E.Var, E.Expr] = {}

    def visit(self, expr: E.Expr) -> E.Expr:
        return self._table[type(expr)](expr)

    def visit_var(self, v: E.Var) -> E.Expr:
        return self.var_map.get(v, v)

    def visit_global_var(self, gv: E.GlobalVar) -> E.Expr:
        return gv

    def visit_constant(self, c: E.Constant) -> E.Expr:
        return c

    def visit_constructor(self, c: E.Constructor) -> E.Expr:
        return c

    def visit_tuple(self, t: E.Tuple) -> E.Expr:
        fields = tuple(self.visit(f) for f in t.fields)
        if all(a is b for a, b in zip(fields, t.fields)):
            return t
        return E.Tuple(fields)

    def visit_tuple_getitem(self, t: E.TupleGetItem) -> E.Expr:
        value = self.visit(t.tuple_value)
        return t if value is t.tuple_value else E.TupleGetItem(value, t.index)

    def visit_call(self, c: E.Call) -> E.Expr:
        callee = self.visit(c.callee) if isinstance(c.callee, E.Expr) else c.callee
        args = tuple(self.visit(a) for a in c.args)
        if callee is c.callee and all(a is b for a, b in zip(args, c.args)):
            return c
        return E.Call(callee, args, c.attrs)

    def visit_function(self, f: E.Function) -> E.Expr:
        params = tuple(self.visit_var_def(p) for p in f.params)
        body = self.visit(f.body)
        if body is f.body and all(a is b for a, b in zip(params, f.params)):
            return f
        return E.Function(params, body, f.ret_type, f.attrs)

    def visit_if(self, e: E.If) -> E.Expr:
        cond, t, f = self.visit(e.cond), self.visit(e.true_branch), self.visit(e.false_branch)
        if cond is e.cond and t is e.true_branch and f is e.false_branch:
            return e
        return E.If(cond, t, f)

    def visit_seq_expr(self, s: E.SeqExpr) -> E.Expr:
        changed = False
        blocks = []
        for block in s.blocks:
            new_bindings = self.visit_block(block)
            changed |= len(new_bindings) != len(block.bindings) or any(
                a is not b for a, b in zip(new_bindings, block.bindings)
            )
            if new_bindings:
                blocks.append(E.BindingBlock(tuple(new_bindings)))
            else:
                changed = True
        body = self.visit(s.body)
        if not changed and body is s.body:
            return s
        return E.SeqExpr(tuple(blocks), body)

    def visit_block(self, block: E.BindingBlock) -> list[E.VarBinding]:
        """Rewrite a block's bindings; return them (a subclass may drop or add bindings)."""
        out = []
        for b in block.bindings:
            out.extend(self.visit_binding(b))
        return out

    def visit_binding(self, b: E.VarBinding) -> list[E.VarBinding]:
        var = self.visit_var_def(b.var)
        value = self.visit(b.value)
        if var is b.var and value is b.value:
            return [b]
        return [E.VarBinding(var, value)]

    def visit_var_def(self, v: E.Var) -> E.Var:
        """A variable at its definition; override to rename (record in var_map)."""
        return v

    def visit_match(self, m: E.Match) -> E.Expr:
        data = self.visit(m.data)
        clauses = []
        changed = data is not m.data
        for clause in m.clauses:
            pattern = self.visit_pattern(clause.pattern)
            body = self.visit(clause.body)
            if pattern is clause.pattern and body is clause.body:
                clauses.append(clause)
            else:
                changed = True
                clauses.append(E.Clause(pattern, body))
        return E.Match(data, tuple(clauses)) if changed else m

    def visit_pattern(self, p: E.Pattern) -> E.Pattern:
        if isinstance(p, E.PatternVar):
            v = self.visit_var_def(p.var)
            return p if v is p.var else E.PatternVar(v)
        if isinstance(p, (E.PatternConstructor, E.PatternTuple)):
            pats = tuple(self.visit_pattern(q) for q in p.patterns)
            if all(a is b for a, b in zip(pats, p.patterns)):
                return p
            if isinstance(p, E.PatternTuple):
                return E.PatternTuple(pats)
            return E.PatternConstructor(p.constructor, pats)
        return p
