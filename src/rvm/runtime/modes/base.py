"""The interface between the VM and its exec modes.

A `VirtualMachine` owns the calling API (argument checks, the thread guard, saved functions,
instrumentation); an exec mode only runs functions. What a mode may see of its VM is an
`ExecContext`: the executable, its decoded functions, the current table of packed functions
(swapped for wrapped ones by `set_instrument` and `profile`), the allocator, the bytecode loop
(for work a mode hands back, such as calls deeper than it nests) and how failures are
reported. A mode is any object with ``run(fidx, args)`` (`ExecMode`), built from the context
by the factory the VM's mode table names (see `rvm.runtime.vm.EXEC_MODE_FACTORIES`). A mode may
also offer ``fast_call(fidx, slow, check)``: the VM's handle of a function (the native
mode's), a callable that runs a call from Python on its unchecked positional arguments when it
can check them more cheaply than the VM (every entry check, the ranges of bounded symbolic dims
included), holding the VM's thread guard (`ExecContext.guard`) as the VM's own entry does, and
checks its result with ``check(result, args)`` (None: no check); else it hands the call to
``slow(*args, **kwargs)``, where the VM checks and runs it as usual. A mode with a ``guard``
attribute of `EntryGuard`'s API has the VM take that guard (the native mode's, which its
native entries claim themselves: `native_guard`).

Failures: a mode raises `VMStackError` (a `VMError`) made by `ExecContext.error` from the
original exception and the VM stack as ``(function index, pc)`` pairs, outermost first, so
every mode reports a failure in the same words; `Fatal` is what the FATAL instruction raises.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable, Sequence
from threading import get_ident
from typing import TYPE_CHECKING, Any, Protocol

from rvm.errors import ShapeError, VMError, is_shape_error, kind_of
from rvm.runtime.kernels import KERNEL_FILE_PREFIX
from rvm.runtime.memory import NAMED_ALLOCATORS
from rvm.runtime.text import describe_instruction

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable
    from rvm.runtime.modes.decode import DecodedFunction

__all__ = ["EntryGuard", "ExecContext", "ExecMode", "Fatal", "VMStackError", "vm_error"]

# A VM stack longer than this is shown as its first and last half.
STACK_SHOWN = 20


class Fatal(Exception):
    """Raised by FATAL; becomes a `VMStackError` reading ``fatal: <message>``."""


class VMStackError(VMError):
    """A failure inside VM code, with the VM stack it happened in.

    Attributes:
        stack: ``(function index, pc)`` per frame, outermost first (all of them; the message
            shows at most `STACK_SHOWN`).
        cause: The original exception (a kernel's, a builtin's, or `Fatal`).
    """

    def __init__(self, message: str, stack: list[tuple[int, int]], cause: BaseException) -> None:
        super().__init__(message)
        self.stack = stack
        self.cause = cause


class VMShapeError(VMStackError, ShapeError):
    """A `VMStackError` whose cause is a `rvm.ShapeError`: a shape computed at run time (a
    reshape to a computed shape, a data-dependent size) that contradicts the shapes the
    program promised. ``except rvm.ShapeError`` catches it, as it catches a bad argument."""


class ExecMode(Protocol):
    """An exec mode: runs function ``fidx`` of the context's executable on checked values."""

    def run(self, fidx: int, args: list[Any]) -> Any:
        """The function's result; failures raise `VMStackError` (see `ExecContext.error`)."""
        ...


class EntryGuard:
    """A VM's thread guard: a call from Python takes it without waiting, a call from another
    thread meanwhile gets the busy error naming ``owner``, and a call from the holding thread
    (a Python function the VM calls calling the VM again) runs. The VM's entry
    (`enter` / `leave`) and a mode's ``fast_call`` take it alike.

    No lock: ``free`` holds one token while nobody holds the guard, and taking it is
    ``free.pop()`` (IndexError: held), giving it back ``free.append(True)``, each one atomic
    step of the list (an ``RLock.acquire(False)`` costs a call from Python 0.1-0.2 us, a
    native call's whole entry). ``owner`` is the holder's thread, set after taking the token
    and cleared before giving it back, so only the holding thread finds itself there."""

    __slots__ = ("free", "owner")

    def __init__(self) -> None:
        self.free: list[bool] = [True]
        self.owner: int | None = None  # the holding thread, None between calls

    def enter(self) -> bool | None:
        """Takes the guard for this thread: True when this call took it (`leave` gives it
        back), False when this thread holds it already (a reentrant call), None when another
        thread holds it."""
        me = get_ident()
        if self.owner == me:
            return False
        try:
            self.free.pop()
        except IndexError:
            return None
        self.owner = me
        return True

    def leave(self) -> None:
        """Gives back the guard `enter` took."""
        self.owner = None
        self.free.append(True)

    @property
    def held(self) -> bool:
        """Whether a thread holds the guard."""
        return not self.free

    def set_plain(self, plain: bool) -> None:
        """Whether native code may run under this guard (`ExecContext.plain`): nothing runs
        native under this one (the native mode's is `native_guard.NativeGuard`)."""


