"""The `vm.builtin.*` packed functions the compiler's bytecode calls through CALL_PACKED.

Importing this module registers them. Each returns its result (CALL_PACKED style):

- `vm.builtin.alloc_shape_heap(size)`: a zeroed 1-d int64 array of `size` slots that holds a
  function's symbolic dimensions.
- `vm.builtin.match_shape(tensor, heap, pattern, context="")`: checks `tensor.shape` against
  `pattern`, an int64 array of (kind, value) pairs, one per dimension: kind 0 = the dim must
  equal value, 1 = store the dim into heap[value], 2 = the dim must equal heap[value], 3 = any
  dim (an unknown `?` dimension; value unused, 0), 4 = the dim must equal a dimension
  expression whose program follows (`rvm.runtime.shape_patterns`). The rank must always
  match. A mismatch raises ShapeError; `context` (a str or 0-d str array, e.g. "main:
  result") starts the message. Returns the tensor.
- `vm.builtin.make_shape(heap, pattern)`: a 1-d int64 shape from (kind, value) pairs: kind 0 =
  the literal value, 1 = heap[value], 4 = a dimension expression (its program follows).
- `vm.builtin.storage_size(shape, dtype)`: the bytes a tensor of `shape` (a 1-d int array or a
  tuple) and `dtype` (a str or 0-d str array) needs, as a Python int.
- `vm.builtin.tuple(*fields)`: a Python tuple of its arguments.
- `vm.builtin.read_bool(x)`: a 0-d tensor or scalar as a Python bool.
- `vm.builtin.read_int(x)`: a 0-d tensor or scalar as a Python int.
- `vm.builtin.empty(shape, dtype)`: a fresh uninitialized tensor (for results whose size is
  known only after a data-dependent kernel).
- `vm.builtin.copy(x)`: a copy of a tensor.
- `vm.builtin.write_slice(buffer, value, start, axis)`: writes `value` into `buffer` in place
  at `start` along `axis` (the other dims equal) and returns `buffer` itself: the key/value
  cache that `rvm.generation.greedy` preallocates takes one step's keys this way.
- `vm.builtin.check_tensor(x, ndim, dtype, context)`: checks that `x` is a tensor of `ndim`
  dimensions (-1: any) and `dtype` ("" : any), raising ShapeError / DTypeError; returns `x`.
- `vm.builtin.check_tuple(x, arity, context)`: checks that `x` is a tuple or list of `arity`
  values, raising DTypeError; returns it as a tuple.
- `vm.builtin.debug_print(x, label)`: prints `label: x` (`rvm.debug_print`); returns None.
- `vm.builtin.dim_carrier(value, context="rvm.dim", heap=None, slot=None, source="")`: an empty
  `(value, 0)` int64 tensor from a 0-d integer (`rvm.dim`), raising ShapeError for a negative one
  or, given a heap, one that differs from `heap[slot]` (the dim's earlier binding, `source`).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from rvm.dtypes import numpy_dtype
from rvm.errors import DTypeError, ShapeError
from rvm.runtime import shape_patterns as sp
from rvm.runtime.registry import register_func
from rvm.runtime.shape_patterns import pairs_flat

__all__ = ["NAMESPACE", "as_str"]

NAMESPACE = "vm.builtin."
"""The prefix of the VM's own packed functions: VM work (shape checks, shape arithmetic), which
`VirtualMachine.profile` counts as VM overhead rather than as kernels."""


def as_str(value: Any) -> str:
    """A str from a str or a string constant (a 0-d numpy unicode array)."""
    if isinstance(value, np.ndarray):
        return str(value.item()) if value.ndim == 0 else str(value.tolist())
    return str(value)


_INT64 = np.dtype(np.int64)


def _ints(values: Any) -> list[int]:
    """`values` flattened to Python ints, as `np.asarray(values, dtype=np.int64)` holds them.

    A 1-d signed-int array (a pattern or shape constant, a heap) skips the conversion."""
    if type(values) is np.ndarray and values.ndim == 1 and values.dtype.kind == "i":
        return values.tolist()
    return np.asarray(values, dtype=_INT64).reshape(-1).tolist()


def _pairs(pattern: Any) -> list[int]:
    """The pattern's numbers, kind, value, kind, value, ... (indexed, not zipped: cheaper)."""
    return pairs_flat(_ints(pattern))


