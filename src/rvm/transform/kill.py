"""kill: drop each tensor and storage register right after its last use.

Needs: a memory-planned module (`memory_plan`), tail calls marked (``attrs["tail"]``).

Guarantees: the same program with ``_ = vm.kill(x)`` inserted right after the binding where
``x`` is used for the last time in the region that defines it, for every variable ``x`` that
holds a tensor (a TensorType) or a storage block (bound by ``vm.alloc_storage``), defined by a
binding of the region or, in a function's top region, a parameter. A use inside an If or Match
branch counts as a use by the binding of that If or Match. Not killed: variables never used,
used by the region's result, bound to a constant (the pool keeps it anyway), or whose last use
is a tail call or after one (nothing is inserted between a tail call and the end of its
region), or the region's last binding when it is its result and an If or Match with a tail
call in a branch (its branches end the function). Running the pass twice adds nothing.

Algorithm: per region, the variables each binding uses (branches included); the last binding
using each candidate; kills inserted after it, in order of definition.
"""

from __future__ import annotations

from rvm.ir import expr as E
from rvm.ir.functor import ExprVisitor
from rvm.ir.module import IRModule
from rvm.ir.types import TensorType
from rvm.transform import vm_ops
from rvm.transform.legalize import map_regions


class _Uses(ExprVisitor):
    """Variables used in an expression, not counting the operand of ``vm.kill``."""

    def __init__(self) -> None:
        super().__init__()
        self.used: set[E.Var] = set()
        self.killed: set[E.Var] = set()

    def visit_var(self, v: E.Var) -> None:
        self.used.add(v)

    def visit_call(self, c: E.Call) -> None:
        if c.callee is vm_ops.kill:
            self.killed.update(a for a in c.args if isinstance(a, E.Var))
            return
        super().visit_call(c)


def _uses(expr: E.Expr, killed: set[E.Var]) -> set[E.Var]:
    visitor = _Uses()
    visitor.visit(expr)
    killed.update(visitor.killed)
    return visitor.used


def _killable(b: E.VarBinding) -> bool:
    if isinstance(b.value, E.Constant):
        return False
    return isinstance(b.var.type, TensorType) or vm_ops.is_vm_op(b.value, vm_ops.alloc_storage)


def _is_tail_call(value: E.Expr) -> bool:
    return isinstance(value, E.Call) and bool(value.attrs.get("tail", False))


def _holds_tail_call(value: E.Expr) -> bool:
    """Whether ``value``, an If or Match in tail position, has a tail call in a branch: its
    branches end the function (the VM then reuses or drops the frame), so nothing may follow
    it in its region."""
    if isinstance(value, E.SeqExpr):
        bindings = list(value.bindings)
        last = bindings[-1] if bindings else None
        return (last is not None and last.var is value.body and _holds_tail_call(last.value)) or (
            _holds_tail_call(value.body)
        )
    if isinstance(value, E.If):
        return _holds_tail_call(value.true_branch) or _holds_tail_call(value.false_branch)
    if isinstance(value, E.Match):
        return any(_holds_tail_call(c.body) for c in value.clauses)
    return _is_tail_call(value)


def _kill_region(
    bindings: list[E.VarBinding], body: E.Expr, params: list[E.Var]
) -> list[E.VarBinding]:
    """``bindings`` with kills inserted (see the module docstring)."""
    killed: set[E.Var] = set()
    uses = [_uses(b.value, killed) for b in bindings]
    in_result = _uses(body, killed)
    candidates = params + [b.var for b in bindings if _killable(b)]
    tail = next((i for i, b in enumerate(bindings) if _is_tail_call(b.value)), len(bindings))
    if bindings and bindings[-1].var is body and _holds_tail_call(bindings[-1].value):
        tail = min(tail, len(bindings) - 1)  # an If or Match whose branches end the function
    last_use: dict[E.Var, int] = {}
    for i, used in enumerate(uses):
        for var in used:
            last_use[var] = i
    after: dict[int, list[E.Var]] = {}
    for var in candidates:
        last = last_use.get(var)
        if last is not None and last < tail and var not in in_result and var not in killed:
            after.setdefault(last, []).append(var)
    if not after:
        return bindings
    out = []
    for i, b in enumerate(bindings):
        out.append(b)
        for var in after.get(i, ()):
            unit = E.Var("_")
            unit.with_type(vm_ops.UNIT)
            out.append(E.VarBinding(unit, E.Call(vm_ops.kill, (var,))))
    return out


def kill(mod: IRModule) -> IRModule:
    """Insert ``vm.kill`` after the last use of each tensor and storage (see the docstring)."""
    replaced: dict[str, E.Function] = {}
    for name, func in mod.items():
        if func.is_primitive:
            continue
        params = [p for p in func.params if isinstance(p.type, TensorType)]

        def region(bindings: list[E.VarBinding], body: E.Expr, depth: int, params=params):
            return _kill_region(bindings, body, params if depth == 0 else []), body

        body = map_regions(func.body, region)
        if body is not func.body:
            replaced[name] = E.Function(func.params, body, func.ret_type, func.attrs)
    return mod.with_functions(replaced) if replaced else mod
