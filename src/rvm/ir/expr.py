"""IR expressions: the nodes of rvm programs.

Nodes are frozen slotted dataclasses compared and hashed by identity (``eq=False``); use
`rvm.ir.structural_equal` / `structural_hash` for structure. Function bodies are flat: a
`SeqExpr` holds binding blocks of `VarBinding`s and a result, never a chain of nested lets.

Every expression has a ``type`` (None until inferred): a `Var` carries its annotation, other
nodes get theirs from `rvm.ir.infer` (the Builder infers as it emits).

Python operators on expressions build op calls (``x + y``, ``x @ w``, ``x < 0.0``); a Python
scalar becomes a constant of the other operand's dtype. Because ``==`` builds an op too, an
expression has no truth value: keep expressions in sets and dicts, compare them with ``is``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rvm import _hooks
from rvm.errors import IRError
from rvm.ir.types import AnyType, TensorType, Type, check_dtype


def _print(node: object) -> str:
    """``node`` as rvm script, by the printer `rvm.script` supplies (see `rvm._hooks`)."""
    return _hooks.demand("printer")(node)


class Node:
    """Base of IR nodes; identity equality, printing through the script printer."""

    __slots__ = ()

    def __repr__(self) -> str:
        return _print(self)

    __str__ = __repr__


class Expr(Node):
    """Base class of expressions."""

    __slots__ = ("_type",)

    @property
    def type(self) -> Type | None:
        """The inferred type, or None when not yet inferred."""
        return getattr(self, "_type", None)

    def with_type(self, ty: Type | None) -> Expr:
        """Record ``ty`` as this expression's type and return the expression."""
        object.__setattr__(self, "_type", ty)
        return self

    def __bool__(self) -> bool:
        raise TypeError(
            "an rvm expression has no Python truth value; use an rvm script `if` on a 0-d bool "
            "tensor, op.where, or compare nodes with `is`"
        )

    __hash__ = object.__hash__

    # Python operators build op calls, looked up by name in rvm.ir.op (filled by rvm.op).
    def __add__(self, o: object) -> Expr:
        return _binary("add", self, o)

    def __radd__(self, o: object) -> Expr:
        return _binary("add", o, self)

    def __sub__(self, o: object) -> Expr:
        return _binary("subtract", self, o)

    def __rsub__(self, o: object) -> Expr:
        return _binary("subtract", o, self)

    def __mul__(self, o: object) -> Expr:
        return _binary("multiply", self, o)

    def __rmul__(self, o: object) -> Expr:
        return _binary("multiply", o, self)

    def __truediv__(self, o: object) -> Expr:
        return _binary("divide", self, o)

    def __rtruediv__(self, o: object) -> Expr:
        return _binary("divide", o, self)

    def __floordiv__(self, o: object) -> Expr:
        return _binary("floor_divide", self, o)

    def __rfloordiv__(self, o: object) -> Expr:
        return _binary("floor_divide", o, self)

    def __mod__(self, o: object) -> Expr:
        return _binary("mod", self, o)

    def __pow__(self, o: object) -> Expr:
        return _binary("power", self, o)

    def __matmul__(self, o: object) -> Expr:
        return _binary("matmul", self, o)

    def __rmatmul__(self, o: object) -> Expr:
        return _binary("matmul", o, self)

    def __lt__(self, o: object) -> Expr:
        return _binary("less", self, o)

    def __le__(self, o: object) -> Expr:
        return _binary("less_equal", self, o)

    def __gt__(self, o: object) -> Expr:
        return _binary("greater", self, o)

    def __ge__(self, o: object) -> Expr:
        return _binary("greater_equal", self, o)

    def __eq__(self, o: object) -> Expr:  # type: ignore[override]
        if not isinstance(o, (Expr, int, float, np.number, np.bool_)):
            return NotImplemented
        return _binary("equal", self, o)

    def __ne__(self, o: object) -> Expr:  # type: ignore[override]
        if not isinstance(o, (Expr, int, float, np.number, np.bool_)):
            return NotImplemented
        return _binary("not_equal", self, o)

    def __neg__(self) -> Expr:
        from rvm.ir.op import get_op

        return Call(get_op("negative"), (self,))

    def __getitem__(self, index: int) -> Expr:
        if not isinstance(index, int):
            raise IRError(f"an expression is indexed by an int (a tuple field), got {index!r}")
        return TupleGetItem(self, index)


