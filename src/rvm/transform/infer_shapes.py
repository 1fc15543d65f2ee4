"""Shape and type inference over a whole module.

Needs: normal form (`rvm.transform.normalize`), so that a failure can be pinned to a binding.

Guarantees: every expression of every function has its type recorded (``expr.type``), every
GlobalVar carries its function's type, and the module is returned otherwise unchanged. Shapes
that are provably incompatible raise `IRError` naming the function and showing the binding:
an op whose rule rejects its operands, a call of a module function or a typed local function
whose argument has a different dtype, rank or fixed dimension than the parameter, or a body
whose type contradicts the declared return type.

Algorithm: `rvm.ir.infer_type` with ``refresh`` re-infers each function in the order the
module lists them (iteratively, so deep expressions are fine); rebuilding the `IRModule`
records GlobalVar types, iterating to a fixed point for recursive functions. Then one walk per
function checks call arguments against parameter types. When inference fails, a second walk
re-infers binding by binding, innermost first, to find and show the binding that failed.
"""

from __future__ import annotations

from rvm.errors import IRError
from rvm.ir import expr as E
from rvm.ir.functor import ExprVisitor
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.ir.types import FuncType, TensorType, TupleType, Type


def infer_shapes(mod: IRModule) -> IRModule:
    """Re-infer and record every type of ``mod``; raise IRError on provably wrong shapes."""
    for name, func in mod.items():
        _infer_function(name, func)
    out = IRModule(mod.functions, mod.adts, mod.global_vars, mod.attrs)
    for name, func in out.items():
        _infer_function(name, func)  # again, with the fixed-point GlobalVar types
        _CallChecker(name).check(func)
    return out


def _infer_function(name: str, func: E.Function) -> None:
    try:
        infer_type(func, refresh=True)
    except IRError as err:
        _Locator(name, err).visit(func)
        raise IRError(f"function {name}: {err}") from None
    ret, body = func.ret_type, func.body.type
    if ret is not None and body is not None and incompatible(ret, body):
        raise IRError(f"function {name}: declared to return {ret}, but its body has type {body}")


class _Locator(ExprVisitor):
    """Re-infers binding by binding (innermost first) and raises at the first that fails."""

    def __init__(self, fname: str, err: IRError) -> None:
        super().__init__()
        self.fname = fname
        self.err = err

    def visit_binding(self, b: E.VarBinding) -> None:
        self.visit(b.value)  # nested bindings (branches, local functions) first
        try:
            ty = infer_type(b.value, refresh=True)
        except IRError as err:
            raise IRError(f"function {self.fname}: {err}\n  in binding: {E._print(b)}") from None
        if b.var.annotation is None:
            b.var.with_type(ty)


class _CallChecker(ExprVisitor):
    """Checks arguments of calls of typed functions against the parameter types."""

    def __init__(self, fname: str) -> None:
        super().__init__()
        self.fname = fname
        self.binding: E.VarBinding | None = None

    def check(self, func: E.Function) -> None:
        self.visit(func)

    def visit_binding(self, b: E.VarBinding) -> None:
        outer, self.binding = self.binding, b
        super().visit_binding(b)
        self.binding = outer

    def visit_call(self, c: E.Call) -> None:
        ft = c.callee.type if isinstance(c.callee, (E.GlobalVar, E.Var)) else None
        if isinstance(ft, FuncType) and len(ft.params) == len(c.args):
            for i, (param, arg) in enumerate(zip(ft.params, c.args)):
                if arg.type is not None and incompatible(param, arg.type):
                    where = f"\n  in binding: {E._print(self.binding)}" if self.binding else ""
                    callee = getattr(c.callee, "name", "function")
                    raise IRError(
                        f"function {self.fname}: argument {i} of {callee} has type {arg.type}, "
                        f"but the parameter is {param}{where}"
                    )
        super().visit_call(c)


def incompatible(expected: Type, actual: Type) -> bool:
    """True when no value can have both types (different dtype, rank or fixed dimension)."""
    stack: list[tuple[Type, Type]] = [(expected, actual)]
    while stack:
        a, b = stack.pop()
        if isinstance(a, TensorType) and isinstance(b, TensorType):
            if a.dtype is not None and b.dtype is not None and a.dtype != b.dtype:
                return True
            if a.shape is None or b.shape is None:
                continue
            if len(a.shape) != len(b.shape):
                return True
            if any(
                isinstance(x, int) and isinstance(y, int) and x != y
                for x, y in zip(a.shape, b.shape)
            ):
                return True
        elif isinstance(a, TupleType) and isinstance(b, TupleType):
            if len(a.fields) != len(b.fields):
                return True
            stack.extend(zip(a.fields, b.fields))
        elif isinstance(a, (TensorType, TupleType)) and isinstance(b, (TensorType, TupleType)):
            return True
    return False
