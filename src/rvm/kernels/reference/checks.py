"""Run-time checks.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np


def check(x, cond, detail, message):
    """``x`` when ``cond`` holds, else ``ValueError(message)`` with ``{0}``, ``{1}``...
    replaced by the elements of ``detail``."""
    if not bool(cond):
        raise ValueError(message.format(*np.asarray(detail).tolist()))
    return x


__all__ = ["check"]
