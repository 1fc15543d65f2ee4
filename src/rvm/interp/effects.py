"""The interpreter's meaning of the ops with effects (`rvm.op.effects`): the same registered
functions, builtin and checks the VM calls, so both print and fail alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rvm.errors import ShapeError, VMError
from rvm.op.effects import ASSERT, CALL_DPS_PACKED, CALL_PACKED, DEBUG_PRINT, DIM
from rvm.runtime.builtins import check_tensor, dim_carrier
from rvm.runtime.builtins import debug_print as print_builtin
from rvm.runtime.registry import get_global_func

__all__ = ["EFFECTS"]


def _checked(x: Any, func: str, shape: tuple | None, dtype: str) -> Any:
    context = f"the result of {func}"
    check_tensor(x, -1 if shape is None else len(shape), dtype, context)
    for axis, (want, got) in enumerate(zip(shape or (), x.shape)):
        if type(want) is int and want != got:
            raise ShapeError(
                f"{context}: shape {tuple(x.shape)} has {got} at axis {axis}, expected {want}"
            )
    return x


def _call_packed(*args: Any, func: str, shape: tuple | None = None, dtype: str | None = None):
    out = get_global_func(func)(*args)
    return () if dtype is None else _checked(out, func, shape, dtype)


def _call_dps_packed(*args: Any, func: str, shape: tuple, dtype: str) -> np.ndarray:
    out = np.empty(shape, dtype)
    get_global_func(func)(*args, out)
    return out


def _debug_print(x: Any, label: str = "") -> tuple:
    print_builtin(x, label)
    return ()


def _assert(cond: Any, message: str) -> tuple:
    if not bool(cond):
        raise VMError(f"fatal: {message}")
    return ()


def _dim(value: Any, name: str) -> np.ndarray:
    # The binding's annotation, T[(name, 0), "int64"], then binds or checks the dimension.
    return dim_carrier(value, f"rvm.dim {name}")


EFFECTS: dict[Any, Callable[..., Any]] = {
    DIM: _dim,
    CALL_PACKED: _call_packed,
    CALL_DPS_PACKED: _call_dps_packed,
    DEBUG_PRINT: _debug_print,
    ASSERT: _assert,
}
