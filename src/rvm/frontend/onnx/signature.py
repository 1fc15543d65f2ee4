"""Checking a node's tensor types against its ONNX schema's type constraints.

Every ONNX operator declares the types its inputs and outputs may take: a fixed type
(``tensor(int64)``) or a type parameter (``T``) with its allowed types, bound to one type for
the whole node. ``Add(float32, int64)`` binds ``T`` twice and ``Add(float32, bool)`` gives
``T`` a type it does not allow: ONNX declares such a model invalid and ONNX Runtime refuses it.
rvm checks each node before converting it (`check_inputs`), with one rule for every op, and the
outputs the converter produced after (`check_outputs`), so no conversion can silently change a
declared type; the graph's outputs must have the element types they declare
(`check_declared`).

Only tensor values are checked (sequences and optionals are rvm data types, checked by their
converters), and only nodes with a schema (a model's local functions have none).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rvm.errors import OnnxImportError
from rvm.ir import Expr, TensorType, infer_type


@dataclass(frozen=True)
class _Formal:
    """One formal input or output: its name, type string, and whether it is variadic and
    then homogeneous (all its values of one type)."""

    name: str
    type_str: str
    variadic: bool
    homogeneous: bool


@dataclass(frozen=True)
class Signature:
    """The formal inputs and outputs of an operator schema and its type constraints."""

    inputs: tuple[_Formal, ...]
    outputs: tuple[_Formal, ...]
    allowed: dict[str, frozenset[str]]  # type parameter: the type strings it may bind to


@functools.cache
def signature(op_type: str, version: int, domain: str) -> Signature | None:
    """The signature of ``op_type``'s schema at ``version`` of ``domain``; None if none."""
    import onnx.defs

    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        return None
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic

    def formals(params: Any) -> tuple[_Formal, ...]:
        return tuple(
            _Formal(p.name, p.type_str, p.option == variadic, p.is_homogeneous) for p in params
        )

    allowed = {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
    return Signature(formals(schema.inputs), formals(schema.outputs), allowed)


@functools.cache
def _onnx_types() -> dict[str, str]:
    """rvm dtype name: the ONNX type string of a tensor of it (``tensor(float)``)."""
    import onnx

    from rvm.frontend.onnx.weights import np_dtype

    out: dict[str, str] = {}
    for name, code in onnx.TensorProto.DataType.items():
        try:
            dtype = np_dtype(code, "")
        except OnnxImportError:
            continue
        out.setdefault(dtype, f"tensor({name.lower()})")
    return out


def _type_str(value: Expr | None) -> str | None:
    """The ONNX type string of a tensor value of known dtype; None for anything else."""
    if value is None:
        return None
    ty = infer_type(value)
    if not isinstance(ty, TensorType) or ty.dtype is None:
        return None
    return _onnx_types().get(ty.dtype)


def _formal_of(formals: Sequence[_Formal], i: int) -> _Formal | None:
    """The formal parameter that value ``i`` binds to (the last one when it is variadic)."""
    if i < len(formals):
        return formals[i]
    return formals[-1] if formals and formals[-1].variadic else None


class _Binder:
    """Binds a node's type parameters as values come, refusing a type a parameter cannot
    take and a second type for one parameter."""

    def __init__(self, sig: Signature, where: str) -> None:
        self.sig = sig
        self.where = where
        self.bound: dict[str, tuple[str, str]] = {}  # parameter: (type string, bound by)

    def check(self, formal: _Formal, actual: str, what: str) -> None:
        allowed = self.sig.allowed.get(formal.type_str)
        if allowed is None:  # a fixed type: tensor(int64)
            if formal.type_str.startswith("tensor(") and actual != formal.type_str:
                self._fail(f"{what} is {actual}, but the schema requires {formal.type_str}")
            return
        if not any(a.startswith("tensor(") for a in allowed):
            return  # a parameter of sequences or optionals only: not a tensor's to check
        if actual not in allowed:
            tensors = sorted(a for a in allowed if a.startswith("tensor("))
            self._fail(
                f"{what} is {actual}, which its type {formal.type_str} does not allow "
                f"(tensors allowed: {', '.join(tensors)})"
            )
        if formal.variadic and not formal.homogeneous:
            return  # each value of a heterogeneous variadic has its own type
        first = self.bound.setdefault(formal.type_str, (actual, what))
        if first[0] != actual:
            self._fail(
                f"{what} is {actual}, but {first[1]} is {first[0]}; the schema requires both "
                f"to have one type {formal.type_str}"
            )

    def _fail(self, message: str) -> None:
        raise OnnxImportError(f"{self.where}: {message}")


def check_inputs(
    node: Any, version: int | None, domain: str, inputs: Sequence[Expr | None], where: str
) -> _Binder | None:
    """Refuse ``node`` when its input types break its schema's type constraints.

    Returns the bound type parameters, for `check_outputs`; None when the node has no schema.
    """
    sig = None if version is None else signature(node.op_type, version, domain)
    if sig is None:
        return None
    binder = _Binder(sig, where)
    for i, (name, value) in enumerate(zip(node.input, inputs)):
        formal, actual = _formal_of(sig.inputs, i), _type_str(value)
        if formal is not None and actual is not None:
            binder.check(formal, actual, f"input {i} ({name!r})")
    return binder


def check_outputs(binder: _Binder | None, node: Any, results: Sequence[Expr | None]) -> None:
    """Refuse a conversion whose outputs break the schema's types as the inputs bound them
    (an rvm defect: the error says so rather than let a wrong type through)."""
    if binder is None:
        return
    for i, (name, value) in enumerate(zip(node.output, results)):
        formal, actual = _formal_of(binder.sig.outputs, i), _type_str(value)
        if name and formal is not None and actual is not None:
            binder.check(formal, actual, f"rvm's output {i} ({name!r})")


def check_declared(info: Any, value: Expr, what: str) -> None:
    """Refuse ``value`` when its element type contradicts its ValueInfo ``info``, as ONNX
    Runtime does. Declared dims that contradict it are tolerated, as ONNX Runtime does (it
    warns, and the value's shape wins)."""
    from rvm.frontend.onnx.weights import np_dtype

    if not info.type.HasField("tensor_type"):
        return
    ty = infer_type(value)
    if not isinstance(ty, TensorType):
        raise OnnxImportError(f"{what} is declared a tensor, but its value is {ty}")
    declared = np_dtype(info.type.tensor_type.elem_type, what)
    if ty.dtype is not None and ty.dtype != declared:
        raise OnnxImportError(f"{what} is declared {declared}, but its value is {ty.dtype}")
