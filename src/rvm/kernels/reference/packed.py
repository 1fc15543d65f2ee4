"""Products with a weight packed in column panels (`rvm.op.packed`): ``dense_packed``.

Part of the NumPy reference kernels (`rvm.kernels.reference`). The weight arrives as
`rvm.transform.pack_weights` stores it: B ``(k, units)`` cut into panels of ``panel``
columns, ``(panels, k, panel)``, the last padded with zeros.
"""

import numpy as np

from rvm.kernels.reference.common import _like

__all__ = ["dense_packed"]


def dense_packed(x, w, units):
    """``x @ B`` for B ``(k, units)`` packed in panels ``w`` ``(panels, k, panel)``."""
    panels, k, panel = w.shape
    b = np.asarray(w).transpose(1, 0, 2).reshape(k, panels * panel)[:, :units]
    return _like(np.matmul(x, b), np.float32)
