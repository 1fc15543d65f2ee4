"""Type inference of expressions.

`infer_type(expr)` returns the type of an expression and records it on every node it visits
(``expr.type``), running op rules from `rvm.ir.op.infer`. It walks with an explicit stack, so
deep expressions built with Python operators do not overflow. Bindings with unannotated
variables give the variable the value's type. Calls of module functions use the type recorded
on the GlobalVar (`IRModule` records it); a function still being inferred (recursion) has
``Any`` as its result, which gives way to the other branch when branches join.
"""

from __future__ import annotations

from rvm.errors import IRError
from rvm.ir import expr as E
from rvm.ir.dims import is_symbol, substitute
from rvm.ir.op import infer as op_rules
from rvm.ir.types import (
    ADTType,
    AnyType,
    Dim,
    FuncType,
    TensorType,
    TupleType,
    Type,
)

ANY = AnyType()


def join_types(a: Type, b: Type) -> Type:
    """The type of a value that is either ``a`` or ``b`` (If and Match branches, loop-carried
    variables): ``Any`` (not typed yet) gives way; tensors keep the dims they agree on and their
    dtype if it is the same, unknown if either is unknown (the dtype rule of `rvm.ir.types`).

    Raises:
        IRError: two different known dtypes, or types of different kinds.
    """
    if isinstance(a, AnyType):
        return b
    if isinstance(b, AnyType) or a == b:
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        if a.dtype is not None and b.dtype is not None and a.dtype != b.dtype:
            raise IRError(f"branches have different dtypes: {a} and {b}")
        if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            shape = None
        else:
            shape = tuple(x if x == y else None for x, y in zip(a.shape, b.shape))
        return TensorType(shape, a.dtype if a.dtype == b.dtype else None)
    if isinstance(a, TupleType) and isinstance(b, TupleType) and len(a.fields) == len(b.fields):
        return TupleType(tuple(join_types(x, y) for x, y in zip(a.fields, b.fields)))
    raise IRError(f"branches have incompatible types: {a} and {b}")


def infer_type(expr: E.Expr, *, refresh: bool = False) -> Type:
    """Infer (and record) the type of ``expr`` and of every sub-expression.

    Types already recorded are reused unless ``refresh`` (after callee types changed).
    """
    known = expr.type
    if known is not None and not refresh and not isinstance(expr, (E.SeqExpr, E.Function)):
        return known
    stack: list[tuple[int, object]] = [(0, expr)]
    while stack:
        phase, node = stack.pop()
        if phase == 1:
            _finish(node)  # type: ignore[arg-type]
            continue
        if phase == 2:
            _bind(node)  # type: ignore[arg-type]
            continue
        if (
            not refresh
            and isinstance(node, E.Expr)
            and node.type is not None
            and not isinstance(node, (E.SeqExpr, E.Function, E.Var))
        ):
            continue
        stack.append((1, node))
        stack.extend((0, c) for c in reversed(_children(node, stack)))
    return expr.type or ANY


def _children(node: object, stack: list) -> list:
    """Sub-expressions to infer first; SeqExprs queue their bindings in order."""
    if isinstance(node, E.Call):
        callee = [node.callee] if isinstance(node.callee, E.Function) else []
        return callee + list(node.args)
    if isinstance(node, E.Tuple):
        return list(node.fields)
    if isinstance(node, E.TupleGetItem):
        return [node.tuple_value]
    if isinstance(node, E.If):
        return [node.cond, node.true_branch, node.false_branch]
    if isinstance(node, E.Function):
        return [node.body]
    if isinstance(node, E.Match):
        return [node.data]  # clause bodies after the pattern vars get types (in _finish)
    if isinstance(node, E.SeqExpr):
        # Pushed in reverse: value, bind, value, bind, ..., body, then finish.
        stack.append((0, node.body))
        for b in reversed(list(node.bindings)):
            stack.append((2, b))
            stack.append((0, b.value))
        return []
    return []


def _bind(binding: E.VarBinding) -> None:
    var = binding.var
    if var.annotation is None or isinstance(var.annotation, AnyType):
        var.with_type(binding.value.type or ANY)


def _finish(node: object) -> None:
    if not isinstance(node, E.Expr):
        return
    try:
        ty = _rule(node)
    except IRError:
        raise
    node.with_type(ty)


