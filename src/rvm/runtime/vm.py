"""The virtual machine: frames, the dispatch loop and the Python calling API.

The loop (`_execute`) follows clox: the current function's code, its registers and the pc are
locals; instructions were decoded once into int-led tuples (`decode.py`); the commonest opcodes
are tested first; calls push `(code, regs, return_pc, dst, func_index)` on an explicit frame
stack, so VM recursion never recurses in Python, and tail calls reuse the frame.

Packed calls go through `self._packed`, a list of callables built at construction. Tracing and
profiling replace that list with wrapped callables (see `profiler.py`), so the loop has no flags
and runs at the same speed when nothing is instrumented.

With `exec_mode="compiled"` the same API runs each function as generated Python instead
(`compiled.py`): `self._run` is the one switch, and `_execute` stays the loop untouched.

A failure in the loop raises `VMError` carrying the VM stack (`in @main pc=7: invoke_packed
fused_add_exp`), chained to the original exception. All loop state is local, so the next call
starts clean.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from threading import get_ident
from typing import Any

import numpy as np

from rvm import _html
from rvm.errors import FunctionNotFoundError, VMError
from rvm.runtime.bytecode import Opcode
from rvm.runtime.compiled import CompiledProgram, compiled_functions
from rvm.runtime.decode import (
    ALLOC_STATIC,
    IF_CONST,
    TAIL_INVOKE,
    TAIL_INVOKE_CLOSURE,
    decode_executable,
)
from rvm.runtime.entry import BoundFunction, SavedFunction, bind_arguments, check_arguments
from rvm.runtime.executable import EXEC_MODES, Executable
from rvm.runtime.kernels import KERNEL_FILE_PREFIX, resolve_primitives
from rvm.runtime.memory import make_allocator
from rvm.runtime.objects import ADT, Closure
from rvm.runtime.profiler import (
    SKIP_RUN,
    BenchmarkResult,
    ProfileReport,
    instrumented,
    profile_runs,
    timed_runs,
)
from rvm.runtime.text import describe_instruction, signature

__all__ = ["VirtualMachine", "SKIP_RUN"]

MAX_CALL_DEPTH = 500_000

_MOVE = Opcode.MOVE.value
_RET = Opcode.RET.value
_FATAL = Opcode.FATAL.value
_INVOKE_PACKED = Opcode.INVOKE_PACKED.value
_CALL_PACKED = Opcode.CALL_PACKED.value
_ALLOC_STORAGE = Opcode.ALLOC_STORAGE.value
_ALLOC_TENSOR = Opcode.ALLOC_TENSOR.value
_ALLOC_TENSOR_REG = Opcode.ALLOC_TENSOR_REG.value
_ALLOC_ADT = Opcode.ALLOC_ADT.value
_ALLOC_CLOSURE = Opcode.ALLOC_CLOSURE.value
_GET_FIELD = Opcode.GET_FIELD.value
_GET_TAG = Opcode.GET_TAG.value
_IF = Opcode.IF.value
_GOTO = Opcode.GOTO.value
_INVOKE = Opcode.INVOKE.value
_INVOKE_CLOSURE = Opcode.INVOKE_CLOSURE.value
_LOAD_CONST = Opcode.LOAD_CONST.value
_LOAD_CONSTI = Opcode.LOAD_CONSTI.value
_SHAPE_OF = Opcode.SHAPE_OF.value
_RESHAPE_TENSOR = Opcode.RESHAPE_TENSOR.value
_KILL_REGISTER = Opcode.KILL_REGISTER.value


class VirtualMachine:
    """Runs the functions of an `Executable`.

    Call a function as `vm["main"](x, w, b=b)`: arguments by position or by parameter name,
    checked against the function's parameters before anything runs. `"main" in vm` tells
    whether `vm["main"]` exists; a name that does not raises `FunctionNotFoundError`.

    Threads: a VM has per-call state of its own (its allocator's blocks, the compiled mode's
    reused tensors), so one VM runs one call at a time. It is cheap to create: make one per
    thread over a shared executable. Every call from Python enters through a lock taken
    without waiting (about 0.3 us a call, `benchmarks/call_overhead.py`): a call from another
    thread while one runs raises `VMError` at once instead of corrupting either. The lock is
    reentrant: a packed function may call back into the same VM from its own thread (a
    recursion through Python), and the inner call runs as an independent call.

    Args:
        ex: The executable.
        exec_mode: "bytecode" (the dispatch loop) or "compiled" (each function as generated
            Python, see `compiled.py`); None takes the executable's `default_exec_mode`.
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
        if exec_mode not in EXEC_MODES:
            raise ValueError(f"exec_mode must be one of {EXEC_MODES}, got {exec_mode!r}")
        self.executable = ex
        self.exec_mode = exec_mode
        self.allocator: Any = make_allocator(allocator) if isinstance(allocator, str) else allocator
        self._funcs = decode_executable(ex)
        self._raw_packed = resolve_primitives(ex)
        self._packed = self._raw_packed
        self._instrument: Callable[..., Any] | None = None
        self._inputs: dict[str, list[Any]] = {}
        self._outputs: dict[str, Any] = {}
        self._saved: dict[str, SavedFunction] = {}
        self._handles: dict[str, BoundFunction] = {}  # vm[name], made once per name
        self._busy = threading.RLock()
        self._owner: int | None = None  # the thread that last entered (for the busy error)
        # `_run(fidx, args)` runs a function: the bytecode loop or the compiled closures.
        self._run: Callable[[int, list[Any]], Any] = self._execute
        if exec_mode == "compiled":
            self._run = CompiledProgram(self, _Fatal).execute

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
        handle = BoundFunction(self.executable.functions[fidx], fidx, self._enter, self._label())
        self._handles[name] = handle
        return handle

    def invoke(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Calls function `name` (or a saved one) with the arguments, by position or by
        parameter name, after the entry checks; returns its result. Same as `vm[name](...)`."""
        handle = self._handles.get(name) if type(name) is str else None
        return (handle or self[name])(*args, **kwargs)

    def _checked(self, name: str, args: tuple, kwargs: dict[str, Any]) -> tuple[int, list]:
        """The index of executable function `name` and its checked arguments."""
        fidx = self.executable.function_index(name)
        fn = self.executable.functions[fidx]
        if kwargs:
            args = bind_arguments(fn, args, kwargs)
        return fidx, check_arguments(fn, args)

    def _enter(self, fidx: int, args: list[Any]) -> Any:
        """Runs function `fidx` on checked values: the entry of every call from Python.

        Takes the VM's reentrant lock without waiting (see the class docstring); a call from
        another thread while one runs raises VMError.
        """
        busy = self._busy
        if not busy.acquire(False):
            raise self._busy_error()
        self._owner = get_ident()
        try:
            return self._run(fidx, args)
        finally:
            busy.release()

    def _busy_error(self) -> VMError:
        owner = self._owner
        names = {t.ident: t.name for t in threading.enumerate()}
        running = f"thread {names.get(owner, owner)!r}" if owner is not None else "another thread"
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
        return self._outputs[name]

    def save_function(self, name: str, new_name: str, /, *args: Any, **kwargs: Any) -> None:
        """Binds checked arguments (by position or parameter name) to function `name` as
        `new_name`; then `vm[new_name]()` runs it."""
        fidx, checked = self._checked(name, args, kwargs)
        fn = self.executable.functions[fidx]
        saved = SavedFunction(new_name, fn, fidx, checked, self._enter, self._label())
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
        destination gets None; the after callback still runs.
        """
        self._instrument = callback
        names = self.executable.primitive_names
        self._packed = (
            self._raw_packed
            if callback is None
            else [instrumented(n, f, callback) for n, f in zip(names, self._raw_packed)]
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

        Raises:
            ValueError: `repeat` < 1 or `warmup` < 0.
        """
        fidx, checked = self._checked(name, args, kwargs)
        saved = self._packed

        def install(table: list[Callable[..., Any]]) -> None:
            self._packed = table

        try:
            return profile_runs(
                name,
                self.executable.primitive_names,
                self._raw_packed,
                install,
                lambda: self._enter(fidx, checked),
                warmup=warmup,
                repeat=repeat,
            )
        finally:
            self._packed = saved

    # -- the loop ---------------------------------------------------------------------------

    def _execute(self, fidx: int, args: list[Any]) -> Any:
        """Runs function `fidx` on VM values `args`; the dispatch loop."""
        funcs = self._funcs
        packed = self._packed
        alloc = self.allocator.alloc
        ndarray = np.ndarray
        empty = np.empty
        int64 = np.int64
        frames: list[tuple] = []
        code, pad, _ = funcs[fidx]
        regs = list(args)
        regs += pad
        pc = 0
        try:
            while True:
                ins = code[pc]
                op = ins[0]
                if op == _INVOKE_PACKED:
                    packed[ins[1]](*ins[2](regs))
                    pc += 1
                elif op == _CALL_PACKED:
                    regs[ins[1]] = packed[ins[2]](*ins[3](regs))
                    pc += 1
                elif op == ALLOC_STATIC:
                    regs[ins[1]] = ins[2]
                    if ins[3] <= 64:  # a tiny tensor: numpy's allocator beats a pool lookup
                        regs[ins[5]] = empty(ins[7], ins[8])
                    else:
                        regs[ins[5]] = ndarray(ins[7], ins[8], alloc(ins[3], ins[4]).buffer, ins[6])
                    pc += 4
                elif op == IF_CONST:
                    regs[ins[2]] = ins[3]
                    test = regs[ins[1]]
                    if type(test) is ndarray:
                        test = test.item()
                    pc = ins[5] if test == ins[4] else ins[6]
                elif op == _KILL_REGISTER:
                    regs[ins[1]] = None
                    pc += 1
                elif op == _MOVE:
                    regs[ins[1]] = regs[ins[2]]
                    pc += 1
                elif op == _LOAD_CONST or op == _LOAD_CONSTI:
                    regs[ins[1]] = ins[2]
                    pc += 1
                elif op == _RET:
                    value = regs[ins[1]]
                    if not frames:
                        return value
                    code, regs, pc, dst, fidx = frames.pop()
                    regs[dst] = value
                elif op == TAIL_INVOKE:
                    fidx = ins[1]
                    code, pad, _ = funcs[fidx]
                    regs = [*ins[2](regs), *pad]
                    pc = 0
                elif op == _INVOKE:
                    frames.append((code, regs, pc + 1, ins[1], fidx))
                    if len(frames) > MAX_CALL_DEPTH:
                        raise VMError(f"call depth exceeds {MAX_CALL_DEPTH} (infinite recursion?)")
                    fidx = ins[2]
                    code, pad, _ = funcs[fidx]
                    regs = [*ins[3](regs), *pad]
                    pc = 0
                elif op == _ALLOC_TENSOR:
                    regs[ins[1]] = ndarray(ins[4], ins[5], regs[ins[2]].buffer, ins[3])
                    pc += 1
                elif op == _ALLOC_STORAGE:
                    regs[ins[1]] = alloc(regs[ins[2]], ins[3])
                    pc += 1
                elif op == _IF:
                    pc = ins[3] if regs[ins[1]] == regs[ins[2]] else ins[4]
                elif op == _GOTO:
                    pc = ins[1]
                elif op == _GET_FIELD:
                    obj = regs[ins[2]]
                    regs[ins[1]] = obj.fields[ins[3]] if type(obj) is ADT else obj[ins[3]]
                    pc += 1
                elif op == _GET_TAG:
                    regs[ins[1]] = regs[ins[2]].tag
                    pc += 1
                elif op == _ALLOC_ADT:
                    fields = tuple(ins[3](regs))
                    regs[ins[1]] = fields if ins[2] == -1 else ADT(ins[2], fields, ins[4])
                    pc += 1
                elif op == _INVOKE_CLOSURE or op == TAIL_INVOKE_CLOSURE:
                    tail = op == TAIL_INVOKE_CLOSURE
                    closure = regs[ins[1] if tail else ins[2]]
                    if type(closure) is not Closure:
                        raise VMError(
                            f"invoke_closure on a {type(closure).__name__}, not a closure"
                        )
                    new_code, pad, nparams = funcs[closure.func_index]
                    new_regs = [*closure.free_vars, *ins[-1](regs)]
                    if len(new_regs) != nparams:
                        nargs = len(new_regs) - len(closure.free_vars)
                        raise VMError(
                            f"closure @{closure.name} takes {nparams} values, got "
                            f"{len(closure.free_vars)} free vars + {nargs} args"
                        )
                    new_regs += pad
                    if not tail:
                        frames.append((code, regs, pc + 1, ins[1], fidx))
                        if len(frames) > MAX_CALL_DEPTH:
                            raise VMError(f"call depth exceeds {MAX_CALL_DEPTH}")
                    fidx, code, regs, pc = closure.func_index, new_code, new_regs, 0
                elif op == _ALLOC_CLOSURE:
                    free = tuple(ins[3](regs))
                    regs[ins[1]] = Closure(ins[2], free, ins[4])
                    pc += 1
                elif op == _ALLOC_TENSOR_REG:
                    shape = tuple(regs[ins[4]].tolist())
                    regs[ins[1]] = ndarray(shape, ins[5], regs[ins[2]].buffer, ins[3])
                    pc += 1
                elif op == _SHAPE_OF:
                    regs[ins[1]] = np.array(regs[ins[2]].shape, dtype=int64)
                    pc += 1
                elif op == _RESHAPE_TENSOR:
                    regs[ins[1]] = regs[ins[2]].reshape(tuple(regs[ins[3]].tolist()))
                    pc += 1
                elif op == _FATAL:
                    raise _Fatal(ins[1])
                else:  # unreachable for a validated executable
                    raise VMError(f"unknown decoded opcode {op}")
        except Exception as e:
            stack = [(f[4], f[2] - 1) for f in frames] + [(fidx, pc)]
            # Drop the registers now: the traceback keeps this frame's locals alive.
            frames.clear()
            regs = code = None  # noqa: F841
            raise self._vm_error(e, stack) from (None if isinstance(e, _Fatal) else e)

    def _vm_error(self, error: Exception, stack: list[tuple[int, int]]) -> VMError:
        ex = self.executable
        lines = []
        full_stack = stack
        if len(stack) > 20:
            omitted = len(stack) - 20
            stack = stack[:10] + [(-1, omitted)] + stack[-10:]
        for fidx, pc in stack:
            if fidx < 0:
                lines.append(f"  ... {pc} frames omitted ...")
                continue
            fn = ex.functions[fidx]
            lines.append(
                f"  in @{fn.name} pc={pc}: {describe_instruction(ex, fn.instructions[pc])}"
            )
        if isinstance(error, _Fatal):
            head = f"fatal: {error.args[0]}"
        else:
            fn = ex.functions[stack[-1][0]]
            what = describe_instruction(ex, fn.instructions[stack[-1][1]])
            head = f"{what} failed: {type(error).__name__}: {error}"
        tb, kernel_line = error.__traceback__, None
        while tb is not None:
            filename = tb.tb_frame.f_code.co_filename
            if filename.startswith(KERNEL_FILE_PREFIX):
                import linecache

                text = linecache.getline(filename, tb.tb_lineno).strip()
                kernel_line = f"  {filename}, line {tb.tb_lineno}: {text}"
            tb = tb.tb_next
        parts = [head, "VM stack (most recent call last):", *lines]
        if kernel_line:
            parts.append(kernel_line)
        err = VMError("\n".join(parts))
        # For the compiled mode, which nests bytecode runs: the frames and the original error.
        err._vm_stack, err._vm_cause = full_stack, error  # type: ignore[attr-defined]
        return err

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


class _Fatal(Exception):
    """Raised by FATAL inside the loop; becomes a VMError with the VM stack."""
