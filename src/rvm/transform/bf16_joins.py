"""What joins a bf16 convolution (`rvm.transform.to_bf16`'s second and third steps): the ops
after it that become its epilogue (`join_epilogue`: a per-channel bias, a residual, then an
activation), the per-channel affine chain and ReLU before it that become its prologue
(`join_prologues`), and the activation between two convolutions kept as a pair plane
(`pair_planes`), each as the ``conv2d_bf16`` call's operands and attributes (`rvm.op.bf16`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from rvm import op
from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.op import ops
from rvm.op.bf16 import (
    PAIRINGS,
    conv_pairs,
    plane_shape,
    split_operands,
    tile_pairs,
    turn_pairs,
    unpair,
    unturn_pairs,
)
from rvm.transform.legalize import const_of

__all__ = ["join_epilogue", "join_prologues", "pair_planes"]

Adds = Callable[[E.Call], bool] | None
"""Which convolutions add a pair plane's residual as their kernels store (None: none)."""


def pair_planes(
    bindings: list[E.VarBinding], uses: Counter, residuals: bool = False, positions: bool = True
) -> tuple[list[E.VarBinding], int]:
    """``bindings`` where each ``conv2d_bf16`` ``p`` (one group, static shapes) whose uses are
    all the input of later ``conv2d_bf16`` calls ``q`` of the region (one group, no prologue)
    writes a pair plane (``plane``: the first stride-1 reader's, else a 1 x 1's) and each
    ``q`` reads it (``source``), as it lies or, strided or laid out otherwise, its words
    copied into its own phases (``source_at``): the activation between them stays bf16,
    rounded once where ``p`` sums it, as ``q`` would round it (`rvm.op.bf16`). With
    ``residuals`` (where the kernels add a pair plane's residual as they store their blocks:
    AMX's walk, `rvm.kernels.amx.BLOCK_OUT`, and with ``positions`` False the vector walk's
    tiles, `rvm.kernels.bf16direct.vectors_out`) some of those uses may instead be the
    residual of later convolutions ``r`` (no panels, at most a ReLU; with ``positions``
    False a 1 x 1 with no padding: rows as the output's), which then read the plane as their
    residual (``residual_plane``: ResNet's shortcut, read by the next block's first
    convolution and added by its last, stays bf16), and ``p`` may take a residual itself;
    else ``p`` takes none. A channel concatenation of such convolutions (``p``s of an even
    number of channels, used only there: squeezenet's fire modules) so read is a
    concatenation of their planes, each writing its pairs of the readers' plane (in place,
    `rvm.transform.concat_plan`); a piece that is no such convolution (float32, of static
    size: inception's slices of merged 1 x 1s, average pools' branches) is rounded into its
    part by a ``pair_image`` after it, where another piece is a convolution's or two
    readers (convolutions or pools) read the concatenation, each of which would otherwise
    round all of it into a plane of its own at each call. A 2-d max pool of such a ``p`` (or
    concatenation) whose result only such convolutions read reads ``p``'s plane and writes theirs
    (``max_pool2d_pairs``), comparing bits where every piece ends in a ReLU (``signed``
    False): a maximum of bf16 values is one of them, so the readers get the values they got.
    With ``residuals`` and ``positions`` (the kernels walk turned around: AMX's) too, a plane
    that one convolution writes and only convolutions that walk turned around read as it
    lies or add (`_lines`) is laid out as positions by channel pairs (``plane_layout``,
    ``source_layout`` and ``residual_layout`` ``"positions"``): a position's pairs one line,
    which the writer rounds its sums into and each reader loads as A's rows as they lie, or
    adds (`rvm.kernels.amxconv`); ResNet's shortcut within a stage too. The program's inputs
    and outputs stay float32. Returns the new bindings and how many convolutions write
    planes (one only added, as a 1 x 1 would read it: ResNet's first block's main path,
    added by its projection)."""
    readers: dict[E.Var, list[tuple[int, str]]] = {}  # a value's readers and their roles
    for j, b in enumerate(bindings):
        if _is_conv(b.value):
            _, residual, _ = split_operands(b.value.args[2:], b.value.attrs.get("prologue", "none"))
            for role, arg in (("x", b.value.args[0]), ("residual", residual)):
                if isinstance(arg, E.Var):
                    readers.setdefault(arg, []).append((j, role))
    for j, b in enumerate(bindings):  # a pool whose result only convolutions read
        if _pools(b.value) and isinstance(b.value.args[0], E.Var):
            shape = getattr(b.var.type, "shape", None)
            found = readers.get(b.var, [])
            if (
                shape is not None
                and all(isinstance(d, int) for d in shape[1:])
                and found
                and len(found) == uses[b.var]
                and all(role == "x" and _plane_for(bindings[k].value, tuple(shape[1:]))
                        is not None for k, role in found)
            ):  # fmt: skip
                readers.setdefault(b.value.args[0], []).append((j, "pool"))
    adds = (_adds if positions else _adds_whole) if residuals else None
    place = {b.var: i for i, b in enumerate(bindings)}
    out = list(bindings)
    after: dict[int, list[E.VarBinding]] = {}  # bindings to insert after each place
    count = 0
    for i, b in enumerate(bindings):
        pieces = _writers(out, i, place, uses, adds)
        found = readers.get(b.var, [])
        if pieces is None or not found or len(found) != uses[b.var]:
            continue
        sources = [j for j, role in found if role == "x"]
        added = [j for j, role in found if role == "residual"]
        pools = [j for j, role in found if role == "pool"]
        # pieces of a concatenation that no convolution writes: each rounded into its part of
        # the plane (`pair_image`), where two readers would each have built a plane of the
        # float32 concatenation, or a convolution writes the rest of it
        rounded = [k for k in pieces if pieces != [i] and not _may_write(out[k].value, adds)]
        if rounded and len(rounded) == len(pieces) and len(sources) + len(pools) < 2:
            continue
        if added and not (adds is not None and all(adds(out[j].value) for j in added)):
            continue
        shape = getattr(b.var.type, "shape", None)
        if shape is None or not all(isinstance(d, int) for d in shape[1:]):
            continue
        source = tuple(shape[1:])
        wants = [_plane_for(out[j].value, source) for j in sources]
        if None in wants:
            continue
        # the plane its first stride-1 reader reads, or a 1 x 1's (no padding): the others
        # copy its words into their own phases (``source_at``), a pool reads any (in place,
        # or through a copy where its padding is not the plane's: a plane of the pool's
        # padding made resnet50's stem write rows wider than its image, 1.07x its time)
        own = [g for g in wants if g != _ANY]
        plane = own[0] if own else (0, 0, *plane_shape(source, (1, 1), (0, 0, 0, 0), (1, 1)))
        layout = "channels"
        if (
            residuals
            and positions
            and pieces == [i]
            and not pools
            and all(want == plane for want in wants)
        ):
            readers_ = [out[j].value for j in sources + added]
            layout = _lines(out[i].value, readers_)
        for k in pieces:
            if k in rounded:  # its plane's piece after it, which the tuple holds instead
                f = out[k].var
                g = op.pair_image(f, plane)
                infer_type(g)
                after.setdefault(k, []).append(E.VarBinding(E.Var(f"{f.name}_pairs", g.type), g))
                continue
            p = out[k].value
            if layout == "positions":
                p = _in_tiles(p)
            lies = {"plane_layout": layout} if _is_conv(p) else {}
            p = _rebuilt(p, plane=plane, **lies)
            out[k] = E.VarBinding(E.Var(out[k].var.name, p.type), p)
        relu = not rounded and all(_no_negatives(out[k].value) for k in pieces)
        if pieces != [i]:  # a concatenation: of the planes, through its tuple
            t = place[out[i].value.args[0]]
            fields = E.Tuple([after[k][-1].var if k in rounded else out[k].var for k in pieces])
            infer_type(fields)
            out[t] = E.VarBinding(E.Var(out[t].var.name, fields.type), fields)
            joined = E.Call(out[i].value.callee, [out[t].var], out[i].value.attrs)
            infer_type(joined)
            out[i] = E.VarBinding(E.Var(out[i].var.name, joined.type), joined)
        var = out[i].var
        for j, want in zip(sources, wants):  # a pair plane in has no column pairs
            at = () if want == plane else plane[:2]
            q = _channel_pairs(out[j].value, source[0])
            q = _rebuilt(q if layout == "channels" else _in_tiles(q), x=var, source=source,
                         source_at=at, source_layout=layout)  # fmt: skip
            out[j] = E.VarBinding(out[j].var, q)  # q may write in turn
        for j in added:
            q = out[j].value if layout == "channels" else _in_tiles(out[j].value)
            q = _rebuilt(q, residual=var, residual_plane=plane[:2], residual_layout=layout)
            out[j] = E.VarBinding(out[j].var, q)
        for j in pools:  # float32 out, until its own readers make it write their plane
            q = _pooled(out[j].value, var, source, plane[:2], signed=not relu)
            out[j] = E.VarBinding(out[j].var, q)
        count += len(pieces) - len(rounded)
    return [c for k, b in enumerate(out) for c in (b, *after.get(k, ()))], count


