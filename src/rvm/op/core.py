"""What every op module shares: the reference table, `as_expr`, and attribute checks.

Builders validate their static attributes eagerly with the ``check_*`` functions here, so a bad
axis or dtype fails where the user wrote it, with the op's name in the message, and they store
attributes in one normalized form (axes as tuples of ints, shapes as tuples of dims, dtypes as
names) so that printing a call and parsing it back gives an equal call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rvm.errors import IRError, RVMError
from rvm.ir.analysis import walk
from rvm.ir.expr import Call, Constant, Expr, Op, Tuple
from rvm.ir.infer import infer_type
from rvm.ir.op import OpPattern, register_op
from rvm.ir.types import FLOAT_DTYPES, Dim, Shape, TensorType, check_dim, check_dtype
from rvm.kernels import reference as library

ExprLike = Expr | bool | int | float | np.ndarray | np.generic

OP_PRECISION: dict[str, str] = {}
"""What the ops that compute in reduced precision compute in (``"bf16"``, ``"int8"``), by op
name; every other op computes in its operands' dtype (``"fp32"`` for float32 models). The
modules defining such ops register them here; `precision_of` reads it."""


def computes_in(mod: Any, precision: str) -> bool:
    """Whether some op of the IRModule ``mod`` computes in ``precision`` (`OP_PRECISION`):
    a quantized model computes in ``"int8"``."""
    return any(
        isinstance(e, Call)
        and isinstance(e.callee, Op)
        and OP_PRECISION.get(e.callee.name) == precision
        for name in mod
        for e in walk(mod[name])
    )


def precision_of(func: Any) -> str:
    """The precision the kernel of primitive function ``func`` computes its products in: the
    first reduced precision among its calls -- their op's (`OP_PRECISION`) or their
    ``precision`` attribute (a bf16 attention's) -- else ``"fp32"``."""
    for e in walk(func):
        if isinstance(e, Call) and isinstance(e.callee, Op):
            found = OP_PRECISION.get(e.callee.name) or e.attrs.get("precision", "fp32")
            if found != "fp32":
                return found
    return "fp32"


reference: dict[Op, Callable[..., Any]] = {}
"""NumPy reference implementation of each op: ``f(*input_arrays, **call.attrs)``.

Every function lives in `rvm.kernels.reference` under the op's name. Shapes given as attributes
reach a reference as concrete ints (the caller resolves symbolic names first). An op whose one
input is a Tuple (``concat``, ``stack``) receives the tuple of arrays as one argument; ``split``
returns a tuple of arrays.
"""


def define_op(name: str, pattern: OpPattern, num_inputs: int = -1) -> Op:
    """Registers op ``name`` (`rvm.ir.op.register_op`) with its reference, the function of
    `rvm.kernels.reference` of the same name: the one line that makes an op exist."""
    ref = getattr(library, name, None)
    if not callable(ref):
        raise IRError(
            f"op {name!r} has no NumPy reference: rvm.kernels.reference.{name} is missing"
        )
    op = register_op(name, pattern, num_inputs)
    reference[op] = ref
    return op


def as_expr(value: ExprLike, like: ExprLike | None = None) -> Expr:
    """``value`` as an expression: expressions pass through, arrays become constants.

    A Python or NumPy scalar becomes a 0-d `Constant` of ``like``'s dtype when ``like`` is an
    expression of known dtype (``x * 2.0`` keeps ``x`` float16), else of NumPy's dtype for it
    (a Python float becomes float32, a Python int int64): the dtype rule of `rvm.ir.types`.

    Raises:
        IRError: ``like``'s dtype is an integer or bool dtype that cannot hold ``value``
            (``int_x * 0.5``), which would otherwise be truncated silently.
    """
    if isinstance(value, Expr):
        return value
    if isinstance(value, np.ndarray):
        return Constant(value)
    if not isinstance(value, (bool, int, float, np.number, np.bool_)):
        raise IRError(f"cannot use {type(value).__name__} {value!r} as an rvm value")
    if isinstance(like, Expr):
        ty = infer_type(like)
        if isinstance(ty, TensorType) and ty.dtype is not None:
            return Constant(_scalar_as(value, ty.dtype))
    if isinstance(value, float):
        return Constant(np.asarray(value, dtype="float32"))
    return Constant(np.asarray(value))


def _scalar_as(value: bool | int | float | np.generic, dtype: str) -> np.ndarray:
    """``value`` as a 0-d array of ``dtype``; an integer or bool dtype must hold it exactly."""
    try:
        data = np.asarray(value, dtype=dtype)
    except (OverflowError, ValueError):
        data = None
    if data is None or (dtype not in FLOAT_DTYPES and data.item() != value):
        raise IRError(
            f"the scalar {value!r} takes the dtype {dtype} of the tensor it meets, which cannot "
            f"hold it; write rvm.const({value!r}, dtype) with the dtype you mean and op.cast "
            "the tensor to it"
        )
    return data


def as_tuple_expr(op: str, tensors: Sequence[ExprLike] | Expr) -> Expr:
    """The one Tuple argument of a variadic op (``concat``, ``stack``)."""
    if isinstance(tensors, Expr):
        return tensors
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise IRError(f"{op}: expects a non-empty list of tensors, got {tensors!r}")
    fields = [as_expr(t) for t in tensors]
    return Tuple(tuple(fields))


def call(op: Op, *args: Expr, **attrs: Any) -> Call:
    """A Call of ``op`` on ``args`` with ``attrs`` (already normalized by the builder)."""
    return Call(op, args, attrs)


# ---------------------------------------------------------------------------------------------
# Attribute checks: each returns the normalized value or raises IRError naming the op.


def check_int(op: str, name: str, value: object, *, minimum: int | None = None) -> int:
    """An int attribute (bools are not ints here)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise IRError(f"{op}: {name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise IRError(f"{op}: {name} must be >= {minimum}, got {value}")
    return int(value)


def check_float(op: str, name: str, value: object) -> float:
    """A float attribute; ints are accepted and stored as floats."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise IRError(f"{op}: {name} must be a number, got {value!r}")
    return float(value)


def check_scalar(op: str, name: str, value: object) -> bool | int | float:
    """A scalar attribute kept as the Python bool/int/float it is (fill values)."""
    if isinstance(value, (np.generic,)):
        value = value.item()
    if not isinstance(value, (bool, int, float)):
        raise IRError(f"{op}: {name} must be a Python scalar, got {value!r}")
    return value


def check_bool(op: str, name: str, value: object) -> bool:
    """A bool attribute."""
    if not isinstance(value, (bool, np.bool_)):
        raise IRError(f"{op}: {name} must be True or False, got {value!r}")
    return bool(value)


def check_choice(op: str, name: str, value: object, choices: Sequence[str]) -> str:
    """A string attribute from ``choices``."""
    if value not in choices:
        raise IRError(f"{op}: {name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return str(value)


def check_axis(op: str, axis: object, *, allow_none: bool = False) -> int | None:
    """One axis (an int, possibly negative), or None when ``allow_none``."""
    if axis is None and allow_none:
        return None
    return check_int(op, "axis", axis)


def check_axes(op: str, axis: object, *, name: str = "axis", allow_none: bool = True) -> Any:
    """Axes stored as None (every axis) or a tuple of ints; a single int becomes a 1-tuple."""
    if axis is None:
        if allow_none:
            return None
        raise IRError(f"{op}: {name} must be an int or a list of ints, got None")
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, (bool, np.bool_)):
        return (int(axis),)
    if isinstance(axis, (list, tuple)):
        return tuple(check_int(op, name, a) for a in axis)
    raise IRError(f"{op}: {name} must be an int or a list of ints, got {axis!r}")


def check_ints(op: str, name: str, value: object, length: int | None = None) -> tuple[int, ...]:
    """A tuple of ints; a single int is repeated ``length`` times when ``length`` is given."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        if length is None:
            return (int(value),)
        return (int(value),) * length
    if not isinstance(value, (list, tuple)):
        raise IRError(f"{op}: {name} must be an int or a tuple of ints, got {value!r}")
    out = tuple(check_int(op, name, v) for v in value)
    if length is not None and len(out) != length:
        raise IRError(f"{op}: {name} must have {length} values, got {value!r}")
    return out


def check_shape(op: str, shape: object, *, allow_infer: bool = False) -> Shape:
    """A shape attribute: ints >= 0, symbolic names, and (``allow_infer``) one -1."""
    if isinstance(shape, np.ndarray):
        shape = shape.tolist()
    if isinstance(shape, (int, np.integer, str)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (list, tuple)):
        raise IRError(f"{op}: shape must be a tuple of ints and names, got {shape!r}")
    out: list[Dim] = []
    for d in shape:
        if allow_infer and isinstance(d, (int, np.integer)) and d == -1:
            out.append(-1)
            continue
        try:
            dim = check_dim(d)
        except IRError as err:
            raise IRError(f"{op}: bad shape {tuple(shape)!r}: {err}") from None
        if dim is None:
            raise IRError(f"{op}: shape {tuple(shape)!r} has an unknown dimension")
        out.append(dim)
    if out.count(-1) > 1:
        raise IRError(f"{op}: shape {tuple(shape)!r} has more than one -1")
    return tuple(out)


def check_dtype_attr(op: str, dtype: object) -> str:
    """A dtype attribute as one of `rvm.ir.DTYPES`."""
    try:
        return check_dtype(dtype)
    except RVMError as err:
        raise type(err)(f"{op}: {err}") from None
