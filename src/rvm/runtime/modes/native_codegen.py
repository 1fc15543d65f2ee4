"""Numba source from bytecode: one njit function per VM function, for the native exec mode.

`render_module(ex, kinds)` writes one Python file for an executable: a Numba function per VM
function that can be native (each lowered by `native_lowering.FunctionLowering`, which says how
registers, control flow, scalars and shapes become Numba code), and, for each of the others,
the reason it cannot (`NotNative`: its own, or a call of a function that is not native). The
functions of a call cycle through other functions are merged into one (`native_groups`).
The file's head binds what the functions read: the kernels (`k<i>`, bound as globals when the
file is loaded), dtypes, small constants (rebuilt from hex text: Numba freezes module-level
arrays into the code it compiles), immediates and the pads of shape checks; big constants are
read through slots bound at load (`native_constants`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from rvm.runtime.executable import SCALAR_META
from rvm.runtime.loading import NATIVE_IMPORTS, NATIVE_SUPPORT_NAMES
from rvm.runtime.loading.cache import kernel_path
from rvm.runtime.loading.loader import kernel_module_name
from rvm.runtime.modes.lowering.operands import Names
from rvm.runtime.modes.native_adts import Key, has_adt, spec_key
from rvm.runtime.modes.native_closures import ClosureFlow
from rvm.runtime.modes.native_groups import groups
from rvm.runtime.modes.native_lowering import (
    MAX_CONSTANT_BYTES,
    MAX_DEPTH,
    NATIVE_BUILTINS,
    OWN_STATEMENTS,
    FunctionLowering,
    NotNative,
    entry_checks,
    slot_name,
)

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable, KernelRecord

__all__ = [
    "MAX_CONSTANT_BYTES",
    "MAX_DEPTH",
    "NATIVE_BUILTINS",
    "NativeModule",
    "NotNative",
    "OWN_STATEMENTS",
    "entry_checks",
    "entry_name",
    "render_module",
    "slot_name",
]


@dataclass
class NativeModule:
    """The generated file of an executable's native functions.

    Attributes:
        source: The file's text (empty when no function is native).
        pynames: Per function index, its Python name in the file.
        reasons: Per function index that is not native, why not.
        kernels: The kernel names the file takes as globals (`k<i>` = the primitive at i).
        entries: Per native function whose parameters are all tensors of known dtype and rank
            and whose result may come back through it (`entry_result`), the `(dtype, ndim)`
            of each: the signature of its entry from Python, the function `entry_name` of its
            Python name, which checks its dims (`entry_checks`) and calls it at depth 0.
        uncached: The native functions Numba's disk cache cannot hold (`_uncached`).
        bound: The big constants' slots (`native_constants.bind`): name -> constant index.
        closures: Where the program's closures go (`native_closures`), for the boundary.
    """

    source: str
    pynames: list[str]
    reasons: dict[int, str] = field(default_factory=dict)
    kernels: dict[str, int] = field(default_factory=dict)
    scalar_kernels: dict[str, int] = field(default_factory=dict)
    entries: dict[int, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    uncached: set[int] = field(default_factory=set)
    bound: dict[str, int] = field(default_factory=dict)
    closures: ClosureFlow | None = None


# The largest compile cost (`rvm.jit.lower.compile_cost`) of a jit kernel native code inlines.
INLINE_COST = 40


def _decorator(cache: bool) -> str:
    # no C wrapper: native functions are called from Python or natively, never as values
    # (`rvm.kernels.jitting.NO_C_WRAPPER`)
    return f"@_nb.njit(cache={cache}, nogil=True, error_model='numpy', no_cfunc_wrapper=True)"


def entry_name(pyname: str) -> str:
    """The Python name of the entry of the native function named `pyname` (`_entry`)."""
    return f"_entry_{pyname}"


def _entry(ex: Executable, f: FunctionLowering, pyname: str) -> list[str]:
    """The entry of native function `f` from Python: a second copy of its body, whose
    parameters are the function's without the call depth (one argument less for Numba's
    dispatcher to type; the depth is a local 0). Its caller holds the VM's thread guard (the
    VM's handle claims it in native code, `native_handle`; the guard is no argument, one more
    for the dispatcher). It checks its dims (`entry_checks`), then does what the thread pool's
    `call` does around a VM call from Python, natively (`workpool.call_begin`), and ends the
    pool's call before each return (`workpool.call_end`): no Python frame, no read of the
    pool's state and no guard taken from Python between the VM's handle and Numba's
    dispatcher. A copy, not a call of the function: Numba compiles a
    callee's code again into its caller, so a wrapper would compile every kernel the function
    calls twice (tens of seconds for a CNN's one big function)."""
    name = ex.functions[f.index].name
    params = ", ".join(f"r{i}" for i in range(len(ex.functions[f.index].params)))
    return [
        f"def {entry_name(pyname)}({params}):",
        f'    """@{name} called from Python under its VM\'s guard: dims checked, at depth 0."""',
        "    _d = 0",
        *entry_checks(ex, f.index),
        "    _w = _call_begin()",
        *f.body_ending("_call_end(_w)"),
    ]


def render_module(ex: Executable, kinds: list[str]) -> NativeModule:
    """The generated file of the native functions of `ex`; `kinds[i]` is "jit" when primitive
    `i` is a jit kernel (see the module docstring)."""
    names = Names(ex)
    slots: dict[int, str] = {}
    rendered: dict[int, FunctionLowering] = {}
    cycles, reasons = groups(ex)
    closures = ClosureFlow(ex)
    for i in range(len(ex.functions)):
        if i in reasons:
            continue
        try:
            f = FunctionLowering(ex, i, names, kinds, slots, cycles.get(i), closures)
            f.lines = f.render()
            rendered[i] = f
        except NotNative as e:
            reasons[i] = str(e)
    merged: list[tuple[list[str], bool]] = []  # each group's function, whether it is cached
    for group in {id(g): g for g in cycles.values()}.values():
        if all(m in rendered for m in group.members):
            members = [rendered[m] for m in group.members]
            merged.append((group.render(members), not group.recursive))
    changed = True
    while changed:
        changed = False
        for i, f in rendered.items():
            if i in reasons:
                continue
            for c in sorted(f.callees):
                if c in reasons:
                    reasons[i] = f"calls @{ex.functions[c].name}, which is not native"
                    changed = True
                    break
    native = [f for i, f in rendered.items() if i not in reasons]
    module = NativeModule("", names.funcs, reasons, closures=closures)
    if native:
        uncached = _uncached(native)
        module.uncached = uncached
        for f in native:
            specs = ex.functions[f.index].param_specs
            if all(
                s.kind == "tensor" and s.dtype and s.shape is not None for s in specs
            ) and entry_result(spec_key(ex.functions[f.index].result)):
                module.entries[f.index] = tuple((str(s.dtype), len(s.shape or ())) for s in specs)
        module.source = _file(ex, names, native, uncached, module.entries, merged)
        module.kernels = {f"k{k}": k for f in native for k in sorted(f.kernels)}
        module.scalar_kernels = {f"ks{k}": k for f in native for k in sorted(f.scalar_kernels)}
        used = {c for f in native for c in f.constants}
        module.bound = {name: c for c, name in sorted(slots.items()) if c in used}
    return module


def _uncached(functions: list[FunctionLowering]) -> set[int]:
    """The functions that recurse or call one that does, transitively: Numba's disk cache
    cannot hold them (object code of a caller of a recursive function, loaded from the cache,
    crashes: numba#6061), so each process compiles them."""
    out = {f.index for f in functions if f.recursive}
    changed = True
    while changed:
        changed = False
        for f in functions:
            if f.index not in out and f.callees & out:
                out.add(f.index)
                changed = True
    return out


def entry_result(key: Key | None) -> bool:
    """Whether a function of result type ``key`` may have an entry for calls from Python:
    a result with no data type value, or a data type value itself, whose native tuple the
    caller converts (`native_adts.Layouts.from_native`), telling it by its type from the VM's
    `ADT` that the checked call returns; not a tuple holding one, whose two forms are both
    tuples."""
    return not has_adt(key) or (key is not None and key[0] == "adt")


def _file(
    ex: Executable,
    names: Names,
    functions: list[FunctionLowering],
    uncached: set[int],
    entries: dict[int, tuple[tuple[str, int], ...]],
    merged: list[tuple[list[str], bool]],
) -> str:
    head = [
        "# rvm native functions (exec_mode='native'), made by rvm.runtime.modes.native_codegen",
        "import numba as _nb",
        "import numpy as _np",
        "",
        *(f"from {NATIVE_IMPORTS[0]} import {n} as _{n}" for n in NATIVE_SUPPORT_NAMES),
        "",
        "_zeros = _np.zeros",
        "_int64 = _np.int64",
    ]
    # Bound by native_mode before the file runs; named here, by the modules they live in, for
    # the file's hash: Numba's cached code of a caller names its callees' modules.
    kernels = sorted({k for f in functions for k in f.kernels})
    for k in kernels:
        rec = ex.kernels[ex.primitive_names[k]]
        head.append(f"# k{k} = kernel {rec.name!r}: {rec.entry} of {_kernel_module(rec)}")
        if not inlined(rec):
            head.append(f"k{k} = _by_symbol(k{k})")
    for k in sorted({k for f in functions for k in f.scalar_kernels}):
        rec = ex.kernels[ex.primitive_names[k]]
        name = rec.meta[SCALAR_META]
        head.append(f"# ks{k} = kernel {rec.name!r}: {name} of {_kernel_module(rec)}")
    for d in sorted({d for f in functions for d in f.dtypes}):
        head.append(f"{names.dtype(d)} = _np.dtype({d!r})")
    for c in sorted({c for f in functions for c in f.constants}):
        if ex.constants[c].nbytes > MAX_CONSTANT_BYTES:
            continue  # bound in each function that reads it (no copy of it made here)
        value = np.array(ex.constants[c], order="C")
        head.append(
            f"c{c} = _constant({value.tobytes().hex()!r}, {value.dtype.str!r}, "
            f"{tuple(value.shape)!r})"
        )
    for v in sorted({v for f in functions for v in f.immediates}):
        data = np.array(v, np.int64)
        head.append(f"{names.immediate(v)} = _constant({data.tobytes().hex()!r}, '<i8', ())")
    for n in sorted({n for f in functions for n in f.pads}):
        head.append(f"_PAD{n} = {(-1,) * n!r}")
    body: list[str] = []
    for f in functions:
        body += ["", "", _decorator(f.index not in uncached), *f.lines]
        if f.index in entries:
            entry = _entry(ex, f, names.funcs[f.index])
            body += ["", "", _decorator(f.index not in uncached), *entry]
    for lines, cache in merged:  # the call cycles' merged functions (`native_groups`)
        body += ["", "", _decorator(cache), *lines]
    return "\n".join(head + body) + "\n"


def inlined(rec: KernelRecord) -> bool:
    """Whether native code calls jit kernel ``rec`` as Numba calls a jitted function, its code
    linked into the native function's module, inlined where LLVM finds it pays, and optimized
    and generated again there; else by symbol (`native_symbols`: its loaded object code). Only
    small kernels (`INLINE_COST`, by the compile cost its generator estimated): their call is
    a real share of their time on small tensors, and their code compiles again quickly."""
    return rec.cost <= INLINE_COST


def _kernel_module(rec: KernelRecord) -> str:
    """The module a jit kernel is loaded as (`rvm.runtime.loading.loader`)."""
    return kernel_module_name(kernel_path(rec.source, rec.imports))
