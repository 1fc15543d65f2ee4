"""Expressions of rvm script, parsed into A-normal form.

`ExprParser.value(node)` returns an expression whose operands are atoms (variables, constants,
global functions, constructors, tuples of atoms); `atom(node)` binds anything else to a fresh
variable (``lv0``, ``lv1``...), emitting the binding into the innermost block with its type
inferred at once, as `rvm.ir.Builder.emit` does. So ``op.relu(op.matmul(x, w) + b)`` becomes
``lv0 = op.matmul(x, w); lv1 = op.add(lv0, b); ... op.relu(lv1)``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from typing import Any as _Any

import numpy as np

from rvm.errors import IRError, ScriptError
from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.op import get_op, list_ops
from rvm.ir.types import FuncType, TensorType, TupleType, Type
from rvm.script.consts import const_b64, literal_value
from rvm.script.types import type_text

if TYPE_CHECKING:
    from rvm.script.parser import ModuleContext

Scalar = (bool, int, float)

BINARY = {
    ast.Add: "add",
    ast.Sub: "subtract",
    ast.Mult: "multiply",
    ast.Div: "divide",
    ast.FloorDiv: "floor_divide",
    ast.Mod: "mod",
    ast.Pow: "power",
    ast.MatMult: "matmul",
}
COMPARE = {
    ast.Lt: "less",
    ast.LtE: "less_equal",
    ast.Gt: "greater",
    ast.GtE: "greater_equal",
    ast.Eq: "equal",
    ast.NotEq: "not_equal",
}


def is_atom(e: E.Expr) -> bool:
    """Atoms appear as operands without a binding of their own."""
    if isinstance(e, (E.Var, E.GlobalVar, E.Constant, E.Constructor)):
        return True
    return isinstance(e, E.Tuple) and all(is_atom(f) for f in e.fields)


def scalar_const(value: object) -> E.Constant:
    """A Python scalar as a constant: floats float32, ints int64, bools bool."""
    if isinstance(value, bool):
        return E.Constant(np.asarray(value))
    if isinstance(value, int):
        return E.Constant(np.asarray(value, dtype="int64"))
    return E.Constant(np.asarray(value, dtype="float32"))


class ExprParser:
    """Scopes, bindings and expressions; `rvm.script._stmts.BodyParser` adds statements."""

    def __init__(self, ctx: ModuleContext) -> None:
        self.ctx = ctx
        self.scopes: list[dict[str, E.Expr]] = [{}]
        self.blocks: list[list[E.VarBinding]] = []
        self.pending: dict[E.Var, E.Function] = {}  # lambdas whose params await a call
        self.counter = 0

    # -- errors -----------------------------------------------------------------------------
    def error(self, node: ast.AST, msg: str) -> ScriptError:
        return self.ctx.error(node, msg)

    @contextmanager
    def at(self, node: ast.AST) -> Iterator[None]:
        """Turn IR errors raised while handling ``node`` into located script errors."""
        try:
            yield
        except ScriptError:
            raise
        except IRError as err:
            raise self.error(node, str(err)) from None

    # -- scopes and bindings ----------------------------------------------------------------
    def lookup(self, name: str) -> E.Expr | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def fresh(self, hint: str = "lv") -> str:
        name = f"{hint}{self.counter}"
        self.counter += 1
        return name

    def emit(
        self,
        value: E.Expr,
        name: str | None = None,
        annotation: Type | None = None,
        var: E.Var | None = None,
    ) -> E.Var:
        """Bind ``value`` to a new variable (or ``var``) of its inferred type."""
        var = var if var is not None else E.Var(name or self.fresh(), annotation)
        ty = infer_type(value)
        if var.annotation is None:
            var.with_type(ty)
        self.blocks[-1].append(E.VarBinding(var, value))
        if isinstance(value, E.Function) and any(p.annotation is None for p in value.params):
            self.pending[var] = value
        return var

    def assign(self, name: str, value: E.Expr, annotation: Type | None = None) -> E.Var:
        var = self.emit(value, name, annotation)
        self.scopes[-1][name] = var
        return var

    # -- expressions ------------------------------------------------------------------------
    def atom(self, node: ast.expr) -> E.Expr:
        """``node`` as an atom, binding it to a fresh variable when it is not one."""
        v = self.value(node)
        if is_atom(v):
            return v
        with self.at(node):
            return self.emit(v)

    def value(self, node: ast.expr) -> E.Expr:
        """``node`` as an expression whose operands are atoms."""
        v = self.operand(node)
        return scalar_const(v) if isinstance(v, Scalar) else v

    def operand(self, node: ast.expr) -> E.Expr | bool | int | float:  # noqa: C901
        """Like `value`, but a Python scalar literal stays a scalar (it takes the dtype of the
        other operand of a binary op)."""
        if isinstance(node, ast.Constant):
            if isinstance(node.value, Scalar):
                return node.value
            raise self.error(node, f"a {type(node.value).__name__} is not an rvm value")
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.Tuple):
            return E.Tuple(tuple(self.atom(e) for e in node.elts))
        if isinstance(node, ast.BinOp):
            name = BINARY.get(type(node.op))
            if name is None:
                raise self.error(node, f"unsupported operator {type(node.op).__name__}")
            return self.binary(node, name, node.left, node.right)
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise self.error(node, "chained comparisons are not supported; use `and`")
            return self.binary(node, COMPARE[type(node.ops[0])], node.left, node.comparators[0])
        if isinstance(node, ast.BoolOp):
            name = "logical_and" if isinstance(node.op, ast.And) else "logical_or"
            out = self.binary(node, name, node.values[0], node.values[1])
            for extra in node.values[2:]:
                left = self.emit(out) if not is_atom(out) else out
                out = self.call_op(node, name, [left, self.operand(extra)], {})
            return out
        if isinstance(node, ast.UnaryOp):
            return self.unary(node)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Lambda):
            return self.lambda_(node)
        if isinstance(node, ast.IfExp):
            return self.if_exp(node)
        if isinstance(node, ast.Attribute):
            raise self.error(node, f"unknown name '{ast.unparse(node)}'")
        raise self.error(node, f"unsupported expression: {type(node).__name__}")

    def name(self, node: ast.Name) -> E.Expr | bool | int | float:
        v = self.lookup(node.id)
        if v is not None:
            return v
        found = self.ctx.resolve(node.id)
        if found is None:
            raise self.error(node, f"undefined name '{node.id}'")
        if isinstance(found, (E.Expr, *Scalar)):
            return found
        if isinstance(found, np.ndarray):
            return E.Constant(found)
        raise self.error(node, f"'{node.id}' is not an rvm value")

    def binary(self, node: ast.expr, name: str, left: ast.expr, right: ast.expr) -> _Any:
        a, b = self.operand(left), self.operand(right)
        a = self.emit(a) if isinstance(a, E.Expr) and not is_atom(a) else a
        b = self.emit(b) if isinstance(b, E.Expr) and not is_atom(b) else b
        return self.call_op(node, name, [a, b], {})

    def unary(self, node: ast.UnaryOp) -> _Any:
        operand = self.operand(node.operand)
        if isinstance(operand, Scalar):
            if isinstance(node.op, ast.USub):
                return -operand
            if isinstance(node.op, ast.UAdd):
                return operand
            if isinstance(node.op, ast.Not):
                return not operand
        if isinstance(node.op, ast.UAdd):
            return operand
        if not is_atom(operand):
            operand = self.emit(operand)
        name = {ast.USub: "negative", ast.Not: "logical_not", ast.Invert: "logical_not"}
        return self.call_op(node, name[type(node.op)], [operand], {})

    def subscript(self, node: ast.Subscript) -> E.Expr:
        index = node.slice
        if not (isinstance(index, ast.Constant) and type(index.value) is int) and not (
            isinstance(index, ast.UnaryOp) and isinstance(index.operand, ast.Constant)
        ):
            raise self.error(node, "only tuple fields can be indexed, with an int: t[0]")
        i = literal_value(index)
        tup = self.atom(node.value)
        if isinstance(i, int) and i < 0:
            ty = infer_type(tup)
            fields = getattr(ty, "fields", None)
            if fields is None:
                raise self.error(node, "a negative index needs a tuple of known length")
            i += len(fields)
        with self.at(node):
            out = E.TupleGetItem(tup, i)  # type: ignore[arg-type]
            infer_type(out)
        return out

    # -- calls ------------------------------------------------------------------------------
    def call_op(self, node: ast.AST, name: str, args: list, kwargs: dict) -> E.Expr:
        """Call the builder of op ``name`` in `rvm.op` (or build the Call directly)."""
        if name not in list_ops():
            with self.at(node):
                get_op(name)  # raises "unknown op" with close matches
        try:
            import rvm.op as op_module
        except ImportError:  # the op set not built yet: build calls from the registry
            op_module = None
        builder = getattr(op_module, name, None)
        try:
            if callable(builder) and not isinstance(builder, E.Op):
                result = builder(*args, **kwargs)
            else:
                like = next((a for a in args if isinstance(a, E.Expr)), None)
                exprs = [a if isinstance(a, E.Expr) else E._scalar_like(a, like) for a in args]
                result = E.Call(get_op(name), tuple(exprs), kwargs)
            infer_type(result)
        except ScriptError:
            raise
        except (IRError, TypeError, ValueError) as err:
            msg = str(err) if str(err).startswith(name) else f"{name}: {err}"
            raise self.error(node, msg) from None
        if not isinstance(result, E.Expr):
            raise self.error(node, f"op.{name} did not build an expression")
        return result

    def op_arg(self, node: ast.expr, in_shape: bool = False) -> object:
        """A positional op argument: a literal stays Python (shapes, axes), else an atom. In a
        tuple or list, a name bound by ``rvm.dim`` is its dimension."""
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self.op_arg(e, True) for e in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if in_shape and isinstance(node, ast.Name):
            dim = _dim_name(self.lookup(node.id))
            if dim is not None:
                return dim
        try:
            return literal_value(node)
        except IRError:
            return self.atom(node)

    def call(self, node: ast.Call) -> E.Expr:
        func = node.func
        path = _dotted(func)
        if path and path[0] == "op" and len(path) == 2 and self.lookup("op") is None:
            return self.op_call(node, path[1])
        if path and path[:2] == ["rvm", "op"] and len(path) == 3:
            return self.op_call(node, path[2])
        if path and path[-1] == "const" and (path[0] == "rvm" or self._is(path, E.const)):
            return self.const_call(node)
        if path and path[-1] == "const_b64" and (path[0] == "rvm" or self._is(path, const_b64)):
            return self.const_call(node, b64=True)
        if path and len(path) == 2 and path[0] == "rvm" and path[1] in _EFFECT_CALLS:
            return self.effect_call(node, path[1])
        if node.keywords:
            raise self.error(node.keywords[0], "keyword arguments are only for op attributes")
        callee = self.operand(func) if isinstance(func, ast.Name) else self.atom(func)
        if isinstance(callee, Scalar):
            raise self.error(func, f"'{ast.unparse(func)}' is not a function")
        args = [self.atom(a) for a in node.args]
        return self.call_value(node, callee, args)

    def _is(self, path: list[str], obj: object) -> bool:
        return len(path) == 1 and self.lookup(path[0]) is None and self.ctx.resolve(path[0]) is obj

    def op_call(self, node: ast.Call, name: str) -> E.Expr:
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise self.error(node, "*args are not supported in op calls")
        args = [self.op_arg(a) for a in node.args]
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise self.error(kw, "**kwargs are not supported in op calls")
            try:
                kwargs[kw.arg] = literal_value(kw.value)
            except IRError:
                kwargs[kw.arg] = self.atom(kw.value)
        return self.call_op(node.func, name, args, kwargs)

    def const_call(self, node: ast.Call, b64: bool = False) -> E.Constant:
        try:
            args = [self.const_arg(a) for a in node.args]
            kwargs = {kw.arg: self.const_arg(kw.value) for kw in node.keywords}
            with self.at(node):
                return const_b64(*args, **kwargs) if b64 else E.const(*args, **kwargs)
        except (IRError, TypeError, ValueError) as err:
            if isinstance(err, ScriptError):
                raise
            raise self.error(node, f"bad constant: {err}") from None

    def effect_call(self, node: ast.Call, name: str) -> E.Expr:
        """``rvm.call_packed("f", *args, out=T[...])``, ``rvm.call_dps_packed(...)``,
        ``rvm.debug_print(x, "label")`` and ``rvm.dim(x, "n")`` (`rvm.op.effects`): a string
        literal names the function, the label or the dimension, ``out=`` is a type."""
        import rvm.op.effects as effects

        if any(isinstance(a, ast.Starred) for a in node.args):
            raise self.error(node, f"*args are not supported in rvm.{name}")
        kwargs: dict[str, object] = {}
        for kw in node.keywords:
            if kw.arg != "out" or name in ("debug_print", "dim"):
                raise self.error(kw, f"rvm.{name} takes no keyword {kw.arg!r}")
            if isinstance(kw.value, ast.Tuple):  # out=(T[...], T[...]): a tuple result
                kwargs["out"] = tuple(self.ctx.type_of(e) for e in kw.value.elts)
            else:
                kwargs["out"] = self.ctx.type_of(kw.value)
        strings = [literal_value(a) for a in node.args if _is_str(a)]
        values = [self.atom(a) for a in node.args if not _is_str(a)]
        try:
            with self.at(node):
                if name == "debug_print":
                    out = effects.debug_print(*values, *strings)
                elif name == "dim":
                    out = effects.dim(*values, *strings)
                else:
                    if not strings or not _is_str(node.args[0]):
                        raise IRError(f"rvm.{name} takes the function's name first, a string")
                    out = getattr(effects, name)(*strings, *values, **kwargs)
                infer_type(out)
        except (IRError, TypeError) as err:
            if isinstance(err, ScriptError):
                raise
            raise self.error(node, f"rvm.{name}: {err}") from None
        return out

    def const_arg(self, node: ast.expr) -> object:
        """A literal, or a name bound to an array or number where the script is defined."""
        if isinstance(node, ast.Name) and self.lookup(node.id) is None:
            value = self.ctx.resolve(node.id)
            if isinstance(value, (np.ndarray, np.generic, *Scalar)):
                return value
        return literal_value(node)

    def call_value(self, node: ast.Call, callee: E.Expr, args: list[E.Expr]) -> E.Expr:
        """A call of a module function, constructor or closure, arity checked."""
        what = getattr(callee, "name", "function")
        want = None
        if isinstance(callee, E.GlobalVar):
            want = self.ctx.arity(callee.name)
        elif isinstance(callee, E.Constructor):
            want = len(callee.field_types)
        elif isinstance(callee, E.Var) and callee in self.pending:
            want = len(self.pending[callee].params)
        elif isinstance(callee.type, FuncType):
            want = len(callee.type.params)
        elif isinstance(callee, E.Expr) and isinstance(callee.type, (TensorType, TupleType)):
            raise self.error(node.func, f"cannot call a value of type {type_text(callee.type)}")
        if want is not None and want != len(args):
            raise self.error(node, f"{what} takes {want} arguments, got {len(args)}")
        if isinstance(callee, E.Var) and callee in self.pending:
            self.type_lambda(callee, args)
        with self.at(node):
            out = E.Call(callee, tuple(args))
            infer_type(out)
        return out

    def type_lambda(self, var: E.Var, args: list[E.Expr]) -> None:
        """Give a lambda's unannotated params the types of its first call's arguments."""
        func = self.pending.pop(var)
        for p, a in zip(func.params, args):
            if p.annotation is None:
                p.with_type(infer_type(a))
        var.with_type(infer_type(func, refresh=True))

    # -- functions and conditionals as expressions ------------------------------------------
    def lambda_(self, node: ast.Lambda) -> E.Function:
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
            raise self.error(node, "a lambda takes plain positional parameters only")
        params = tuple(E.Var(p.arg) for p in a.args)
        self.scopes.append({p.name: p for p in params})
        self.blocks.append([])
        try:
            result = self.atom(node.body)
            body = E.seq(self.blocks[-1], result)
        finally:
            self.blocks.pop()
            self.scopes.pop()
        return E.Function(params, body)

    def if_exp(self, node: ast.IfExp) -> E.If:
        cond = self.atom(node.test)
        branches = []
        for branch in (node.body, node.orelse):
            self.scopes.append({})
            self.blocks.append([])
            try:
                branches.append(E.seq(self.blocks[-1], self.atom(branch)))
            finally:
                self.blocks.pop()
                self.scopes.pop()
        with self.at(node):
            out = E.If(cond, branches[0], branches[1])
            infer_type(out)
        return out


_EFFECT_CALLS = frozenset({"call_packed", "call_dps_packed", "debug_print", "dim"})


def dim_type(name: str) -> TensorType:
    """The type of ``rvm.dim``'s value: the carrier of dimension ``name`` (`rvm.op.effects`)."""
    return TensorType((name, 0), "int64")


def _dim_name(value: object) -> str | None:
    """The dimension a variable bound by ``rvm.dim`` stands for in a shape (else None)."""
    ty = value.annotation if isinstance(value, E.Var) else None
    if isinstance(ty, TensorType) and ty.dtype == "int64" and ty.shape is not None:
        if len(ty.shape) == 2 and isinstance(ty.shape[0], str) and ty.shape[1] == 0:
            return ty.shape[0]
    return None


def _is_str(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]