def _binary(name: str, a: object, b: object) -> Expr:
    from rvm.ir.op import get_op

    if not isinstance(a, Expr):
        a = _scalar_like(a, b)
    if not isinstance(b, Expr):
        b = _scalar_like(b, a)
    return Call(get_op(name), (a, b))


def _scalar_like(value: object, other: object) -> Constant:
    """A 0-d constant of ``other``'s dtype (numpy's dtype of ``value`` if other's is unknown)."""
    from rvm.ir.infer import infer_type

    if not isinstance(value, (bool, int, float, np.number, np.bool_)):
        raise IRError(f"cannot use {type(value).__name__} {value!r} as an rvm value")
    ty = infer_type(other) if isinstance(other, Expr) else None
    if isinstance(ty, TensorType) and ty.dtype is not None:
        return Constant(np.asarray(value, dtype=ty.dtype))
    return Constant(np.asarray(value, dtype="float32" if isinstance(value, float) else None))


def _freeze(value: Any) -> Any:
    """Make an attribute value immutable and hashable: lists become tuples, arrays tuples."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.ndarray):
        return _freeze(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


_NODE = dict(frozen=True, slots=True, eq=False, repr=False)


@dataclass(**_NODE)
class Var(Expr):
    """A variable, bound by a function parameter, a binding, or a match pattern."""

    name: str
    annotation: Type | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_type", self.annotation)


@dataclass(**_NODE)
class GlobalVar(Expr):
    """The name of a module-level function."""

    name: str


@dataclass(**_NODE)
class Constant(Expr):
    """A constant tensor: ``data`` is a read-only, C-contiguous numpy array.

    Given a numpy array, the constant shares its memory (a read-only view, no copy), so a
    model's weights are held once, from the IR down to the executable's constant pool and the
    VM. Only an array that is not C-contiguous or not in native byte order is copied. Anything
    else (a Python scalar or list) becomes a new array, a Python float as float32.

    The view is read-only, but the array it views may not be: do not write into an array
    after making a constant of it. The IR, the compiled executable and its VMs would see the
    new values (or, where a constant was folded or copied into a kernel, the old ones).
    """

    data: np.ndarray

    def __post_init__(self) -> None:
        given = self.data
        if isinstance(given, np.ndarray):
            data = _shared_readonly(given)
        else:
            data = np.array(given)
            if data.dtype == np.float64:
                data = data.astype(np.float32)
            data.flags.writeable = False
        check_dtype(data.dtype)
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "_type", TensorType(data.shape, data.dtype.name))


def _shared_readonly(arr: np.ndarray) -> np.ndarray:
    """A read-only, C-contiguous, native-byte-order numpy array with the contents of ``arr``:
    a view of it when it already is all that (of any ndarray subclass), else a copy."""
    if arr.flags.c_contiguous and arr.dtype.isnative:
        view = arr.view(np.ndarray)
    else:
        view = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
    view.flags.writeable = False
    return view


def const(value: object, dtype: str | None = None) -> Constant:
    """A constant tensor; a Python float without ``dtype`` becomes float32."""
    if dtype is not None:
        return Constant(np.asarray(value, dtype=check_dtype(dtype)))
    return Constant(value)  # type: ignore[arg-type]


@dataclass(**_NODE)
class Tuple(Expr):
    """A tuple built from ``fields``."""

    fields: tuple[Expr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))


@dataclass(**_NODE)
class TupleGetItem(Expr):
    """Field ``index`` of a tuple value."""

    tuple_value: Expr
    index: int


class Callee:
    """Marker for what a Call may call besides expressions: Op and Constructor."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, eq=False)
class Op(Callee):
    """A primitive operator, defined once in `rvm.op` with its rules in per-layer tables.

    ``pattern`` is the fusion kind (see `rvm.ir.op.OpPattern`).
    """

    name: str
    pattern: int
    num_inputs: int = -1  # -1: variadic

    def __repr__(self) -> str:
        return f"op.{self.name}"

    def __hash__(self) -> int:
        return object.__hash__(self)


