"""concat_images: a channel concatenation of a batch whose pieces are per-image chains is
computed image by image, so the memory plan writes every piece in place.

Needs: an inlined module in A-normal form whose op calls are not yet legalized, types inferred,
batch norms folded and weights packed (`rvm.transform.pack_conv_weights`: each image's call
reads the one packed weight), before `legalize`.

Guarantees: the same values, where a ``concat`` along an axis after the batch (of ``N`` > 1
images, static) has as its pieces only the ends of chains that compute each image from that
image alone: a head (`HEADS`: a convolution or a pool) on a batch tensor the region computes
(a kernel's result, whose storage a slice can view) whose other operands are constants, then
single-use ops of `TAILS` whose other operand is a constant without a batch axis (a bias, a
scale), each piece used by the concatenation only, and the heads cheap enough for the copy
to matter (`MAX_DEPTH`). The chains then run once an image, on the image's slice of their
inputs (``strided_slice`` along the batch: a view, `rvm.transform.concat_plan.slice_offset`),
each image's pieces joined by a concatenation of their own, and those joined along the
batch. Every piece of every image is one contiguous run of the result, so
`rvm.transform.concat_plan` places them all (the image's concatenation inside the batch's)
and no kernel copies them: with more than one image, a piece of a channel concatenation is
not one run (its images are the concatenation's image apart), which the memory plan places
only when every axis before the joined one has size 1.

Why: at batch 8 squeezenet's fire modules copied 4 ms a call into their concatenations (of 74
ms of kernels at one thread on a Zen 3 core), what one image a call never copies; image by
image its calls took 5-8% less time (thread CPU, against ONNX Runtime in the same process).
Each image's chain is its own kernel call (eight calls of a batch-1 kernel for eight images),
whose work the pool splits inside the image; where the pieces' work is large beside the copy
(inception's blocks: 3.5 ms of 357) that costs more than the copy saves (`MAX_DEPTH`).
"""

from __future__ import annotations

import logging

import numpy as np

from rvm import op
from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.ir.types import TensorType
from rvm.op import ops
from rvm.op.conv import winograd_keeps_phases
from rvm.transform.legalize import rewrite_with_uses, splice

logger = logging.getLogger("rvm.transform")

HEADS = ("conv2d", "conv2d_packed", "conv2d_winograd", "max_pool2d", "avg_pool2d")
"""The ops a piece's chain starts with: each output image from its input image alone (the
batch tensor their first operand, the rest constants); a Winograd convolution only where one
image's call keeps its phases together (`_whole_phases`)."""
TAILS = ("add", "multiply", "relu")
"""The ops that may follow the head, one after the other, each on the one use of the one
before (with a constant that has no batch axis, for the binary ones)."""
MAX_DEPTH = 400
"""The most multiply-adds (a pool's taps) the heads take per float of the concatenation, on
average (`depth`): beyond, the copy is too small a share of the pieces' work to repay an
image a call. A measured constant (one thread, thread CPU, a Zen 3 core, batch 8):
squeezenet's fire modules (80 to 320) took 5-8% less time a call, inception_v2's blocks
(470 to 1460) 0-4% more; and with threads an image a call splits within the image, a join
each, where the batch's call gives each thread whole images (`rvm.kernels.direct.images_pay`),
which the cheaper the pieces the less it matters."""


def concat_images(mod: IRModule) -> IRModule:
    """Compute image by image each batch concatenation of per-image chains (see above)."""

    out, split = rewrite_with_uses(mod, _region)
    if split:
        logger.debug("concat_images: %d concatenations computed image by image", split)
    return out


def _batch(ty: object) -> int:
    """The static batch of a static 4-d tensor type, else 0."""
    if not isinstance(ty, TensorType) or not ty.is_static or len(ty.shape) != 4:
        return 0
    return int(ty.shape[0])  # type: ignore[arg-type]


def _region(bindings: list[E.VarBinding], uses: dict[E.Var, int]) -> tuple[list[E.VarBinding], int]:
    at = {b.var: i for i, b in enumerate(bindings)}
    out: list[E.VarBinding | None] = list(bindings)
    extra: dict[int, list[E.VarBinding]] = {}
    for j, b in enumerate(bindings):
        chains = _site(b, bindings, at, uses)
        if chains is None:
            continue
        tuple_var = b.value.args[0]  # type: ignore[attr-defined]
        for chain in chains:
            for i in chain:
                out[i] = None
        out[at[tuple_var]] = None
        out[j] = None
        extra[j] = _by_image(b, [[bindings[i] for i in c] for c in chains])
    if not extra:
        return bindings, 0
    return splice(out, extra), len(extra)


def _site(
    b: E.VarBinding, bindings: list[E.VarBinding], at: dict[E.Var, int], uses: dict[E.Var, int]
) -> list[list[int]] | None:
    """The chains (binding indices, head first) of the pieces of the concatenation ``b``, or
    None when it is not one this pass computes image by image."""
    call = b.value
    if not isinstance(call, E.Call) or call.callee is not ops.concat or len(call.args) != 1:
        return None
    images = _batch(b.var.type)
    axis = call.attrs["axis"] % 4 if images else 0
    arg = call.args[0]
    if images < 2 or axis == 0 or not isinstance(arg, E.Var) or uses.get(arg) != 1:
        return None
    fields = bindings[at[arg]].value if arg in at else None
    if not isinstance(fields, E.Tuple) or len(set(fields.fields)) != len(fields.fields):
        return None
    chains = []
    for f in fields.fields:
        chain = _chain(f, bindings, at, uses, images) if isinstance(f, E.Var) else None
        if chain is None:
            return None
        chains.append(chain)
    heads = [bindings[c[0]] for c in chains]
    if depth(heads) > MAX_DEPTH:
        return None
    return chains


