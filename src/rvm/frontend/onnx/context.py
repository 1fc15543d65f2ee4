"""What a converter sees of the graph being imported: scopes, emitting with folding, shapes.

A converter receives a `NodeContext`: the node's attributes, its inputs as IR expressions, and
``ctx.emit`` to bind the IR it builds. Emitting folds as it goes, so no pass is needed later:

- a call whose inputs are all constants is evaluated at once with the op's NumPy reference
  (`rvm.op.reference`, the same function the interpreter runs), giving a `Constant`;
- a call on *shape values* keeps a known value beside its variable. A shape value is a 0-d or
  1-d integer tensor whose elements are known at import as ints or symbolic dimension names
  (None where unknown): ``Shape(x)`` of ``x: T[("n", 3, 224, 224)]`` is ``["n", 3, 224, 224]``.
  Structural ops (take, concat, expand_dims, squeeze, strided_slice, reshape, cast to an int,
  sum and prod, where) run their reference on object arrays of those elements; arithmetic
  (add, subtract, multiply, divide, equal, min, max) keeps sums of names exact
  (`rvm.frontend.onnx.dims`: ``(past + seq) - past`` is ``seq``). ``Reshape`` and friends then read
  the target shape from it, so the ``Shape -> Gather -> Concat -> Reshape`` chains of torch
  exports become a static or symbolic reshape. The run-time IR is emitted too; dead code
  removes it when nothing else reads it.

`Scope` maps ONNX value names to expressions; a subgraph's scope looks names up in its
parents', which is how If/Loop bodies capture outer values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from rvm.errors import OnnxImportError
from rvm.frontend.onnx.dims import Dims
from rvm.ir import (
    Call,
    Constant,
    Expr,
    Op,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    infer_type,
)
from rvm.ir.types import INT_DTYPES, static_nbytes
from rvm.op import ops, reference

if TYPE_CHECKING:
    from rvm.ir import Builder

_REQUIRED = object()

FOLD_LIMIT_BYTES = 1 << 20
"""The largest result import folds into a constant, unless an input of the call is as large:
a larger one is computed at run time, so a small file cannot grow into a huge import
(``ConstantOfShape([100000, 100000])`` is 40 GB of zeros)."""


class Scope:
    """ONNX value names bound to IR expressions, with the enclosing graph's scope as parent.

    ``opsets`` (domain to opset version) selects the op versions of the nodes converted in the
    scope: the model's, inherited by subgraphs; a function body's own (see `functions`).
    """

    def __init__(self, parent: Scope | None = None, opsets: dict[str, int] | None = None) -> None:
        self.parent = parent
        self.values: dict[str, Expr] = {}
        if opsets is None:
            opsets = parent.opsets if parent is not None else {}
        self.opsets = opsets

    def lookup(self, name: str) -> Expr | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            scope = scope.parent
        return None

    def bind(self, name: str, value: Expr) -> None:
        self.values[name] = value


class Emitter:
    """Binds IR through a Builder, folding constants and tracking known shape values."""

    def __init__(self, builder: Builder) -> None:
        self.builder = builder
        self.shape_values: dict[Expr, np.ndarray] = {}
        self.dims = Dims()  # the arithmetic of shape-value elements (`rvm.ir.dims`)

    def emit(self, expr: Expr) -> Expr:
        """``expr`` bound to a new variable, or folded to a constant."""
        if isinstance(expr, TupleGetItem):
            if isinstance(expr.tuple_value, Tuple):
                return expr.tuple_value.fields[expr.index]
            return self.builder.emit(expr)
        if isinstance(expr, (Constant, Tuple)) or not isinstance(expr, Call):
            return expr
        if isinstance(expr.callee, Op):
            args = tuple(self._operand(a) for a in expr.args)
            if any(a is not b for a, b in zip(args, expr.args)):
                expr = Call(expr.callee, args, expr.attrs)
            folded = self._fold(expr)
            if folded is not None:
                return folded
        known = self._shape_value(expr)
        if known is not None and all(isinstance(d, int) for d in known.flat):
            ty = infer_type(expr)  # every element known: the value is a constant
            return _typed_constant(known.astype(np.int64), ty)
        var = self.builder.emit(expr)
        if known is not None:
            self.shape_values[var] = known
        return var

    def _operand(self, arg: Expr) -> Expr:
        """A nested op call emitted first, so it folds and gets a shape value of its own."""
        if isinstance(arg, Call) and isinstance(arg.callee, Op):
            return self.emit(arg)
        if isinstance(arg, Tuple):
            fields = tuple(self._operand(f) for f in arg.fields)
            if any(a is not b for a, b in zip(fields, arg.fields)):
                return Tuple(fields)
        return arg

    def shape_value(self, expr: Expr) -> np.ndarray | None:
        """The known elements of an integer tensor (an object array), or None."""
        if isinstance(expr, Constant):
            if expr.data.dtype.name in INT_DTYPES and expr.data.ndim <= 1:
                return expr.data.astype(object)
            return None
        return self.shape_values.get(expr)

    def _fold(self, call: Call) -> Expr | None:
        op = call.callee
        if op is ops.shape_of:
            ty = infer_type(call.args[0])
            if isinstance(ty, TensorType) and ty.is_static:
                return Constant(np.array(ty.shape, dtype=np.int64))
            return None
        arrays = [_constant_data(a) for a in call.args]
        if any(a is None for a in arrays) or _names_dims(call.attrs) or op not in reference:
            return None
        ty = infer_type(call)
        if _grows_past_limit(static_nbytes(ty), arrays):
            return None  # computed at run time, as ONNX Runtime leaves it
        out = reference[op](*arrays, **call.attrs)
        if _grows_past_limit(_nbytes(out), arrays):
            return None
        if isinstance(out, tuple):
            fields = ty.fields if isinstance(ty, TupleType) else (None,) * len(out)
            return Tuple(tuple(_typed_constant(o, t) for o, t in zip(out, fields)))
        return _typed_constant(out, ty)

    def _shape_value(self, call: Call) -> np.ndarray | None:
        op = call.callee
        if not isinstance(op, Op):
            return None
        if op is ops.shape_of:
            ty = infer_type(call.args[0])
            if isinstance(ty, TensorType) and ty.shape is not None:
                return np.array(list(ty.shape), dtype=object)
            return None
        if op not in _STRUCTURAL and op not in _ARITHMETIC and op is not ops.where:
            return None
        args = [self._known(a) for a in call.args]
        if any(a is None for a in args) or all(isinstance(a, Constant) for a in call.args):
            return None
        try:
            if op is ops.where:
                out = np.frompyfunc(_choose, 3, 1)(*args)
                return np.asarray(out, dtype=object)
            if op in _ARITHMETIC:
                fn = _ARITHMETIC[op]
                out = np.frompyfunc(lambda a, b: fn(self.dims, _item(a), _item(b)), 2, 1)(*args)
                return np.asarray(out, dtype=object)
            if op is ops.cast:
                return args[0] if call.attrs["dtype"] in INT_DTYPES else None
            out = reference[op](*args, **call.attrs)
        except Exception:  # a value the reference cannot take symbolically: no known value
            return None
        out = np.asarray(out, dtype=object)
        return out if out.ndim <= 1 else None

    def _known(self, arg: Expr) -> Any:
        """A constant's data (indices stay ints) or a shape value; None if neither."""
        if isinstance(arg, Tuple):
            fields = [self._known(f) for f in arg.fields]
            return None if any(f is None for f in fields) else fields
        if isinstance(arg, Constant):
            return arg.data
        return self.shape_values.get(arg)