def _prefix(context: Any) -> str:
    text = as_str(context)
    return f"{text}: " if text else ""


@functools.cache
def _itemsize_of(name: str) -> int:
    """`np.dtype(name).itemsize`, remembered: `np.dtype` costs more than the rest of a call."""
    return numpy_dtype(name).itemsize


def _itemsize(dtype: Any) -> int:
    return _itemsize_of(as_str(dtype))


@register_func("vm.builtin.alloc_shape_heap")
def alloc_shape_heap(size: Any) -> np.ndarray:
    """A zeroed int64 shape heap of `size` slots."""
    return np.zeros(int(size), _INT64)


@register_func("vm.builtin.match_shape")
def match_shape(tensor: Any, heap: np.ndarray, pattern: Any, context: Any = "") -> Any:
    """Checks `tensor`'s shape against `pattern`, storing dims into `heap` (module docstring)."""
    shape = tensor.shape if type(tensor) is np.ndarray else np.shape(tensor)
    pairs = _pairs(pattern)
    if 2 * len(shape) != len(pairs):
        return _match_decoded(shape, heap, pattern, context, tensor)
    for axis, dim in enumerate(shape):
        kind, value = pairs[2 * axis], pairs[2 * axis + 1]
        if kind == 0:
            if dim != value:
                raise ShapeError(
                    f"{_prefix(context)}shape {tuple(shape)} has {dim} at axis {axis}, "
                    f"expected {value}"
                )
        elif kind == 1:
            heap[value] = dim
        elif kind == 2:
            if dim != heap[value]:
                raise ShapeError(
                    f"{_prefix(context)}shape {tuple(shape)} has {dim} at axis {axis}, but an "
                    f"earlier shape set that dimension to {int(heap[value])}"
                )
        elif kind == sp.EXPR:  # a pattern with an expression: its program follows
            return _match_decoded(shape, heap, pattern, context, tensor)
        elif kind != 3:
            raise ValueError(f"match_shape: unknown pattern kind {kind}")
    return tensor


def _match_decoded(shape: tuple, heap: np.ndarray, pattern: Any, context: Any, tensor: Any) -> Any:
    """`match_shape` of a pattern with dimension expressions (`shape_patterns.EXPR`)."""
    dims = _decoded(pattern, sp.MATCH_KINDS, heap)
    if len(shape) != len(dims):
        raise ShapeError(
            f"{_prefix(context)}expected a {len(dims)}-d tensor, got shape {tuple(shape)} "
            f"({len(shape)}-d)"
        )
    for axis, (dim, (kind, value)) in enumerate(zip(shape, dims)):
        if kind == sp.STORE:
            heap[value] = dim
        elif kind == sp.ANY:
            continue
        want = _dim_value(kind, value, heap, context)
        if dim != want:
            how = " (an earlier shape set that dimension)" if kind == sp.CHECK else ""
            raise ShapeError(
                f"{_prefix(context)}shape {tuple(shape)} has {dim} at axis {axis}, "
                f"expected {want}{how}"
            )
    return tensor


def _decoded(pattern: Any, kinds: tuple[int, ...], heap: np.ndarray) -> list[tuple[int, Any]]:
    try:
        return sp.decode(np.asarray(pattern), kinds, len(heap))
    except sp.PatternError as err:
        raise ValueError(f"shape pattern {err}") from None


