"""fold_constant: evaluate primitive calls on constants at compile time.

Needs: any module in A-normal form; normally a fused one (`fuse_ops`). Evaluating uses the
NumPy references of `rvm.op.reference`.

Guarantees: the same program, where a binding ``y = prim(args)`` calling a primitive function
(or an op directly) whose arguments are all constants is ``y = Constant`` (a tuple of constants
for a tuple result), a tuple field taken from a tuple of constants is that constant, and uses of
variables bound to constants (or to tuples of constants, in field access) see the constant.
Other calls are kept, and so is a call whose result is larger than its constant inputs and
than `MAX_GROWTH_BYTES` (``zeros((1024, 1024))``): a kernel is cheaper than storing it.

Algorithm: walk each function's regions in order, outer bindings before the branches that
follow them, substituting known constants into each binding before looking at it; a foldable
call runs the primitive's body binding by binding with the op references.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from rvm.errors import RVMError
from rvm.ir import expr as E
from rvm.ir import infer_type
from rvm.ir.functor import ExprMutator
from rvm.ir.module import IRModule
from rvm.ir.types import static_nbytes

logger = logging.getLogger("rvm.transform")

MAX_GROWTH_BYTES = 1 << 16

Value = Any  # np.ndarray or a tuple of values


def fold_constant(mod: IRModule) -> IRModule:
    """Fold the primitive calls of ``mod`` whose arguments are constants."""
    funcs = mod.functions
    replaced = {}
    for name, func in funcs.items():
        if func.is_primitive:
            continue
        folder = _Folder(funcs)
        body = folder.visit(func.body)
        if body is not func.body:
            replaced[name] = E.Function(func.params, body, func.ret_type, func.attrs)
            logger.debug("fold_constant %s: %d calls folded", name, folder.folded)
    if not replaced:
        return mod
    return mod.with_functions(replaced)


def evaluate_primitive(func: E.Function, args: list[Value]) -> Value:
    """Run primitive function ``func`` on NumPy ``args`` with the op references."""
    env: dict[E.Var, Value] = dict(zip(func.params, args))
    body = func.body
    if isinstance(body, E.SeqExpr):
        for b in body.bindings:
            env[b.var] = _evaluate(b.value, env)
        body = body.body
    return _evaluate(body, env)


def _evaluate(expr: E.Expr, env: dict[E.Var, Value]) -> Value:
    """The value of an op call or an atom inside a primitive function."""
    if isinstance(expr, E.Var):
        return env[expr]
    if isinstance(expr, E.Constant):
        return expr.data
    if isinstance(expr, E.Tuple):
        return tuple(_evaluate(f, env) for f in expr.fields)
    if isinstance(expr, E.TupleGetItem):
        return _evaluate(expr.tuple_value, env)[expr.index]
    if isinstance(expr, E.Call) and isinstance(expr.callee, E.Op):
        args = [_evaluate(a, env) for a in expr.args]
        return _as_value(_reference(expr.callee)(*args, **expr.attrs))
    raise RVMError(f"cannot evaluate {type(expr).__name__} at compile time")


def _reference(op: E.Op) -> Any:
    from rvm.op import reference  # rvm.op fills the table as it is imported

    ref = reference.get(op)
    if ref is None:
        raise RVMError(f"op.{op.name} has no reference implementation")
    return ref


def _as_value(out: Value) -> Value:
    if isinstance(out, (tuple, list)):
        return tuple(_as_value(o) for o in out)
    return np.asarray(out)


def _as_expr(value: Value) -> E.Expr:
    if isinstance(value, tuple):
        return E.Tuple(tuple(_as_expr(v) for v in value))
    return E.Constant(value)


def _const_value(expr: E.Expr) -> Value | None:
    """The value of a constant or a tuple of constants, else None."""
    if isinstance(expr, E.Constant):
        return expr.data
    if isinstance(expr, E.Tuple):
        fields = [_const_value(f) for f in expr.fields]
        return None if any(f is None for f in fields) else tuple(fields)
    return None


def _nbytes(value: Value) -> int:
    if isinstance(value, tuple):
        return sum(_nbytes(v) for v in value)
    return int(value.nbytes)


def _known_nbytes(call: E.Call) -> int:
    """The bytes of ``call``'s result when its type says, else 0."""
    try:
        return static_nbytes(infer_type(call)) or 0
    except Exception:  # noqa: BLE001 - a call whose type is unknown is evaluated to find out
        return 0


class _Folder(ExprMutator):
    """Substitutes constants for variables and folds bindings, in program order."""

    def __init__(self, funcs: dict[str, E.Function]) -> None:
        super().__init__()
        self.funcs = funcs
        self.tuples: dict[E.Var, E.Expr] = {}  # variables bound to tuples of constants
        self.folded = 0

    def visit_binding(self, b: E.VarBinding) -> list[E.VarBinding]:
        value = self.visit(b.value)
        folded = self._fold(value)
        if folded is not None:
            value = folded
            self.folded += 1
        if isinstance(value, E.Constant):
            self.var_map[b.var] = value
        elif isinstance(value, E.Tuple) and _const_value(value) is not None:
            self.tuples[b.var] = value
        if value is b.value:
            return [b]
        return [E.VarBinding(b.var, value)]

    def visit_tuple_getitem(self, t: E.TupleGetItem) -> E.Expr:
        t = super().visit_tuple_getitem(t)  # type: ignore[assignment]
        source = self.tuples.get(t.tuple_value, t.tuple_value)  # type: ignore[call-overload]
        if isinstance(source, E.Tuple) and _const_value(source) is not None:
            return source.fields[t.index]
        return t

    def _fold(self, value: E.Expr) -> E.Expr | None:
        """A constant for a call whose arguments are all constants, else None."""
        if not isinstance(value, E.Call):
            return None
        if isinstance(value.callee, E.GlobalVar):
            func = self.funcs.get(value.callee.name)
            if func is None or not func.is_primitive:
                return None
        elif not isinstance(value.callee, E.Op) or value.callee.name.startswith("vm."):
            return None
        args = [_const_value(self.tuples.get(a, a)) for a in value.args]  # type: ignore
        if any(a is None for a in args):
            return None
        limit = max(MAX_GROWTH_BYTES, sum(_nbytes(a) for a in args))
        if _known_nbytes(value) > limit:
            return None  # known too large before evaluating it
        try:
            if isinstance(value.callee, E.Op):
                out = _as_value(_reference(value.callee)(*args, **value.attrs))
            else:
                out = evaluate_primitive(func, args)
        except Exception as err:  # noqa: BLE001 - a call we cannot evaluate stays a call
            logger.debug("fold_constant: keeping a call: %s: %s", type(err).__name__, err)
            return None
        if _nbytes(out) > limit:
            return None
        return _as_expr(out)