def _writers(
    out: list[E.VarBinding], i: int, place: dict, uses: Counter, adds: Adds
) -> list[int] | None:
    """The places of the convolutions that would write binding ``i``'s pair plane: ``[i]``
    where it is a convolution that may write one, or the pieces of a channel concatenation
    (its tuple's one use) each of which may, of an even number of channels and used only
    there; else None."""
    value = out[i].value
    if _is_conv(value):
        return [i] if _may_write(value, adds) else None
    if isinstance(value, E.Call) and value.callee is ops.max_pool2d_pairs:
        return [i] if not value.attrs["plane"] else None
    if not (isinstance(value, E.Call) and value.callee is ops.concat and value.attrs["axis"] == 1):
        return None
    t = value.args[0]
    if not isinstance(t, E.Var) or t not in place or uses[t] != 1:
        return None
    fields = out[place[t]].value
    if not isinstance(fields, E.Tuple):
        return None
    pieces = []
    for f in fields.fields:
        k = place.get(f) if isinstance(f, E.Var) else None
        if k is None or uses[f] != 1 or k in pieces:
            return None
        if not (_may_write(out[k].value, adds) or _rounds_in(f)):
            return None
        shape = getattr(f.type, "shape", None)
        if shape is None or not isinstance(shape[1], int) or shape[1] % 2:
            return None
        pieces.append(k)
    return pieces