def _dim_value(kind: int, value: Any, heap: np.ndarray, context: Any) -> int:
    """The dim a LITERAL / CHECK / STORE (make_shape) / EXPR pair stands for."""
    if kind == sp.LITERAL:
        return value
    if kind != sp.EXPR:
        return int(heap[value])
    try:
        return sp.evaluate(value, heap)
    except ZeroDivisionError:
        raise ShapeError(
            f"{_prefix(context)}a dimension expression divides by a dimension that is 0"
        ) from None


@register_func("vm.builtin.make_shape")
def make_shape(heap: np.ndarray, pattern: Any) -> np.ndarray:
    """A 1-d int64 shape from (kind, value) pairs: 0 = literal, 1 = heap[value], 4 = an
    expression (`shape_patterns`)."""
    pairs = _pairs(pattern)
    dims = pairs[1::2]  # the literals in place; heap slots are replaced by their values
    for axis, kind in enumerate(pairs[::2]):
        if kind == 1:
            dims[axis] = int(heap[dims[axis]])
        elif kind == sp.EXPR:
            decoded = _decoded(pattern, sp.MAKE_KINDS, heap)
            dims = [_dim_value(k, v, heap, "make_shape") for k, v in decoded]
            break
        elif kind != 0:
            raise ValueError(f"make_shape: unknown pattern kind {kind}")
    return np.array(dims, _INT64)


@register_func("vm.builtin.storage_size")
def storage_size(shape: Any, dtype: Any) -> int:
    """Bytes needed by a tensor of `shape` and `dtype`."""
    return math.prod(_ints(shape)) * _itemsize(dtype)


@register_func("vm.builtin.tuple")
def make_tuple(*fields: Any) -> tuple:
    """A Python tuple of the arguments."""
    return fields


@register_func("vm.builtin.read_bool")
def read_bool(x: Any) -> bool:
    """A 0-d tensor or scalar as a Python bool."""
    return bool(x)


@register_func("vm.builtin.read_int")
def read_int(x: Any) -> int:
    """A 0-d tensor or scalar as a Python int."""
    return int(x)


@register_func("vm.builtin.empty")
def empty(shape: Any, dtype: Any) -> np.ndarray:
    """A fresh uninitialized tensor."""
    return np.empty(tuple(np.asarray(shape, dtype=np.int64).tolist()), numpy_dtype(as_str(dtype)))


@register_func("vm.builtin.copy")
def copy(x: Any) -> np.ndarray:
    """A copy of a tensor."""
    return np.array(x, copy=True)


@register_func("vm.builtin.write_slice")
def write_slice(buffer: Any, value: Any, start: Any, axis: Any) -> np.ndarray:
    """Writes `value` into `buffer` in place at `start` along `axis`; returns `buffer`.

    Raises:
        ShapeError: the ranks or the other dims differ, or the slice does not fit.
        DTypeError: `buffer` is not a writeable tensor of `value`'s dtype.
    """
    if not isinstance(buffer, np.ndarray) or not buffer.flags.writeable:
        raise DTypeError(f"write_slice: expected a writeable tensor, got {_kind(buffer)}")
    value = np.asarray(value)
    if value.dtype != buffer.dtype:
        raise DTypeError(f"write_slice: a {value.dtype} value into a {buffer.dtype} buffer")
    at, n = int(axis), int(start)
    if value.ndim != buffer.ndim or not 0 <= at < buffer.ndim:
        raise ShapeError(
            f"write_slice: a value of shape {value.shape} into a buffer of shape {buffer.shape} "
            f"along axis {at}"
        )
    end = n + value.shape[at]
    if not slice_fits(buffer.shape, value.shape, at, n):
        raise ShapeError(
            f"write_slice: a value of shape {value.shape} does not fit a buffer of shape "
            f"{buffer.shape} at {n} along axis {at}"
        )
    buffer[(slice(None),) * at + (slice(n, end),)] = value
    return buffer


