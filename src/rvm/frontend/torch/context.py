"""What a converter sees: the node, its output's dtype and shape, emitting, symbolic integers.

A converter gets a `NodeContext` and the node's arguments. Tensors are IR expressions;
symbolic integers (``x.shape[0]``, ``s0 * 12`` in a ``view``) are `SymInt`: the sympy
expression torch.export recorded, which the context turns into an rvm dimension (an int, a
symbolic name, or None for arithmetic the IR cannot name) or into a run-time 0-d tensor read
from the shape of the input that carries the symbol.

Every node's result is conformed to the dtype torch.export recorded for it (`conform`): a
converter may compute in the dtype rvm's rules give, and the context casts where torch's
promotion differs (``int_tensor * 2.5`` is float32 in torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from rvm import op
from rvm.errors import TorchImportError
from rvm.ir import Call, Expr, TensorType, Tuple, TupleGetItem, infer_type
from rvm.ir import const as ir_const
from rvm.ir.types import Type

if TYPE_CHECKING:
    from rvm.frontend.torch.importer import GraphImporter

TORCH_DTYPES = {
    "torch.float32": "float32",
    "torch.float64": "float64",
    "torch.float16": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.int64": "int64",
    "torch.int32": "int32",
    "torch.int16": "int16",
    "torch.int8": "int8",
    "torch.uint8": "uint8",
    "torch.uint16": "uint16",
    "torch.uint32": "uint32",
    "torch.uint64": "uint64",
    "torch.bool": "bool",
}


def rvm_dtype(dtype: Any, where: str = "") -> str:
    """The rvm name of a ``torch.dtype``."""
    name = TORCH_DTYPES.get(str(dtype))
    if name is None:
        raise TorchImportError(f"{where}dtype {dtype} is not supported by rvm")
    return name


@dataclass(frozen=True)
class SymInt:
    """A symbolic integer of the program: ``expr`` is its sympy expression."""

    expr: Any

    @property
    def static(self) -> int | None:
        """Its value when it is a constant, else None."""
        return int(self.expr) if getattr(self.expr, "is_Integer", False) else None


class NodeContext:
    """One node being converted: its output types, and the IR emitted for it."""

    def __init__(self, node: Any, importer: GraphImporter) -> None:
        self.node = node
        self.importer = importer
        self.val = node.meta.get("val")

    # -- emitting ---------------------------------------------------------------------------
    def emit(self, expr: Expr) -> Expr:
        """``expr`` bound to a new variable (a tuple or item of a literal tuple as itself)."""
        if isinstance(expr, Tuple):
            return expr
        if isinstance(expr, TupleGetItem) and isinstance(expr.tuple_value, Tuple):
            return expr.tuple_value.fields[expr.index]
        return self.importer.builder.emit(expr)

    def fail(self, message: str) -> NoReturn:
        raise TorchImportError(f"node {self.node.name!r} ({self.node.target}): {message}")

    # -- types ------------------------------------------------------------------------------
    @staticmethod
    def type(x: Expr) -> Type:
        return infer_type(x)

    def shape(self, x: Expr) -> tuple:
        ty = infer_type(x)
        if not isinstance(ty, TensorType) or ty.shape is None:
            self.fail(f"needs a tensor of known rank, got {ty}")
        return ty.shape

    def rank(self, x: Expr) -> int:
        return len(self.shape(x))

    def dtype_of(self, x: Expr) -> str | None:
        ty = infer_type(x)
        return ty.dtype if isinstance(ty, TensorType) else None

    def out_dtype(self, index: int | None = None) -> str:
        """The dtype torch.export recorded for the node's output (``index`` of several)."""
        val = self.val if index is None else self.val[index]
        return rvm_dtype(val.dtype, f"node {self.node.name!r}: ")

    def out_shape(self, index: int | None = None) -> tuple:
        """The node's output shape as rvm dimensions."""
        val = self.val if index is None else self.val[index]
        return tuple(self.importer.dim(d) for d in val.shape)

    # -- symbolic integers ------------------------------------------------------------------
    def sym_value(self) -> Any:
        """The node's value when it is a (symbolic) number: a `SymInt`, or an int or float."""
        return sym_value(self.val)

    def dim(self, value: int | SymInt) -> int | str | None:
        return self.importer.dim(value)

    def dims(self, values: Sequence[int | SymInt]) -> list[int | str | None]:
        return [self.importer.dim(v) for v in values]

    def scalar(self, value: Any, dtype: str | None = None) -> Expr:
        """``value`` (a tensor, a number or a `SymInt`) as an expression; numbers as 0-d
        tensors of ``dtype`` when given."""
        if isinstance(value, Expr):
            return value if dtype is None else self.cast(value, dtype)
        if isinstance(value, SymInt):
            out = self.importer.sym_tensor(value.expr)
            return out if dtype is None else self.cast(out, dtype)
        if dtype is None:
            dtype = "bool" if isinstance(value, bool) else "int64"
            dtype = "float32" if isinstance(value, float) else dtype
        return ir_const(value, dtype)

    def cast(self, x: Expr, dtype: str) -> Expr:
        """``x`` in ``dtype`` (itself when it already is)."""
        if self.dtype_of(x) == dtype:
            return x
        return self.emit(op.cast(x, dtype))

    def conform(self, result: Any) -> Any:
        """``result`` cast to the dtypes torch recorded for the node's outputs."""
        if isinstance(result, Expr) and _is_tensor(self.val):
            return self.cast(result, self.out_dtype())
        if isinstance(result, list) and isinstance(self.val, (list, tuple)):
            return [
                self.cast(r, rvm_dtype(v.dtype)) if isinstance(r, Expr) and _is_tensor(v) else r
                for r, v in zip(result, self.val)
            ]
        return result


def sym_value(val: Any) -> Any:
    """A torch ``SymInt``/``SymFloat``/``SymBool`` as a `SymInt` (its constant when it has
    one); other values as themselves."""
    node = getattr(val, "node", None)
    expr = getattr(node, "expr", None)
    if expr is None:
        return val
    return val.node.hint if getattr(expr, "is_Number", False) else SymInt(expr)


def _is_tensor(val: Any) -> bool:
    return hasattr(val, "dtype") and hasattr(val, "shape") and not isinstance(val, Call)
