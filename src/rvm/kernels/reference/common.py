"""What the reference modules share: dtype helpers, constants and the glue generated kernels call.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np

SQRT_HALF = 0.7071067811865476


SQRT_2_OVER_PI = 0.7978845608028654


LINE = 64
"""Bytes of a cache line (as on every x86-64; an AMX tile row's bytes): where the weights the
compiler packs start (`on_line`), as an executable's constants do (the runtime's
`rvm.runtime.weights.ALIGN`, which this layer below it cannot import)."""


def on_line(shape, dtype):
    """An uninitialized C-contiguous array of ``shape`` and ``dtype`` whose data starts at a
    multiple of `LINE` bytes: NumPy gives 16, and a kernel that loads rows of a weight as
    vectors or AMX tiles then reads two lines a row (`rvm.runtime.weights.aligned`)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + LINE, np.uint8)
    start = -raw.ctypes.data % LINE
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def _like(result, dtype):
    """``result`` as an array of ``dtype`` (undoes float64 from 0-d or mixed promotion)."""
    return np.asarray(result, dtype=dtype)


def _dtype(name):
    """The numpy dtype ``name``. A narrow one (bfloat16, float8_e4m3fn, int4...) is ml_dtypes',
    imported here on first use because importing it registers its names with numpy: a saved
    executable may run this library in a process that never imported it."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # noqa: F401

    return np.dtype(name)


def _is_float(dtype):
    """Whether ``dtype`` is a float, ml_dtypes' bfloat16/float8... (numpy kind "V") included."""
    return dtype.kind == "f" or dtype.name.startswith(("bfloat", "float"))


def _is_ml_float(dtype):
    """Whether ``dtype`` is one of ml_dtypes' floats, for which some numpy functions (einsum)
    have no loops: those compute in float32 and round once."""
    return _is_float(dtype) and dtype.name not in ("float16", "float32", "float64")


def _binary_dtype(a, b):
    return np.result_type(a.dtype, b.dtype)


def _shape_error(message):
    """A ValueError marked as sizes that disagree (``rvm_kind = "shape"``): the VM and the
    interpreter raise it as `rvm.ShapeError` (this package imports nothing of rvm)."""
    err = ValueError(message)
    err.rvm_kind = "shape"
    return err


def _contiguous(value):
    """``value`` (an array or a tuple of them) in C order, copied only where it is not."""
    if isinstance(value, tuple):
        return tuple(_contiguous(v) for v in value)
    if isinstance(value, np.ndarray) and not value.flags.c_contiguous:
        return value.copy(order="C")
    return value


def _store_exact(out, value):
    """``out[...] = value`` where ``value`` must have ``out``'s shape (no broadcasting): a
    result whose shape was computed at run time, written into an output planned from types."""
    if np.shape(value) != out.shape:
        raise _shape_error(
            f"the result's shape {np.shape(value)}, computed at run time, differs from the "
            f"shape its type promised, {out.shape}"
        )
    out[...] = value


def _bf16_values(bits):
    """float32 values of the bf16 values whose bits are the int16 array ``bits``."""
    return (bits.astype(np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_bits(x):
    """The bits (uint16) of the bf16 values nearest the float32 array ``x``: ties to even, a
    NaN a quiet NaN (as ml_dtypes rounds, without needing it)."""
    w = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (w + 0x7FFF + ((w >> 16) & 1)) >> 16
    nan = (w & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (w >> 16) | 0x40, rounded).astype(np.uint16)


def _round_bf16(x):
    """float32 ``x`` rounded to the nearest bf16 (ties to even), as float32."""
    return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)