@dataclass(**_NODE)
class Constructor(Expr, Callee):
    """A constructor of an algebraic data type, called like a function."""

    name: str
    tag: int
    field_types: tuple[Type, ...]
    adt_name: str


@dataclass(**_NODE)
class Call(Expr):
    """A call of an op, a module function (GlobalVar), a closure (Var/Function) or a
    constructor. ``attrs`` hold an op's static parameters (axis, shape, ...)."""

    callee: Any
    args: tuple[Expr, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.callee, (Op, Expr)):
            raise IRError(f"cannot call {type(self.callee).__name__} {self.callee!r}")
        args = tuple(self.args)
        for a in args:
            if not isinstance(a, Expr):
                raise IRError(f"call argument must be an expression, got {a!r}")
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "attrs", {k: _freeze(v) for k, v in self.attrs.items()})


@dataclass(**_NODE)
class Function(Expr):
    """A function: parameters, a body (usually a SeqExpr), an optional return type.

    ``attrs`` may hold ``primitive`` (a fused kernel), ``global_symbol``, ``tail_calls``...
    A nested function bound by a VarBinding may call its own variable (recursion).
    """

    params: tuple[Var, ...]
    body: Expr
    ret_type: Type | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "attrs", {k: _freeze(v) for k, v in self.attrs.items()})

    @property
    def is_primitive(self) -> bool:
        return bool(self.attrs.get("primitive", False))


@dataclass(**_NODE)
class If(Expr):
    """``true_branch`` if the 0-d bool tensor ``cond`` holds, else ``false_branch``."""

    cond: Expr
    true_branch: Expr
    false_branch: Expr


@dataclass(**_NODE)
class VarBinding(Node):
    """``var = value`` inside a binding block."""

    var: Var
    value: Expr


@dataclass(**_NODE)
class BindingBlock(Node):
    """A flat list of bindings evaluated in order."""

    bindings: tuple[VarBinding, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "bindings", tuple(self.bindings))


@dataclass(**_NODE)
class SeqExpr(Expr):
    """Binding blocks evaluated in order, then ``body`` (the result)."""

    blocks: tuple[BindingBlock, ...]
    body: Expr

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", tuple(self.blocks))

    @property
    def bindings(self) -> Iterable[VarBinding]:
        for block in self.blocks:
            yield from block.bindings


class Pattern(Node):
    """Base class of match patterns."""

    __slots__ = ()


@dataclass(**_NODE)
class PatternWildcard(Pattern):
    """``_``: matches anything, binds nothing."""


@dataclass(**_NODE)
class PatternVar(Pattern):
    """Matches anything and binds it to ``var``."""

    var: Var


@dataclass(**_NODE)
class PatternConstructor(Pattern):
    """Matches a value built by ``constructor`` whose fields match ``patterns``."""

    constructor: Constructor
    patterns: tuple[Pattern, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", tuple(self.patterns))


@dataclass(**_NODE)
class PatternTuple(Pattern):
    """Matches a tuple whose fields match ``patterns``."""

    patterns: tuple[Pattern, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", tuple(self.patterns))


@dataclass(**_NODE)
class Clause(Node):
    """``case pattern: body``."""

    pattern: Pattern
    body: Expr


@dataclass(**_NODE)
class Match(Expr):
    """Evaluate ``data`` and the body of the first clause whose pattern matches it."""

    data: Expr
    clauses: tuple[Clause, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "clauses", tuple(self.clauses))


def seq(bindings: Sequence[VarBinding], body: Expr) -> SeqExpr:
    """A SeqExpr of one block holding ``bindings``."""
    return SeqExpr((BindingBlock(tuple(bindings)),) if bindings else (), body)


def pattern_vars(pattern: Pattern) -> list[Var]:
    """The variables a pattern binds, left to right."""
    out: list[Var] = []
    stack = [pattern]
    while stack:
        p = stack.pop()
        if isinstance(p, PatternVar):
            out.append(p.var)
        elif isinstance(p, (PatternConstructor, PatternTuple)):
            stack.extend(reversed(p.patterns))
    return out


ANY = AnyType()
