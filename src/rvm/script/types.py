"""Types in rvm script: ``T[shape, dtype]``, ``Tuple[...]``, ``Shape[k]``, ``Callable``, ``Any``.

The objects exported here make annotations evaluate to IR types when Python runs a decorated
function's signature (``T[("n", 4), "float32"]`` is a `TensorType`). The parser never relies on
that evaluation: it reads annotations from the syntax tree with `type_from_ast`, and the printer
writes types back with `type_text`, so the two stay each other's inverse.
"""

from __future__ import annotations

import ast
from collections.abc import Callable as _Callable

from rvm.errors import IRError
from rvm.ir.types import (
    ADTType,
    AnyType,
    FuncType,
    ShapeType,
    TensorType,
    TupleType,
    Type,
)


class _TensorTypeMaker:
    """``T[shape, dtype]``: a tensor type; shape None means unknown rank."""

    def __getitem__(self, key: object) -> TensorType:
        if not isinstance(key, tuple) or len(key) != 2:
            raise IRError('a tensor type is written T[shape, dtype], e.g. T[(2, "n"), "float32"]')
        shape, dtype = key
        return TensorType(None if shape is None else tuple(shape), dtype)

    def __repr__(self) -> str:
        return "T"


class _TupleTypeMaker:
    """``Tuple[a, b, ...]``: a tuple type (``Tuple[()]`` is the empty tuple)."""

    def __getitem__(self, key: object) -> TupleType:
        fields = key if isinstance(key, tuple) else (key,)
        return TupleType(tuple(to_type(f) for f in fields))

    def __repr__(self) -> str:
        return "Tuple"


class _ShapeTypeMaker:
    """``Shape[k]``: a shape value of k dimensions (None: unknown)."""

    def __getitem__(self, key: object) -> ShapeType:
        return ShapeType(key)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return "Shape"


class _CallableTypeMaker:
    """``Callable[[params...], ret]``: a function type."""

    def __getitem__(self, key: object) -> FuncType:
        if not isinstance(key, tuple) or len(key) != 2 or not isinstance(key[0], list):
            raise IRError("a function type is written Callable[[param types...], result type]")
        return FuncType(tuple(to_type(p) for p in key[0]), to_type(key[1]))

    def __repr__(self) -> str:
        return "Callable"


T = _TensorTypeMaker()
Tuple = _TupleTypeMaker()
Shape = _ShapeTypeMaker()
Callable = _CallableTypeMaker()
Any = AnyType()


def to_type(value: object) -> Type:
    """A Python value produced by evaluating an annotation, as an IR type.

    Strings name data types (``"List"``); declared data types (`ADTDef`) stand for themselves.
    """
    from rvm.ir.module import ADTDef

    if isinstance(value, Type):
        return value
    if isinstance(value, str):
        return ADTType(value)
    if isinstance(value, ADTDef):
        return ADTType(value.name)
    raise IRError(f"not a type: {value!r}")


# ---------------------------------------------------------------------------------------------
# Reading types from syntax


def _head(node: ast.expr) -> str | None:
    """The last name of ``T`` / ``rvm.script.T``-like heads."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def type_from_ast(node: ast.expr, resolve_name: _Callable[[ast.expr, str], Type]) -> Type:
    """The IR type written by the annotation ``node``.

    ``resolve_name(node, name)`` turns a bare name (or a string) into a type: the parser maps
    data type names to `ADTType` and raises a located error for anything else.
    """
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return resolve_name(node, node.value)
    if isinstance(node, (ast.Name, ast.Attribute)):
        head = _head(node)
        if head == "Any":
            return AnyType()
        return resolve_name(node, head or "")
    if isinstance(node, ast.Subscript):
        head = _head(node.value)
        if head == "T":
            return _tensor_from_ast(node.slice)
        if head == "Tuple":
            return _tuple_from_ast(node.slice, resolve_name)
        if head == "Shape":
            ndim = _literal_dim(node.slice)
            if ndim is not None and not isinstance(ndim, int):
                raise IRError("Shape[k] takes an int or None")
            return ShapeType(ndim)
        if head == "Callable":
            s = node.slice
            ok = isinstance(s, ast.Tuple) and len(s.elts) == 2 and isinstance(s.elts[0], ast.List)
            if not ok:
                raise IRError("a function type is written Callable[[param types...], result]")
            params = tuple(type_from_ast(p, resolve_name) for p in s.elts[0].elts)
            return FuncType(params, type_from_ast(s.elts[1], resolve_name))
    raise IRError(f"not a type: {ast.unparse(node)}")


def _tuple_from_ast(node: ast.expr, resolve_name: _Callable[[ast.expr, str], Type]) -> Type:
    if isinstance(node, ast.Tuple):
        return TupleType(tuple(type_from_ast(e, resolve_name) for e in node.elts))
    return TupleType((type_from_ast(node, resolve_name),))


def _literal_dim(node: ast.expr) -> object:
    if isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (int, str)):
        return node.value
    raise IRError(f"a dimension must be an int, a name in quotes or None, got {ast.unparse(node)}")


def _tensor_from_ast(node: ast.expr) -> TensorType:
    if not (isinstance(node, ast.Tuple) and len(node.elts) == 2):
        raise IRError('a tensor type is written T[shape, dtype], e.g. T[(2, "n"), "float32"]')
    shape_node, dtype_node = node.elts
    if isinstance(shape_node, ast.Constant) and shape_node.value is None:
        shape = None
    elif isinstance(shape_node, (ast.Tuple, ast.List)):
        shape = tuple(_literal_dim(d) for d in shape_node.elts)
    else:
        got = ast.unparse(shape_node)
        raise IRError(f"a tensor shape is a tuple of dimensions or None, got {got}")
    if not (
        isinstance(dtype_node, ast.Constant)
        and (dtype_node.value is None or isinstance(dtype_node.value, str))
    ):
        raise IRError(f'a dtype is a string such as "float32", got {ast.unparse(dtype_node)}')
    return TensorType(shape, dtype_node.value)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Writing types


def _dim_text(d: object) -> str:
    return f'"{d}"' if isinstance(d, str) else repr(d)


def type_text(ty: Type | None) -> str:
    """The script spelling of ``ty``; `type_from_ast` reads it back."""
    if ty is None or isinstance(ty, AnyType):
        return "Any"
    if isinstance(ty, TensorType):
        if ty.shape is None:
            shape = "None"
        elif len(ty.shape) == 1:
            shape = f"({_dim_text(ty.shape[0])},)"
        else:
            shape = "(" + ", ".join(_dim_text(d) for d in ty.shape) + ")"
        dtype = "None" if ty.dtype is None else f'"{ty.dtype}"'
        return f"T[{shape}, {dtype}]"
    if isinstance(ty, TupleType):
        if not ty.fields:
            return "Tuple[()]"
        return "Tuple[" + ", ".join(type_text(f) for f in ty.fields) + "]"
    if isinstance(ty, ADTType):
        return ty.name
    if isinstance(ty, ShapeType):
        return f"Shape[{ty.ndim!r}]"
    if isinstance(ty, FuncType):
        params = ", ".join(type_text(p) for p in ty.params)
        return f"Callable[[{params}], {type_text(ty.ret)}]"
    raise IRError(f"cannot print type {ty!r}")
