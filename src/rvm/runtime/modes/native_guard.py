"""The native mode's thread guard: one VM run at a time, claimed in native code.

A native-mode VM's guard (`NativeGuard`, the guard its mode has and the VM takes) is a word the
VM's handle (C code, `native_handle`) claims around its call of a native entry and gives back,
by a compare-and-swap of the calling thread's ident (`rvm.kernels.guard.compare_and_swap`), so
a call from Python through the handle pays no Python for it (see `NativeMode.fast_call`); a
second word is nonzero while native entries may not run (`ExecContext.plain` false: an
instrumented or profiled VM, an allocator of its own). The handle finding the guard another
thread's, or native code turned off, runs nothing and hands the call to the VM's checked call;
finding it its own thread's (a call from Python the VM runs calling the VM again) it runs the
entry without claiming it.

Python takes the same word by the same compare-and-swap (`NativeGuard.enter`, through
`guard.python_turn`: the VM's checked entry, compiled-mode fallbacks), so the two never hold it
at once. Imports Numba: made by the native mode only.
"""

from __future__ import annotations

import numpy as np

from rvm.kernels.guard import OFF, OWNER, load, python_turn

__all__ = ["NativeGuard", "Refused"]


class Refused(Exception):
    """Raised in place of a native entry that did not compile: the VM's handle hands the call
    to the VM's checked entry."""


class NativeGuard:
    """A native-mode VM's thread guard (see the module docstring), with `EntryGuard`'s API:
    `enter` / `leave` for Python's claims, `owner` and `held`. ``word`` is the array the VM's
    native handle claims."""

    __slots__ = ("word",)

    def __init__(self, plain: bool = True) -> None:
        self.word = np.zeros(2, np.int64)
        self.word[OFF] = 0 if plain else 1
        load()

    def enter(self) -> bool | None:
        """Takes the guard for this thread: True when this call took it (`leave` gives it
        back), False when this thread holds it already (a reentrant call), None when another
        thread holds it."""
        took = python_turn(self.word, True)
        return True if took == 1 else False if took == 0 else None

    def leave(self) -> None:
        """Gives back the guard `enter` took."""
        python_turn(self.word, False)

    def set_plain(self, plain: bool) -> None:
        """Lets native entries run (``plain``) or makes them raise `Refused` (`OFF`)."""
        self.word[OFF] = 0 if plain else 1

    @property
    def owner(self) -> int | None:
        """The holding thread's ident, None while the guard is free."""
        return int(self.word[OWNER]) or None

    @property
    def held(self) -> bool:
        """Whether a thread holds the guard."""
        return self.word[OWNER] != 0
