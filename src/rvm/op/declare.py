"""An elementwise op declared once: its registration, type rule, scalar form and builder.

`elementwise` decorates an op's builder in `rvm.op.elemwise` and from that one declaration
registers the op (`rvm.op.core.define_op`, which binds its NumPy reference: the function of
its name in `rvm.kernels.reference`), its type rule (one of the `Rule` kinds here, or a
function), its scalar form and the builder's name in the module's ``__all__``. The jit maps the
scalar form over the operands' elements for its compute (`rvm.jit.compute`) and the native
exec mode calls it on scalar locals (`rvm.jit.scalar.scalar_compute` reads `ELEMENTWISE`).

A scalar form is ``form(e, *operands) -> source``: Numba source of one element of the result
from the sources of the operands' elements, which arrive converted to the computation dtype
``e.dtype``. ``e`` (`Emitter`, implemented by the jit) gives the call's attributes, typed
constants and the vectorizable float32 math of `rvm.kernels.mathlib`, and refuses what the jit
does not lower (``e.unsupported(reason)``: the kernel falls back to numpy). The form must
compute what the reference computes (NaN propagation, integer semantics, dtype).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from rvm.errors import IRError
from rvm.ir.expr import Call, Op
from rvm.ir.op import OpPattern
from rvm.ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType, Type, promote_dtypes
from rvm.op.core import define_op
from rvm.op.shapes import broadcast_shapes, fmt, rule


class Emitter(Protocol):
    """What a scalar form writes its source with (the jit's `rvm.jit.scalar.ScalarEmitter`)."""

    dtype: str
    """The computation dtype of the operands' elements."""
    attrs: dict[str, Any]
    """The call's attributes."""
    is_float: bool
    """Whether ``dtype`` is a float dtype."""

    def lit(self, value: object) -> str:
        """A constant of ``dtype`` (``np.float32(0.5)``)."""
        ...

    def exp(self, x: str) -> str:
        """e ** x (vectorizable for float32)."""
        ...

    def tanh(self, x: str) -> str:
        """tanh(x) (vectorizable for float32)."""
        ...

    def sigmoid(self, x: str) -> str:
        """The stable sigmoid (vectorizable for float32)."""
        ...

    def erf(self, x: str) -> str:
        """The error function (vectorizable for float32)."""
        ...

    def gelu(self, x: str, tanh: bool = False) -> str:
        """GELU's erf form, ``0.5 x (1 + erf(x / sqrt 2))``, or its tanh form (``tanh``)
        (vectorizable for float32)."""
        ...

    def unsupported(self, reason: str) -> NoReturn:
        """Refuse: the kernel falls back to numpy."""
        ...


ScalarForm = Callable[..., str]
RuleFn = Callable[[Op, Call, list[TensorType]], Type]


def _same_shape(args: list[TensorType], op: Op) -> tuple:
    shapes = [a.shape for a in args]
    return shapes[0] if len(shapes) == 1 else broadcast_shapes(op.name, *shapes)


def _expect(op: Op, x: TensorType, allowed: frozenset[str] | set[str], what: str) -> None:
    if x.dtype is not None and x.dtype not in allowed:
        raise IRError(f"{op.name}: expects {what} tensor, got {x.dtype} {fmt(x.shape)}")


class Rule:
    """The type rules elementwise ops share: ``Rule.FLOAT`` and so on, each a function
    ``(op, call, arg_types) -> Type``. Operands broadcast as NumPy's."""

    @staticmethod
    def PROMOTE(op: Op, call: Call, args: list[TensorType]) -> Type:  # noqa: N802
        """Any numeric dtypes; the result has their promoted dtype."""
        dtype = args[0].dtype
        for a in args[1:]:
            dtype = promote_dtypes(dtype, a.dtype)
        return TensorType(_same_shape(args, op), dtype)

    @staticmethod
    def FLOAT(op: Op, call: Call, args: list[TensorType]) -> Type:  # noqa: N802
        """Float tensors only; the result keeps their (promoted) dtype."""
        for x in args:
            _expect(op, x, FLOAT_DTYPES, "a float")
        return Rule.PROMOTE(op, call, args)

    @staticmethod
    def BOOL(op: Op, call: Call, args: list[TensorType]) -> Type:  # noqa: N802
        """Any dtypes; a bool result (comparisons, logic)."""
        return TensorType(_same_shape(args, op), "bool")

    @staticmethod
    def INTEGER(op: Op, call: Call, args: list[TensorType]) -> Type:  # noqa: N802
        """Integer tensors only (shifts)."""
        for x in args:
            _expect(op, x, INT_DTYPES, "an integer")
        return Rule.PROMOTE(op, call, args)

    @staticmethod
    def BITWISE(op: Op, call: Call, args: list[TensorType]) -> Type:  # noqa: N802
        """Integer or bool tensors (bitwise and/or/xor/not)."""
        for x in args:
            _expect(op, x, INT_DTYPES | {"bool"}, "an integer or bool")
        return Rule.PROMOTE(op, call, args)


@dataclass(frozen=True, slots=True)
class Elementwise:
    """One declared elementwise op.

    Attributes:
        op: The op.
        scalar: Its scalar form, ``form(e, *operands) -> source``, or None: the jit does not
            lower it (its kernels run the NumPy reference).
        compute: The dtype its operands are converted to: ``"result"`` (the result's),
            ``"inputs"`` (the inputs' promoted dtype: comparisons and logic, whose result is
            bool) or ``"select"`` (a bool condition, then the result's: ``where``).
    """

    op: Op
    scalar: ScalarForm | None
    compute: str = "result"


ELEMENTWISE: dict[Op, Elementwise] = {}
"""Every declared elementwise op, by op, in declaration order."""

COMPUTE_KINDS = ("result", "inputs", "select")


def elementwise(
    name: str,
    arity: int,
    type_rule: RuleFn,
    scalar: ScalarForm | None,
    *,
    compute: str = "result",
    exports: list[str] | None = None,
) -> Callable[[Callable[..., Call]], Callable[..., Call]]:
    """Declares elementwise op ``name`` of ``arity`` operands on its builder (the decorated
    function, which ``exports`` lists: the module's ``__all__``).

    Registers the op (pattern ELEMWISE for one operand, BROADCAST for more) with its NumPy
    reference (the function ``name`` of `rvm.kernels.reference`: `define_op` fails when it is
    missing), the type rule ``type_rule`` and the scalar form ``scalar`` (`Elementwise`).
    """
    if compute not in COMPUTE_KINDS:
        raise ValueError(f"compute must be one of {COMPUTE_KINDS}, got {compute!r}")
    pattern = OpPattern.ELEMWISE if arity == 1 else OpPattern.BROADCAST
    op = define_op(name, pattern, arity)

    @rule(op)
    def infer_elementwise(call: Call, args: list[TensorType]) -> Type:
        return type_rule(op, call, args)

    ELEMENTWISE[op] = Elementwise(op, scalar, compute)

    def register(builder: Callable[..., Call]) -> Callable[..., Call]:
        if builder.__name__ != name:
            raise ValueError(f"the builder of op {name!r} is named {builder.__name__!r}")
        if exports is not None:
            exports.append(name)
        return builder

    return register


__all__ = ["ELEMENTWISE", "Elementwise", "Emitter", "Rule", "ScalarForm", "elementwise"]