def _rounds_in(value: E.Var) -> bool:
    """Whether ``value``, a piece of a concatenation no convolution of which writes it, may be
    rounded into the concatenation's pair plane by a ``pair_image`` (`rvm.op.bf16planes`):
    a float32 NCHW image of static size."""
    t = value.type
    shape = getattr(t, "shape", None)
    return (
        getattr(t, "dtype", None) == "float32"
        and shape is not None
        and len(shape) == 4
        and all(isinstance(d, int) for d in shape[1:])
    )


def _may_write(conv: E.Expr, adds: Adds) -> bool:
    """Whether ``conv`` (a ``conv2d_bf16`` or another value) may write a pair plane: one
    group, none yet, and a residual only where the kernels add it as they store (``adds``:
    `_adds` or `_adds_whole`; None: nowhere). A prologue's affine is no residual (counted as
    one, densenet121's 1 x 1s at 7 x 7, turned around, wrote float32 rows and each 3 x 3
    after them built its plane from those)."""
    if not _is_conv(conv) or conv.attrs["groups"] != 1 or conv.attrs.get("plane"):
        return False
    _, residual, _ = split_operands(conv.args[2:], conv.attrs.get("prologue", "none"))
    return residual is None or (adds is not None and adds(conv))


def _lines(writer: E.Call, readers: list[E.Call]) -> str:
    """How the plane ``writer`` (a ``conv2d_bf16``) writes for its ``readers`` (convolutions
    that read it as it lies, or add it) lies (`rvm.op.bf16.LAYOUTS`): as
    positions by channel pairs where the writer and every reader run as AMX's walk turned
    around (`_turns`), the writer with at most a ReLU and no float32 residual, and rounds its
    sums into them a line a position; else as channel pairs."""
    if not _is_conv(writer):  # a pool's
        return "channels"
    attrs = writer.attrs
    _, residual, _ = split_operands(writer.args[2:], attrs.get("prologue", "none"))
    # a 1 x 1 takes tiles reading a plane of positions, or widening the channels: then the
    # copy of its pair plane into positions costs less than the lines save (64 -> 256 on 56 x
    # 56, two threads: 235 -> 109 us; narrowing, 256 -> 64: 79 -> 88); `_turns` checks both
    # are whole numbers of 32
    if not _turns(writer):
        return "channels"
    c, o = _channels_in(writer), _channels_out(writer)
    widens = tuple(attrs["kernel"]) == (1, 1) and c < o  # type: ignore[operator]
    ok = (residual is None or bool(attrs.get("residual_plane"))) and attrs["activation"] in (
        "none", "relu")  # fmt: skip
    ok = ok and (attrs["pairing"] == "tiles" or widens)
    return "positions" if ok and all(_turns(q) for q in readers) else "channels"


