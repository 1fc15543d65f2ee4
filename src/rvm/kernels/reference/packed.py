"""Products with a weight packed in column panels (`rvm.op.packed`): ``dense_packed``.

Part of the NumPy reference kernels (`rvm.kernels.reference`). The layout is written here,
once, in NumPy (`pack`), for the pass that packs weights at compile time
(`rvm.transform.pack_weights`) and the kernel that reads them (`rvm.kernels.packed`), with
the epilogue's `ACTIVATIONS`: B ``(k, units)`` cut into panels of ``panel`` columns,
``(panels, k, panel)``, the last padded with zeros.
"""

import numpy as np

from rvm.kernels.reference.common import _like, on_line
from rvm.kernels.reference.elemwise import gelu, relu

__all__ = ["dense_packed"]  # the ops; `ACTIVATIONS`, `pack` and `packed_shape` are not ops

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh")
"""The activations of ``dense_packed``'s epilogue, after the bias, by index (the kernel's
``act``): ``gelu`` is the erf form, ``gelu_tanh`` the tanh approximation."""


def packed_shape(k, n, panel):
    """The packed array's shape for a ``(k, n)`` weight: ``(panels, k, panel)``."""
    return (-(-n // panel), k, panel)


def pack(weight, transposed, panel):
    """``weight`` as B ``(k, n)`` (its transpose when ``transposed``: ``(n, k)``) in column
    panels ``(panels, k, panel)`` float32, the last padded with zeros."""
    if weight.ndim != 2 or panel <= 0:
        raise ValueError(f"pack: expects a 2-d weight and panel > 0, got {weight.shape}, {panel}")
    b = weight.T if transposed else weight
    k, n = b.shape
    padded = np.zeros((-(-n // panel) * panel, k), dtype=np.float32)
    padded[:n] = b.T
    out = on_line((padded.shape[0] // panel, k, panel), np.float32)  # an executable's constant
    out[...] = padded.reshape(-1, panel, k).transpose(0, 2, 1)
    return out


def dense_packed(x, w, *rest, units, activation):
    """``activation(x @ B + bias) + residual`` for B ``(k, units)`` packed in panels ``w``
    ``(panels, k, panel)``; ``rest``: none, ``(bias,)`` (units,) or ``(bias, residual)``."""
    panels, k, panel = w.shape
    b = np.asarray(w).transpose(1, 0, 2).reshape(k, panels * panel)[:, :units]
    y = _like(np.matmul(x, b), np.float32)
    if rest:
        y = _like(y + rest[0], np.float32)
    if activation == "relu":
        y = relu(y)
    elif activation in ("gelu", "gelu_tanh"):
        y = gelu(y, approximate="tanh" if activation == "gelu_tanh" else "none")
    if len(rest) == 2:
        y = _like(y + rest[1], np.float32)
    return y
