"""Products with a weight packed in column panels (`rvm.op.packed`): ``dense_packed``.

Part of the NumPy reference kernels (`rvm.kernels.reference`). The weight arrives as
`rvm.transform.pack_weights` stores it: B ``(k, units)`` cut into panels of ``panel``
columns, ``(panels, k, panel)``, the last padded with zeros.
"""

import numpy as np

from rvm.kernels.reference.common import _like
from rvm.kernels.reference.elemwise import gelu, relu

__all__ = ["dense_packed"]


def dense_packed(x, w, *bias, units, activation):
    """``activation(x @ B + bias)`` for B ``(k, units)`` packed in panels ``w``
    ``(panels, k, panel)``; ``bias`` (units,) or none."""
    panels, k, panel = w.shape
    b = np.asarray(w).transpose(1, 0, 2).reshape(k, panels * panel)[:, :units]
    y = _like(np.matmul(x, b), np.float32)
    if bias:
        y = _like(y + bias[0], np.float32)
    if activation == "relu":
        return relu(y)
    if activation in ("gelu", "gelu_tanh"):
        return gelu(y, approximate="tanh" if activation == "gelu_tanh" else "none")
    return y
