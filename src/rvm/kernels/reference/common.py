"""What the reference modules share: dtype helpers, constants and the glue generated kernels call.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np

SQRT_HALF = 0.7071067811865476


SQRT_2_OVER_PI = 0.7978845608028654


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