class ExecContext:
    """What an exec mode sees of its VM (one per VM; the VM keeps it current).

    Attributes:
        executable: The executable the VM runs.
        functions: Its functions decoded for the bytecode loop (`rvm.runtime.modes.decode`).
        raw_packed: A callable per primitive name, in index order, as resolved.
        packed: The table the VM calls now: `raw_packed`, or wrapped callables while
            instrumented or profiled. A mode reads it at each run (its identity changes).
        allocator: The VM's allocator now (`VirtualMachine.allocator` may be replaced between
            calls; the VM sets it here).
        plain: Whether the VM calls `raw_packed` with an allocator of its own kind
            (`rvm.runtime.memory.NAMED_ALLOCATORS`): what native code, which calls kernels
            directly and allocates Numba's memory, runs under. Kept current as `packed` and
            `allocator` are set, so a fast path reads one attribute (two and their tests cost
            the MLP's native call at batch 1 ~5%, its caches cold after its product).
        guard: The VM's thread guard (`EntryGuard`), for a mode's ``fast_call``; a mode may
            have its own with the same API as its ``guard`` attribute, which the VM makes the
            context's, kept told of `plain` (the native mode's `native_guard.NativeGuard`,
            which its native entries claim themselves).
        fatal: The exception class FATAL raises.
        run_bytecode: ``run_bytecode(fidx, args)`` runs a function in the bytecode loop.
        pool_call: The thread pool's `call`, that each run from Python goes through
            (`rvm.kernels.threads.pool_call`: it wakes sleeping helpers when that helps), or
            None.
    """

    fatal = Fatal
    plain = False

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in ("packed", "allocator", "raw_packed", "guard"):
            own = type(getattr(self, "allocator", None)) in _OWN_ALLOCATORS
            raw = getattr(self, "raw_packed", None)
            plain = own and getattr(self, "packed", None) is raw
            object.__setattr__(self, "plain", plain)
            guard = getattr(self, "guard", None)
            if guard is not None:
                guard.set_plain(plain)

    def __init__(
        self,
        executable: Executable,
        functions: list[DecodedFunction],
        packed: list[Callable[..., Any]],
        allocator: Any,
    ) -> None:
        self.executable = executable
        self.functions = functions
        self.raw_packed = packed
        self.packed = packed
        self.allocator = allocator
        self.guard = EntryGuard()
        self.run_bytecode: Callable[[int, list[Any]], Any] = _unbound
        self.pool_call: Callable[[list[bool], int, Callable[..., Any], tuple], Any] | None = None

    def error(self, error: BaseException, stack: Sequence[tuple[int, int]]) -> VMStackError:
        """The error every mode raises for `error` at VM stack `stack` (see `vm_error`)."""
        return vm_error(self.executable, error, list(stack))


_OWN_ALLOCATORS = tuple(NAMED_ALLOCATORS.values())


def _unbound(fidx: int, args: list[Any]) -> Any:
    raise VMError("this exec context has no bytecode loop bound")


def vm_error(ex: Executable, error: BaseException, stack: list[tuple[int, int]]) -> VMStackError:
    """A `VMStackError` naming the failed instruction, the VM stack and, when a numpy kernel
    failed, its generated line; `stack` is ``(function index, pc)`` outermost first."""
    shown: list[tuple[int, int]] = stack
    if len(stack) > STACK_SHOWN:
        half = STACK_SHOWN // 2
        shown = stack[:half] + [(-1, len(stack) - STACK_SHOWN)] + stack[-half:]
    lines = []
    for fidx, pc in shown:
        if fidx < 0:
            lines.append(f"  ... {pc} frames omitted ...")
            continue
        fn = ex.functions[fidx]
        lines.append(f"  in @{fn.name} pc={pc}: {describe_instruction(ex, fn.instructions[pc])}")
    if isinstance(error, Fatal):
        head = f"fatal: {error.args[0]}"
    else:
        fn = ex.functions[stack[-1][0]]
        what = describe_instruction(ex, fn.instructions[stack[-1][1]])
        kind = kind_of(error)
        head = f"{what} failed: {kind}: {error}"
    parts = [head, "VM stack (most recent call last):", *lines]
    kernel_line = _kernel_line(error)
    if kernel_line:
        parts.append(kernel_line)
    cls = VMShapeError if is_shape_error(error) else VMStackError
    return cls("\n".join(parts), stack, error)


def _kernel_line(error: BaseException) -> str | None:
    """The last line of a numpy kernel's generated source in `error`'s traceback."""
    tb, found = error.__traceback__, None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(KERNEL_FILE_PREFIX):
            text = linecache.getline(filename, tb.tb_lineno).strip()
            found = f"  {filename}, line {tb.tb_lineno}: {text}"
        tb = tb.tb_next
    return found
