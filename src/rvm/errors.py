"""The one exception tree of rvm.

Every error rvm raises on purpose derives from `RVMError`, so callers can catch rvm's errors as
a group. Shape and dtype problems with user input also derive from the matching builtin
exception (`ValueError`, `TypeError`) so ordinary Python handlers keep working.
"""

from __future__ import annotations


class RVMError(Exception):
    """Base class of every error rvm raises on purpose."""


class IRError(RVMError, ValueError):
    """A malformed IR: ill-typed expression, unbound variable, incompatible shapes."""


class ShapeError(RVMError, ValueError):
    """A tensor's shape disagrees with what a function or operator expects."""


class DTypeError(RVMError, TypeError):
    """A tensor's dtype disagrees with what a function or operator expects."""


class ScriptError(IRError):
    """rvm script source that cannot be parsed; the message shows the line and a caret."""


class OnnxImportError(IRError):
    """An ONNX model rvm cannot import: unreadable, invalid, or using unsupported ops."""


class VMError(RVMError):
    """A failure while the virtual machine runs; the message carries the VM stack."""


class JITError(RVMError):
    """A kernel that could not be compiled to native code."""


class ExecutableFormatError(RVMError, ValueError):
    """A saved executable that is truncated, corrupted or of an unsupported version."""