def _channels_in(conv: E.Call) -> int | None:
    """The input channels of ``conv`` (a ``conv2d_bf16``): its image's, or its plane's."""
    if conv.attrs.get("source"):
        return conv.attrs["source"][0]
    shape = getattr(conv.args[0].type, "shape", None)
    return shape[1] if shape else None


def _channels_out(conv: E.Call) -> int | None:
    """The output channels of ``conv`` (a ``conv2d_bf16``): its weight's rows."""
    shape = getattr(getattr(conv.args[1], "type", None), "shape", None)
    return shape[0] if shape else None


def _turns(conv: E.Call) -> bool:
    """Whether ``conv`` (a ``conv2d_bf16``) runs as the walk turned around
    (`rvm.kernels.bf16conv._walks_positions`): one group, stride 1, no panels, input and
    output channels in 32s, its weight in tiles or a 1 x 1's (laid out so: `_in_tiles`), and
    at most a ReLU after a residual."""
    attrs = conv.attrs
    c, o = _channels_in(conv), _channels_out(conv)
    _, residual, _ = split_operands(conv.args[2:], attrs.get("prologue", "none"))
    tiles = attrs["pairing"] == "tiles" or tuple(attrs["kernel"]) == (1, 1)
    return (
        tiles
        and isinstance(c, int) and c % 32 == 0
        and isinstance(o, int) and o % 32 == 0
        and attrs["groups"] == 1 and attrs["strides"] == (1, 1) and attrs.get("panel", 0) == 0
        and (residual is None or attrs["activation"] in ("none", "relu"))
    )  # fmt: skip


def _in_tiles(conv: E.Call) -> E.Call:
    """``conv`` (a ``conv2d_bf16`` `_turns` takes) with its weight in tiles (a 1 x 1's
    channel pairs laid out anew, `rvm.op.bf16.tile_pairs`)."""
    if conv.attrs["pairing"] == "tiles":
        return conv
    rows = tile_pairs(conv.args[1].data, 1)
    return _rebuilt(conv, w=E.Constant(np.ascontiguousarray(rows)), pairing="tiles")


_ANY = ()  # `_plane_for`: a convolution that copies any plane's words into its own phases


def _plane_for(q: E.Call, source: tuple) -> tuple | None:
    """The pair plane ``(pt, pl, hq, wq)`` convolution ``q`` reads as it lies of a ``source``
    image (its input; stride 1), `_ANY` where it copies another's words into its own phases
    (strided), or None where it reads none (groups, a prologue, one read already)."""
    attrs = q.attrs
    if attrs.get("source") or attrs.get("prologue", "none") != "none" or attrs["groups"] != 1:
        return None
    if attrs["strides"] != (1, 1):
        return _ANY
    hq, wq = plane_shape(source, attrs["kernel"], attrs["padding"], attrs["dilation"])
    return (attrs["padding"][0], attrs["padding"][1], hq, wq)