def _item(x: Any) -> Any:
    """An element as a Python value (NumPy ints from constants become ints)."""
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def _grows_past_limit(nbytes: int | None, inputs: Sequence[Any]) -> bool:
    """Whether a result of ``nbytes`` is too large to fold: above `FOLD_LIMIT_BYTES` and
    larger than each of its inputs (folding never makes a large constant out of a small one)."""
    if nbytes is None or nbytes <= FOLD_LIMIT_BYTES:
        return False
    return all(nbytes > _nbytes(a) for a in inputs)


def _nbytes(value: Any) -> int:
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    return int(np.asarray(value).nbytes)


def _constant_data(arg: Expr) -> Any:
    if isinstance(arg, Constant):
        return arg.data
    if isinstance(arg, Tuple) and all(isinstance(f, Constant) for f in arg.fields):
        return [f.data for f in arg.fields]  # type: ignore[attr-defined]
    return None


def _typed_constant(value: Any, ty: Any) -> Constant:
    arr = np.asarray(value)
    if isinstance(ty, TensorType) and ty.dtype is not None and arr.dtype.name != ty.dtype:
        arr = arr.astype(ty.dtype)
    return Constant(arr)


def _names_dims(attrs: Any) -> bool:
    """Whether an attribute names a symbolic dimension (the call cannot run at import)."""
    for key, value in attrs.items():
        if key != "dtype" and isinstance(value, tuple):
            if any(isinstance(v, str) for v in value):
                return True
    return False


