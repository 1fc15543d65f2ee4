"""The one exception tree of rvm.

Every error rvm raises on purpose derives from `RVMError`, so callers can catch rvm's errors as
a group. Shape and dtype problems with user input also derive from the matching builtin
exception (`ValueError`, `TypeError`), and a missing function name from `KeyError`, so
ordinary Python handlers keep working.
"""

from __future__ import annotations

from collections.abc import Iterable


class RVMError(Exception):
    """Base class of every error rvm raises on purpose."""


class IRError(RVMError, ValueError):
    """A malformed IR: ill-typed expression, unbound variable, incompatible shapes."""


class ShapeError(RVMError, ValueError):
    """A tensor's shape disagrees with what a function or operator expects."""


def is_shape_error(err: BaseException) -> bool:
    """Whether ``err`` is a `ShapeError`, or a reference kernel's ValueError marked as one
    (``rvm_kind = "shape"``: `rvm.kernels.reference` imports nothing of rvm)."""
    return isinstance(err, ShapeError) or getattr(err, "rvm_kind", None) == "shape"


class DTypeError(RVMError, TypeError):
    """A tensor's dtype disagrees with what a function or operator expects."""


class ScriptError(IRError):
    """rvm script source that cannot be parsed; the message shows the line and a caret."""


class OnnxImportError(IRError):
    """An ONNX model rvm cannot import: unreadable, invalid, or using unsupported ops."""


class OnnxCheckerWarning(UserWarning):
    """An ``onnx.checker`` finding ONNX Runtime tolerates: `rvm.from_onnx` imports the model
    anyway (`rvm.frontend.onnx.loader.TOLERATED` lists those findings)."""


class TorchImportError(IRError):
    """A PyTorch program rvm cannot import: it fails to export, uses unsupported ATen
    overloads (all of them listed), or mutates its buffers or inputs.

    ``overloads`` maps each ATen overload at fault (``"aten.i0.default"``) to the names of
    its nodes, when the error is about particular nodes; else it is empty.
    """

    def __init__(self, message: str, overloads: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.overloads: dict[str, list[str]] = dict(overloads or {})


class VMError(RVMError):
    """A failure while the virtual machine runs; the message carries the VM stack."""


class FunctionNotFoundError(RVMError, KeyError):
    """A function name that the executable, the VM or the module does not have.

    The message names the functions that exist: ``no function 'nope' in the executable; it
    has: main, helper``. Raised by `rvm.interpret`, `VirtualMachine` (``vm["nope"]``,
    ``invoke``, ``set_input``, ...) and `Executable.function_index`. It is also a `KeyError`,
    so code catching ``KeyError`` keeps working.
    """

    def __str__(self) -> str:
        # KeyError's str() is the repr of its key; this error's argument is a message.
        return Exception.__str__(self)

    @classmethod
    def missing(cls, name: object, where: str, known: Iterable[str]) -> FunctionNotFoundError:
        """The error for `name` missing from `where` ("the executable"), which has `known`."""
        return cls(f"no function {name!r} in {where}; it has: {', '.join(known) or 'none'}")


class JITError(RVMError):
    """A kernel that could not be compiled to native code."""


class ExecutableFormatError(RVMError, ValueError):
    """A saved executable that is truncated, corrupted or of an unsupported version."""


class UntrustedExecutableError(RVMError):
    """Code from a saved executable nobody trusted was about to run (see the README's
    "Security" section): sign the file with a trusted key, or load it with ``trusted=True``."""