def _pools(value: E.Expr) -> bool:
    """Whether ``value`` is a 2-d max pool (NCHW) that may read a pair plane instead."""
    return isinstance(value, E.Call) and value.callee is ops.max_pool2d


def _no_negatives(value: E.Call) -> bool:
    """Whether ``value`` (a convolution or a pool on pair planes) has no value below +0."""
    if value.callee is ops.max_pool2d_pairs:
        return not value.attrs["signed"]
    return value.attrs["activation"] == "relu"


def _pooled(pool: E.Call, x: E.Var, source: tuple, at: tuple, signed: bool) -> E.Call:
    """``pool`` (a ``max_pool2d``) as a ``max_pool2d_pairs`` of ``x``, the pair plane of its
    ``source`` image with padding ``at``, float32 out, typed."""
    a = pool.attrs
    new = op.max_pool2d_pairs(x, source, at, a["pool_size"], a["strides"], a["padding"],
                              a["dilation"], a["ceil_mode"], signed=signed)  # fmt: skip
    infer_type(new)
    return new


def _adds(conv: E.Call) -> bool:
    """Whether ``conv`` adds a residual (or may take a pair plane's) as AMX's walk stores its
    blocks: no panels, at most a ReLU after (`rvm.kernels.bf16conv.conv2d`)."""
    attrs = conv.attrs
    return attrs.get("panel", 0) == 0 and attrs["activation"] in ("none", "relu")


def _adds_whole(conv: E.Call) -> bool:
    """Whether ``conv`` adds a residual (or may take a pair plane's) as the vector walk puts
    its tiles out (`rvm.kernels.bf16direct.vectors_out`): as `_adds`, and its rows the
    output's, a 1 x 1 with no padding (wider rows round their sums in a pass of their own)."""
    attrs = conv.attrs
    whole = tuple(attrs["kernel"]) == (1, 1) and not any(attrs["padding"])
    return whole and _adds(conv)


def _channel_pairs(conv: E.Call, c: int) -> E.Call:
    """``conv`` (a ``conv2d_bf16`` of ``c`` input channels, one group) with its odd channel's
    taps paired as its channel pairs (`rvm.op.bf16.PAIRINGS`' ``"channels"``), its weight's
    words moved (out of their panels and back, when turned)."""
    attrs = conv.attrs
    if attrs["pairing"] != "columns":
        return conv
    rows, panel = conv.args[1].data, attrs["panel"]
    rows = unturn_pairs(rows, 1, panel) if panel else rows
    rows = conv_pairs(unpair(rows, c, *attrs["kernel"], PAIRINGS.index(attrs["pairing"])))
    rows = turn_pairs(rows, 1, panel) if panel else rows
    return _rebuilt(conv, w=E.Constant(np.ascontiguousarray(rows)), pairing="channels")


_CONV_ATTRS = (
    "strides", "padding", "dilation", "groups", "kernel", "panel", "activation", "pairing"
)  # fmt: skip


def _rebuilt(conv: E.Call, **changes) -> E.Call:
    """``conv`` (a ``conv2d_bf16``, or a ``max_pool2d_pairs``) with ``changes`` to its operands
    (``x``, ``w``, ``bias``, ``residual``, ``affine``) or attributes, typed."""
    attrs = conv.attrs
    if conv.callee is ops.max_pool2d_pairs:
        new = op.max_pool2d_pairs(conv.args[0], **{**attrs, **changes})
        infer_type(new)
        return new
    prologue = attrs.get("prologue", "none")
    bias, residual, affine = split_operands(conv.args[2:], prologue)
    parts = dict(x=conv.args[0], w=conv.args[1], bias=bias, residual=residual, affine=affine,
                 plane=attrs.get("plane", ()), source=attrs.get("source", ()), prologue=prologue,
                 residual_plane=attrs.get("residual_plane", ()),
                 source_at=attrs.get("source_at", ()),
                 plane_layout=attrs.get("plane_layout", "channels"),
                 source_layout=attrs.get("source_layout", "channels"),
                 residual_layout=attrs.get("residual_layout", "channels"),
                 **{k: attrs[k] for k in _CONV_ATTRS})  # fmt: skip
    new = op.conv2d_bf16(**{**parts, **changes})
    infer_type(new)
    return new