def _rule(node: E.Expr) -> Type:  # noqa: C901 - one case per node kind
    if isinstance(node, E.Var):
        return node.type or ANY
    if isinstance(node, (E.GlobalVar, E.Constant)):
        return node.type or ANY
    if isinstance(node, E.Tuple):
        return TupleType(tuple(f.type or ANY for f in node.fields))
    if isinstance(node, E.TupleGetItem):
        tt = node.tuple_value.type
        if isinstance(tt, TupleType):
            if not 0 <= node.index < len(tt.fields):
                raise IRError(f"tuple index {node.index} out of range for {tt}")
            return tt.fields[node.index]
        if tt is None or isinstance(tt, AnyType):
            return ANY
        raise IRError(f"cannot index a value of type {tt} with [{node.index}]")
    if isinstance(node, E.Call):
        return _call_type(node)
    if isinstance(node, E.Function):
        ret = node.ret_type or node.body.type or ANY
        return FuncType(tuple(p.type or ANY for p in node.params), ret)
    if isinstance(node, E.If):
        ct = node.cond.type
        if (
            isinstance(ct, TensorType)
            and ct.shape is not None
            and (ct.shape != () or ct.dtype not in (None, "bool"))
        ):
            raise IRError(f"`if` needs a 0-d bool tensor condition, got {ct}")
        return join_types(node.true_branch.type or ANY, node.false_branch.type or ANY)
    if isinstance(node, E.SeqExpr):
        return node.body.type or ANY
    if isinstance(node, E.Match):
        out: Type = ANY
        for clause in node.clauses:
            _bind_pattern(clause.pattern, node.data.type or ANY)
            out = join_types(out, infer_type(clause.body, refresh=True))
        return out
    return ANY


def _call_type(call: E.Call) -> Type:
    callee = call.callee
    arg_types = [a.type or ANY for a in call.args]
    if isinstance(callee, E.Op):
        rule = op_rules.get(callee)
        if rule is None:
            raise IRError(f"op {callee.name!r} has no type rule")
        return rule(call, arg_types)
    if isinstance(callee, E.Constructor):
        if len(call.args) != len(callee.field_types):
            raise IRError(
                f"constructor {callee.name} takes {len(callee.field_types)} fields, "
                f"got {len(call.args)}"
            )
        return ADTType(callee.adt_name)
    ft = callee.type
    if isinstance(ft, FuncType):
        if len(ft.params) != len(call.args):
            name = getattr(callee, "name", "function")
            raise IRError(f"{name} takes {len(ft.params)} arguments, got {len(call.args)}")
        return substitute_dims(ft.ret, bind_dims(ft.params, arg_types))
    return ANY


def bind_dims(params: tuple[Type, ...], args: list[Type]) -> dict[str, Dim]:
    """The caller's dimensions for the callee's symbolic names, unified parameter by argument.

    Only bare names bind: a parameter's dim ``past + seq`` binds nothing (the VM checks it
    once ``past`` and ``seq`` are bound), and the result's ``past + seq`` is computed from
    what they bind to (`substitute_dims`)."""
    out: dict[str, Dim] = {}
    stack = list(zip(params, args))
    while stack:
        p, a = stack.pop()
        if isinstance(p, TensorType) and isinstance(a, TensorType):
            if p.shape is not None and a.shape is not None and len(p.shape) == len(a.shape):
                for pd, ad in zip(p.shape, a.shape):
                    if is_symbol(pd) and out.get(pd, ad) == ad:
                        out[pd] = ad
                    elif is_symbol(pd):
                        out[pd] = None  # bound to two different caller dims: unknown here
        elif isinstance(p, TupleType) and isinstance(a, TupleType):
            stack.extend(zip(p.fields, a.fields))
    return out


def substitute_dims(ty: Type, dims: dict[str, Dim]) -> Type:
    """``ty`` with symbolic names replaced by ``dims``, expressions computed from them (names
    not in ``dims`` become unknown)."""
    if isinstance(ty, TensorType) and ty.shape is not None:
        if not any(isinstance(d, str) for d in ty.shape):
            return ty
        return TensorType(tuple(substitute(d, dims) for d in ty.shape), ty.dtype)
    if isinstance(ty, TupleType):
        return TupleType(tuple(substitute_dims(f, dims) for f in ty.fields))
    return ty


def _bind_pattern(pattern: E.Pattern, ty: Type) -> None:
    stack: list[tuple[E.Pattern, Type]] = [(pattern, ty)]
    while stack:
        p, t = stack.pop()
        if isinstance(p, E.PatternVar):
            if p.var.annotation is None:
                p.var.with_type(t)
        elif isinstance(p, E.PatternConstructor):
            stack.extend(zip(p.patterns, p.constructor.field_types))
        elif isinstance(p, E.PatternTuple):
            fields = t.fields if isinstance(t, TupleType) else (ANY,) * len(p.patterns)
            stack.extend(zip(p.patterns, fields))


__all__ = ["infer_type", "join_types", "ADTType"]
