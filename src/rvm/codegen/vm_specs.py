"""What a VM function's callers are promised and checked against: its parameters' specs (the
VM's entry checks), the declared ranges of its symbolic dims and its result's spec
(`VMFunction.result`), from the IR function's types (`vm_function.FunctionCodegen` records
them in the function it emits)."""

from __future__ import annotations

from rvm.codegen import patterns
from rvm.ir import expr as E
from rvm.ir.types import ADTType, TensorType, TupleType, Type
from rvm.runtime.executable import ParamSpec

__all__ = ["dim_ranges", "param_spec", "result_spec", "result_type"]


def param_spec(var: E.Var) -> ParamSpec:
    """The entry check the VM runs for parameter ``var`` (a tuple's fields checked too)."""
    return result_spec(var.type, var.name)


def dim_ranges(func: E.Function) -> list[tuple[str, int | None, int | None]]:
    """The entry bounds of symbolic dimensions, from ``func.attrs["dim_ranges"]``
    (``{name: (min, max)}``, None for no bound)."""
    ranges = (func.attrs or {}).get("dim_ranges") or {}
    return [(str(n), lo, hi) for n, (lo, hi) in sorted(dict(ranges).items())]


def result_spec(ty: Type | None, name: str = "result") -> ParamSpec:
    """What a function returns, for callers (`VMFunction.result`): tensors with their shape
    and dtype, tuples with a spec per field."""
    if isinstance(ty, TensorType):
        return ParamSpec(name, "tensor", ty.dtype, patterns.spec_shape(ty.shape))
    if isinstance(ty, TupleType):
        fields = tuple(result_spec(f, f"{name}[{i}]") for i, f in enumerate(ty.fields))
        return ParamSpec(name, "tuple", fields=fields)
    if isinstance(ty, ADTType):
        return ParamSpec(name, "adt", adt=ty.name)
    return ParamSpec(name, "any")


def result_type(func: E.Function) -> Type | None:
    """The type ``func`` returns: its declared one, else its body's."""
    return func.ret_type or func.body.type
