"""Loading Numba's cached object code without starting Numba's compiler.

Before it loads a cached function, Numba's `Cache.load_overload` refreshes the target context:
it imports and installs every lowering and typing registry Numba has (NumPy's, the typed
containers', SciPy's BLAS bindings...), about half a second of CPU and most of a warm start,
though loading object code needs none of it, only Numba's runtime (NRT) symbols. Within
`light_loads()`, cache loads on this thread skip that refresh: the NRT is initialized and the
object code is loaded through Numba's own cache classes (its private ``Cache._load_overload``,
used in `light_load` only). Everything else goes Numba's normal way: a miss compiles (Numba's
compiler refreshes the context itself first), and a light load that fails for any reason (a
Numba whose internals differ, a corrupt file) is done again by Numba's own `load_overload`,
which reports a corrupt file as it always did (`rvm.runtime.loading.loader` then drops the
entry and recompiles).

`install()` puts the switch in place, once per process, after dropping the library's object
code if the library's source changed since it was cached (`cache.drop_stale_library_code`);
on a Numba without the private methods it changes nothing and loads stay Numba's own.
`counts()` says how many loads went which way in this process.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from rvm.runtime.loading.cache import drop_stale_library_code

logger = logging.getLogger("rvm.jit")

_state = threading.local()  # .depth: how many `light_loads` this thread is inside
_lock = threading.Lock()
_installed: bool | None = None
_counts = {"light": 0, "normal": 0, "fallback": 0}


def counts() -> dict[str, int]:
    """Cache loads this process made: ``light`` (no refresh), ``normal`` (Numba's own, outside
    `light_loads` or without `install`), ``fallback`` (a light load that failed, then done
    Numba's way)."""
    return dict(_counts)


def light_load(cache: Any, sig: Any, target_context: Any) -> Any:
    """Numba's cached compile result of ``sig`` from ``cache`` (a `numba.core.caching.Cache`),
    or None on a miss, without refreshing ``target_context`` (the only use of Numba's private
    methods; raises whatever they raise)."""
    from numba.core.runtime import nrt

    nrt.rtsys.initialize(target_context)  # the NRT symbols the object code links against
    return cache._load_overload(sig, target_context)


def install() -> bool:
    """Put the `light_loads` switch into Numba's cache, once per process; False (and nothing
    changed) when this Numba lacks what `light_load` uses."""
    global _installed
    with _lock:
        if _installed is None:
            drop_stale_library_code()
            _installed = _patch()
        return _installed


def _patch() -> bool:
    try:
        from numba.core import caching
        from numba.core.runtime import nrt
    except ImportError as err:  # pragma: no cover - Numba is a dependency
        logger.debug("Numba's cache loads stay its own: %s", err)
        return False
    cls = caching.Cache
    original = cls.__dict__.get("load_overload")
    usable = (
        callable(original)
        and callable(getattr(cls, "_load_overload", None))
        and callable(getattr(nrt.rtsys, "initialize", None))
    )
    if not usable:
        logger.debug("Numba's cache loads stay its own: its Cache has no _load_overload")
        return False

    def load_overload(self: Any, sig: Any, target_context: Any) -> Any:
        if getattr(_state, "depth", 0) > 0:
            try:
                data = light_load(self, sig, target_context)
            except Exception as err:  # noqa: BLE001 - Numba's own load runs (and reports)
                _counts["fallback"] += 1
                logger.debug("light cache load failed (%s: %s): Numba's own", type(err), err)
            else:
                _counts["light"] += 1
                return data
        else:
            _counts["normal"] += 1
        return original(self, sig, target_context)

    load_overload.__wrapped__ = original  # type: ignore[attr-defined]
    cls.load_overload = load_overload
    return True


@contextlib.contextmanager
def light_loads() -> Iterator[None]:
    """Within: Numba's cache loads on this thread skip the context refresh (see the module
    docstring; `install` is called first)."""
    install()
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1
