"""The virtual machine: the Python calling API over an exec mode.

The VM checks arguments, guards against concurrent calls, keeps saved functions and stateful
inputs, and swaps the packed-function table for wrapped callables while instrumented or
profiled (see `profiler.py`), so the modes have no flags and run at full speed when nothing is
instrumented. Running a function is the exec mode's work: the VM builds an `ExecContext`
(`exec_mode.py`) and the mode named by `exec_mode` from it (`EXEC_MODE_FACTORIES`): the
bytecode loop (`loop.py`), generated Python (`compiled.py`) or Numba functions
(`native_mode.py`); `self._run` is the one switch.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rvm import _html
from rvm.errors import FunctionNotFoundError, VMError
from rvm.kernels.threads import apply_environment, pool_call
from rvm.runtime.calling import BoundLast, closure_function, result_checks
from rvm.runtime.derived import Derived
from rvm.runtime.entry import (
    BoundFunction,
    PythonForms,
    SavedFunction,
    bind_arguments,
    check_arguments,
    range_probes,
)
from rvm.runtime.executable import Executable
from rvm.runtime.kernels import resolve_primitives
from rvm.runtime.memory import NAMED_ALLOCATORS, make_allocator
from rvm.runtime.modes.base import ExecContext, ExecMode
from rvm.runtime.modes.bytecode import BytecodeMode
from rvm.runtime.modes.compiled import CompiledMode, compiled_functions
from rvm.runtime.modes.decode import decode_executable
from rvm.runtime.objects import Closure
from rvm.runtime.profiler import (
    SKIP_RUN,
    BenchmarkResult,
    ProfileReport,
    instrumented,
    profile_runs,
    timed_runs,
)
from rvm.runtime.text import signature

if TYPE_CHECKING:
    from rvm.runtime.modes.native import NativeReport


def _native_mode(context: ExecContext) -> ExecMode:
    """The native mode, imported when a VM first asks for it (its code generator is not needed
    by the other modes)."""
    from rvm.runtime.modes.native import NativeMode

    return NativeMode(context)


__all__ = ["VirtualMachine", "SKIP_RUN"]

_RESULT_CHECKS: Derived[Any] = Derived("the result check of each function")
_PYTHON_FORMS: Derived[Any] = Derived("the Python forms of the executable's ADTs")

# Each exec mode by name: the factory of its `ExecMode` from the VM's `ExecContext`.
EXEC_MODE_FACTORIES: dict[str, Callable[[ExecContext], ExecMode]] = {
    "bytecode": BytecodeMode,
    "compiled": CompiledMode,
    "native": _native_mode,
}


class VirtualMachine:
    """Runs the functions of an `Executable`.

    Call a function as `vm["main"](x, w, b=b)`: arguments by position or by parameter name,
    checked against the function's parameters before anything runs. `"main" in vm` tells
    whether `vm["main"]` exists; a name that does not raises `FunctionNotFoundError`.

    Threads: a VM has per-call state of its own (its allocator's blocks, the compiled mode's
    reused tensors), so one VM runs one call at a time. It is cheap to create: make one per
    thread over a shared executable. Every call from Python enters through a thread guard
    taken without waiting (`EntryGuard`: a token taken from a list, no lock; in the native
    mode a word its native entries claim themselves, `native_guard.NativeGuard`): a call from
    another thread while one runs raises `VMError` at once instead of corrupting either. The
    guard is reentrant: a packed function may call back into the same VM from its own thread
    (a recursion through Python), and the inner call runs as an independent call.

    Args:
        ex: The executable.
        exec_mode: "bytecode" (the dispatch loop), "compiled" (each function as generated
            Python, see `compiled.py`) or "native" (each function as one Numba function where
            it can be, else compiled, see `native_mode.py` and `native_report`); None takes
            the executable's `default_exec_mode`.
        allocator: "pooled" (reuse storage nothing references any more), "naive", or an
            allocator object with `alloc(nbytes, alignment) -> Storage` (a `Storage` whose
            `buffer` is a writable uint8 array of at least `nbytes` bytes aligned to
            `alignment`); it may also have `alloc_view(nbytes, alignment, shape, dtype)`
            returning a tensor at offset 0 of such a block (see `memory.py`).

    Raises:
        ValueError: An unknown exec_mode or allocator.
        VMError: A primitive name is neither a kernel nor a registered function.
        JITError: A jit kernel cannot be loaded.
    """

    def __init__(
        self, ex: Executable, exec_mode: str | None = None, allocator: Any = "pooled"
    ) -> None:
        if not isinstance(ex, Executable):
            raise TypeError(f"VirtualMachine expects an Executable, got {type(ex).__name__}")
        if exec_mode is None:
            exec_mode = ex.default_exec_mode
        if exec_mode not in EXEC_MODE_FACTORIES:
            known = tuple(EXEC_MODE_FACTORIES)
            raise ValueError(f"exec_mode must be one of {known}, got {exec_mode!r}")
        apply_environment()  # RVM_NUM_THREADS, read at the first VM
        self.executable = ex
        self.exec_mode = exec_mode
        made = make_allocator(allocator) if isinstance(allocator, str) else allocator
        # What the exec mode sees of this VM; `set_instrument` and `profile` swap its `packed`,
        # and setting `allocator` sets the context's.
        self.context = ExecContext(ex, decode_executable(ex), resolve_primitives(ex), made)
        self.context.run_bytecode = BytecodeMode(self.context).run
        self.context.pool_call = pool_call()  # loaded by the kernels it resolved, if any
        self._ran_jobs = [True] * len(ex.functions)  # per function, for `pool_call`
        self._instrument: Callable[..., Any] | None = None
        self._inputs: dict[str, list[Any]] = {}
        self._outputs: dict[str, Any] = {}
        self._saved: dict[str, SavedFunction] = {}
        self._handles: dict[str, BoundFunction] = {}  # vm[name], made once per name
        # `_run(fidx, args)` runs a function: the exec mode's `run`, the one switch.
        self._mode: ExecMode = EXEC_MODE_FACTORIES[exec_mode](self.context)
        self.context.guard = getattr(self._mode, "guard", self.context.guard)  # a mode's own
        self._guard = self.context.guard  # the thread guard, shared with the mode's fast path
        self._run: Callable[[int, list[Any]], Any] = self._mode.run
        # Each function's result check at the boundary (`calling.py`), by function index.
        self._results = _RESULT_CHECKS.get(ex, lambda: result_checks(ex))

    @property
    def allocator(self) -> Any:
        """The allocator of the storage the VM's code allocates (may be replaced between
        calls: an object with `alloc(nbytes, alignment) -> Storage`)."""
        return self.context.allocator

    @allocator.setter
    def allocator(self, value: Any) -> None:
        self.context.allocator = value

    def native_report(self, compile: bool = False) -> NativeReport:
        """Which functions run as native code in this VM's native mode, and for the others
        (which run in the compiled mode) why not; `str()` of it is a table.

        Args:
            compile: Compile every function's native entry first (a function whose compile
                fails is then reported with its reason; `Executable.save` of a native
                executable does this, to ship the native code).

        Raises:
            VMError: The VM does not run in the native mode.
        """
        if self.exec_mode != "native":
            raise VMError(f"native_report: this VM runs in the {self.exec_mode} mode, not native")
        return self._mode.report(compile)  # type: ignore[attr-defined]

    # -- pickling ---------------------------------------------------------------------------

    def __reduce__(self) -> tuple[Callable[..., VirtualMachine], tuple]:
        """A VM pickles by re-creating itself: its executable (as RVMX bytes), exec mode and
        allocator kind, with its saved functions and `set_input` inputs. Per-call state (the
        allocator's pooled blocks, `get_outputs` results) starts afresh.

        Raises:
            TypeError: The VM has what cannot be re-created: an instrument callback
                (`set_instrument(None)` first) or an allocator object rather than "pooled"
                or "naive" (pickle the executable and make the VM where it is unpickled).
        """
        if self._instrument is not None:
            raise TypeError(
                "cannot pickle a VirtualMachine with an instrument callback: call "
                "vm.set_instrument(None) first, or pickle vm.executable and make a new VM"
            )
        if type(self.allocator) not in NAMED_ALLOCATORS.values():
            raise TypeError(
                f"cannot pickle a VirtualMachine over the allocator object {self.allocator!r}: "
                "only the 'pooled' and 'naive' allocators are re-created; pickle vm.executable "
                "and make the VM with its allocator where it is unpickled"
            )
        saved = [(s.name, s.function.name, s.values) for s in self._saved.values()]
        inputs = dict(self._inputs)
        kind = self.allocator.name
        return _rebuild_vm, (self.executable, self.exec_mode, kind, saved, inputs)

    def compiled_source(self, name: str) -> str:
        """The Python source the compiled exec mode runs for function `name` (any mode)."""
        _, functions = compiled_functions(self.executable)
        return functions[self.executable.function_index(name)].source

    # -- calling from Python ----------------------------------------------------------------

    def __contains__(self, name: object) -> bool:
        """Whether `vm[name]` exists: a function of the executable or one saved here."""
        return isinstance(name, str) and (name in self._saved or name in self.executable)

    def __getitem__(self, name: str) -> BoundFunction:
        """`vm["f"]`: function `f`, or one saved by `save_function`, as a callable.

        The callable takes the arguments by position or by parameter name and returns the
        function's result; its repr and `inspect.signature` show the parameters.

        Raises:
            FunctionNotFoundError: No function or saved function is called `name` (the message
                lists those there are; it is also a KeyError).
        """
        try:
            return self._handles[name]
        except (KeyError, TypeError):
            pass
        if name in self._saved:
            return self._saved[name]
        try:
            fidx = self.executable.function_index(name)
        except FunctionNotFoundError:
            known = [f.name for f in self.executable.functions] + list(self._saved)
            where = "the executable or saved on this VM" if self._saved else "the executable"
            raise FunctionNotFoundError.missing(name, where, known) from None
        fn = self.executable.functions[fidx]
        handle = BoundFunction(
            fn, fidx, self._enter, self._label(), self._fast_entry(fidx), self._forms()
        )
        self._handles[name] = handle
        return handle

    def _fast_entry(self, fidx: int) -> Callable[[Callable[..., Any]], Any] | None:
        """The exec mode's handle of `fidx` for calls from Python (`fast_call`, optional),
        made from the handle's checked call (``slow``): it takes the thread guard `_enter`
        takes (`ExecContext.guard`), its result checked as `_enter` checks one; see
        `BoundFunction`."""
        if range_probes(self.executable.functions[fidx]) is None:
            return None  # a bounded dimension the fast path cannot read: the checked entry
        make = getattr(self._mode, "fast_call", None)
        if make is None:
            return None
        check = self._results[fidx]
        checked = None if check is None else lambda result, args: check(result, args, self)
        return lambda slow: make(fidx, slow, checked)

    def invoke(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Calls function `name` (or a saved one) with the arguments, by position or by
        parameter name, after the entry checks; returns its result. Same as `vm[name](...)`."""
        handle = self._handles.get(name) if type(name) is str else None
        return (handle or self[name])(*args, **kwargs)

    def invoke_closure(self, closure: Closure, /, *args: Any) -> Any:
        """Calls `closure` (a function value a VM call returned) with the arguments, after the
        entry checks of its function's parameters past the captured values; returns its
        result. `closure(*args)` does the same on the VM that returned it.

        Raises:
            TypeError: `closure` is not a Closure of this VM's executable, or wrong arguments.
        """
        fn = closure_function(self.executable, closure)
        checked = check_arguments(fn, args)
        return self._enter(closure.func_index, [*closure.free_vars, *checked])

    def bind(self, name: str, /, *last: Any) -> BoundLast:
        """Function `name` with its last arguments bound to `last` (Relax's `BindLastArgs`):
        `vm.bind("f", w, b)(x)` is `vm["f"](x, w, b)`, every entry check included.

        Raises:
            FunctionNotFoundError: No function is called `name`.
            TypeError: More arguments than the function takes.
        """
        handle = self[name]
        return BoundLast(handle.function, last, handle, self._label())

    def _checked(self, name: str, args: tuple, kwargs: dict[str, Any]) -> tuple[int, list]:
        """The index of executable function `name` and its checked arguments."""
        fidx = self.executable.function_index(name)
        fn = self.executable.functions[fidx]
        if kwargs:
            args = bind_arguments(fn, args, kwargs)
        return fidx, check_arguments(fn, args, self._forms())

    def _forms(self) -> PythonForms:
        """The Python forms of the executable's data types, made once per executable."""
        ex = self.executable
        return _PYTHON_FORMS.get(ex, lambda: PythonForms(ex.adts))

    def _enter(self, fidx: int, args: list[Any]) -> Any:
        """Runs function `fidx` on checked values: the entry of every call from Python.

        Takes the VM's thread guard without waiting (`EntryGuard`; see the class docstring): a
        call from another thread while one runs raises VMError.
        """
        guard = self._guard
        took = guard.enter()
        while took is None:  # held: by the thread named, or given back since (then take it)
            owner = guard.owner
            if owner is not None:
                raise self._busy_error(owner)
            took = guard.enter()
        through = self.context.pool_call  # wakes sleeping helpers as it begins, if that helps
        try:
            if through is None:
                result = self._run(fidx, args)
            else:
                result = through(self._ran_jobs, fidx, self._run, (fidx, args))
        finally:
            if took:
                guard.leave()
        check = self._results[fidx]
        if check is not None:
            check(result, args, self)
        return result

    def _busy_error(self, owner: int) -> VMError:
        names = {t.ident: t.name for t in threading.enumerate()}
        running = f"thread {names.get(owner, owner)!r}"
        return VMError(
            f"this VirtualMachine is already running in {running} (called from thread "
            f"{threading.current_thread().name!r}); create one VirtualMachine per thread over "
            "the shared Executable"
        )

    def _label(self) -> str:
        return f"VirtualMachine {self.exec_mode} at {id(self):#x}"

    def set_input(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Stores checked inputs of `name` for `invoke_stateful`, by position or param name."""
        self._inputs[name] = self._checked(name, args, kwargs)[1]

    def invoke_stateful(self, name: str) -> None:
        """Runs `name` on the inputs given by `set_input`; read the result with `get_outputs`."""
        fidx = self.executable.function_index(name)
        if name not in self._inputs:
            raise VMError(f"invoke_stateful({name!r}): call set_input({name!r}, ...) first")
        self._outputs[name] = self._enter(fidx, self._inputs[name])

    def get_outputs(self, name: str) -> Any:
        """The result of the last `invoke_stateful(name)`."""
        if name not in self._outputs:
            self.executable.function_index(name)  # FunctionNotFoundError for a wrong name
            raise VMError(f"get_outputs({name!r}): no invoke_stateful({name!r}) has run")
        fn = self.executable.get_function(name)
        return self._forms().to_python(self._outputs[name], fn.result)

    def save_function(self, name: str, new_name: str, /, *args: Any, **kwargs: Any) -> None:
        """Binds checked arguments (by position or parameter name) to function `name` as
        `new_name`; then `vm[new_name]()` runs it."""
        fidx, checked = self._checked(name, args, kwargs)
        fn = self.executable.functions[fidx]
        saved = SavedFunction(
            new_name, fn, fidx, checked, self._enter, self._label(), self._forms()
        )
        self._saved[new_name] = self._handles[new_name] = saved

    def time_evaluator(
        self, name: str, number: int = 10, repeat: int = 3, min_repeat_ms: float = 0
    ) -> Callable[..., BenchmarkResult]:
        """Returns `evaluator(*args, **kwargs) -> BenchmarkResult` timing calls of `name`.

        The arguments go by position or by parameter name (none for a saved function). Each
        of `repeat` measurements times `number` calls (raised until one measurement takes
        `min_repeat_ms`) and records seconds per call. One untimed call warms up first.
        """
        self[name]  # FunctionNotFoundError now, not at the evaluator's call

        def evaluator(*args: Any, **kwargs: Any) -> BenchmarkResult:
            saved = self._saved.get(name)
            if saved is not None:
                run = functools.partial(saved, *args, **kwargs)  # arguments: its TypeError
            else:
                run = functools.partial(self._enter, *self._checked(name, args, kwargs))
            return timed_runs(run, number, repeat, min_repeat_ms)

        return evaluator

    def set_instrument(self, callback: Callable[[str, tuple, bool], Any] | None) -> None:
        """Calls `callback(name, args, before)` around every packed call; None removes it.

        `name` is the packed function's name, `args` its arguments (for INVOKE_PACKED the
        outputs are the last ones), `before` True before the call and False after it. If the
        call before returns `SKIP_RUN`, the packed function is not called: its outputs keep
        whatever the allocator gave them (uninitialized or reused memory), a CALL_PACKED
        destination gets None; the after callback still runs. In the native mode, calls run in
        the compiled mode while a callback is set (native code calls kernels directly).
        """
        self._instrument = callback
        names = self.executable.primitive_names
        raw = self.context.raw_packed
        self.context.packed = (
            raw if callback is None else [instrumented(n, f, callback) for n, f in zip(names, raw)]
        )

    def profile(
        self, name: str, *args: Any, warmup: int = 1, repeat: int = 10, **kwargs: Any
    ) -> ProfileReport:
        """Times each kernel call of `name` over `repeat` runs; returns the per-kernel table.

        `warmup` untimed runs come first (first-call costs: pools filling, the compiled mode
        binding its code to the timed kernels), then `repeat` timed runs, then one untimed run
        that records argument shapes. Arguments go by position or by parameter name, as for
        `set_input`. Per kernel (and per registered function; the VM's own `vm.builtin.*`
        functions are VM work) the report gives the median time per run, calls per run, mean
        per call and share; the VM overhead is the median over runs of run time minus kernel
        time, which includes the profiler's own cost of a few hundred ns per kernel call.

        In the native mode the profiled runs are the compiled mode's (native code calls kernels
        directly, so they cannot be timed one by one there).

        Raises:
            ValueError: `repeat` < 1 or `warmup` < 0.
        """
        fidx, checked = self._checked(name, args, kwargs)
        context = self.context
        saved = context.packed

        def install(table: list[Callable[..., Any]]) -> None:
            context.packed = table

        try:
            return profile_runs(
                name,
                self.executable.primitive_names,
                context.raw_packed,
                install,
                lambda: self._enter(fidx, checked),
                warmup=warmup,
                repeat=repeat,
                precisions={
                    name: rec.meta.get("precision", "fp32")
                    for name, rec in self.executable.kernels.items()
                },
            )
        finally:
            context.packed = saved

    def _allocator_name(self) -> str:
        return getattr(self.allocator, "name", type(self.allocator).__name__)

    def __repr__(self) -> str:
        names = ", ".join(f.name for f in self.executable.functions)
        return f"<VirtualMachine {self.exec_mode} [{names}] allocator={self._allocator_name()}>"

    def _repr_html_(self) -> str:
        """Exec mode, allocator and the functions' signatures, for notebooks."""
        facts = _html.table(
            (), [("exec mode", self.exec_mode), ("allocator", self._allocator_name())]
        )
        functions = [(signature(fn),) for fn in self.executable.functions]
        functions += [
            (f"@{name} = {signature(saved.function)} with bound arguments",)
            for name, saved in self._saved.items()
        ]
        return _html.box("VirtualMachine", facts, _html.table(("functions",), functions))


def _rebuild_vm(
    ex: Executable,
    exec_mode: str,
    allocator: str,
    saved: list[tuple[str, str, list[Any]]],
    inputs: dict[str, list[Any]],
) -> VirtualMachine:
    """The VM `VirtualMachine.__reduce__` describes (the unpickling side)."""
    vm = VirtualMachine(ex, exec_mode=exec_mode, allocator=allocator)
    for new_name, name, values in saved:
        vm.save_function(name, new_name, *values)
    for name, values in inputs.items():
        vm.set_input(name, *values)
    return vm
