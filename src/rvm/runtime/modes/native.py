"""The native exec mode: every VM function that can be, one Numba function.

`native_codegen.py` writes one Python file per executable holding an njit function per native
VM function (registers as typed locals, kernels called njit to njit (by the symbol of their
loaded object code but for small ones: `native_symbols`), tensors allocated by Numba, branches
and loops native, calls between native functions native calls). The file is
the native code's cache entry: it lives at ``<rvm cache dir>/native/n_<hash>.py``, named by the
hash of its text, the versions and CPU it is compiled for and the rvm modules it imports
(`rvm.runtime.loading.cache.source_hash`), written atomically, registered in `linecache`, and
imported as a module with its kernels bound as globals, so Numba's ``cache=True`` keeps the
object code beside it: identical programs compile once, and a second process compiles nothing.
A function is compiled at its first call (for the types of that call's values).

Fallback, per function, to the compiled mode (`CompiledMode`, which this mode holds):

- functions that cannot be native (`native_codegen.NotNative`: closures, values of recursive
  data types, packed functions that are not jit kernels; recursion through other functions is
  native, each call cycle one merged function, `native_groups`), and
  functions Numba fails to type at their first call, always run compiled; `NativeMode.report`
  (`VirtualMachine.native_report()`) says which and why;
- a failure inside native code (a kernel's error, a failed shape check, FATAL, recursion
  deeper than `native_codegen.MAX_DEPTH`) reruns the call in the compiled mode, so its error
  and VM stack read exactly as in the other modes (kernels write only the outputs native code
  allocated, so a rerun sees the arguments unchanged);
- while instrumented (`set_instrument`) or profiled (`profile`) the VM calls the wrapped packed
  functions, which native code cannot: those calls run in the compiled mode, observed exactly
  as there; so do calls with an allocator the VM did not make (native memory is Numba's).

Entry checks are the VM's (`entry.check_arguments`), before any mode runs, so their messages
are those of every mode.
"""

from __future__ import annotations

import linecache
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from rvm.kernels.numba_cache import light_loads
from rvm.progress import Progress
from rvm.runtime.derived import Derived
from rvm.runtime.executable import SCALAR_META
from rvm.runtime.kernels import resolve_primitives
from rvm.runtime.loading import NATIVE_DIR, NATIVE_IMPORTS, artifact
from rvm.runtime.loading import cache as native_cache
from rvm.runtime.loading.loader import exec_module_file, kernel_function
from rvm.runtime.modes.base import ExecContext
from rvm.runtime.modes.compiled import CompiledMode
from rvm.runtime.modes.native_adts import Layouts, NoLayout, has_adt, spec_key
from rvm.runtime.modes.native_codegen import NativeModule, entry_name, render_module

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable

__all__ = ["NativeMode", "NativeReport", "native_file", "native_path"]

_lock = threading.RLock()
_modules: dict[str, ModuleType] = {}  # by file path: identical programs share their code
_ENTRIES: dict[tuple, Any] = {}  # by (id of the function, signature); modules live on
_PLAN: Derived[_Plan] = Derived("the native plan its VMs share: file, dispatchers, reasons")


@dataclass(frozen=True)
class NativeReport:
    """Which functions of an executable run natively, and why the others do not.

    Attributes:
        functions: Per function, in table order, ``(name, reason)``: reason None when native.
        path: The generated file, or None when no function is native.
        compiled: Native functions (per signature) this process compiled so far.
        loaded: Native functions (per signature) this process loaded from the disk cache.
    """

    functions: tuple[tuple[str, str | None], ...]
    path: str | None
    compiled: int = 0
    loaded: int = 0

    @property
    def native(self) -> list[str]:
        """The names of the native functions."""
        return [name for name, why in self.functions if why is None]

    @property
    def fallbacks(self) -> dict[str, str]:
        """Each function that runs in the compiled mode, with the reason."""
        return {name: why for name, why in self.functions if why is not None}

    def __str__(self) -> str:
        width = max((len(name) for name, _ in self.functions), default=0) + 1
        lines = [f"native functions ({len(self.native)} of {len(self.functions)}):"]
        for name, why in self.functions:
            what = "native" if why is None else f"compiled mode: {why}"
            lines.append(f"  @{name:<{width}} {what}")
        return "\n".join(lines)


