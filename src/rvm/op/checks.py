"""Run-time checks: ``check(x, cond, detail, message=...)`` is ``x`` when ``cond`` holds.

When the 0-d bool ``cond`` is false the op raises ``ValueError(message)`` (``rvm.ShapeError``
with ``error="shape"``: sizes that disagree), the message's
``{0}``, ``{1}``... replaced by the elements of the 1-d ``detail`` tensor (the run-time values
the message names). A program checks its own inputs with it where the check needs values
computed at run time (``rvm.generation``: a prompt longer than the model's positions). The
result is ``x`` itself, so whatever uses ``x`` after the check depends on it and dead-code
elimination keeps it. OPAQUE, with no jit compute: its numpy kernel stands alone.
"""

from __future__ import annotations

from rvm.errors import IRError
from rvm.ir.expr import Call
from rvm.ir.op import OpPattern
from rvm.ir.types import TensorType, Type
from rvm.op import ops
from rvm.op.core import ExprLike, as_expr, call, check_choice, define_op
from rvm.op.shapes import fmt, rule

__all__ = ["check"]

define_op("check", OpPattern.OPAQUE, 3)


@rule(ops.check)
def _infer_check(call_: Call, args: list[TensorType]) -> Type:
    x, cond, detail = args
    if cond.dtype is not None and cond.dtype != "bool":
        raise IRError(f"check: the condition must be a bool tensor, got {cond.dtype}")
    if cond.shape is not None and cond.shape != ():
        raise IRError(f"check: the condition must be 0-d, got shape {fmt(cond.shape)}")
    if detail.shape is not None and len(detail.shape) != 1:
        raise IRError(f"check: the detail must be a 1-d tensor, got shape {fmt(detail.shape)}")
    return x


def check(
    x: ExprLike, cond: ExprLike, detail: ExprLike, message: str, error: str = "value"
) -> Call:
    """``x`` when the 0-d bool ``cond`` holds; else raises ``ValueError(message)``
    (``ShapeError`` for ``error="shape"``) with ``{0}``, ``{1}``... replaced by the elements
    of the 1-d ``detail``."""
    if not isinstance(message, str) or not message:
        raise IRError(f"check: message must be a non-empty str, got {message!r}")
    error = check_choice("check", "error", error, ("value", "shape"))
    attrs = {"message": message} if error == "value" else {"message": message, "error": error}
    return call(ops.check, as_expr(x), as_expr(cond), as_expr(detail), **attrs)
