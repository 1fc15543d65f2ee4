"""What the runtime derives from an executable once and shares among the VMs over it.

An `Executable` is data: it holds no caches and knows nothing of what is built from it. Each
module that builds something from an executable (decoded code, loaded kernels, the compiled
and native modes' functions, a VM's result checks) declares it here as a `Derived` beside the
code that builds it, so a reader finds every cached thing with its owner:

    _DECODED = Derived("decoded bytecode")
    ...
    return _DECODED.get(ex, lambda: decode(ex))

The values live with the executable object (so they die with it, and the VMs over it share
them; a copy, as `Executable.with_exec_mode` makes, derives its own). A value is
computed once per executable (and key), under one re-entrant lock per executable, so threads
building VMs over one executable build it once; a factory may read other derived values.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable

__all__ = ["Derived"]

T = TypeVar("T")

_STORE = "_rvm_derived"  # the attribute of an executable holding its derived values
_attach = threading.Lock()


class _Store:
    """An executable's derived values and the lock that builds them."""

    __slots__ = ("lock", "values")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.values: dict[tuple[Any, ...], Any] = {}


def _store(ex: Executable) -> _Store:
    store = ex.__dict__.get(_STORE)
    if store is None:
        with _attach:
            store = ex.__dict__.setdefault(_STORE, _Store())
    return store


class Derived(Generic[T]):
    """One kind of value derived from an executable, declared by the module that builds it.

    Args:
        what: What the value is, for a reader (and `repr`).
    """

    def __init__(self, what: str) -> None:
        self.what = what

    def get(self, ex: Executable, factory: Callable[[], T], *key: Hashable) -> T:
        """The value of `ex` (for `key`, when one executable has several), computed with
        `factory` the first time (thread-safe)."""
        store = _store(ex)
        slot = (self, *key)
        try:
            return store.values[slot]
        except KeyError:
            pass
        with store.lock:
            if slot not in store.values:
                store.values[slot] = factory()
            return store.values[slot]

    def __repr__(self) -> str:
        return f"Derived({self.what!r})"