def slice_fits(buffer: tuple, value: tuple, at: int, start: int) -> bool:
    """Whether a value of shape ``value`` fits a buffer of shape ``buffer`` from ``start``
    along axis ``at`` (`write_slice`): same rank, the other dims equal, the slice inside.
    Plain Python that Numba compiles too: the native mode's write_slice tests the same."""
    if len(value) != len(buffer) or not 0 <= at < len(buffer):
        return False
    for i in range(len(buffer)):
        if i != at and value[i] != buffer[i]:
            return False
    return 0 <= start and start + value[at] <= buffer[at]


@register_func("vm.builtin.check_tensor")
def check_tensor(x: Any, ndim: Any, dtype: Any, context: Any = "") -> Any:
    """Checks `x` is a tensor of `ndim` dims (-1: any) and `dtype` ("": any); returns `x`."""
    prefix = f"{as_str(context)}: " if as_str(context) else ""
    if not isinstance(x, np.ndarray):
        raise DTypeError(f"{prefix}expected a tensor, got {type(x).__name__}")
    ndim, want = int(ndim), as_str(dtype)
    if want and x.dtype != numpy_dtype(want):
        raise DTypeError(f"{prefix}expected dtype {want}, got {x.dtype}")
    if ndim >= 0 and x.ndim != ndim:
        raise ShapeError(f"{prefix}expected a {ndim}-d tensor, got shape {x.shape}")
    return x


@register_func("vm.builtin.check_tuple")
def check_tuple(x: Any, arity: Any, context: Any = "") -> tuple:
    """Checks `x` is a tuple (or list) of `arity` values; returns it as a tuple."""
    n = int(arity)
    if not isinstance(x, (tuple, list)):
        raise DTypeError(f"{_prefix(context)}expected a tuple of {n} tensors, got {_kind(x)}")
    if len(x) != n:
        raise DTypeError(
            f"{_prefix(context)}expected a tuple of {n} tensors, got a {type(x).__name__} "
            f"of {len(x)}"
        )
    return tuple(x)


def _kind(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"a tensor of shape {x.shape}"
    return type(x).__name__


@register_func("vm.builtin.debug_print")
def debug_print(x: Any, label: Any = "") -> None:
    """Prints `label: x` (`rvm.debug_print` in a program); a tensor shows its dtype and shape
    before its values."""
    text = as_str(label)
    if isinstance(x, np.ndarray):
        body = f"{x.dtype}{list(x.shape)} {np.array2string(x, threshold=64)}"
    else:
        body = repr(x)
    print(f"{text}: {body}" if text else body, flush=True)


@register_func("vm.builtin.dim_carrier")
def dim_carrier(
    value: Any,
    context: Any = "rvm.dim",
    heap: np.ndarray | None = None,
    slot: Any = None,
    source: Any = "",
) -> np.ndarray:
    """An empty int64 tensor of shape `(value, 0)` from a 0-d integer `value` (`rvm.dim`): it
    carries the dimension in its shape, where MATCH_SHAPE and kernels read dimensions.

    `context` is the binding (``main: n = rvm.dim(steps)``). With `heap`, the dimension was
    bound earlier: `value` must equal `heap[slot]`; `source` (``n = {} from argument 0 'x'``,
    ``{}`` for the earlier value) says where that binding came from."""
    arr = np.asarray(value)
    if arr.ndim != 0 or arr.dtype.kind not in "iu":
        raise ShapeError(
            f"{_prefix(context)}a dimension comes from a 0-d integer tensor, got {arr.dtype} "
            f"of shape {arr.shape}"
        )
    n = int(arr)
    if n < 0:
        raise ShapeError(f"{as_str(context)} is {n}, but a dimension must be >= 0")
    if heap is not None and n != int(heap[int(slot)]):
        earlier = as_str(source).replace("{}", str(int(heap[int(slot)])), 1)
        raise ShapeError(f"{as_str(context)} is {n}, but {earlier}")
    return np.empty((n, 0), _INT64)
