"""Run-time checks.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np

from rvm.kernels.reference.common import _shape_error


def check(x, cond, detail, message, error="value"):
    """``x`` when ``cond`` holds, else ``ValueError(message)`` (``ShapeError`` for
    ``error="shape"``) with ``{0}``, ``{1}``... replaced by the elements of ``detail``."""
    if not bool(cond):
        text = message.format(*np.asarray(detail).tolist())
        raise _shape_error(text) if error == "shape" else ValueError(text)
    return x


__all__ = ["check"]
