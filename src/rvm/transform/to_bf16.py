"""to_bf16: float32 products with constant weights compute in bf16 (``precision="bf16"``).

Needs: an inlined module in A-normal form whose op calls are not yet legalized, batch norms
already folded into their convolutions (run after `fold_batch_norm`, before `legalize`).

Guarantees: the same program, where each float32 ``dense(x, W)``, ``matmul(x, W)`` with a 2-d
``W`` and ``conv2d(x, W)`` whose weight ``W`` is a constant is ``dense_packed_bf16``,
``dense_bf16`` or ``conv2d_bf16`` (`rvm.op.bf16`) of ``x`` and ``W`` converted once, here, to
bf16 bits in the kernel's layout (products of more than `GEMV_ROWS` rows: B in column panels
of pairs, `rvm.op.bf16.pack_pairs`; fewer: the rows of W, ``matmul``'s transposed, padded to
an even depth; ``conv2d``: OIHW in channel pairs per output channel,
`rvm.op.bf16.conv_pairs`, an odd group's last channel's taps paired along the kernel's rows,
`rvm.op.bf16.conv_pairing`); and each float32 ``attention`` is one with ``precision="bf16"``:
its two products take bf16 operands, its scores and softmax stay float32
(`rvm.kernels.attention`). Everything
else -- elementwise ops, norms, softmax, depthwise convolutions (a few taps a
channel, no product worth the rounding) and other products of two computed tensors -- stays
float32, as do the program's inputs and outputs. A function's last product, where it is a GEMV
(a classifier at batch 1), takes its input float32 (``dense_bf16``'s ``input``): its rounding
would move the results themselves, and a GEMV's float32 FMAs cost no time
(`_last_gemv_unrounded`).

A convolution's epilogue joins it where the convolution has no other use: a following ``add``
of a constant float32 bias of one value per output channel, an ``add`` of a computed float32
tensor of the convolution's shape (a residual: ResNet's shortcut, the later convolution taking
the other when both are ones), then ``relu`` or ``gelu`` (either form), become
``conv2d_bf16``'s ``bias``, ``residual`` and ``activation``, which its kernel applies to each
tile as it stores it (`rvm.kernels.bf16conv`) instead of a pass over the output after it
(`rvm.transform.bf16_joins.join_epilogue`).

Then activations stay bf16 between convolutions where nothing else reads them: a chain of
per-channel affine ops (``batch_norm``, ``multiply`` and ``add`` by constants of one value a
channel) and, or only, a ``relu`` before a convolution becomes its ``prologue``, applied as
its input is rounded (densenet's BN-ReLU); and a convolution read only by stride-1
convolutions of one group that read the same pair plane writes it (``plane``: their padded
bf16 input, int32 words), which they read as it is (``source``; its taps in channel pairs), so
the activation is rounded once, by the producer, while in cache. Some of its readers may
instead add it as their residual (``residual_plane``), and it may take a residual itself:
ResNet's shortcut stays a pair plane from block to block, read by each block's first
convolution and added by its last, which the walk adds and rounds as it stores each block of
sums (`rvm.kernels.amx.BLOCK_OUT`; on vectors, each tile where the adder's rows are the
output's, a 1 x 1: `rvm.kernels.bf16direct.vectors_out`; `_residual_planes`;
`rvm.transform.bf16_joins`; `rvm.op.bf16`).

Where the CPU has no bf16 dot product (``vdpbf16ps``: `rvm.kernels.bf16gemm.DPBF16`), the bf16
kernels could only widen each bf16 pair to float32 and multiply in float32 -- as many FMAs as
float32's, plus the widening and each call's rounding of the activations, in a smaller tile
(AVX2's 16 registers hold fewer accumulators beside the widened operands); where its dot
product does fewer multiply-adds a second than its float32 FMAs (timed: `native_way`), the
bf16 kernels would run at that lower rate. There the pass
takes the ``"rounded"`` way (`WAYS`; the default follows the CPU, `native_way`): each product
it would convert keeps its float32 op and kernel, with its weight rounded to bf16 here, once
(float32 values that are bf16 values): products of bf16 values are exact in float32, so a
product sees bf16's weights at float32's speed, with no conversion per call. Its activations
stay float32 (rounding them would cost a pass over each input for no speed, and a bf16
product of them differs from this one by less than the weight's rounding already costs), and
so do attention's operands (no weights: nothing to round once). Products of a few rows
(`GEMV_ROWS`) still take ``dense_bf16``: a GEMV reads each weight once, and reading half the
bytes made vgg19's 25088 x 4096 classifier layer 1.75x as fast (one AVX2 core); its input
stays float32 too (``input="float32"``: its FMAs widen the weight and take the input as it
is, so rounding the input bought only error: over 200 random inputs, zfnet512's logits 6.3e-3
off float32's, bvlc_alexnet's 8.5e-3, against 4.9e-3 and 6.3e-3 with it float32). The pass
says once in the log which way runs and why.

Algorithm: one walk over each straight-line region (`map_regions`), remembering constants
bound to variables and the convolutions whose epilogue may still grow; each matching call is
replaced in place, and a convolution whose epilogue joined a later call is dropped. A second
walk joins the prologues and pairs the planes, on the uses counted after the first, and
finds each function's last product.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter

import numpy as np

from rvm import op
from rvm.ir import expr as E
from rvm.ir.analysis import walk
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.op import ops
from rvm.op.bf16 import (
    PAIRINGS,
    _round_bf16,
    bf16_bits,
    bf16_dot_speed,
    bf16_rows,
    conv_pairing,
    conv_pairs,
    default_pair_panel,
    has_amx_tiles,
    has_bf16_dot,
    pack_pairs,
    pair_width,
    turn_pairs,
    turned_panel,
)
from rvm.op.conv import winograd_bf16
from rvm.transform.bf16_joins import join_epilogue, join_prologues, pair_planes
from rvm.transform.legalize import const_of, map_functions, map_regions

logger = logging.getLogger("rvm.transform")

MIN_DEPTH = 16
"""Products of a smaller depth (per output value) stay float32: depthwise and tiny
convolutions, whose kernels are not GEMMs."""

MIN_CONV_DEPTH = 32
"""Convolutions with taps of a smaller depth stay float32: a 3-channel 3x3 stem (depth 27, 9
pairs of taps a pixel) spends its bf16 tiles storing more than multiplying, and ran at
0.17-0.20 ms against float32's 0.11 ms (shufflenet's, 224x224 to 24 channels). A 1 x 1
convolution needs only `MIN_DEPTH`: squeezenet's 16 to 64 channels at 55 x 55 took 62 us in
bf16 against 88 in float32 (one Zen 4 core, in the model)."""

MIN_STRIDED_DEPTH = 16
"""Without AMX a strided convolution takes bf16 from this depth, below `MIN_CONV_DEPTH`:
squeezenet's 3-channel 3 x 3 stem of stride 2 (depth 27), its float32 sums put out from L1
into its pool's input (`rvm.kernels.bf16direct.vectors_out`), took squeezenet to 0.952-0.969
of its bf16 time (Zen 4, the two in turns in one process, three runs), shufflenet's (3 -> 24,
stride 2) 1.00; vgg19's 3-channel stem of stride 1 took 1.009-1.010, so stride 1 keeps
`MIN_CONV_DEPTH`, as AMX does (its tiles above)."""


GEMV_ROWS = 4
"""Products of at most this many rows, known at compile time (a classifier's head at batch
1), keep the weight's rows for a GEMV (``dense_bf16``: `rvm.kernels.bf16.dense`); more rows,
or a count known only at run time, take it packed in pair panels (``dense_packed_bf16``:
`rvm.kernels.bf16dense`), whose bias, activation and residual `pack_weights` then joins."""


WAYS = ("bf16", "rounded")
"""How the pass computes a product in bf16: ``"bf16"``, by the bf16 ops (`rvm.op.bf16`);
``"rounded"``, by its float32 op on its weight rounded to bf16 (the module docstring)."""


def native_way() -> str:
    """The `WAYS` this CPU target runs fastest: ``"bf16"`` with AMX tiles
    (`rvm.kernels.amx.AMX`), or with a bf16 dot product
    (`rvm.kernels.bf16gemm.DPBF16`) that does more multiply-adds a second than float32's FMAs
    (`rvm.op.bf16.bf16_dot_speed`, timed once a process; untimed, a cross build: bf16), else
    ``"rounded"``: on an Intel Emerald Rapids without AMX ``vdpbf16ps`` runs at half the
    FMAs' rate, and rvm's bf16 kernels took 1.3-1.5x float32's time in a model."""
    if not has_bf16_dot():
        _say_way("rounded", None)
        return "rounded"
    if has_amx_tiles():  # a tile product does 8192 multiply-adds, a vector FMA 16
        return "bf16"
    speed = bf16_dot_speed()
    way = "bf16" if speed is None or speed[0] > speed[1] else "rounded"
    _say_way(way, speed)
    return way


