"""Tail calls: mark calls whose result is the function's result.

Needs: normal form (a function body is a SeqExpr whose result is an atom, an If or a Match).

Guarantees: a call of a (non-primitive) module function or a ``vm.invoke_closure`` in tail
position carries ``attrs["tail"] = True``; the function records how many it has in
``attrs["num_tail_calls"]`` (only when it has any) and one debug line is logged for it. A call
is in tail position when it is the value of the last binding and the SeqExpr's result is that
binding's variable, in the function body or, recursively, in a branch of an If or Match that is
itself in tail position (as the SeqExpr's result or as that last binding's value). Nothing else
changes; the VM reuses the frame for marked calls.

Algorithm: one walk down the tail positions of each function; only the nodes on the path to a
marked call are rebuilt (a rebuilt node keeps its recorded type).
"""

from __future__ import annotations

import logging

from rvm.ir import expr as E
from rvm.ir.module import IRModule
from rvm.transform.vm_ops import invoke_closure

logger = logging.getLogger("rvm.transform")


def tail_call(mod: IRModule) -> IRModule:
    """Return ``mod`` with tail calls marked."""
    funcs = {}
    for name, func in mod.items():
        marker = _Marker(mod)
        body = func.body if func.is_primitive else marker.tail(func.body)
        if marker.count == 0:
            funcs[name] = func
            continue
        logger.debug("tail_call: %s has %d tail call(s)", name, marker.count)
        attrs = {**func.attrs, "num_tail_calls": marker.count}
        funcs[name] = E.Function(func.params, body, func.ret_type, attrs)
    return IRModule(funcs, mod.adts, mod.global_vars, mod.attrs)


class _Marker:
    """Rewrites the tail positions of one function, counting marked calls."""

    def __init__(self, mod: IRModule) -> None:
        self.mod = mod
        self.count = 0

    def tail(self, expr: E.Expr) -> E.Expr:
        """``expr`` (in tail position) with its tail calls marked."""
        if isinstance(expr, E.SeqExpr):
            return self._seq(expr)
        if isinstance(expr, E.If):
            t, f = self.tail(expr.true_branch), self.tail(expr.false_branch)
            if t is expr.true_branch and f is expr.false_branch:
                return expr
            return _typed(E.If(expr.cond, t, f), expr)
        if isinstance(expr, E.Match):
            clauses = tuple(
                c if (body := self.tail(c.body)) is c.body else E.Clause(c.pattern, body)
                for c in expr.clauses
            )
            if all(a is b for a, b in zip(clauses, expr.clauses)):
                return expr
            return _typed(E.Match(expr.data, clauses), expr)
        if isinstance(expr, E.Call) and self._is_tail_callee(expr):
            self.count += 1
            if expr.attrs.get("tail"):
                return expr
            return _typed(E.Call(expr.callee, expr.args, {**expr.attrs, "tail": True}), expr)
        return expr

    def _is_tail_callee(self, call: E.Call) -> bool:
        callee = call.callee
        if callee is invoke_closure:
            return True
        if isinstance(callee, E.GlobalVar) and callee.name in self.mod:
            return not self.mod[callee.name].is_primitive
        return False

    def _seq(self, seq: E.SeqExpr) -> E.Expr:
        body = seq.body
        if not isinstance(body, E.Var):
            new_body = self.tail(body)
            return seq if new_body is body else _typed(E.SeqExpr(seq.blocks, new_body), seq)
        last_block = next((blk for blk in reversed(seq.blocks) if blk.bindings), None)
        if last_block is None or last_block.bindings[-1].var is not body:
            return seq
        last = last_block.bindings[-1]
        value = self.tail(last.value)
        if value is last.value:
            return seq
        new_block = E.BindingBlock((*last_block.bindings[:-1], E.VarBinding(last.var, value)))
        blocks = tuple(new_block if blk is last_block else blk for blk in seq.blocks)
        return _typed(E.SeqExpr(blocks, body), seq)


def _typed(new: E.Expr, old: E.Expr) -> E.Expr:
    return new.with_type(old.type)
