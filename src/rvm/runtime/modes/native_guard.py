"""The native mode's thread guard: one VM run at a time, claimed in native code.

A native-mode VM's guard (`NativeGuard`, the guard its mode has and the VM takes) is a word its
native entries claim and give back themselves, by a compare-and-swap of the calling thread's
ident (`rvm.kernels.guard`: `guard_claim`, `guard_release`), so a call from Python through the
VM's handle pays no Python for it (see `NativeMode.fast_call`); a second word is nonzero while
native entries may not run (`ExecContext.plain` false: an instrumented or profiled VM, an
allocator of its own). An entry finding the guard another thread's, or native code turned off,
raises `Refused` before it runs anything; finding it its own thread's (a call from Python the VM
runs calling the VM again) it runs without claiming it.

Python takes the same word by the same compare-and-swap (`NativeGuard.enter`, through
`guard.python_turn`: the VM's checked entry, compiled-mode fallbacks), so the two never hold it
at once. Imports Numba: made by the native mode only.
"""

from __future__ import annotations

from threading import get_ident

import numpy as np

from rvm.kernels.guard import OFF, OWNER, load, python_turn

__all__ = ["NativeGuard", "Refused"]


class Refused(Exception):
    """Raised by a native entry that did not run: its VM's guard held by another thread, or
    native code off for the VM; the caller hands the call to the VM's checked entry."""


class NativeGuard:
    """A native-mode VM's thread guard (see the module docstring), with `EntryGuard`'s API:
    `enter` / `leave` for Python's claims, `owner`, `held`, and `failed` after a native entry
    raised. ``word`` is the array native entries take as their first argument."""

    __slots__ = ("word", "_python")

    def __init__(self, plain: bool = True) -> None:
        self.word = np.zeros(2, np.int64)
        self.word[OFF] = 0 if plain else 1
        self._python = False  # whether the holder took it from Python (`enter`)
        load()

    def enter(self) -> bool | None:
        """Takes the guard for this thread: True when this call took it (`leave` gives it
        back), False when this thread holds it already (a reentrant call), None when another
        thread holds it."""
        took = python_turn(self.word, True)
        if took == 1:
            self._python = True
            return True
        return False if took == 0 else None

    def leave(self) -> None:
        """Gives back the guard `enter` took."""
        self._python = False
        python_turn(self.word, False)

    def failed(self) -> None:
        """After a native entry of this thread raised: gives the guard back if the entry took
        it (it holds it, and Python did not take it), as the entry would have returning."""
        if self.word[OWNER] == get_ident() and not self._python:
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