def _residual_planes() -> bool:
    """Whether ResNet's shortcuts stay pair planes (`bf16_joins.pair_planes`' ``residuals``):
    wherever the kernels add a pair plane's residual as they put their sums out, AMX's walk
    and the vector walk's tiles (a 1 x 1's), so everywhere. With float32 shortcuts instead,
    resnet50 in bf16 took 1.02-1.03x the time on a Zen 4 (the two in turns in one process)."""
    return True


@functools.cache
def _say_way(way: str, speed: tuple[float, float] | None) -> None:
    """Logs once per process which way bf16 products take, when it is not the bf16 ops."""
    if way != "rounded":
        return
    if speed is None:
        why = "this CPU has no bf16 dot product (AVX512-BF16)"
    else:
        why = (
            f"this CPU's bf16 dot product (vdpbf16ps) does {speed[0] / 1e9:.0f}G multiply-adds "
            f"a second on one core, its float32 FMAs {speed[1] / 1e9:.0f}G"
        )
    logger.info(
        "rvm: %s: precision='bf16' runs its convolutions and GEMMs as float32 kernels on "
        "weights rounded to bf16 at compile time (activations stay float32), its GEMVs of a "
        "few rows on bf16 weights",
        why,
    )


def to_bf16(mod: IRModule, way: str | None = None) -> IRModule:
    """Rewrite every float32 dense, matmul and conv2d with a constant weight to its bf16 op,
    and every float32 attention to its bf16 products; or, the ``"rounded"`` way (`WAYS`;
    None: `native_way`), each such dense, matmul and conv2d of more than a few rows to itself
    on its weight rounded to bf16, and those of a few rows to ``dense_bf16``."""
    way = native_way() if way is None else way
    if way not in WAYS:
        raise ValueError(f"to_bf16: way must be one of {WAYS}, got {way!r}")
    converted = joined = planes = prologues = unrounded = 0
    weight_bytes = 0

    def rewrite(name: str, func: E.Function) -> E.Function:
        consts: dict[E.Var, np.ndarray] = {}
        uses = Counter(n for n in walk(func.body) if isinstance(n, E.Var))

        def region(bindings: list[E.VarBinding], body: E.Expr, depth: int):
            nonlocal converted, weight_bytes, joined
            out: list[E.VarBinding | None] = []
            convs: dict[E.Var, int] = {}  # a conv2d_bf16's var -> its place in out
            for b in bindings:
                if isinstance(b.value, E.Constant):
                    consts[b.var] = b.value.data
                new = _convert(b.value, consts, way)
                if new is not None:
                    converted += 1
                    if isinstance(new.args[1], E.Constant):
                        weight_bytes += new.args[1].data.nbytes
                else:
                    found = join_epilogue(b.value, convs, out, consts, uses)
                    if found is not None:
                        joined += 1
                        conv, new = found
                        out[convs.pop(conv)] = None
                if new is not None:
                    b = E.VarBinding(b.var, new)
                    if new.callee is ops.conv2d_bf16:
                        convs[b.var] = len(out)
                out.append(b)
            return [b for b in out if b is not None], body

        body = map_regions(func.body, region)
        if body is func.body:
            return func
        nonlocal planes, prologues, unrounded
        uses = Counter(n for n in walk(body) if isinstance(n, E.Var))

        def paired(bindings: list[E.VarBinding], body: E.Expr, depth: int):
            nonlocal planes, prologues, unrounded
            new, count = join_prologues(bindings, uses)
            prologues += count
            new, count = pair_planes(
                new, uses, residuals=_residual_planes(), positions=has_amx_tiles()
            )
            planes += count
            if depth == 0:
                new, count = _last_gemv_unrounded(new)
                unrounded += count
            return new, body

        body = map_regions(body, paired)
        return E.Function(func.params, body, func.ret_type, func.attrs)

    funcs = map_functions(mod, rewrite)
    if not converted:
        return mod
    logger.debug(
        "to_bf16 (%s): %d products in bf16 (%d conv epilogues joined, %d prologues, %d pair planes "
        "between convolutions, %d last GEMVs on float32 inputs), weights %.2f MB", way, converted,
        joined, prologues, planes, unrounded, weight_bytes / 1e6,
    )  # fmt: skip
    return mod.with_functions({n: f for n, f in funcs.items() if f is not mod[n]})


