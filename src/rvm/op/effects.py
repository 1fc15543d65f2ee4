"""Ops with effects: calls of registered Python functions, debug prints and asserts.

They are the program's way out to Python (Relax's `call_packed`, `call_dps_packed` and
`call_py_func`): the VM calls a function registered with `rvm.register_func` by name.

- ``call_packed(func, *args, out=T[shape, dtype])``: ``func(*args)`` returns a tensor, checked
  against ``out`` (dtype, rank and dims; a symbolic dim is bound at its first use, then
  checked) before the program uses it. With ``out=(T[...], T[...])`` it returns a tuple (or
  list) of that many tensors, each field checked the same way; the program sees a tuple.
  Without ``out`` the call returns nothing (``()``).
- ``call_dps_packed(func, *args, out=T[shape, dtype])``: destination-passing: the VM allocates
  the output (its shape from ``out``: fixed dims, or dims bound earlier) and calls
  ``func(*args, output)``, which writes it.
- ``debug_print(x, label)``: prints ``label: x`` through the ``vm.builtin.debug_print``
  builtin (the interpreter prints the same line); returns nothing.
- ``assert_(cond, message)``: stops the program with ``VMError`` (``fatal: message`` and the VM
  stack) when the 0-d bool ``cond`` is false; returns nothing. rvm script writes it
  ``assert cond, "message"``.
- ``dim(value, name)``: binds the symbolic dimension ``name`` to a 0-d integer ``value`` (Relax's
  ``match_prim_value``), checked at run time (a negative value, or one that disagrees with an
  earlier binding of ``name``, a parameter's dim among them, is a ShapeError). Its value is a
  tensor of shape ``(name, 0)``, no data: the carrier the rest of the compiler reads the
  dimension from (kernels read dims from their arguments' shapes; the VM stores it in the shape
  heap with MATCH_SHAPE). rvm script writes ``n = rvm.dim(steps)`` and then ``n`` in shapes:
  ``op.zeros((n, 4))``, ``op.reshape(x, (n, -1))``.

All four are named ``vm.*``: no pass fuses, folds or removes them (`dead_code` keeps every
``vm.*`` call as an effect), and VM codegen turns each into instructions (CALL_PACKED,
NEW_TENSOR + INVOKE_PACKED, IF_IMM + FATAL). A function that uses one runs in the compiled mode
under ``exec_mode="native"`` (`native_report()` says which packed call); one that uses none
keeps its native code. The attributes: ``func`` (the registered name), ``shape`` and ``dtype``
(the declared output; absent for no output) or ``fields`` (a tuple output: ``(shape, dtype)``
per field), ``label``, ``message``.
"""

from __future__ import annotations

from typing import Any

from rvm.errors import IRError
from rvm.ir.expr import Call, Op
from rvm.ir.op import OpPattern, infer, register_op
from rvm.ir.types import TensorType, TupleType, Type
from rvm.op.core import ExprLike, as_expr

__all__ = ["assert_", "call_dps_packed", "call_packed", "debug_print", "dim"]

CALL_PACKED = register_op("vm.call_packed", OpPattern.OPAQUE)
CALL_DPS_PACKED = register_op("vm.call_dps_packed", OpPattern.OPAQUE)
DEBUG_PRINT = register_op("vm.debug_print", OpPattern.OPAQUE, 1)
ASSERT = register_op("vm.assert", OpPattern.OPAQUE, 1)
DIM = register_op("vm.dim", OpPattern.OPAQUE, 1)
EFFECT_OPS = frozenset({CALL_PACKED, CALL_DPS_PACKED, DEBUG_PRINT, ASSERT, DIM})

UNIT = TupleType(())


def declared_output(call: Call) -> TensorType | TupleType | None:
    """The output a packed call declares: a tensor, a tuple of tensors (``fields``), or None
    (it returns nothing)."""
    if "fields" in call.attrs:
        return TupleType(tuple(TensorType(shape, dtype) for shape, dtype in call.attrs["fields"]))
    if "dtype" not in call.attrs:
        return None
    return TensorType(call.attrs.get("shape"), call.attrs["dtype"])