def join_prologues(bindings: list[E.VarBinding], uses: Counter) -> tuple[list[E.VarBinding], int]:
    """``bindings`` where each ``conv2d_bf16`` whose input is a chain of per-channel affine
    ops on a float32 NCHW tensor ``x`` -- ``batch_norm``, ``multiply`` and ``add`` by a
    constant of one value a channel (or one value) -- then, or only, a ``relu``, each read by
    the next alone, reads ``x`` with that chain as its ``prologue`` (one scale and shift a
    channel, then ReLU), applied as its pair plane is built (densenet's BN-ReLU before each
    convolution); the chain's bindings dropped. Returns the new bindings and how many
    convolutions took a prologue."""
    consts = {b.var: b.value.data for b in bindings if isinstance(b.value, E.Constant)}
    at = {b.var: i for i, b in enumerate(bindings)}
    out: list[E.VarBinding | None] = list(bindings)
    count = 0
    for j, b in enumerate(bindings):
        q = b.value
        if not _is_conv(q) or q.attrs.get("source") or q.attrs.get("prologue", "none") != "none":
            continue
        x = q.args[0]
        shape = getattr(x.type, "shape", None)
        if shape is None or len(shape) != 4 or not isinstance(shape[1], int):
            continue
        c = shape[1]
        scale, shift, drop, relu = np.ones(c), np.zeros(c), [], False

        def producer(v: E.Expr) -> E.Call | None:
            if not isinstance(v, E.Var) or v not in at or uses[v] != 1:
                return None
            binding = out[at[v]]
            value = binding.value if binding is not None else None
            return value if isinstance(value, E.Call) and isinstance(value.callee, E.Op) else None

        call = producer(x)
        if call is not None and call.callee is ops.relu:
            relu, drop, x = True, [at[x]], call.args[0]
        while (call := producer(x)) is not None:
            step = _affine_step(call, consts, c)
            if step is None:
                break
            s, t = step
            scale, shift = s * scale, t * scale + shift  # the chain after x * s + t
            drop.append(at[x])
            x = call.args[0]
        if not drop or getattr(x.type, "dtype", None) != "float32":
            continue
        if tuple(getattr(x.type, "shape", ())) != tuple(shape):
            continue
        affine = E.Constant(np.stack([scale, shift]).astype(np.float32))
        out[j] = E.VarBinding(
            b.var,
            _rebuilt(q, x=x, affine=affine, prologue="affine_relu" if relu else "affine"),
        )
        for d in drop:
            out[d] = None
        count += 1
    return [b for b in out if b is not None], count


