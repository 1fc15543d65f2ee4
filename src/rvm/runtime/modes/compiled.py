"""The compiled exec mode: every VM function as a generated Python closure.

`compiled_codegen.py` turns each function's bytecode into Python source (registers as locals,
instructions as statements, structured if/else and loops). This module compiles those sources
once per executable (the code objects are cached on it and shared by its VMs), registers each
in `linecache` as `<rvm-compiled @name #N>` so tracebacks show the generated line, and binds
them per VM into a namespace holding the packed functions, constants, dtypes, the allocator and
the other functions, so a call between VM functions is a direct Python call.

Observations stay those of the bytecode loop:

- Instrumented and profiled runs use the same code objects bound in a second namespace whose
  packed functions are the wrapped ones (`VirtualMachine.set_instrument`, `profile`), so the
  plain variant pays nothing for them.
- Errors: the traceback's generated frames are mapped back to `(function, pc)` through each
  source's line table and reported by `ExecContext.error`, giving the same VM stack
  text as the bytecode loop (`in @main pc=7: invoke_packed fused_add_exp`); frames of tail
  calls are dropped, as the bytecode loop reuses their frames.
- Depth: compiled functions recurse in Python, one frame per VM call, counted by the hidden
  `_d` argument. A call deeper than `max_depth` (150 below the default recursion limit) runs
  in the bytecode loop (`_deep`), which has its own frame stack, so non-tail recursion of any
  depth works and no process-wide setting (`sys.setrecursionlimit`) is ever changed. Self tail
  calls are loops and never deepen; other tail calls deepen until the bytecode loop takes over.
- Memory: tensors of at most 64 bytes are plain numpy arrays, as in the bytecode loop. Those the
  memory plan puts in one block are that block's one array (the plan proved each dead before
  the next is made, so they share the block's memory in the bytecode loop as well), and in a
  loop each such allocation takes the array of two iterations before when only its slot still
  refers to it (`sys.getrefcount`, as `PooledAllocator` checks its blocks), so a held value is
  never overwritten. Larger tensors view blocks of the VM's allocator exactly as the bytecode
  loop's do.
"""

from __future__ import annotations

import itertools
import linecache
import sys
from collections.abc import Callable
from types import CodeType
from typing import TYPE_CHECKING, Any

from rvm.dtypes import numpy_dtype
from rvm.errors import VMError
from rvm.runtime.bytecode import OPCODE_INFO, Opcode
from rvm.runtime.derived import Derived
from rvm.runtime.memory import alloc_view_of
from rvm.runtime.modes.base import ExecContext, VMStackError
from rvm.runtime.modes.compiled_codegen import (
    FunctionSource,
    Names,
    generate_source,
    ring_probe_source,
)
from rvm.runtime.objects import Closure
from rvm.runtime.semantics import RUNTIME_NAMES, closure_error, consti

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable

__all__ = ["CompiledMode", "compiled_functions", "COMPILED_FILE_PREFIX"]

COMPILED_FILE_PREFIX = "<rvm-compiled "
_FUNCTIONS: Derived[Any] = Derived("the compiled mode's generated functions")
_CONSTANTS: Derived[Any] = Derived("the compiled mode's constants namespace")
_serial = itertools.count()


def _free_refcount() -> int:
    """What `sys.getrefcount` reports, in generated code, for a ring slot nothing else holds
    (the interpreter's own temporary references vary between Python versions).

    At most 2 (the slot and the call's argument): a tracer that snapshots the probe's locals
    would add one, and a baseline too high would let a held tensor be reused; one too low only
    stops reuse.
    """
    ns: dict[str, Any] = {"_rc": sys.getrefcount, "_new": object}
    exec(compile(ring_probe_source(), f"{COMPILED_FILE_PREFIX}probe>", "exec"), ns)
    return min(ns["_probe"](), 2)


_FREE = _free_refcount()


