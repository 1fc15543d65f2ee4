"""Bitwise ONNX ops: BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot and BitShift.

They map one to one onto rvm's bitwise ops. BitShift-28 widens BitShift-11 from unsigned to
signed integers and defines what C leaves undefined: left shifts wrap within the type, and a
shift count outside ``[0, bits)`` gives 0 (or -1 for a right shift of a negative value), which
is rvm's ``left_shift``/``right_shift`` on every integer type, so one converter serves both.
"""

from __future__ import annotations

from rvm import op
from rvm.frontend.onnx.context import NodeContext
from rvm.frontend.onnx.registry import converter
from rvm.ir import Expr


def _binary(fn):
    def convert(ctx: NodeContext) -> Expr:
        return ctx.emit(fn(ctx.input(0), ctx.input(1)))

    return convert


converter("BitwiseAnd", since=18)(_binary(op.bitwise_and))
converter("BitwiseOr", since=18)(_binary(op.bitwise_or))
converter("BitwiseXor", since=18)(_binary(op.bitwise_xor))


@converter("BitwiseNot", since=18)
def _bitwise_not(ctx: NodeContext) -> Expr:
    return ctx.emit(op.bitwise_not(ctx.input(0)))


@converter("BitShift", since=(11, 28))
def _bit_shift(ctx: NodeContext) -> Expr:
    direction = ctx.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        ctx.fail(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    fn = op.left_shift if direction == "LEFT" else op.right_shift
    return ctx.emit(fn(ctx.input(0), ctx.input(1)))