class _Plan:
    """An executable's native functions, shared by its VMs: the generated module, the
    dispatchers, and the reasons of the functions that run compiled."""

    def __init__(self, ex: Executable, kernels: list[Any]) -> None:
        kinds = [
            "jit" if name in ex.kernels and ex.kernels[name].backend == "jit" else "other"
            for name in ex.primitive_names
        ]
        for i, name in enumerate(ex.primitive_names):
            if name in ex.kernels and ex.kernels[name].backend == "numpy":
                kinds[i] = "numpy"
        self.module: NativeModule = render_module(ex, kinds)
        self.reasons: dict[int, str] = dict(self.module.reasons)
        self.names = [f.name for f in ex.functions]
        self.path: Path | None = None
        self.own = False  # whether `path` is in rvm's own cache (its object code sealed)
        self.funcs: list[Any] = [None] * len(ex.functions)
        self.entries: list[Any] = [None] * len(ex.functions)
        layouts = Layouts(ex)  # one for every function: each data type's layout made once
        self.boundaries: list[_Boundary | None] = [
            _Boundary.of(ex, i, self.module, layouts) if i not in self.reasons else None
            for i in range(len(ex.functions))
        ]
        if self.module.source:
            bound = {name: kernels[k] for name, k in self.module.kernels.items()}
            try:
                for name, k in self.module.scalar_kernels.items():
                    rec = ex.kernels[ex.primitive_names[k]]
                    bound[name] = kernel_function(rec, rec.meta[SCALAR_META])
                _bind_constants(self, ex)
                own = native_path(self.module.source)
                self.path = artifact.native_entry(ex, own, self.module.source) or own
                self.own = self.path == own
                self._mod = _load(self.path, self.module.source, bound, self.own)
            except Exception as e:  # noqa: BLE001 - an unwritable cache: everything compiled
                why = f"the native module did not load: {type(e).__name__}: {e}"
                for i in range(len(self.names)):
                    self.reasons.setdefault(i, why)
                self.path = None
                return
            for i, pyname in enumerate(self.module.pynames):
                if i not in self.reasons:
                    self.funcs[i] = getattr(self._mod, pyname)

    def signature(self, fidx: int) -> tuple[Any, ...]:
        """The Numba types `entry` compiles native function `fidx`'s entry for."""
        import numba as nb
        from numba import types as nt

        return tuple(
            nt.Array(nb.from_dtype(np.dtype(d)), n, "C") for d, n in self.module.entries[fidx]
        )

    def entry(self, fidx: int) -> Any:
        """The entry dispatcher of native function `fidx` (`native_codegen.entry_name`: its
        arguments without the call depth, its dims checked, run under the VM's guard), compiled
        for its parameters' specs only (C-contiguous arrays of their dtypes and ranks; other
        values make Numba raise TypeError at once), or None if it has none or does not
        compile. Calls from Python take it, so a function called with the values its signature
        promises compiles once."""
        found = self.entries[fidx]
        if found is not None or fidx not in self.module.entries or self.funcs[fidx] is None:
            return found
        sig = self.signature(fidx)
        with _lock:
            if self.entries[fidx] is None:
                if self.funcs[fidx] is None:  # another thread's compile of it failed meanwhile
                    return None
                entry = getattr(self._mod, entry_name(self.module.pynames[fidx]))
                key = (id(entry), sig)
                if key not in _ENTRIES:  # the module may be another plan's too
                    try:
                        with Progress(f"compiling native function @{self.names[fidx]}"):
                            with light_loads():  # a cached one loads without a refresh
                                entry.compile(sig)
                    except Exception as e:  # noqa: BLE001 - Numba's errors: run compiled
                        self.fail(fidx, e)
                        return None
                    entry.disable_compile()
                    _ENTRIES[key] = entry
                self.entries[fidx] = entry
        return self.entries[fidx]

    def fail(self, fidx: int, error: BaseException) -> None:
        """Function `fidx` did not compile: it runs compiled from now on."""
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        useful = [ln for ln in lines if not ln.startswith(("Failed in", "During:"))]
        first = (useful or lines or [type(error).__name__])[0]
        self.reasons[fidx] = f"Numba typing error: {first[:200]}"
        self.funcs[fidx] = None


class _Boundary:
    """The conversions of a native function's values at its call from the VM: its `ADT`
    arguments into tuples and its result back into `ADT` objects (`native_adts`), the
    `Closure` arguments into their class's tuples (`native_closures`)."""

    def __init__(self, params: list[Any], result: Any) -> None:
        self.params = params
        self.result = result

    @staticmethod
    def of(ex: Executable, fidx: int, module: NativeModule, layouts: Layouts) -> _Boundary | None:
        """The boundary of function ``fidx`` (its data types' layouts from ``layouts``), or
        None where its values need no conversion (or one native code cannot hold: the function
        is not native then)."""
        fn = ex.functions[fidx]
        try:
            params = []
            for i, spec in enumerate(fn.param_specs):
                key = spec_key(spec)
                if has_adt(key):
                    params.append(layouts.to_native(key))
                elif spec.kind == "any" and module.closures is not None:
                    params.append(module.closures.to_native(fidx, i, layouts))
                else:
                    params.append(None)
            key = spec_key(fn.result)
            result = layouts.from_native(key) if has_adt(key) else None
        except (NoLayout, ValueError):
            return None
        if all(p is None for p in params) and result is None:
            return None
        return _Boundary(params, result)

    def arguments(self, args: list[Any]) -> list[Any]:
        return [a if f is None else f(a) for a, f in zip(args, self.params)]

    def value(self, result: Any) -> Any:
        return result if self.result is None else self.result(result)


