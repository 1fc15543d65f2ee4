"""The interpreter's meaning of the ops with effects (`rvm.op.effects`): the same registered
functions, builtin and checks the VM calls, so both print and fail alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rvm.errors import ShapeError, VMError
from rvm.interp.prims import as_typed, run_reference
from rvm.interp.values import Env
from rvm.ir import expr as E
from rvm.op.effects import ASSERT, CALL_DPS_PACKED, CALL_PACKED, DEBUG_PRINT, DIM
from rvm.runtime.builtins import check_tensor, check_tuple, dim_carrier
from rvm.runtime.builtins import debug_print as print_builtin
from rvm.runtime.registry import get_global_func

__all__ = ["EFFECTS", "PACKED_OPS", "dim_call", "packed_call"]


def _checked(x: Any, func: str, shape: tuple | None, dtype: str, context: str = "") -> Any:
    context = context or f"the result of {func}"
    check_tensor(x, -1 if shape is None else len(shape), dtype, context)
    for axis, (want, got) in enumerate(zip(shape or (), x.shape)):
        if type(want) is int and want != got:
            raise ShapeError(
                f"{context}: shape {tuple(x.shape)} has {got} at axis {axis}, expected {want}"
            )
    return x


def _call_packed(
    *args: Any,
    func: str,
    shape: tuple | None = None,
    dtype: str | None = None,
    fields: tuple | None = None,
):
    out = get_global_func(func)(*args)
    if fields is not None:  # `packed_call` checks each field
        return check_tuple(out, len(fields), f"the result of {func}")
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
    return dim_carrier(value, f"rvm.dim {name}")  # `dim_call` runs it with the env


def dim_call(call: E.Call, value: Any, env: Env) -> np.ndarray:
    """``n = rvm.dim(value)``: the carrier of ``n``, checked against an earlier binding of
    ``n`` and binding it otherwise, with the VM's messages (`vm.builtin.dim_carrier`)."""
    name = call.attrs["name"]
    binding = f"{name} = rvm.dim({getattr(call.args[0], 'name', 'value')})"
    context = f"{env.name}: {binding}"
    carrier = dim_carrier(value, context)
    bound = env.dim(name)
    if bound is None:
        env.dims[name] = carrier.shape[0]
        env.sources[name] = binding
    elif bound != carrier.shape[0]:
        raise ShapeError(
            f"{context} is {carrier.shape[0]}, but {name} = {bound} from {_source(env, name)}"
        )
    return carrier


def _source(env: Env | None, name: str) -> str:
    while env is not None and name not in env.sources:
        env = env.parent
    return env.sources[name] if env is not None else "an enclosing function"


EFFECTS: dict[Any, Callable[..., Any]] = {
    DIM: _dim,
    CALL_PACKED: _call_packed,
    CALL_DPS_PACKED: _call_dps_packed,
    DEBUG_PRINT: _debug_print,
    ASSERT: _assert,
}


PACKED_OPS = frozenset({CALL_PACKED, CALL_DPS_PACKED})


def packed_call(ref: Callable[..., Any], op: E.Op, call: E.Call, args: list, env: Env) -> Any:
    """A packed call: the dims of its declared output that ``env`` binds are checked, the
    others are bound by the result (as the VM's MATCH_SHAPE stores them); a tuple output's
    fields in order, so a dim bound by one field is checked in the next."""
    attrs = dict(call.attrs)
    func, shape = attrs["func"], attrs.get("shape")
    if shape is not None:
        attrs["shape"] = tuple(env.dim(d) if isinstance(d, str) else d for d in shape)
    out = run_reference(ref, op, args, attrs, env)
    if "fields" in attrs:
        for i, ((want, dtype), x) in enumerate(zip(attrs["fields"], out)):
            what = f"the result of {func} field {i}"
            dims = (
                None
                if want is None
                else tuple(env.dim(d) if isinstance(d, str) else d for d in want)
            )
            _checked(x, func, dims, dtype, what)
            _bind_dims(want, x, env, what)
    else:
        _bind_dims(shape, out, env, f"the result of {func}")
    return as_typed(out, call.type)


def _bind_dims(shape: tuple | None, out: Any, env: Env, what: str) -> None:
    for d, size in zip(shape or (), getattr(out, "shape", ())):
        if isinstance(d, str) and env.dim(d) is None:
            env.dims[d] = int(size)
            env.sources[d] = what
