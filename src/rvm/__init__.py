"""rvm: tensor programs compiled to register bytecode, run on a VM, kernels through LLVM.

import rvm
from rvm import op
from rvm.script import T, module, func

ex = rvm.compile(Model)                  # an Executable
vm = rvm.VirtualMachine(ex)              # exec_mode="bytecode" | "compiled"
y = vm["main"](x, w, b)
ref = rvm.interpret(Model, "main", x, w, b)
"""

from __future__ import annotations

import importlib
from typing import Any

from rvm.errors import (
    DTypeError,
    ExecutableFormatError,
    IRError,
    JITError,
    OnnxImportError,
    RVMError,
    ScriptError,
    ShapeError,
    VMError,
)
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

# The compiler side loads on first use, so a deployment that only loads and runs saved
# executables (`rvm.load_executable`, `rvm.VirtualMachine`) never imports it.
_LAZY = {
    "compile": ("rvm.codegen", "compile"),
    "interpret": ("rvm.interp", "interpret"),
    "from_onnx": ("rvm.frontend.onnx", "from_onnx"),
    "IRModule": ("rvm.ir", "IRModule"),
    "const": ("rvm.ir", "const"),
    "op": ("rvm.op", None),
    "script": ("rvm.script", None),
    "ir": ("rvm.ir", None),
    "transform": ("rvm.transform", None),
    "testing": ("rvm.testing", None),
    "jit": ("rvm.jit", None),
}


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'rvm' has no attribute {name!r}") from None
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


__all__ = [
    "ADT",
    "Closure",
    "DTypeError",
    "Executable",
    "ExecutableFormatError",
    "IRError",
    "IRModule",
    "JITError",
    "OnnxImportError",
    "RVMError",
    "SKIP_RUN",
    "ScriptError",
    "ShapeError",
    "VMError",
    "VirtualMachine",
    "compile",
    "const",
    "from_onnx",
    "get_global_func",
    "interpret",
    "load_executable",
    "op",
    "register_func",
    "script",
]