class CompiledFunction:
    """A generated function: its source, line table and compiled code object."""

    __slots__ = (
        "index",
        "name",
        "pyname",
        "source",
        "filename",
        "line_pcs",
        "tails",
        "code",
        "structured",
    )

    def __init__(self, ex: Executable, index: int, gen: FunctionSource) -> None:
        self.index = index
        self.name = ex.functions[index].name
        self.pyname = gen.pyname
        self.source = gen.source
        self.line_pcs = gen.line_pcs
        self.tails = gen.tails
        self.structured = gen.structured
        self.filename = f"{COMPILED_FILE_PREFIX}@{self.name} #{next(_serial)}>"
        linecache.cache[self.filename] = (
            len(gen.source),
            None,
            gen.source.splitlines(True),
            self.filename,
        )
        self.code: CodeType = compile(gen.source, self.filename, "exec")


def compiled_functions(ex: Executable) -> tuple[Names, list[CompiledFunction]]:
    """The generated functions of `ex`, built once and cached on it."""

    def build() -> tuple[Names, list[CompiledFunction]]:
        names = Names(ex)
        return names, [
            CompiledFunction(ex, i, generate_source(ex, i, names)) for i in range(len(ex.functions))
        ]

    return _FUNCTIONS.get(ex, build)


class _Nested(Exception):
    """A failure inside the bytecode loop `_deep` ran: its VM stack and original error."""

    def __init__(self, stack: list[tuple[int, int]], cause: BaseException) -> None:
        super().__init__("nested VM failure")
        self.stack = stack
        self.cause = cause


def _constants(ex: Executable, names: Names) -> dict[str, Any]:
    """Constants, immediates and dtypes the generated code names, built once per executable."""
    ns: dict[str, Any] = {}
    for i, c in enumerate(ex.constants):
        ns[f"c{i}"] = c
    for fn in ex.functions:
        for ins in fn.instructions:
            if ins[0] == Opcode.LOAD_CONSTI:
                ns.setdefault(names.immediate(ins[2]), consti(ins[2]))
            for kind, value in zip(OPCODE_INFO[Opcode(ins[0])].kinds, ins[1:]):
                if kind == "dtype":
                    ns.setdefault(names.dtype(value), numpy_dtype(value))
    return ns


