"""The rvm runtime: executables, the virtual machine, and what it needs at run time.

It imports nothing from the compiler (`rvm.ir`, `rvm.transform`, `rvm.codegen`, ...), so a
saved executable loads and runs without it.
"""

from __future__ import annotations

from rvm.runtime import builtins as _builtins  # noqa: F401  (registers vm.builtin.*)
from rvm.runtime import methods as _methods  # noqa: F401  (binds Executable's methods)
from rvm.runtime.builder import ExecBuilder, FunctionBuilder, Label
from rvm.runtime.bytecode import OPCODE_INFO, Opcode, OpInfo
from rvm.runtime.entry import BoundFunction
from rvm.runtime.executable import (
    ADTInfo,
    Executable,
    KernelRecord,
    ParamSpec,
    VMFunction,
)
from rvm.runtime.memory import NaiveAllocator, PooledAllocator, Storage
from rvm.runtime.modes.base import ExecContext, ExecMode, VMStackError
from rvm.runtime.objects import ADT, Closure
from rvm.runtime.profiler import SKIP_RUN, BenchmarkResult, ProfileReport
from rvm.runtime.registry import get_global_func, list_global_func_names, register_func
from rvm.runtime.serialize import load_executable
from rvm.runtime.vm import VirtualMachine

__all__ = [
    "ADT",
    "ADTInfo",
    "BenchmarkResult",
    "BoundFunction",
    "Closure",
    "ExecBuilder",
    "ExecContext",
    "ExecMode",
    "Executable",
    "FunctionBuilder",
    "KernelRecord",
    "Label",
    "NaiveAllocator",
    "OPCODE_INFO",
    "OpInfo",
    "Opcode",
    "ParamSpec",
    "PooledAllocator",
    "ProfileReport",
    "SKIP_RUN",
    "Storage",
    "VMFunction",
    "VMStackError",
    "VirtualMachine",
    "get_global_func",
    "list_global_func_names",
    "load_executable",
    "register_func",
]