def _converting(
    handle: Callable[..., Any],
    convert: Callable[[tuple], Any],
    check: Callable[[Any, tuple], None] | None,
) -> Callable[..., Any]:
    """The handle of a function whose result is a data type value (`native_codegen.
    entry_result`): the native tuple the entry returns converted into the VM's `ADT`, then
    checked; the checked call's result (an `ADT` already) as it comes."""

    def call(*args: Any, **kwargs: Any) -> Any:
        result = handle(*args, **kwargs)
        if type(result) is tuple:
            result = convert(result)
            if check is not None:
                check(result, args)
        return result

    return call


def _refuse(*args: Any) -> Any:
    """A handle's run where the entry did not compile: the VM's checked call runs it."""
    from rvm.runtime.modes.native_guard import Refused

    raise Refused


def _bind_constants(plan: _Plan, ex: Executable) -> None:
    """Binds the big constants' slots of ``plan``'s module to ``ex``'s arrays, before its code
    is linked (`native_constants`), for as long as ``plan`` lives."""
    if not plan.module.bound:
        return
    from rvm.runtime.modes import native_constants

    releases = [native_constants.bind(n, ex.constants[c]) for n, c in plan.module.bound.items()]
    weakref.finalize(plan, _release_all, releases)


def _release_all(releases: list[Callable[[], None]]) -> None:
    for release in releases:
        release()


def native_file(ex: Executable) -> str | None:
    """The native mode's file of ``ex`` with every function's entry compiled, so its native
    code is in the cache (what a saved native executable ships); None when no function is
    native. The plan is the one ``ex``'s VMs share; no VM is made."""
    plan = _PLAN.get(ex, lambda: _Plan(ex, resolve_primitives(ex)))
    for fidx in plan.module.entries:
        plan.entry(fidx)
    return None if plan.path is None else str(plan.path)


def native_path(source: str) -> Path:
    """Where the generated file of `source` lives in rvm's cache."""
    name = f"n_{native_cache.source_hash(source, NATIVE_IMPORTS)}.py"
    return native_cache.cache_dir() / NATIVE_DIR / name


def _load(path: Path, source: str, kernels: dict[str, Any], own: bool = True) -> ModuleType:
    """The generated module at `path` (written if needed), its kernels bound as globals.

    The module runs ``source``, never what the file holds. In rvm's own cache (``own``), its
    functions' object code is sealed and checked against its seal before each load
    (`native_cache.guard_dispatcher`); a trusted file's isolated entry is verified byte for
    byte by `artifact.native_entry` instead."""
    key = str(path)
    with _lock:
        module = _modules.get(key)
        if module is not None:
            return module
        native_cache.write_entry(path, source)
        linecache.cache[key] = (len(source), None, source.splitlines(True), key)
        with light_loads():  # the library it imports loads its cached code, Numba unrefreshed
            module = exec_module_file(path, f"rvm_native_{path.stem}", kernels, source)
        if own:
            for value in list(vars(module).values()):
                if getattr(getattr(value, "py_func", None), "__globals__", None) is vars(module):
                    native_cache.guard_dispatcher(value, path)
        _modules[key] = module
        return module


