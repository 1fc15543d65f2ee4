"""pack_conv_weights: convolutions with constant weights that the direct method serves get
their weights packed once, at build time (jit kernels).

Needs: an inlined module in A-normal form whose op calls are not yet legalized, batch norms
already folded into their convolutions (run after `fold_batch_norm`, before `legalize`), and
types inferred.

Guarantees: the same program, where each float32 ``conv2d(x, W)`` with a constant ``W`` and a
static input shape, for which the direct convolution vectorized along output channels beats
the GEMMs on this CPU (`rvm.op.conv.pack_conv2d`, the library's rule), is ``conv2d_packed(x,
P)`` with ``P`` the weight packed in panels of output channels (`rvm.kernels.direct.pack`):
the kernel reads it as it is, with no copy at each call; each one Winograd's F(2x2, 3x3) serves
(`rvm.kernels.convmethod.winograd_pays`) is ``conv2d_winograd(x, U)`` with ``U`` the weight
transformed once (`rvm.kernels.winograd.transform`), not at each call. A module that packs
one builds the method anyway, so its shallower convolutions on small maps take it too where it pays
(`rvm.kernels.convmethod.pays_once_built`), and so does one run on batches (`BATCH_BUILDS`), while
a module that packs none (squeezenet at batch 1) builds none of it at its first run. Likewise
each int8 ``qconv2d`` with a constant weight and a static output shape that this CPU's
turned-around kernel serves better (`rvm.op.turn_qconv2d`) takes its weight turned once
(``weight_layout="turned"``), and each other int8 ``qconv2d`` or ``qdense`` with a constant
weight, where this CPU's integer kernels multiply 16-bit values, takes it widened to int16
once (`rvm.op.quantized.widen_weight`), not at every call, or, where its pairs fit 16 bits
(7-bit weights), keeps it int8 and says so (``weight_pairs="int16"``: the ``vpmaddubsw``
tiles). Elsewhere nothing changes.

Algorithm: one walk over each straight-line region (`map_regions`), remembering constants
bound to variables; each matching call is replaced in place; a second walk by the wider rule
when the first packed any or saw a batch.
"""

from __future__ import annotations

import logging

import numpy as np

from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.op import ops
from rvm.op.conv import pack_conv2d
from rvm.op.quantized import turn_qconv2d, widen_weight
from rvm.transform.legalize import map_function_regions, map_functions, replace_changed

logger = logging.getLogger("rvm.transform")


BATCH_BUILDS = 2
"""From this many images a call (a static batch), a module takes the direct method where the
wider rule (`rvm.kernels.convmethod.pays_once_built`) has it, whether or not it packs a
convolution by the narrow one: its first run builds the method (squeezenet's: about 8 CPU-s),
which a batch of ``n`` repays ``n`` times sooner. squeezenet at batch 8 (one thread): its
3 x 3 expansions on 27 x 27 and 13 x 13 maps; at batch 1 (the quick start) it builds none."""


def pack_conv_weights(mod: IRModule) -> IRModule:
    """Rewrite every conv2d the direct method serves to `rvm.op.conv2d_packed`, every one
    Winograd's serves to `rvm.op.conv2d_winograd`."""
    out, packed, direct, images = _pack(mod, False)
    # The module builds the direct method, or runs batches whose calls repay its build sooner:
    # the wider rule's convolutions take it too.
    if direct or images >= BATCH_BUILDS:
        out, more, _, _ = _pack(out, True)
        packed += more
    if not packed:
        return mod
    logger.debug("pack_conv_weights: %d convolutions on packed weights", packed)
    return out


def _pack(mod: IRModule, built: bool) -> tuple[IRModule, int, int, int]:
    """``mod`` with the convolutions `_convert` packs (``built``: only float ones, by the
    wider rule too) rewritten, how many, how many of them the direct method's (an int8 one
    turned around or a Winograd one builds none of it), and the most images a float32
    convolution of it takes a call (`_images`)."""
    packed = direct = images = 0

    def rewrite(name: str, func: E.Function) -> E.Function:
        consts: dict[E.Var, np.ndarray] = {}

        def region(bindings: list[E.VarBinding], body: E.Expr, depth: int):
            nonlocal packed, direct, images
            out = []
            for b in bindings:
                if isinstance(b.value, E.Constant):
                    consts[b.var] = b.value.data
                images = max(images, _images(b.value))
                new = _convert(b.value, consts, built)
                if new is not None:
                    packed += 1
                    direct += new.callee is ops.conv2d_packed
                    b = E.VarBinding(b.var, new)
                out.append(b)
            return out, body

        return map_function_regions(func, region)

    funcs = map_functions(mod, rewrite)
    return (replace_changed(mod, funcs) if packed else mod), packed, direct, images


def _images(value: E.Expr) -> int:
    """The images a float32 ``conv2d`` call takes at once (its input's static batch), else 0."""
    if not isinstance(value, E.Call) or value.callee is not ops.conv2d:
        return 0
    x_type = getattr(value.args[0], "type", None)
    shape = getattr(x_type, "shape", None)
    if getattr(x_type, "dtype", None) != "float32" or not shape or not isinstance(shape[0], int):
        return 0
    return shape[0]


def _convert(value: E.Expr, consts: dict[E.Var, np.ndarray], built: bool) -> E.Call | None:
    """The packed call computing ``value``, or None when it stays as it is (``built``: the
    module builds the direct method anyway, `rvm.op.conv.pack_conv2d`; int8 ones are done)."""
    callees = (ops.conv2d,) if built else (ops.conv2d, ops.qconv2d, ops.qdense)
    if not isinstance(value, E.Call) or value.callee not in callees:
        return None
    w = value.args[1]
    weight = w.data if isinstance(w, E.Constant) else consts.get(w)
    if weight is None:
        return None
    if value.type is None:
        infer_type(value)
    if value.callee is ops.qdense:
        new = widen_weight(value, weight)
    elif value.callee is ops.qconv2d:
        new = turn_qconv2d(value, weight)  # an rvm expression has no truth value: not `or`
        if new is None:
            new = widen_weight(value, weight)
    else:
        new = pack_conv2d(value, weight, built)
    if new is not None:
        infer_type(new)
    return new
