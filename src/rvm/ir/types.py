"""Types of IR values: tensors with symbolic shapes, tuples, functions, shapes and data types.

A tensor's shape is a tuple of dimensions. A dimension is an ``int`` (known), a ``str`` naming a
symbolic dimension (``"n"``: the same name inside one function is one dimension), an expression
over names (`rvm.ir.dims.DimExpr`, ``past + seq``: canonical, so equal expressions are ``==``),
or ``None`` (unknown: a dimension that depends on data). ``shape=None`` means even the rank is
unknown. Types are small immutable values compared with ``==``; they are not expressions.

Dtypes follow one rule, decided when the program is built, so that the interpreter (which
computes with NumPy on the run-time values) and the VM (which allocates outputs and compiles
kernels from the types) give every value the same dtype in every mode:

- A constant has its array's dtype; a Python scalar written without one takes the dtype of
  the tensor it meets in a binary op (``x * 2.0`` keeps ``x`` float16; a value that dtype
  cannot hold, ``int_x * 0.5``, is an error) and is float32 / int64 / bool alone or next to a
  value not typed yet (`rvm.op.core.as_expr`).
- An op on known dtypes gives its rule's dtype: `promote_dtypes` for binary ops (NumPy's
  ``promote_types``). A dtype known only at run time (``T[shape, None]``) makes the result's
  dtype unknown too, never the other operand's, and every mode then computes it as NumPy does.
- The narrow dtypes (`rvm.dtypes`: ``bfloat16``, the float8/float6/float4 family, ``int4``,
  ``uint4``, ``int2``, ``uint2``) never promote implicitly: a binary op on one of them and any
  other dtype is an error that asks for an ``op.cast``. NumPy's promotion between them (through
  ``ml_dtypes``) is partial and sometimes lossy (``int8 + bfloat16`` is bfloat16, float8
  e4m3fnuz + e4m3fn is e4m3fn), so rvm does not follow it.
- A value that is one of several (``if``/``match`` branches, a ``while`` loop's carried
  variable, before the loop and after the body) has their common dtype, unknown if one is
  unknown; two different known dtypes are an error (`rvm.ir.infer.join_types`). A loop-carried
  variable thus keeps the dtype of its initial value: a body that changes it is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rvm.dtypes import NARROW_DTYPES, NARROW_FLOAT_DTYPES, NARROW_INT_DTYPES, numpy_dtype
from rvm.errors import IRError
from rvm.ir.dims import DimExpr, parse_dim

Dim = int | str | None
Shape = tuple[Dim, ...]

STANDARD_DTYPES: tuple[str, ...] = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
"""NumPy's own dtypes that rvm supports."""

DTYPES: tuple[str, ...] = STANDARD_DTYPES + NARROW_FLOAT_DTYPES + NARROW_INT_DTYPES
"""Every dtype name rvm supports; the narrow ones need ``ml_dtypes`` (`rvm.dtypes`)."""

FLOAT_DTYPES = frozenset({"float16", "float32", "float64", *NARROW_FLOAT_DTYPES})
"""Float dtypes: the ops that need floats (exp, softmax, conv...) take all of them."""

INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})
"""Integer dtypes that ops compute with (indices, bitwise ops, integer arithmetic)."""

STORAGE_DTYPES = frozenset(NARROW_INT_DTYPES)
"""Dtypes that only store values: cast to and from them, move, select and compare them, and
compute in a wider type (`rvm.op.shapes.rule` refuses them to every other op)."""


