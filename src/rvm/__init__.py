"""rvm: tensor programs compiled to register bytecode, run on a VM, kernels through LLVM.

import rvm
from rvm import op
from rvm.script import T, module, func

ex = rvm.compile(Model)                  # an Executable
vm = rvm.VirtualMachine(ex)              # exec_mode="bytecode" | "compiled"
y = vm["main"](x, w, b)
ref = rvm.interpret(Model, "main", x, w, b)
"""

from rvm import op, script
from rvm.codegen import compile
from rvm.errors import (
    DTypeError,
    ExecutableFormatError,
    IRError,
    JITError,
    RVMError,
    ScriptError,
    ShapeError,
    VMError,
)
from rvm.interp import interpret
from rvm.ir import IRModule, const
from rvm.runtime import (
    ADT,
    SKIP_RUN,
    Closure,
    Executable,
    VirtualMachine,
    get_global_func,
    load_executable,
    register_func,
)

__version__ = "0.1.0"

__all__ = [
    "ADT",
    "Closure",
    "DTypeError",
    "Executable",
    "ExecutableFormatError",
    "IRError",
    "IRModule",
    "JITError",
    "RVMError",
    "SKIP_RUN",
    "ScriptError",
    "ShapeError",
    "VMError",
    "VirtualMachine",
    "compile",
    "const",
    "get_global_func",
    "interpret",
    "load_executable",
    "op",
    "register_func",
    "script",
]
