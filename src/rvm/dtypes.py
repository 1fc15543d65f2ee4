"""NumPy dtypes of rvm's dtype names, the narrow ones through ``ml_dtypes``.

rvm's dtypes are NumPy's (``"float32"``, ``"int64"``...) plus the narrow machine-learning types
that NumPy itself lacks: ``bfloat16``, the float8 family, ``float6``/``float4`` and the 4- and
2-bit integers. Google's ``ml_dtypes`` package (the one JAX and ONNX use) defines those as NumPy
dtypes, with their rounding and arithmetic; importing it registers them with NumPy by name.

``ml_dtypes`` is optional: rvm imports it the first time a narrow dtype is resolved
(`numpy_dtype`), so a program without narrow dtypes never needs it, and one with them gets an
error that says how to install it.

This module sits beside `rvm.errors`, below every package: the runtime (which loads saved
executables and imports nothing of the compiler) and the IR resolve names through it alike.
"""

from __future__ import annotations

import functools

import numpy as np

from rvm.errors import DTypeError

NARROW_FLOAT_DTYPES: tuple[str, ...] = (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
)
"""Narrow float dtypes, named as ``ml_dtypes`` names them."""

NARROW_INT_DTYPES: tuple[str, ...] = ("int4", "uint4", "int2", "uint2")
"""Narrow integer dtypes (one element per byte in memory, as ``ml_dtypes`` stores them)."""

NARROW_DTYPES = frozenset(NARROW_FLOAT_DTYPES + NARROW_INT_DTYPES)


@functools.cache
def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype named ``name``, importing ``ml_dtypes`` for a narrow one.

    Raises:
        DTypeError: ``name`` is a narrow dtype and ``ml_dtypes`` is not installed.
        TypeError: ``name`` is no dtype NumPy knows.
    """
    if name not in NARROW_DTYPES:
        return np.dtype(name)
    require_ml_dtypes(name)
    try:
        return np.dtype(name)
    except TypeError:  # an ml_dtypes older than the dtype
        raise DTypeError(
            f"dtype {name} needs a newer ml_dtypes: pip install -U 'ml_dtypes>=0.5'"
        ) from None


def require_ml_dtypes(name: str) -> None:
    """Import ``ml_dtypes`` (which registers its dtypes with NumPy), or say how to get it."""
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        raise DTypeError(
            f"dtype {name} comes from the ml_dtypes package, which is not installed: "
            "pip install ml_dtypes"
        ) from None


def dtype_kind(name: str) -> str:
    """NumPy's kind letter of dtype ``name`` ("b", "i", "u", "f"), the narrow ones included.

    ``ml_dtypes`` gives most of its dtypes NumPy's kind "V" (raw bytes); rvm classes them by
    what their values are: bfloat16 and the float8/6/4 types are floats, int4/int2 signed and
    uint4/uint2 unsigned integers.
    """
    if name in NARROW_FLOAT_DTYPES:
        return "f"
    if name in NARROW_INT_DTYPES:
        return "u" if name.startswith("u") else "i"
    return np.dtype(name).kind