def depth(heads: list[E.VarBinding]) -> float:
    """The multiply-adds (a pool's taps) of the chain heads ``heads`` per float of their
    results, on average: a convolution's input channels a group times its kernel's taps."""
    work = floats = 0
    for b in heads:
        call: E.Call = b.value  # type: ignore[assignment]
        if call.callee.name == "conv2d_winograd":  # a 3x3 kernel's taps a channel
            taps = 9 * int(call.args[0].type.shape[1])  # type: ignore[attr-defined]
        elif call.callee.name in ("conv2d", "conv2d_packed"):
            w = call.args[
                1
            ].type.shape  # (O, C / g, kh, kw); packed: (g, panels, kh, kw, C / g, panel)
            taps = int(np.prod(w[1:] if len(w) == 4 else w[2:5]))  # type: ignore[index]
        else:
            taps = int(np.prod(call.attrs["pool_size"]))
        n = int(np.prod(b.var.type.shape))  # type: ignore[attr-defined]
        work += taps * n
        floats += n
    return work / floats


def _whole_phases(call: E.Call, var: E.Var) -> bool:
    """Whether a Winograd convolution of one image keeps each piece's three phases together
    on the pool's threads (`rvm.op.conv.winograd_keeps_phases`), where cut apart each phase
    waits for the one before: at batch 8 on two threads (Zen 4) squeezenet with its 27 x 27
    and 13 x 13 fire modules image by image too took 0.95-1.23 of the time it took with
    their copies (medians of interleaved calls, 9 runs, the host's contended spells the
    worst), with its 55 x 55 ones alone (four blocks of rows an image) 0.96-0.98 (0.96 at
    one thread)."""
    o = int(call.args[1].type.shape[1])  # type: ignore[attr-defined]  # U: (16, O, C or C2)
    c = int(call.args[0].type.shape[1])  # type: ignore[attr-defined]
    oh, ow = (int(d) for d in var.type.shape[2:])  # type: ignore[attr-defined]
    return winograd_keeps_phases(c, o, oh, ow)


def _chain(
    var: E.Var, bindings: list[E.VarBinding], at: dict[E.Var, int], uses: dict[E.Var, int],
    images: int,
) -> list[int] | None:  # fmt: skip
    """The bindings (head first) of the per-image chain that ends in ``var``, or None."""
    chain: list[int] = []
    while True:
        if uses.get(var) != 1 or var not in at:
            return None
        value = bindings[at[var]].value
        if not isinstance(value, E.Call) or not value.args or _batch(var.type) != images:
            return None
        chain.append(at[var])
        name = value.callee.name
        if name in HEADS:
            x, rest = value.args[0], value.args[1:]
            if _batch(getattr(x, "type", None)) != images or x not in at:
                return None  # (a parameter's slices would be copies: no kernel's storage)
            if not all(isinstance(a, E.Constant) for a in rest):
                return None
            if name == "conv2d_winograd" and not _whole_phases(value, var):
                return None
            return chain[::-1]
        if name not in TAILS:
            return None
        operands = [a for a in value.args if isinstance(a, E.Var)]
        constants = [a for a in value.args if isinstance(a, E.Constant)]
        if len(operands) != 1 or len(operands) + len(constants) != len(value.args):
            return None
        if any(c.data.ndim >= 4 and c.data.shape[0] != 1 for c in constants):
            return None  # a constant with a batch axis of its own
        var = operands[0]


def _by_image(concat: E.VarBinding, chains: list[list[E.VarBinding]]) -> list[E.VarBinding]:
    """The bindings computing ``concat`` image by image: the chains' inputs sliced a batch
    entry each, each image's chains on its slices, each image's concatenation, then theirs
    along the batch bound to the concatenation's variable."""
    name = concat.var.name
    images = _batch(concat.var.type)
    out: list[E.VarBinding] = []

    def bind(hint: str, value: E.Expr) -> E.Var:
        infer_type(value)
        var = E.Var(f"{name}_{hint}", value.type)
        out.append(E.VarBinding(var, value))
        return var

    inputs = list(dict.fromkeys(c[0].value.args[0] for c in chains))  # type: ignore[attr-defined]
    joined = []
    for n in range(images):
        slices = {
            x: bind(f"x{k}_image{n}", op.strided_slice(x, begin=[n], end=[n + 1], axes=[0]))
            for k, x in enumerate(inputs)
        }
        pieces = []
        for p, chain in enumerate(chains):
            var = slices[chain[0].value.args[0]]  # type: ignore[attr-defined]
            for s, b in enumerate(chain):
                value: E.Call = b.value  # type: ignore[assignment]
                args = tuple(a if isinstance(a, E.Constant) else var for a in value.args)
                var = bind(f"p{p}_{s}_image{n}", E.Call(value.callee, args, value.attrs))
            pieces.append(var)
        fields = bind(f"pieces_image{n}", E.Tuple(tuple(pieces)))
        joined.append(bind(f"image{n}", E.Call(ops.concat, (fields,), concat.value.attrs)))  # type: ignore[attr-defined]
    fields = bind("images", E.Tuple(tuple(joined)))
    whole = E.Call(ops.concat, (fields,), {**concat.value.attrs, "axis": 0})  # type: ignore[attr-defined]
    infer_type(whole)
    out.append(E.VarBinding(concat.var, whole))
    return out
