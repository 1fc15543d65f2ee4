"""The converter table: which ATen overload becomes which rvm IR.

Converters are keyed by the overload's qualified name, as ``str(torch.ops.aten.add.Tensor)``
prints it (``"aten.add.Tensor"``), so registering one needs no torch import:

    @converter("aten.add.Tensor", "aten.add.Scalar")
    def add(ctx, x, other, alpha=1): ...

A converter receives a `rvm.frontend.torch.context.NodeContext` and the node's arguments as
the ATen schema orders them: tensors as IR expressions, symbolic integers as
`rvm.frontend.torch.context.SymInt`, lists, numbers and dtypes as themselves. It returns an
expression, or a list of them for an overload with several outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ConvertFn = Callable[..., Any]

_table: dict[str, ConvertFn] = {}


def converter(*names: str) -> Callable[[ConvertFn], ConvertFn]:
    """Register the decorated function for each ATen overload in ``names``."""

    def register(fn: ConvertFn) -> ConvertFn:
        for name in names:
            if name in _table:
                raise ValueError(f"{name}: registered twice")
            _table[name] = fn
        return fn

    return register


def lookup(name: str) -> ConvertFn | None:
    """The converter of the overload ``name``, or None."""
    return _table.get(name)


def supported() -> list[str]:
    """Every ATen overload rvm converts, sorted."""
    return sorted(_table)
