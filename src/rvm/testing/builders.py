"""Building blocks for pass tests: primitive functions added to a module under construction."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rvm.ir import Builder, Function, GlobalVar, Var
from rvm.ir.infer import infer_type
from rvm.ir.op import OpPattern


def add_prim(
    bb: Builder,
    name: str,
    params: Sequence[Var],
    build: Callable[..., object],
    pattern: OpPattern,
    ops: Sequence[str],
) -> GlobalVar:
    """Add primitive function ``name`` whose body is ``build(inner_builder, *params)``."""
    inner = Builder()
    attrs = {"primitive": True, "pattern": int(pattern), "ops": tuple(ops), "private": True}
    with inner.function(name, params, attrs=attrs):
        inner.emit_output(build(inner, *params))
    func: Function = inner.get()[name]
    gv = bb.add_function(name, func)
    gv.with_type(infer_type(func))
    return gv
