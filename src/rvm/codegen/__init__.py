"""IRModule → Executable: the VM codegen and `rvm.compile`."""

from rvm.codegen.compile import compile
from rvm.codegen.vm_codegen import vm_codegen

__all__ = ["compile", "vm_codegen"]