def _float32(value: E.Expr) -> bool:
    t = getattr(value.args[0], "type", None) if isinstance(value, E.Call) else None
    return getattr(t, "dtype", None) == "float32" and getattr(t, "shape", None) is not None


def _convert(value: E.Expr, consts: dict[E.Var, np.ndarray], way: str) -> E.Call | None:
    """The bf16 call computing ``value`` the ``way`` (`WAYS`), or None when it stays as it
    is."""
    if not isinstance(value, E.Call) or not isinstance(value.callee, E.Op):
        return None
    if value.callee is ops.attention:
        if way == "rounded" or not _float32(value) or value.attrs.get("precision") == "bf16":
            return None
        new = op.attention(*value.args, **{**value.attrs, "precision": "bf16"})
        infer_type(new)
        return new
    if value.callee not in (ops.dense, ops.matmul, ops.conv2d) or not _float32(value):
        return None
    x, w = value.args[0], const_of(value.args[1], consts)
    if w is None or w.dtype != np.float32:
        return None
    if value.callee is ops.conv2d:
        new = _conv(value, x, w, way)
    elif w.ndim != 2 or w.shape[0 if value.callee is ops.matmul else 1] < MIN_DEPTH:
        return None
    elif _few_rows(x):
        rows = E.Constant(bf16_rows(w if value.callee is ops.dense else w.T))
        new = op.dense_bf16(x, rows, input="float32" if way == "rounded" else "bf16")
    elif way == "rounded":
        new = _rounded(value, w)
    else:
        transposed = value.callee is ops.dense
        units = w.shape[0] if transposed else w.shape[1]
        panels = E.Constant(pack_pairs(w.astype(np.float32), transposed, default_pair_panel()))
        new = op.dense_packed_bf16(x, panels, units=units)
    if new is not None:
        infer_type(new)
    return new