def _affine_step(call: E.Call, consts: dict, c: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(s, t)`` (float64, one a channel) when ``call`` is ``x * s + t`` of its first
    operand ``x`` per channel of ``c`` (axis 1): an inference ``batch_norm`` of constant
    statistics, or a ``multiply`` or ``add`` by a constant of one value a channel (or one
    value); else None."""
    args = call.args
    if call.callee is ops.batch_norm:
        stats = [_per_channel(const_of(a, consts), c, stats=True) for a in args[1:5]]
        if len(args) != 5 or call.attrs.get("axis") != 1 or any(v is None for v in stats):
            return None
        gamma, beta, mean, var = stats
        s = gamma / np.sqrt(var + float(call.attrs["epsilon"]))
        return s, beta - mean * s
    if call.callee not in (ops.multiply, ops.add) or len(args) != 2:
        return None
    if const_of(args[0], consts) is not None:
        return None  # the constant first: the chain's input is not args[0]
    v = _per_channel(const_of(args[1], consts), c)
    if v is None:
        return None
    return (v, np.zeros(c)) if call.callee is ops.multiply else (np.ones(c), v)


def _per_channel(b: np.ndarray | None, c: int, stats: bool = False) -> np.ndarray | None:
    """``b`` as ``c`` float64 values, one a channel: ``(c,)`` statistics (``stats``: a batch
    norm's), or a constant an NCHW tensor broadcasts along its channels only (or one value
    for all); else None."""
    if b is None or b.dtype != np.float32 or b.ndim > 4:
        return None
    if stats:
        return b.astype(np.float64) if b.shape == (c,) else None
    if b.size == 1:
        return np.full(c, float(b.reshape(())), np.float64)
    if (1,) * (4 - b.ndim) + b.shape != (1, c, 1, 1):
        return None
    return b.reshape(c).astype(np.float64)


def _is_conv(value: E.Expr) -> bool:
    return isinstance(value, E.Call) and value.callee is ops.conv2d_bf16


def join_epilogue(
    value: E.Expr,
    convs: dict[E.Var, int],
    out: list[E.VarBinding | None],
    consts: dict[E.Var, np.ndarray],
    uses: Counter,
) -> tuple[E.Var, E.Call] | None:
    """(``p``, the one ``conv2d_bf16`` computing ``value``) when ``value`` is ``add(p, b)``
    of a constant per-channel bias ``b`` (p without a bias, residual or activation yet),
    ``add(p, r)`` of a float32 ``r`` of p's static shape (p without a residual or activation
    yet; of two such convolutions, the later), or ``relu(p)`` or ``gelu(p)`` (p without an
    activation yet), of a ``conv2d_bf16`` ``p`` that ``value`` alone uses; else None. The
    kernel applies them to its rows as it sums them."""
    if not isinstance(value, E.Call) or not isinstance(value.callee, E.Op):
        return None
    args = [a for a in value.args if isinstance(a, E.Var) and a in convs and uses[a] == 1]
    if not args or (len(args) > 1 and value.callee is not ops.add):
        return None
    p = max(args, key=lambda a: convs[a])  # the later, whose place the joined call takes
    binding = out[convs[p]]
    assert binding is not None
    conv = binding.value
    rest = conv.args[2:]
    if conv.attrs["activation"] != "none":
        return None
    bias = rest[0] if rest else None
    residual = rest[1] if len(rest) > 1 else None
    if value.callee is ops.add and len(value.args) == 2 and residual is None:
        other = value.args[1] if value.args[0] is p else value.args[0]
        b = None if bias is not None else _channel_bias(other, consts, conv)
        if b is not None:
            new = _rebuilt(conv, bias=E.Constant(b))
        elif _same_shape(other, binding.var):
            if bias is None:
                bias = E.Constant(np.zeros(conv.args[1].data.shape[0], np.float32))
            new = _rebuilt(conv, bias=bias, residual=other)
        else:
            return None
    elif value.callee in (ops.relu, ops.gelu):
        form = "relu" if value.callee is ops.relu else "gelu"
        if value.callee is ops.gelu and value.attrs.get("approximate") == "tanh":
            form = "gelu_tanh"
        new = _rebuilt(conv, activation=form)
    else:
        return None
    return p, new


def _same_shape(r: E.Expr, conv: E.Var) -> bool:
    """Whether ``r`` is a computed float32 tensor of the convolution's static shape."""
    if isinstance(r, E.Constant):
        return False
    rt, ct = getattr(r, "type", None), getattr(conv, "type", None)
    shape = getattr(ct, "shape", None)
    return (
        getattr(rt, "dtype", None) == "float32"
        and shape is not None
        and all(isinstance(d, int) for d in shape)
        and tuple(getattr(rt, "shape", None) or ()) == tuple(shape)
    )


def _channel_bias(
    other: E.Expr, consts: dict[E.Var, np.ndarray], conv: E.Call
) -> np.ndarray | None:
    """``other`` as a (channels,) float32 bias when it is a float32 constant broadcast along
    the convolution's channels only (so the sum keeps the convolution's shape); else None."""
    b = const_of(other, consts)
    channels = conv.args[1].data.shape[0]
    if b is None or b.dtype != np.float32 or b.ndim > 4:
        return None
    shape = (1,) * (4 - b.ndim) + b.shape
    if shape != (1, channels, 1, 1):
        return None
    return np.ascontiguousarray(b.reshape(channels))