def check_dtype(dtype: object) -> str:
    """Return ``dtype`` as one of `DTYPES`, accepting numpy dtypes and scalar types.

    Raises:
        IRError: ``dtype`` is not one of `DTYPES`.
        DTypeError: it is a narrow dtype and ``ml_dtypes`` is not installed.
    """
    if isinstance(dtype, str) and dtype in NARROW_DTYPES:
        numpy_dtype(dtype)  # the dtype must be usable, not just named
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:  # the common case, without numpy's lookup
        return dtype
    try:
        name = np.dtype(dtype).name  # type: ignore[call-overload]
    except TypeError:
        name = None
    if name not in DTYPES:
        raise IRError(f"unsupported dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return name


def check_dim(dim: object) -> Dim:
    """Return ``dim`` as a dimension: a non-negative int, a name, an expression (a `DimExpr`,
    or text such as ``"past + seq"``, parsed to its canonical form), or None."""
    if dim is None:
        return None
    if isinstance(dim, (bool, np.bool_)):
        raise IRError(f"a dimension must be an int or a name, got {dim!r}")
    if isinstance(dim, (int, np.integer)):
        if dim < 0:
            raise IRError(f"a dimension must be >= 0, got {dim}")
        return int(dim)
    if isinstance(dim, DimExpr) or (isinstance(dim, str) and dim.isidentifier()):
        return dim
    if isinstance(dim, str):
        return check_dim(parse_dim(dim))
    raise IRError(f"a dimension must be an int, a symbolic name or None, got {dim!r}")


class Type:
    """Base class of IR types."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class TensorType(Type):
    """A tensor of ``dtype`` (None: unknown) and ``shape`` (None: unknown rank)."""

    shape: Shape | None
    dtype: str | None

    def __post_init__(self) -> None:
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(check_dim(d) for d in self.shape))
        if self.dtype is not None:
            object.__setattr__(self, "dtype", check_dtype(self.dtype))

    @property
    def ndim(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when every dimension is a known integer."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def __str__(self) -> str:
        shape = "None" if self.shape is None else repr(self.shape)
        return f"T[{shape}, {self.dtype!r}]"


@dataclass(frozen=True, slots=True)
class TupleType(Type):
    """A tuple of values of the given field types."""

    fields: tuple[Type, ...]

    def __str__(self) -> str:
        inner = ", ".join(str(f) for f in self.fields)
        return f"Tuple[{inner}{',' if len(self.fields) == 1 else ''}]"


@dataclass(frozen=True, slots=True)
class FuncType(Type):
    """A function from ``params`` to ``ret``."""

    params: tuple[Type, ...]
    ret: Type

    def __str__(self) -> str:
        return f"Callable[[{', '.join(str(p) for p in self.params)}], {self.ret}]"


@dataclass(frozen=True, slots=True)
class ShapeType(Type):
    """A shape value (a 1-d int64 tensor at run time) of ``ndim`` dimensions."""

    ndim: int | None = None

    def __str__(self) -> str:
        return f"Shape[{self.ndim}]"


@dataclass(frozen=True, slots=True)
class ADTType(Type):
    """A value of the algebraic data type named ``name`` (declared in the IRModule)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class AnyType(Type):
    """A value whose type is not known statically."""

    def __str__(self) -> str:
        return "Any"


def static_nbytes(ty: Type) -> int | None:
    """The bytes a value of ``ty`` holds (a tensor, or a tuple of them) when every shape and
    dtype in it is known; None otherwise."""
    if isinstance(ty, TupleType):
        sizes = [static_nbytes(f) for f in ty.fields]
        return None if None in sizes else sum(sizes)  # type: ignore[arg-type]
    if not isinstance(ty, TensorType) or not ty.is_static or ty.dtype is None:
        return None
    return int(np.prod(ty.shape, dtype=object)) * numpy_dtype(ty.dtype).itemsize


def tensor(shape: Shape | None, dtype: str | None) -> TensorType:
    """Shorthand for `TensorType`."""
    return TensorType(None if shape is None else tuple(shape), dtype)


def scalar(dtype: str) -> TensorType:
    """A 0-d tensor type."""
    return TensorType((), dtype)


def promote_dtypes(a: str | None, b: str | None) -> str | None:
    """The dtype of a binary op on ``a`` and ``b``: equal dtypes stay, else numpy's promotion;
    unknown (None) when either is unknown, since the run-time dtype decides then.

    Raises:
        IRError: ``a`` and ``b`` differ and one is narrow (no implicit promotion).
    """
    if a is None or b is None:
        return None
    if a == b:
        return a
    if a in NARROW_DTYPES or b in NARROW_DTYPES:
        narrow = a if a in NARROW_DTYPES else b
        raise IRError(
            f"no implicit promotion between {a} and {b}: rvm promotes the narrow dtype "
            f"{narrow} with nothing else; op.cast one operand to the dtype you mean"
        )
    return check_dtype(np.promote_types(a, b))


def dims_equal(a: Dim, b: Dim) -> bool | None:
    """True/False when provably equal/different, None when unknown."""
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, str) and isinstance(b, str) and a == b:
        return True
    return None