_PRODUCTS = (
    ops.attention, ops.conv1d, ops.conv2d, ops.conv2d_bf16, ops.conv2d_packed,
    ops.conv2d_transpose, ops.conv2d_winograd, ops.conv3d, ops.dense, ops.dense_bf16,
    ops.dense_packed, ops.dense_packed_bf16, ops.matmul, ops.qconv2d, ops.qdense,
)  # fmt: skip
"""The products `_last_gemv_unrounded` looks back for."""


def _last_gemv_unrounded(bindings: list[E.VarBinding]) -> tuple[list[E.VarBinding], int]:
    """``bindings`` (a function's outer region) with its last product, where that is a GEMV
    of rounded inputs (``dense_bf16``), on its float32 input, and how many (0 or 1): its
    result is the function's (a classifier's logits), no later layer averages its input's
    rounding away, and a GEMV reads each weight once, so its float32 FMAs cost no time (the
    models 0.97-1.01x, in turns; every GEMV so cost bvlc_alexnet and zfnet512 2-3%). Over
    `benchmarks/precision.py`'s 200 inputs the largest error against float32 fell from 4.8e-3
    to 4.3e-3 (shufflenet), 9.4e-3 to 8.9e-3 (bvlc_alexnet), 7.2e-3 to 7.0e-3 (zfnet512),
    top-1 unchanged (its flips are near ties); over 200 others, shufflenet's top-1 rose from
    97.5% to 99.0%, bvlc_alexnet's from 98.0% to 99.5%."""
    for i in range(len(bindings) - 1, -1, -1):
        value = bindings[i].value
        if not isinstance(value, E.Call) or value.callee not in _PRODUCTS:
            continue
        if value.callee is not ops.dense_bf16 or value.attrs["input"] != "bf16":
            return bindings, 0
        new = op.dense_bf16(value.args[0], value.args[1], input="float32")
        infer_type(new)
        return [*bindings[:i], E.VarBinding(bindings[i].var, new), *bindings[i + 1 :]], 1
    return bindings, 0


