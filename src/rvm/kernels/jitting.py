"""How the library's functions are jitted: one compile per function and argument types.

Numba compiles a jitted function again for every distinct set of argument types it is called
with from other jitted code, and a constant argument (``0``, ``True``, an enum such as
``NO_TRANS``) types as a literal of its value: ``f(x, 0)`` and ``f(x, 1)`` are two compiles
of ``f`` and of everything it calls, seconds of LLVM each for the GEMM's tree on a first run.
`jit(**options)` is ``numba.njit(**options)`` whose calls from jitted code compile for the
arguments' plain types (``int64``, ``bool``), so each library function compiles once per
array types: a constant is an argument like any other (LLVM still folds it where the call
is inlined).

What a task or an entry point calls from one place is inlined in Numba's IR
(``inline="always"``): each jitted level of a call chain is a library that LLVM optimizes
and compiles again with everything it links (on a 2.6 GHz Zen 4 the int8 convolution's entry
point built in 18.0 CPU-s with its chain inlined and no slice assignment, 25.0 before). An
inlined function's arguments are no longer held for a call: inline none that reads an array
its caller made only through its address (a job's field), as Numba frees an array after its
last use as an array (`rvm.kernels.direct.conv2d_packed` is not inlined for that), nor one
with other fastmath flags than its callers (theirs would apply).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba as nb
from numba.core import types as nt

# Numba builds, beside each function's Python wrapper, a C wrapper for its use as a value of a
# first-class function type (`numba.core.types.FunctionType`). rvm's functions are called from
# Python (through the dispatcher's Python wrapper) or from jitted code (linked into the caller),
# never taken as such values, so that wrapper is code LLVM optimizes and compiles for nothing:
# about a tenth of a small jit kernel's build on a Zen 3 (session 48). The library's functions
# (`jit`), the jit kernels (`rvm.jit.lower`) and the native mode's functions go without it.
NO_C_WRAPPER = {"no_cfunc_wrapper": True}


def jit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(**options)`` whose calls from jitted code type their arguments without
    literal values (see the module docstring), without a C wrapper (`NO_C_WRAPPER`)."""

    def wrap(fn: Callable[..., Any]) -> Any:
        return plain_arguments(nb.njit(**{**NO_C_WRAPPER, **options})(fn))

    return wrap


def plain_arguments(dispatcher: Any) -> Any:
    """Make ``dispatcher`` (a Numba dispatcher) compile for the plain types of the literal
    arguments its jitted callers pass; returns it."""
    original = dispatcher.get_call_template

    def get_call_template(args: tuple, kws: dict) -> Any:
        args = tuple(nt.unliteral(a) for a in args)
        return original(args, {k: nt.unliteral(v) for k, v in kws.items()})

    dispatcher.get_call_template = get_call_template
    return dispatcher


@jit(nogil=True, cache=True)
def alive(a):  # type: ignore[no-untyped-def]
    """Nothing: a use of the array ``a`` after the code that reads or writes it only through
    its address (a job's field, an int64 argument). Numba frees an array after its last use
    as an array, so a scratch array used only through its address must be used so after
    that code, or it is freed under it: a use after free that no test sees while the freed
    memory stays mapped (a process whose compiles raised glibc's mmap threshold), and a crash
    where it does not (a process loading everything from Numba's cache)."""
