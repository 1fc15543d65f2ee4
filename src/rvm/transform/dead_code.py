"""Dead code elimination: unused pure bindings and unreachable private functions.

Needs: any module (normal form keeps it precise: an effect nested in an operand is still
found, but then the whole binding is kept).

Guarantees: a binding whose variable is never used is removed when its value is pure; rvm
programs are pure, so op calls, tuples, tuple indexing, constructor calls, calls of module
functions and of local functions, If/Match without effects inside, and function literals all
go. Kept as effects, conservatively: ``vm.call_dps``, ``vm.kill`` and every other op named
``vm.*`` except ``vm.make_closure``, ``vm.make_shape``, ``vm.shape_of`` and ``vm.alloc_*``.
Private module functions (attrs ``lifted``, ``primitive`` or ``private``) that no public
function reaches are removed. Empty binding blocks are dropped.

Algorithm: backward liveness over each SeqExpr. Bindings are visited last to first with the
set of variables used later; a kept binding's value is cleaned first (branches, local
functions) and only then adds its uses, so a chain of dead bindings, also across nested scopes,
goes in one pass: the result is the fixpoint of removing single dead bindings.
"""

from __future__ import annotations

import logging

from rvm.ir import expr as E
from rvm.ir.analysis import called_globals, walk
from rvm.ir.module import IRModule

logger = logging.getLogger("rvm.transform")

_PURE_VM_OPS = frozenset({"vm.make_closure", "vm.make_shape", "vm.shape_of"})


def dead_code(mod: IRModule) -> IRModule:
    """Return ``mod`` without unused pure bindings and unreachable private functions."""
    cleaner = _Cleaner()
    funcs = {}
    for name, func in mod.items():
        body = cleaner.clean(func.body)
        funcs[name] = (
            func if body is func.body else E.Function(func.params, body, func.ret_type, func.attrs)
        )
    live = _reachable(funcs)
    dropped = [name for name in funcs if name not in live]
    if cleaner.removed or dropped:
        logger.debug(
            "dead_code: %d bindings and %d functions removed%s",
            cleaner.removed,
            len(dropped),
            f" ({', '.join(dropped)})" if dropped else "",
        )
    funcs = {name: f for name, f in funcs.items() if name in live}
    gvars = {name: gv for name, gv in mod.global_vars.items() if name in live}
    return IRModule(funcs, mod.adts, gvars, mod.attrs)


def is_private(func: E.Function) -> bool:
    """Lifted closures and primitive kernels exist only for their callers."""
    attrs = func.attrs
    return bool(attrs.get("lifted") or attrs.get("primitive") or attrs.get("private"))


def _reachable(funcs: dict[str, E.Function]) -> set[str]:
    live = {name for name, f in funcs.items() if not is_private(f)}
    stack = list(live)
    while stack:
        for callee in called_globals(funcs[stack.pop()]):
            if callee in funcs and callee not in live:
                live.add(callee)
                stack.append(callee)
    return live


def has_effect(expr: E.Expr) -> bool:
    """True when evaluating ``expr`` may do more than compute its value (a Function literal
    only defines, so its body does not count)."""
    return any(
        isinstance(node, E.Call) and isinstance(node.callee, E.Op) and _effect_op(node.callee.name)
        for node in walk(expr, into_functions=False)
    )


def _effect_op(name: str) -> bool:
    if not name.startswith("vm."):
        return False
    return name not in _PURE_VM_OPS and not name.startswith("vm.alloc_")


class _Cleaner:
    """Removes dead bindings; counts them."""

    def __init__(self) -> None:
        self.removed = 0

    def clean(self, expr: E.Expr) -> E.Expr:
        """``expr`` with dead bindings removed in every SeqExpr it holds."""
        if isinstance(expr, E.SeqExpr):
            return self._seq(expr)
        if isinstance(expr, E.If):
            t, f = self.clean(expr.true_branch), self.clean(expr.false_branch)
            if t is expr.true_branch and f is expr.false_branch:
                return expr
            return E.If(expr.cond, t, f)
        if isinstance(expr, E.Match):
            clauses = tuple(
                c if (body := self.clean(c.body)) is c.body else E.Clause(c.pattern, body)
                for c in expr.clauses
            )
            if all(a is b for a, b in zip(clauses, expr.clauses)):
                return expr
            return E.Match(expr.data, clauses)
        if isinstance(expr, E.Function):
            body = self.clean(expr.body)
            if body is expr.body:
                return expr
            return E.Function(expr.params, body, expr.ret_type, expr.attrs)
        return expr

    def _seq(self, seq: E.SeqExpr) -> E.Expr:
        body = self.clean(seq.body)
        live = _used_vars(body)
        blocks: list[E.BindingBlock] = []
        changed = body is not seq.body
        for block in reversed(seq.blocks):
            kept: list[E.VarBinding] = []
            for b in reversed(block.bindings):
                if b.var not in live and not has_effect(b.value):
                    self.removed += 1
                    changed = True
                    continue
                value = self.clean(b.value)
                live |= _used_vars(value)
                kept.append(b if value is b.value else E.VarBinding(b.var, value))
                changed |= value is not b.value
            kept.reverse()
            if (
                kept
                and len(kept) == len(block.bindings)
                and all(a is b for a, b in zip(kept, block.bindings))
            ):
                blocks.append(block)
            elif kept:
                blocks.append(E.BindingBlock(tuple(kept)))
            else:
                changed = True  # an empty block (also one that came in empty) is dropped
        if not changed:
            return seq
        blocks.reverse()
        return E.SeqExpr(tuple(blocks), body)


def _used_vars(expr: E.Expr) -> set[E.Var]:
    """Every variable ``expr`` refers to (inner definitions included: harmless here)."""
    return {node for node in walk(expr) if isinstance(node, E.Var)}