def _few_rows(x: E.Expr) -> bool:
    """Whether the product of ``x`` has at most `GEMV_ROWS` rows, known here."""
    shape = x.type.shape
    rows = int(np.prod([d for d in shape[:-1] if isinstance(d, int)], dtype=np.int64))
    return len(shape) == 1 or (all(isinstance(d, int) for d in shape[:-1]) and rows <= GEMV_ROWS)


def _rounded(value: E.Call, w: np.ndarray) -> E.Call:
    """``value``'s call on its weight ``w`` rounded to bf16 (the ``"rounded"`` way)."""
    args = (value.args[0], E.Constant(_round_bf16(w)), *value.args[2:])
    return E.Call(value.callee, args, value.attrs)


def _conv(value: E.Call, x: E.Expr, w: np.ndarray, way: str) -> E.Call | None:
    attrs = value.attrs
    depth = int(np.prod(w.shape[1:]))
    least = MIN_DEPTH if w.shape[2:] == (1, 1) else MIN_CONV_DEPTH
    if least > MIN_STRIDED_DEPTH and tuple(attrs["strides"]) != (1, 1) and not has_amx_tiles():
        least = MIN_STRIDED_DEPTH
    if w.ndim != 4 or w.shape[1] == 1 or depth < least:
        return None
    if way == "rounded":
        return _rounded(value, w)
    winograd = winograd_bf16(value, w)
    if winograd is not None:
        return winograd
    panel = _turned_panel(value, x, w, attrs)
    # on AMX a direct stride-1 convolution's taps go first: its tiles then load from the
    # plane (strided ones read their phases' tiles packed faster: resnet50's 1.03-1.18x),
    # and where its output channels fill bands of 32 its weight is the tiles of the walk
    # turned around (`rvm.kernels.amxconv`)
    taps = has_amx_tiles() and not panel and attrs["groups"] == 1 and attrs["strides"] == (1, 1)
    pairing = conv_pairing(w.shape[1], w.shape[3], w.shape[2], taps, w.shape[0])
    rows = bf16_bits(conv_pairs(w.astype(np.float32), PAIRINGS.index(pairing))).view(np.int16)
    if panel:
        rows = turn_pairs(rows, attrs["groups"], panel)
    return op.conv2d_bf16(
        x,
        E.Constant(rows),
        strides=attrs["strides"],
        padding=attrs["padding"],
        dilation=attrs["dilation"],
        groups=attrs["groups"],
        kernel=w.shape[2:],
        panel=panel,
        pairing=pairing,
    )


def _turned_panel(value: E.Call, x: E.Expr, w: np.ndarray, attrs: dict) -> int:
    """The panel width the convolution's kernel runs turned around with (0: not), by
    `rvm.op.bf16.turned_panel` from its static output shape."""
    shape = getattr(getattr(value, "type", None), "shape", None)
    if shape is None or not all(isinstance(d, int) for d in shape[2:]):
        return 0
    (kw, sw, dw) = w.shape[3], attrs["strides"][1], attrs["dilation"][1]
    iw = getattr(x.type, "shape", (None,) * 4)[3]
    if not isinstance(iw, int):
        return 0
    wq = pair_width(iw, shape[3], attrs["padding"][1], kw, dw, sw)  # `bf16conv.conv2d`'s
    return turned_panel(w.shape[0] // attrs["groups"], shape[2], shape[3], wq, attrs["groups"])