def _choose(cond: Any, a: Any, b: Any) -> Any:
    """One element of ``where(cond, a, b)``; an unknown condition knows only ``a == b``."""
    if cond is None or not isinstance(cond, (bool, int, np.bool_, np.integer)):
        return a if a == b and a is not None else None
    return a if cond else b


def _not_equal(dims: Dims, a: Any, b: Any) -> bool | None:
    same = dims.equal(a, b)
    return None if same is None else not same


_STRUCTURAL = {
    ops.take,
    ops.concat,
    ops.expand_dims,
    ops.squeeze,
    ops.strided_slice,
    ops.reshape,
    ops.cast,
    ops.flatten,
    ops.prod,
    ops.sum,
}
# Elementwise arithmetic on elements (`rvm.frontend.onnx.dims`): ints compute, names and sums
# of names stay exact where they can, anything else is unknown.
_ARITHMETIC: dict[Op, Callable[[Dims, Any, Any], Any]] = {
    ops.add: Dims.add,
    ops.subtract: Dims.subtract,
    ops.multiply: Dims.multiply,
    ops.divide: Dims.divide,
    ops.floor_divide: Dims.floor_divide,
    ops.equal: Dims.equal,
    ops.not_equal: _not_equal,
    ops.maximum: lambda dims, a, b: dims.extreme(a, b, larger=True),
    ops.minimum: lambda dims, a, b: dims.extreme(a, b, larger=False),
}


class NodeContext:
    """One node being converted: attributes, inputs, emitting, errors that name the node."""

    def __init__(
        self,
        node: Any,
        version: int,
        attrs: dict[str, Any],
        inputs: Sequence[Expr | None],
        emitter: Emitter,
        importer: Any = None,
        scope: Scope | None = None,
    ) -> None:
        self.node = node
        self.version = version
        self.attrs = attrs
        self.inputs = list(inputs)
        self.emitter = emitter
        self.importer = importer  # the graph importer: subgraphs of control flow use it
        self.scope = scope  # the node's scope: subgraphs look outer names up through it

    @property
    def name(self) -> str:
        return self.node.name or (self.node.output[0] if self.node.output else "?")

    @property
    def num_outputs(self) -> int:
        """How many outputs the node names (trailing empty names omitted)."""
        outs = list(self.node.output)
        while outs and not outs[-1]:
            outs.pop()
        return len(outs)

    def fail(self, message: str) -> NoReturn:
        raise OnnxImportError(f"node {self.name!r} ({self.node.op_type}-{self.version}): {message}")

    def attr(self, name: str, default: Any = _REQUIRED) -> Any:
        if name in self.attrs:
            return self.attrs[name]
        if default is _REQUIRED:
            self.fail(f"missing required attribute {name!r}")
        return default

    def input(self, i: int) -> Expr:
        value = self.optional(i)
        if value is None:
            self.fail(f"input {i} is required")
        return value

    def optional(self, i: int) -> Expr | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def const(self, i: int) -> np.ndarray | None:
        value = self.optional(i)
        return value.data if isinstance(value, Constant) else None

    def ints(self, i: int, what: str) -> list[int] | None:
        """Input ``i`` as a list of ints (it must be a constant); None when omitted."""
        value = self.optional(i)
        if value is None:
            return None
        data = self.const(i)
        if data is None:
            self.fail(f"{what} (input {i}) must be a constant known at import")
        return [int(v) for v in np.ravel(data)]

    def shape_value(self, i: int) -> np.ndarray | None:
        value = self.optional(i)
        return None if value is None else self.emitter.shape_value(value)

    def type(self, value: Expr) -> TensorType:
        ty = infer_type(value)
        if not isinstance(ty, TensorType):
            self.fail(f"expects tensors, got {ty}")
        return ty

    def shape(self, value: Expr) -> tuple:
        """The shape of ``value``; the rank must be known."""
        shape = self.type(value).shape
        if shape is None:
            self.fail("needs inputs of known rank")
        return shape

    def emit(self, expr: Expr) -> Expr:
        return self.emitter.emit(expr)

    def expand(self) -> list[Expr]:
        """The node's outputs from its ONNX function body, for a case the converter leaves to
        it (see `rvm.frontend.onnx.functions`)."""
        return self.importer.expand(self.node, self.scope, self.inputs, self.name)
