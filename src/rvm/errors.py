"""The one exception tree of rvm.

Every error rvm raises on purpose derives from `RVMError`, so callers can catch rvm's errors as
a group. Shape and dtype problems with user input also derive from the matching builtin
exception (`ValueError`, `TypeError`), and a missing function name from `KeyError`, so
ordinary Python handlers keep working.
"""

from __future__ import annotations

from collections.abc import Iterable
from string import Formatter


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


def kind_of(err: BaseException) -> str:
    """The kind an error message names for ``err``: ``ShapeError`` for a shape error
    (`is_shape_error`), the builtin's name for a jit kernel's `KernelValueError`, else its
    class's name."""
    if is_shape_error(err):
        return "ShapeError"
    return "ValueError" if isinstance(err, KernelValueError) else type(err).__name__


def filled(template: str, values: tuple[int, ...]) -> str:
    """A jit kernel's error message: ``template``'s ``{}`` fields filled with the first
    ``values``; the rest are (axis, got, expected) triples, and its ``{wrong}`` field lists
    those that disagree (``axis 0 is 3, expected 4; ...``)."""
    fields = sum(1 for _, name, _, _ in Formatter().parse(template) if name == "")
    rest = values[fields:]
    wrong = "; ".join(
        f"axis {axis} is {got}, expected {want}"
        for axis, got, want in zip(rest[0::3], rest[1::3], rest[2::3])
        if got != want
    )
    return template.format(*values[:fields], wrong=wrong)


class KernelShapeError(ShapeError):
    """A `ShapeError` a jit kernel raised as a message template and the ints it names
    (`filled`): Numba passes ints out of a kernel for Python to format, where building the
    string in the kernel (``str`` and ``+`` on Numba's unicode) cost 0.5-4 CPU-s of compile a
    kernel (`rvm.jit.dynamic`). Without values, ``template`` is the message (a copy, a pickle)."""

    def __init__(self, template: str = "", *values: int) -> None:
        super().__init__(filled(template, values) if values else template)


class KernelValueError(ValueError):
    """A ValueError a jit kernel raised as `KernelShapeError` is raised; it reads as a
    ValueError (`kind_of`)."""

    def __init__(self, template: str = "", *values: int) -> None:
        super().__init__(filled(template, values) if values else template)


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
