"""rvm: tensor programs compiled to register bytecode, run on a VM, kernels through LLVM."""

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
from rvm.ir import IRModule, const

__version__ = "0.1.0"
