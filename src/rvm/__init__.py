"""rvm: tensor programs compiled to register bytecode, run on a VM, kernels through LLVM.

    import rvm
    from rvm import op
    from rvm.script import T, module, func

    @module
    class Model:
        @func
        def main(x: T[("n", 4), "float32"], w: T[(4, 2), "float32"]):
            return op.relu(op.matmul(x, w))

    ex = rvm.compile(Model)                  # an Executable (kernels="jit" | "numpy")
    vm = rvm.VirtualMachine(ex)              # exec_mode="bytecode" | "compiled" | "native"
    y = vm["main"](x, w)                     # numpy in, numpy out
    ref = rvm.interpret(Model, "main", x, w) # the reference interpreter

What users call lives here: `compile`, `compile_onnx` (through the `compile_cache`),
`interpret`, `const`, `VirtualMachine`, `load_executable`, the `op` and `script` packages, the
errors, and `set_num_threads` / `get_num_threads` (the ``RVM_NUM_THREADS`` environment
variable does the same).
`docs/architecture.md` in the repository explains how the pieces fit. rvm logs through the
standard `logging` module under the names `rvm.transform` (pass effects), `rvm.codegen` and
`rvm.jit` (kernel builds and cache).
"""

from __future__ import annotations

import importlib as _importlib
from typing import Any as _Any

from rvm.errors import (
    DTypeError,
    ExecutableFormatError,
    FunctionNotFoundError,
    IRError,
    JITError,
    OnnxCheckerWarning,
    OnnxImportError,
    RVMError,
    ScriptError,
    ShapeError,
    TorchImportError,
    UntrustedExecutableError,
    VMError,
)
from rvm.kernels.threads import get_num_threads, set_num_threads
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
from rvm.runtime.loading import VERSION as __version__
from rvm.runtime.loading import trust

# The compiler side loads on first use, so a deployment that only loads and runs saved
# executables (`rvm.load_executable`, `rvm.VirtualMachine`) never imports it.
_LAZY = {
    "compile": ("rvm.codegen", "compile"),
    "compile_onnx": ("rvm.compile_cache", "compile_onnx"),
    "compile_cache": ("rvm.compile_cache", None),
    "interpret": ("rvm.interp", "interpret"),
    "from_onnx": ("rvm.frontend.onnx", "from_onnx"),
    "from_torch": ("rvm.frontend.torch", "from_torch"),
    "quantize": ("rvm.quantization", "quantize"),
    "IRModule": ("rvm.ir", "IRModule"),
    "const": ("rvm.ir", "const"),
    "call_packed": ("rvm.op", "call_packed"),
    "call_dps_packed": ("rvm.op", "call_dps_packed"),
    "debug_print": ("rvm.op", "debug_print"),
    "op": ("rvm.op", None),
    "script": ("rvm.script", None),
    "ir": ("rvm.ir", None),
    "transform": ("rvm.transform", None),
    "testing": ("rvm.testing", None),
    "jit": ("rvm.jit", None),
    "generation": ("rvm.generation", None),
}


def __getattr__(name: str) -> _Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'rvm' has no attribute {name!r}") from None
    value = _importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # What users call, not this module's own imports (`annotations`, `importlib`, ...).
    return sorted(__all__)


__all__ = [
    "ADT",
    "Closure",
    "DTypeError",
    "Executable",
    "ExecutableFormatError",
    "FunctionNotFoundError",
    "IRError",
    "IRModule",
    "JITError",
    "OnnxCheckerWarning",
    "OnnxImportError",
    "RVMError",
    "SKIP_RUN",
    "ScriptError",
    "ShapeError",
    "TorchImportError",
    "VMError",
    "VirtualMachine",
    "__version__",
    "call_dps_packed",
    "call_packed",
    "compile",
    "compile_onnx",
    "const",
    "debug_print",
    "from_onnx",
    "from_torch",
    "generation",
    "get_global_func",
    "get_num_threads",
    "interpret",
    "quantize",
    "ir",
    "load_executable",
    "trust",
    "UntrustedExecutableError",
    "op",
    "register_func",
    "script",
    "set_num_threads",
]
