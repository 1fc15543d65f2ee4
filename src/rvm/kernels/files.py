"""Files the kernel library keeps beside its object code: the rules of Numba's cache folders
(`object_code_dir`) and atomic writes (`write_atomic`), for `rvm.kernels.numba_cache`'s stamp
and seals, `rvm.kernels.cpu`'s measured facts and `rvm.runtime.loading`'s caches. It imports
no other rvm module, so the modules below all of those may use it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["object_code_dir", "write_atomic"]


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in its folder moved in place with
    ``os.replace`` (atomic: a reader sees the old file or the whole new one)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def object_code_dir(path: Path) -> Path:
    """The folder where Numba caches the object code of the kernel file ``path``: the
    ``__pycache__`` beside it, or its mirror under ``NUMBA_CACHE_DIR`` when that is set
    (Numba's own rule, `numba.core.caching.UserProvidedCacheLocator`)."""
    from numba.core import config
    from numba.core.caching import UserProvidedCacheLocator

    if config.CACHE_DIR:
        return Path(config.CACHE_DIR) / UserProvidedCacheLocator.get_suitable_cache_subpath(
            str(path)
        )
    return path.parent / "__pycache__"
