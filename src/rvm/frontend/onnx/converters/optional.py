"""ONNX optionals: Optional, OptionalHasElement and OptionalGetElement.

An optional is a value of the data type ``Optional_<inner>``, declared on first use::

    Optional_tensor_float32 = Nothing | Some(value: T[?, float32])
    Optional_Sequence_float32 = Nothing | Some(value: Sequence_float32)

Getting the element of ``Nothing`` matches no clause, which the VM reports as an error. A
Loop may carry an optional in and give back its element (``test_loop16_seq_none``): `like`
wraps such a value in ``Some`` to keep the loop's types.

`adt_type` gives the IR type of an ONNX sequence or optional type (graph inputs). Optionals
are declared with the Python form ``"optional"`` (``IRModule.attrs["python_forms"]``): the VM
takes and returns None for ``Nothing`` and the value for ``Some``, as ONNX Runtime does
(`rvm.runtime.entry`).
"""

from __future__ import annotations

from typing import Any

from rvm.errors import OnnxImportError
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.converters import sequence
from rvm.frontend.onnx.converters.subgraph import block
from rvm.frontend.onnx.registry import converter
from rvm.frontend.onnx.weights import np_dtype
from rvm.ir import (
    ADTType,
    Call,
    Clause,
    Constructor,
    Expr,
    Match,
    PatternConstructor,
    PatternVar,
    PatternWildcard,
    TensorType,
    Var,
    const,
    infer_type,
)
from rvm.ir.types import Type

_PREFIX = "Optional_"
# 18 lets OptionalHasElement/GetElement take a plain tensor or sequence; 28 (and Optional-28)
# only add element types
_VERSIONS = (15, 18, 28)


def _key(inner: Type) -> str:
    if isinstance(inner, ADTType):
        return inner.name
    assert isinstance(inner, TensorType)
    return f"tensor_{inner.dtype}"


def constructors(importer: Any, inner: Type) -> tuple[Constructor, Constructor]:
    """Nothing and Some of optionals of ``inner`` values, declared on first use."""
    if isinstance(inner, TensorType):
        inner = sequence.element_type(inner.dtype)  # type: ignore[arg-type]
    python = f"optional:{inner.name}" if isinstance(inner, ADTType) else "optional"
    adt = importer.declare_adt(
        _PREFIX + _key(inner), [("Nothing", []), ("Some", [inner])], python=python
    )
    return adt.constructors[0], adt.constructors[1]


def _is_optional(ty: Type) -> bool:
    return isinstance(ty, ADTType) and ty.name.startswith(_PREFIX)


def _inner(ctx: NodeContext, ty: ADTType) -> Type:
    return constructors_of(ctx, ty)[1].field_types[0]


def constructors_of(ctx: NodeContext, ty: ADTType) -> tuple[Constructor, Constructor]:
    adt = ctx.importer.adts[ty.name]
    return adt.constructors[0], adt.constructors[1]


def adt_type(importer: Any, tp: Any, what: str) -> ADTType:
    """The IR type of ONNX sequence or optional type ``tp`` (its data type declared with its
    Python form, so the VM converts its values from and to Python's)."""
    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        elem = tp.sequence_type.elem_type
        if elem.WhichOneof("value") != "tensor_type":
            raise OnnxImportError(f"{what} is a sequence of non-tensors, which rvm cannot import")
        dtype = np_dtype(elem.tensor_type.elem_type, what)
        sequence.constructors(importer, dtype)
        return sequence.sequence_type(dtype)
    if kind == "optional_type":
        elem = tp.optional_type.elem_type
        if elem.WhichOneof("value") == "tensor_type":
            inner: Type = sequence.element_type(np_dtype(elem.tensor_type.elem_type, what))
        else:
            inner = adt_type(importer, elem, what)
        nothing, _some = constructors(importer, inner)
        return ADTType(nothing.adt_name)
    raise OnnxImportError(f"{what} is a {kind}; rvm imports tensors, sequences and optionals")


def like(ctx: NodeContext, value: Expr, ty: Type) -> Expr:
    """``value`` wrapped in ``Some`` when ``ty`` is an optional of its type, else itself."""
    got = infer_type(value)
    if not _is_optional(ty) or _is_optional(got):
        return value
    _nothing, some = constructors_of(ctx, ty)  # type: ignore[arg-type]
    return ctx.emitter.builder.emit(Call(some, (value,)))


@converter("Optional", since=(15, 28))
def _optional(ctx: NodeContext) -> Expr:
    value = ctx.optional(0)
    if value is None:
        tp = ctx.attr("type")
        if tp.WhichOneof("value") == "tensor_type":
            inner: Type = _tensor_of(ctx, tp)
        else:
            inner = adt_type(ctx.importer, tp, f"node {ctx.name!r}: the type")
        nothing, _some = constructors(ctx.importer, inner)
        return ctx.emitter.builder.emit(Call(nothing, ()))
    _nothing, some = constructors(ctx.importer, infer_type(value))
    return ctx.emitter.builder.emit(Call(some, (value,)))


def _tensor_of(ctx: NodeContext, tp: Any) -> TensorType:
    return sequence.element_type(np_dtype(tp.tensor_type.elem_type, f"node {ctx.name!r}"))


@converter("OptionalHasElement", since=_VERSIONS)
def _optional_has_element(ctx: NodeContext) -> Expr:
    value = ctx.optional(0)
    if value is None or not _is_optional(infer_type(value)):
        return const(value is not None, "bool")
    nothing, _some = constructors_of(ctx, infer_type(value))  # type: ignore[arg-type]
    clauses = (
        Clause(PatternConstructor(nothing, ()), block(ctx, lambda: const(False, "bool"))),
        Clause(PatternWildcard(), block(ctx, lambda: const(True, "bool"))),
    )
    return ctx.emitter.builder.emit(Match(value, clauses))


@converter("OptionalGetElement", since=_VERSIONS)
def _optional_get_element(ctx: NodeContext) -> Expr:
    value = ctx.input(0)
    ty = infer_type(value)
    if not _is_optional(ty):
        return value
    _nothing, some = constructors_of(ctx, ty)  # type: ignore[arg-type]
    v = Var(ctx.importer.names("value"), _inner(ctx, ty))  # type: ignore[arg-type]
    clause = Clause(PatternConstructor(some, (PatternVar(v),)), block(ctx, lambda: v))
    return ctx.emitter.builder.emit(Match(value, (clause,)))