infer[CALL_PACKED] = lambda call, types: declared_output(call) or UNIT
infer[CALL_DPS_PACKED] = lambda call, types: declared_output(call) or UNIT
infer[DEBUG_PRINT] = lambda call, types: UNIT


def _infer_assert(call: Call, types: list[Type]) -> Type:
    ty = types[0]
    if isinstance(ty, TensorType) and (
        (ty.shape is not None and len(ty.shape) != 0) or ty.dtype not in (None, "bool")
    ):
        raise IRError(f"assert: the condition must be a 0-d bool tensor, got {ty}")
    return UNIT


infer[ASSERT] = _infer_assert


def _infer_dim(call: Call, types: list[Type]) -> Type:
    ty = types[0]
    if isinstance(ty, TensorType) and (
        (ty.shape is not None and len(ty.shape) != 0)
        or (ty.dtype is not None and not ty.dtype.startswith(("int", "uint")))
    ):
        raise IRError(f"dim: the value must be a 0-d integer tensor, got {ty}")
    return TensorType((call.attrs["name"], 0), "int64")


infer[DIM] = _infer_dim


def _packed(op: Op, func: str, args: tuple[ExprLike, ...], out: Any) -> Call:
    what = op.name.removeprefix("vm.")
    if not isinstance(func, str) or not func:
        raise IRError(f"{what}: the function name must be a non-empty str, got {func!r}")
    attrs: dict[str, Any] = {"func": func}
    if isinstance(out, (tuple, list, TupleType)) and op is CALL_PACKED:
        fields = out.fields if isinstance(out, TupleType) else tuple(out)
        if not fields or not all(_is_output(f) for f in fields):
            raise IRError(
                f"{what}: a tuple out must hold tensor types with dtypes "
                f"((T[shape, dtype], ...)), got {out!r}"
            )
        attrs["fields"] = tuple((f.shape, f.dtype) for f in fields)
    elif out is not None:
        if not _is_output(out):
            kinds = " or a tuple of them" if op is CALL_PACKED else ""
            raise IRError(
                f"{what}: out must be a tensor type with a dtype (T[shape, dtype]){kinds}"
            )
        attrs["shape"] = out.shape
        attrs["dtype"] = out.dtype
    elif op is CALL_DPS_PACKED:
        raise IRError(f"{what}: the destination's type is needed: out=T[shape, dtype]")
    return Call(op, tuple(as_expr(a) for a in args), attrs)


def _is_output(ty: Any) -> bool:
    return isinstance(ty, TensorType) and ty.dtype is not None


def call_packed(
    func: str, *args: ExprLike, out: TensorType | tuple[TensorType, ...] | TupleType | None = None
) -> Call:
    """``func(*args)``: a call of the Python function registered as ``func``, its result
    checked against ``out``: a tensor type, or a tuple of them for a function returning a
    tuple (each field checked); no result without ``out``."""
    return _packed(CALL_PACKED, func, args, out)


def call_dps_packed(func: str, *args: ExprLike, out: TensorType) -> Call:
    """``func(*args, output)``: the registered function writes a tensor of type ``out`` that
    the VM allocates; the call's value is that tensor."""
    return _packed(CALL_DPS_PACKED, func, args, out)


def debug_print(x: ExprLike, label: str = "") -> Call:
    """Prints ``label: x`` when the program runs (every exec mode); returns nothing."""
    if not isinstance(label, str):
        raise IRError(f"debug_print: the label must be a str, got {label!r}")
    return Call(DEBUG_PRINT, (as_expr(x),), {"label": label})


def assert_(cond: ExprLike, message: str = "assertion failed") -> Call:
    """Stops the program with ``VMError`` carrying ``message`` when ``cond`` is false."""
    if not isinstance(message, str):
        raise IRError(f"assert: the message must be a str, got {message!r}")
    return Call(ASSERT, (as_expr(cond),), {"message": message})


def dim(value: ExprLike, name: str) -> Call:
    """The symbolic dimension ``name`` bound to the 0-d integer ``value`` (module docstring)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise IRError(f"dim: the dimension's name must be an identifier, got {name!r}")
    return Call(DIM, (as_expr(value),), {"name": name})