class CompiledMode:
    """The compiled exec mode: the generated functions of one VM, bound to its packed
    functions and allocator (an `ExecMode`).

    Args:
        context: The VM's context; its current `packed` table and `allocator` are bound again
            whenever either changes.
    """

    def __init__(self, context: ExecContext) -> None:
        self.context = context
        self.fatal = context.fatal
        ex = context.executable
        self.names = compiled_functions(ex)[0]
        self.by_file: dict[str, CompiledFunction] = {}  # of every variant bound
        self.constants = _CONSTANTS.get(ex, lambda: _constants(ex, self.names))
        self.nparams = [len(f.params) for f in ex.functions]
        self.max_depth = min(150, max(20, (sys.getrecursionlimit() - 300) // 3))
        self._allocator: Any = None
        self._alloc_view: Callable[..., Any] | None = None
        self._variants: dict[int, tuple[list, list[Callable[..., Any]]]] = {}
        self._packed: list = []
        self._funcs: list[Callable[..., Any]] = []
        self._select()

    def _select(self) -> None:
        """Binds the variant for the VM's current packed table and allocator."""
        context = self.context
        allocator = context.allocator
        if allocator is not self._allocator:
            self._variants.clear()
            self._allocator = allocator
            self._alloc_view = alloc_view_of(allocator)
        packed = context.packed
        if id(packed) not in self._variants:
            if len(self._variants) >= 2:  # keep the plain variant and one other
                for key in [k for k in self._variants if k != id(context.raw_packed)]:
                    del self._variants[key]
            self._variants[id(packed)] = (packed, self._bind(packed))
        self._packed, self._funcs = self._variants[id(packed)]

    def _bind(self, packed: list[Callable[..., Any]]) -> list[Callable[..., Any]]:
        """Executes every generated function's code in a new namespace over `packed`."""
        _, functions = compiled_functions(self.context.executable)
        self.by_file.update((f.filename, f) for f in functions)
        ns: dict[str, Any] = dict(self.constants)
        ns.update(zip(self.names.packed, packed))
        funcs: list[Callable[..., Any]] = []
        ns.update(RUNTIME_NAMES)
        ns.update(
            __name__="rvm_compiled",
            _alloc=self._allocator.alloc,
            _alloc_view=self._alloc_view,
            _Fatal=self.fatal,
            _MAX_DEPTH=self.max_depth,
            _call_closure=self._closure_caller(funcs),
            _deep=self._deep,
            _rc=sys.getrefcount,
            _FREE=_FREE,
        )
        for f in functions:
            exec(f.code, ns)
        funcs.extend(ns[f.pyname] for f in functions)
        return funcs

    def _closure_caller(self, funcs: list[Callable[..., Any]]) -> Callable[..., Any]:
        nparams = self.nparams

        def call_closure(closure: Any, args: tuple, depth: int) -> Any:
            """INVOKE_CLOSURE: the closure's function gets its free vars first, then args."""
            if type(closure) is not Closure:
                raise closure_error(closure, 0, 0)
            free = closure.free_vars
            want = nparams[closure.func_index]
            if len(free) + len(args) != want:
                raise closure_error(closure, len(args), want)
            return funcs[closure.func_index](*free, *args, depth + 1)

        return call_closure

    def _deep(self, fidx: int, args: tuple) -> Any:
        """Runs a call past the compiled depth limit in the bytecode loop."""
        try:
            return self.context.run_bytecode(fidx, list(args))
        except VMStackError as e:
            raise _Nested(e.stack, e.cause) from None

    # -- running -------------------------------------------------------------------------

    def run(self, fidx: int, args: list[Any]) -> Any:
        """Runs function `fidx` on VM values `args`."""
        context = self.context
        if context.packed is not self._packed or context.allocator is not self._allocator:
            self._select()
        try:
            return self._funcs[fidx](*args, 0)
        except Exception as e:
            error, cause = self._error(e)
            raise error from (None if isinstance(cause, self.fatal) else cause)

    def _error(self, e: Exception) -> tuple[VMError, BaseException]:
        """The VMError the bytecode loop would raise for `e`, and its cause."""
        frames: list[tuple[int, int, bool]] = []
        tb = e.__traceback__
        while tb is not None:
            f = self.by_file.get(tb.tb_frame.f_code.co_filename)
            if f is not None and 0 < tb.tb_lineno <= len(f.line_pcs):
                pc = f.line_pcs[tb.tb_lineno - 1]
                if pc is not None:
                    frames.append((f.index, pc, pc in f.tails))
            tb = tb.tb_next
        nested: list[tuple[int, int]] = []
        cause: BaseException = e
        if isinstance(e, _Nested):
            nested, cause = e.stack, e.cause
        last = len(frames) - 1 if not nested else -1
        stack = [(fi, pc) for i, (fi, pc, tail) in enumerate(frames) if not tail or i == last]
        stack += nested
        if not stack:  # failed before any instruction ran: not expected, but be honest
            return VMError(f"compiled code failed: {type(cause).__name__}: {cause}"), cause
        error = self.context.error(cause if isinstance(cause, Exception) else e, stack)
        self._clear_frames(e)
        return error, cause

    def _clear_frames(self, e: BaseException) -> None:
        """Drops the registers of finished generated frames, which the traceback keeps alive."""
        tb = e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename in self.by_file:
                _clear_one(tb)
            tb = tb.tb_next


def _clear_one(tb: Any) -> None:
    try:
        tb.tb_frame.clear()
    except RuntimeError:  # still executing
        pass
