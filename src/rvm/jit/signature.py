"""A jit kernel's signature: which tensors its parameters hold, their Numba types, and the
generic shapes that let layers of one geometry share a kernel (`rvm.jit.lower` builds the
kernel from them)."""

from __future__ import annotations

from collections.abc import Sequence

from rvm.ir import expr as E
from rvm.ir.types import TensorType, TupleType, Type
from rvm.jit.te import Unsupported
from rvm.op import ops

__all__ = [
    "JIT_DTYPES",
    "conv_windows",
    "generic_shapes",
    "numba_array_type",
    "numba_dtype",
    "param_leaves",
    "param_type",
    "tensor_type",
]

JIT_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "float32", "float64"})
_NUMBA_DTYPE = {"bool": "boolean"}


def numba_dtype(dtype: str) -> str:
    """The name of ``dtype``'s Numba scalar type (in ``numba.types``)."""
    return _NUMBA_DTYPE.get(dtype, dtype)


def tensor_type(ty: Type | None, what: str) -> TensorType:
    """``ty`` as a tensor type the jit takes: known rank and a `JIT_DTYPES` dtype."""
    if not isinstance(ty, TensorType) or ty.shape is None or ty.dtype is None:
        raise Unsupported(f"{what} has type {ty}, not a tensor of known rank and dtype")
    if ty.dtype not in JIT_DTYPES:
        raise Unsupported(f"{what} has dtype {ty.dtype}")
    return ty


def param_leaves(params: Sequence[E.Var]) -> list[tuple[tuple[int, int | None], TensorType]]:
    """The tensors the parameters hold, in order, each with (parameter, field or None): a
    parameter is a tensor or a tuple of tensors (concat's pieces)."""
    leaves: list[tuple[tuple[int, int | None], TensorType]] = []
    for i, p in enumerate(params):
        if isinstance(p.type, TupleType) and p.type.fields:
            for j, f in enumerate(p.type.fields):
                leaves.append(((i, j), tensor_type(f, f"field {j} of parameter {p.name!r}")))
        else:
            leaves.append(((i, None), tensor_type(p.type, f"parameter {p.name!r}")))
    return leaves


def param_type(p: E.Var) -> str:
    """Source of the Numba type of a parameter: a read-only array or a tuple of them."""
    if not isinstance(p.type, TupleType):
        return numba_array_type(p.type, True)  # type: ignore[arg-type]
    fields = [numba_array_type(f, True) for f in p.type.fields]  # type: ignore[arg-type]
    if len(set(fields)) == 1:
        return f"nt.UniTuple({fields[0]}, {len(fields)})"
    return f"nt.Tuple(({', '.join(fields)},))"


def numba_array_type(ty: TensorType, readonly: bool) -> str:
    """Source of the Numba type of a C-contiguous array of ``ty``."""
    dt = numba_dtype(ty.dtype or "")
    ro = ", readonly=True" if readonly else ""
    return f'nt.Array(nt.{dt}, {len(ty.shape or ())}, "C"{ro})'


def generic_shapes(
    shapes: Sequence[Sequence[object]], keep: frozenset[tuple[int, int]] = frozenset()
) -> tuple[list[tuple[object, ...]], dict[int, str]]:
    """``shapes`` with every fixed size other than 1 made a symbolic dimension, and the
    symbol of each such size. Axis ``a`` of shape ``k`` stays fixed when ``(k, a)`` is in
    ``keep`` (a convolution's window: its geometry then folds at lowering time).

    Equal sizes become one symbol (``"#0"``, ``"#1"``... in order of first appearance), so
    the kernel still checks that they agree and broadcasting still sees them as one size;
    1 stays fixed, since it decides broadcasting. Symbolic dimensions are kept. The kernel
    reads an attribute equal to one of these sizes as its symbol too (`KernelBuilder.resolve`:
    a depthwise convolution's groups, a reshape's target), so it holds for whatever size the
    layer sharing the kernel has.
    """
    names: dict[int, str] = {}

    def generic(d: object) -> object:
        if isinstance(d, int) and d != 1:
            return names.setdefault(d, f"#{len(names)}")
        return d

    out = [
        tuple(d if (k, a) in keep else generic(d) for a, d in enumerate(shape))
        for k, shape in enumerate(shapes)
    ]
    return out, names


def conv_windows(func: E.Function) -> frozenset[tuple[int, int]]:
    """(parameter, axis) of every convolution window size that a parameter holds."""
    body = func.body
    index = {p: k for k, p in enumerate(func.params)}
    out = set()
    for b in body.bindings if isinstance(body, E.SeqExpr) else ():
        v = b.value
        if isinstance(v, E.Call) and v.callee in (ops.conv1d, ops.conv2d) and v.args[1] in index:
            k = index[v.args[1]]
            out |= {(k, a) for a in range(2, len(v.args[1].type.shape or ()))}
    return frozenset(out)
