"""float32 products with a constant weight packed in column panels: ``dense_packed``.

What ``rvm.compile`` turns a float32 ``dense``, ``matmul`` or ``Gemm`` with a constant 2-d
weight into (`rvm.transform.pack_weights`): the weight, as B ``(k, units)`` (``dense``'s
transposed), is cut once, at compile time, into panels of ``panel`` columns laid out as
``(panels, k, panel)`` float32, the last panel padded with zeros -- the layout rvm's GEMM
reads as one contiguous stream per panel (`rvm.kernels.packed`). The panel width is the
weight's last dimension: a fact of the data, saved with the executable's weights.

- ``dense_packed(x, w, bias=None, residual=None, *, units, activation="none")``: ``x`` (...,
  k) float32, ``w`` (panels, k, panel) float32, ``bias`` (units,) float32, ``residual`` a
  float32 tensor: ``activation(x @ B + bias) + residual``, (..., units) float32 broadcast
  with the residual's shape. The bias, the activation (`ACTIVATIONS`: ``gelu`` the erf form,
  ``gelu_tanh`` the tanh one) and the residual (a transformer's skip connection) are the
  GEMM's epilogue, run on each tile as it is done. A residual comes with a bias (zeros when
  the product has none): the operands are ``(x, w)``, ``(x, w, bias)`` or ``(x, w, bias,
  residual)``.
- `pack_weight(weight, transposed, panel)` and `default_panel()`: the packing and this
  CPU's panel width, for the pass (`rvm.kernels.reference.packed`, `rvm.kernels.packed`).
"""

from __future__ import annotations

import numpy as np

from rvm.errors import IRError
from rvm.ir.expr import Call
from rvm.ir.op import OpPattern
from rvm.ir.types import TensorType, Type
from rvm.kernels.reference.packed import ACTIVATIONS, pack
from rvm.op import ops
from rvm.op.core import ExprLike, as_expr, call, check_choice, check_int, define_op
from rvm.op.shapes import broadcast_shapes, fmt, rule

__all__ = ["dense_packed"]

define_op("dense_packed", OpPattern.OUT_ELEMWISE_FUSABLE)


def pack_weight(weight: np.ndarray, transposed: bool, panel: int) -> np.ndarray:
    """``weight`` as B ``(k, n)`` (``transposed``: ``weight`` is ``(n, k)``) in column panels
    ``(panels, k, panel)`` float32 (`rvm.kernels.packed.pack`)."""
    return pack(weight, transposed, panel)


def default_panel() -> int:
    """The panel width this CPU's GEMM reads best (`rvm.kernels.gemmshape.panel_width`). Imported
    here, when a pass asks: importing the ops loads no Numba, and the pass loads none of the
    library's code (the work pool's functions load at their first use, within its light loads)."""
    from rvm.kernels.gemmshape import panel_width

    return panel_width()


def _check_weight(w: TensorType, units: int) -> None:
    if w.dtype is not None and w.dtype != "float32":
        raise IRError(f"dense_packed: expects a float32 packed weight, got {w.dtype}")
    if w.shape is None:
        return
    if len(w.shape) != 3:
        raise IRError(
            f"dense_packed: the weight must be 3-d (panels, k, panel), got {fmt(w.shape)}"
        )
    if all(isinstance(d, int) for d in w.shape):
        panels, _, panel = w.shape
        if panel < 1 or panels != -(-units // panel):
            raise IRError(
                f"dense_packed: {units} units need {-(-units // max(panel, 1))} panels of "
                f"{panel}, the weight {fmt(w.shape)} has {panels}"
            )


@rule(ops.dense_packed)
def _infer(call_: Call, args: list[TensorType]) -> Type:
    if len(args) not in (2, 3, 4):
        raise IRError(
            f"dense_packed: expects 2 to 4 inputs (x, w[, bias[, residual]]), got {len(args)}"
        )
    x, w = args[:2]
    units = call_.attrs["units"]
    if x.dtype is not None and x.dtype != "float32":
        raise IRError(f"dense_packed: expects a float32 input, got {x.dtype} {fmt(x.shape)}")
    _check_weight(w, units)
    if len(args) == 3:
        bias = args[2]
        if bias.dtype not in (None, "float32") or (
            bias.shape is not None and tuple(bias.shape) != (units,)
        ):
            raise IRError(
                f"dense_packed: the bias must be float32 ({units},), got {bias.dtype} "
                f"{fmt(bias.shape)}"
            )
    residual = args[3] if len(args) == 4 else None
    if residual is not None and residual.dtype not in (None, "float32"):
        raise IRError(f"dense_packed: the residual must be float32, got {residual.dtype}")
    if x.shape is None:
        return TensorType(None, "float32")
    if not x.shape:
        raise IRError("dense_packed: the input must have rank >= 1, got ()")
    k = x.shape[-1]
    if w.shape is not None and isinstance(k, int) and isinstance(w.shape[1], int):
        if w.shape[1] != k:
            raise IRError(
                f"dense_packed: input {fmt(x.shape)} has {k} features, the packed weight "
                f"{fmt(w.shape)} has depth {w.shape[1]}"
            )
    product = (*x.shape[:-1], units)
    if residual is None:
        return TensorType(product, "float32")
    return TensorType(broadcast_shapes("dense_packed", product, residual.shape), "float32")


def dense_packed(
    x: ExprLike,
    w: ExprLike,
    bias: ExprLike | None = None,
    residual: ExprLike | None = None,
    *,
    units: int,
    activation: str = "none",
) -> Call:
    """``activation(x @ B + bias) + residual`` for B ``(k, units)`` packed in column panels
    ``w`` ``(panels, k, panel)``; ``bias`` (units,) or None; ``residual`` a tensor or None
    (with a residual and no bias, the bias is zeros). The operands come first and the
    attributes by keyword, so the text parser's ``op.dense_packed(*args, **attrs)`` rebuilds
    the call."""
    if residual is not None and bias is None:
        bias = np.zeros(check_int("dense_packed", "units", units, minimum=0), np.float32)
    args = (as_expr(x), as_expr(w)) + (() if bias is None else (as_expr(bias),))
    args += () if residual is None else (as_expr(residual),)
    return call(
        ops.dense_packed,
        *args,
        units=check_int("dense_packed", "units", units, minimum=0),
        activation=check_choice("dense_packed", "activation", activation, ACTIVATIONS),
    )