class NativeMode:
    """The native exec mode (an `ExecMode`; see the module docstring).

    Args:
        context: The VM's context.
    """

    def __init__(self, context: ExecContext) -> None:
        self.context = context
        self._compiled: CompiledMode | None = None
        ex = context.executable
        self.plan: _Plan = _PLAN.get(ex, lambda: _Plan(ex, context.raw_packed))
        self._typing_error: type[BaseException] | None = None
        self.guard: Any = context.guard  # the VM takes a mode's guard (`modes.base`)
        if self.plan.path is not None:
            from numba.core.errors import NumbaError

            from rvm.runtime.modes.native_guard import NativeGuard

            self._typing_error = NumbaError
            self.guard = NativeGuard()  # its native entries claim it themselves

    @property
    def compiled(self) -> CompiledMode:
        """The compiled mode that runs what does not run natively, made at its first use
        (generating and compiling every function's Python costs a model's load 0.1-0.3 s)."""
        found = self._compiled
        if found is None:
            with _lock:
                if self._compiled is None:
                    self._compiled = CompiledMode(self.context)
                found = self._compiled
        return found

    def run(self, fidx: int, args: list[Any]) -> Any:
        """Runs function `fidx` on checked VM values: natively when it can, else compiled."""
        context = self.context
        func = self.plan.funcs[fidx]
        if func is None or not context.plain:
            return self.compiled.run(fidx, args)
        entry = self.plan.entry(fidx)
        boundary = self.plan.boundaries[fidx]
        if entry is not None:
            try:  # the guard held by this thread's caller: the entry runs under it
                result = entry(*args)
                return result if boundary is None else boundary.value(result)
            except TypeError:  # other types: the dispatcher compiles for them
                pass
            except Exception:  # noqa: BLE001 - it ran and failed: the compiled mode reports
                return self.compiled.run(fidx, args)  # (the dispatcher would compile it anew)
        try:
            if boundary is not None:
                return boundary.value(func(*boundary.arguments(args), 0))
            return func(*args, 0)
        except Exception as e:  # noqa: BLE001 - any failure is reported by the compiled mode
            if self._typing_error is not None and isinstance(e, self._typing_error):
                self.plan.fail(fidx, e)
            return self.compiled.run(fidx, args)

    def fast_call(
        self,
        fidx: int,
        slow: Callable[..., Any],
        check: Callable[[Any, tuple], None] | None = None,
    ) -> Callable[..., Any] | None:
        """The VM's handle of function `fidx` (what `vm[name]` calls; `native_handle`, C code):
        it claims the VM's thread guard in native code (`native_guard.NativeGuard`'s word),
        runs the function's entry dispatcher on positional arguments, gives the guard back and
        returns the result (``check``ed, if given: ``check(result, args)``). Every call the
        entry does not run (by keyword, the guard held by another thread or native code off
        for the VM, arguments other than what the entry checks would pass unchanged, a
        failure inside) is ``slow(*args, **kwargs)``: the VM's checked call, which reenters or
        says who holds the guard, and reruns a failure in the compiled mode. None if the
        function has no such entry or this Python lacks the C API the handle calls.

        No Python frame between the handle's call and Numba's dispatcher: this is the native
        call's whole cost above the dispatcher. What the thread pool's `call` does around a VM
        call from Python (`VirtualMachine._enter`'s), the entry does natively
        (`workpool.call_begin`): that Python frame and its three reads of the pool's state cost
        the MLP's call at batch 1 about 2 us (15%) on a Zen 3 core, its caches cold after the
        product; a Python function holding just the call and its ``try``, 0.4-0.6 us more, the
        guard taken from Python (a token, the owner's ident stored and cleared) 0.2-0.3, and
        the guard's word an argument of the entry (an array more to type and unbox) 0.1-0.25."""
        plan = self.plan
        if fidx not in plan.module.entries or plan.funcs[fidx] is None:
            return None
        from rvm.runtime.modes import native_handle as nh

        guard = self.guard

        def first(*args: Any) -> Any:
            """The entry, compiled now (or a refusal where it does not compile), then run; its
            compiled function for the handle to call where the arguments are its types."""
            entry = plan.entry(fidx)
            state[nh.RUN] = entry or _refuse
            types = None if entry is None else nh.argument_types(plan.module.entries[fidx])
            if types is not None:
                state[nh.KEEP], state[nh.TYPES] = (guard, types), types.ctypes.data
                state[nh.COMPILED] = entry.overloads[plan.signature(fidx)].entry_point
            return state[nh.RUN](*args)

        boundary = plan.boundaries[fidx]
        convert = None if boundary is None else boundary.result
        state: list[Any] = [None] * 7
        state[nh.RUN], state[nh.WORD], state[nh.KEEP] = first, guard.word.ctypes.data, guard
        state[nh.SLOW], state[nh.CHECK] = slow, check if convert is None else None
        state[nh.TYPES] = 0
        try:
            handle = nh.handle(state)
        except nh.Unavailable:
            return None  # the checked call serves (an older CPython)
        if convert is None:
            return handle
        return _converting(handle, convert, check)

    def report(self, compile: bool = False) -> NativeReport:
        """Which functions are native and why the others are not (typing errors show once a
        function has been called, or with ``compile``, which compiles every function's entry
        from Python first, so their native code is in the cache)."""
        plan = self.plan
        if compile:
            native_file(self.context.executable)  # compiles this plan's entries (shared)
        functions = tuple((name, plan.reasons.get(i)) for i, name in enumerate(plan.names))
        compiled = loaded = 0
        for dispatcher in plan.funcs + plan.entries:
            stats = getattr(dispatcher, "stats", None)
            if stats is not None:
                compiled += sum(stats.cache_misses.values())
                loaded += sum(stats.cache_hits.values())
        path = None if plan.path is None else str(plan.path)
        return NativeReport(functions, path, compiled, loaded)
