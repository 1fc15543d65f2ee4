"""Window pools (inlined reduce loops) and ops that fill an array piece by piece.

Float max_pool2d and avg_pool2d call `rvm.kernels.pool.pool2d` (compiled once for
every kernel) into an array that the epilogue reads, or the output itself; float NCHW lrn
calls `rvm.kernels.lrn.lrn` the same way; uint8 and int8 max_pool2d (quantized models) call
`rvm.kernels.qpool.max_pool2d` through its entry point, in the integers. Other dtypes'
pools are reduce loops over the window, inlined into their consumer like any reduction; the
window's rows and columns outside the input are skipped, and the average divides by the
count the reference uses. concat, stack and pad fill their array with one loop nest per
input (no conditional loads, so nothing is read out of bounds, size-0 pieces included), but a
float concat of arrays calls `rvm.kernels.joins.join_rows` a piece (its rows' runs copied, on
the pool when large: at batch 8 a loop nest a piece in the calling thread took 4 ms of
squeezenet's 48 at two threads, the innermost loop a map's row); a
concat or stack whose same-shape elementwise epilogue ends in the output fills nothing: each
piece's nest computes the epilogue on its elements and stores the output's (`write_joined`);
pad's edge, reflect and wrap modes are index maps instead, each element reading the one it
copies; cumsum fills its array with a running sum.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.jit.compute import compute
from rvm.jit.cond import eq, lt, ne
from rvm.jit.kernel import KernelBuilder
from rvm.jit.reduce import _init
from rvm.jit.scalar import convert, lit
from rvm.jit.te import Body, Scalar, Tensor, Unsupported, deps_of, idx, product
from rvm.jit.views import reshape_to
from rvm.kernels import entry
from rvm.op import ops


def _pool_geometry(kb: KernelBuilder, attrs: dict, x: Tensor) -> list[tuple]:
    geo = []
    for s in range(2):
        size, kern = x.dims[2 + s], attrs["pool_size"][s]
        st, dil = attrs["strides"][s], attrs["dilation"][s]
        lo, hi = attrs["padding"][s], attrs["padding"][s + 2]
        span = kb.dim(f"{size} + {lo + hi} - {dil * (kern - 1)} - 1")
        kb.check(lt(span, 0), f"{kb.kernel}: {kb.op}: the window is larger than the input")
        if attrs["ceil_mode"]:
            o = kb.dim(f"-(-{span} // {st}) + 1")
            o = kb.dim(f"{o} - 1 if ({o} - 1) * {st} >= {size} + {lo} else {o}")
        else:
            o = kb.dim(f"{span} // {st} + 1")
        geo.append((size, kern, st, dil, lo, hi, o))
    return geo


def _pool(kind: str):
    def lower(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
        (x,) = args
        if x.dtype == "bool":
            raise Unsupported("pooling of bools")
        geo = _pool_geometry(kb, attrs, x)
        dims = (x.dims[0], x.dims[1], geo[0][6], geo[1][6])
        include = attrs.get("count_include_pad", False)
        if x.dtype in FLOATS:
            return _library_pool(kb, kind, attrs, x, dims, include, x.dtype)
        if kind == "max" and x.dtype in ("uint8", "int8"):  # quantized models' activations
            return _int8_max_pool(kb, attrs, x, dims)

        def loader(body: Body, index: Sequence[Scalar]) -> Scalar:
            home = body.home(deps_of(*index))
            at = x.dtype if kind == "max" else "float64"
            acc = kb.fresh("acc")
            home.lines.append(f"{acc} = {_init(kind, at) if kind == 'max' else lit(0, at)}")
            pos, loops, parent = [], [], home
            for s, (size, kern, st, dil, lo, _hi, _) in enumerate(geo):
                loop = kb.open_loop(parent, str(kern))
                p = idx(
                    f"({index[2 + s].code} * {st} - {lo} + {loop.var} * {dil})",
                    index[2 + s],
                    loop.var,
                )
                loops.append(loop)
                pos.append((p, size))
                parent = loop
            v = convert(kb.load(x, parent, [index[0], index[1], pos[0][0], pos[1][0]]), at)
            for (p, size), loop in zip(pos, loops):
                loop.lines[:0] = [f"if {p.code} < 0 or {p.code} >= {size}:", "    continue"]
            if kind == "max":
                parent.lines.append(f"{acc} = np.maximum({acc}, {v.code})")
            else:
                parent.lines.append(f"{acc} += {v.code}")
            for loop in reversed(loops):
                kb.close_loop(loop)
            if kind == "max":
                return Scalar(acc, deps_of(*index), at)
            cnt = _pool_count(kb, home, index, geo, include)
            return convert(Scalar(f"({acc} / max({cnt}, 1))", deps_of(*index), "float64"), out)

        return Tensor(dims, out, loader)

    return lower


FLOATS = ("float32", "float64")


def _library_pool(
    kb: KernelBuilder, kind: str, attrs: dict, x: Tensor, dims, include, dtype: str
) -> Tensor:
    """A pool in float ``dtype`` as a call of `rvm.kernels.pool.pool2d` (compiled once for
    all kernels) filling an array, as convolutions do: the kernel's own code is the checks
    and the epilogue."""
    t = Tensor(dims, dtype, kind="anchor")
    (kh, kw), (sh, sw), (dh, dw) = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    ceil, pads = attrs["ceil_mode"], attrs["padding"]
    params = (int(kind == "max"), kh, kw, sh, sw, dh, dw, *pads, int(ceil), int(include))

    def fill() -> None:
        t.array = kb.buffer(dims, dtype, t.array)
        xv = kb.materialize(x, dtype)
        kb.call_entry("pool2d", (xv, t.array), params, dtype)

    t.fill = fill
    return t


def _int8_max_pool(kb: KernelBuilder, attrs: dict, x: Tensor, dims) -> Tensor:
    """A uint8/int8 max pool as a call of `rvm.kernels.qpool.max_pool2d` through its entry
    point (exact in the integers: no float copies) filling an array."""
    t = Tensor(dims, x.dtype, kind="anchor")
    (kh, kw), (sh, sw), (dh, dw) = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    pt, pl = attrs["padding"][0], attrs["padding"][1]
    low = -128 if x.dtype == "int8" else 0

    def fill() -> None:
        t.array = kb.buffer(dims, x.dtype, t.array)
        xv = kb.materialize(x)
        params = (low, kh, kw, sh, sw, dh, dw, pt, pl)
        kb.call_entry("qmax_pool2d", (xv, t.array), params, entry.variant([x.dtype] * 2))

    t.fill = fill
    return t


def _pool_count(kb: KernelBuilder, home: Body, index: Sequence[Scalar], geo, include) -> str:
    """The divisor of an average window: its input elements (plus padding when included)."""
    names = []
    for s, (size, kern, st, dil, lo, hi, _) in enumerate(geo):
        c = kb.fresh("cnt")
        names.append(c)
        first = f"{index[2 + s].code} * {st} - {lo}"
        low, high = ("-" + str(lo), f"{size} + {hi}") if include else ("0", size)
        kb.loops += 1
        home.lines += [
            f"{c} = 0",
            f"for q_ in range({kern}):",
            f"    if {low} <= {first} + q_ * {dil} < {high}:",
            f"        {c} += 1",
        ]
    return f"{names[0]} * {names[1]}"


compute[ops.max_pool2d] = _pool("max")
compute[ops.avg_pool2d] = _pool("avg")


def _lrn(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    """Float NCHW lrn across channels as a call of the library's ``lrn`` entry point
    (`rvm.kernels.lrn`) filling an array (other ranks and axes: the numpy kernel)."""
    (x,) = args
    if x.dtype not in FLOATS or x.ndim != 4 or attrs["axis"] % 4 != 1:
        raise Unsupported("lrn other than across the channels of a float NCHW tensor")
    from rvm.kernels.lrn import float_bits

    t = Tensor(x.dims, x.dtype, kind="anchor")
    bits = [float_bits(float(attrs[k])) for k in ("alpha", "beta", "bias")]

    def fill() -> None:
        t.array = kb.buffer(x.dims, x.dtype, t.array)
        xv = kb.materialize(x)
        kb.call_entry("lrn", (xv, t.array), (attrs["size"], *bits), x.dtype)

    t.fill = fill
    return t


compute[ops.lrn] = _lrn


# -- filled arrays -------------------------------------------------------------------------


def _store(kb: KernelBuilder, target: str, x: Tensor, offset: dict[int, str], dtype: str):
    def emit(body: Body, index: list[Scalar]) -> None:
        v = kb.let(body, convert(kb.load(x, body, index), dtype))
        where = [
            idx(f"{offset[a]} + {i.code}", i) if a in offset else i for a, i in enumerate(index)
        ]
        body.lines.append(f"{kb.ref(target, where)} = {v.code}")

    kb.loop_nest(kb.root, x.dims, emit)


def join(kb: KernelBuilder, pieces: Sequence[Tensor], axis: int, out: str) -> Tensor:
    """The pieces concatenated along ``axis`` as a filled array."""
    first = pieces[0]
    for p in pieces[1:]:
        for a in range(first.ndim):
            if a != axis and p.dims[a] != first.dims[a]:
                kb.check(
                    ne(p.dims[a], first.dims[a]),
                    f"{kb.kernel}: {kb.op}: inputs differ outside the joined axis",
                )
    dims = list(first.dims)
    dims[axis] = kb.dim(" + ".join(p.dims[axis] for p in pieces))
    t = Tensor(tuple(dims), out, kind="anchor", info={"join": (tuple(pieces), axis)})

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        if out in FLOATS and all(_is_array(p, out) for p in pieces):
            _join_rows(kb, t.array, pieces, axis, dims, out)
            return
        offset = "0"
        for p in pieces:
            _store(kb, t.array, p, {axis: offset}, out)
            offset = kb.dim(f"{offset} + {p.dims[axis]}")

    t.fill = fill
    return t


def _is_array(p: Tensor, dtype: str) -> bool:
    """Whether ``p`` is (or its fill makes) a C-contiguous array of ``dtype`` as it is."""
    return p.dtype == dtype and p.loader is None and (p.array is not None or p.fill is not None)


def _join_rows(
    kb: KernelBuilder, target: str, pieces: Sequence[Tensor], axis: int, dims: list, dtype: str
) -> None:
    """The float ``pieces`` (arrays, `_is_array`) copied into ``target`` along ``axis`` by
    the library's `rvm.kernels.joins.join_rows`, a call a piece: the result and each piece
    viewed as rows of what follows the axis, split over threads when large."""
    rows = kb.dim(product(dims[:axis]))
    width = kb.dim(product(dims[axis:]))
    whole = kb.fresh("w")
    kb.root.lines.append(f"{whole} = {target}.reshape(({rows}, 1, 1, {width}))")
    offset = "0"
    for p in pieces:
        array = kb.materialize(p)
        view = kb.fresh("w")
        run = kb.dim(product(p.dims[axis:]))
        kb.root.lines.append(f"{view} = {array}.reshape(({rows}, 1, 1, {run}))")
        at = "0" if offset == "0" else kb.dim(product([offset, *dims[axis + 1 :]]))
        kb.call_entry("join_rows", (view, whole), (at,), dtype)
        offset = kb.dim(f"{offset} + {p.dims[axis]}")


def write_joined(kb: KernelBuilder, target: Tensor, joined: Tensor, name: str, dtype: str) -> bool:
    """Loops storing ``target`` into the array ``name`` when ``target`` reads the filled array
    ``joined`` (`join`'s) only element by element at its own index (a same-shape elementwise
    epilogue: `rvm.jit.lower`): one loop nest per piece over its part of the output, the
    epilogue computed on the piece's elements, so ``joined`` is never filled and the output is
    written once, not copied into and then read and written again (a concat and its ReLU or
    batch norm at batch 8: an NCHW concat's pieces are not runs of the output there,
    `rvm.transform.concat_plan`). False (nothing emitted) for other tensors or a filled one."""
    if "join" not in joined.info or id(joined) in kb.filled or target is joined:
        return False
    pieces, axis = joined.info["join"]
    kb.filled.add(id(joined))  # its elements are its pieces': no array is filled
    offset = "0"
    for p in pieces:
        shifted: dict[str, Scalar] = {}  # the output's index code along the axis -> the piece's

        def piece_at(body: Body, index: Sequence[Scalar], p=p, off=offset, shifted=shifted):
            at = list(index)
            i = at[axis]
            at[axis] = shifted.get(i.code) or idx(f"{i.code} - {off}", i)
            return kb.load(p, body, at)

        def emit(body: Body, index: list[Scalar], off=offset, shifted=shifted) -> None:
            at = list(index)
            if off != "0":
                at[axis] = idx(f"{off} + {index[axis].code}", index[axis])
            shifted[at[axis].code] = index[axis]
            v = kb.let(body, convert(kb.load(target, body, at), dtype))
            body.lines.append(f"{kb.ref(name, at)} = {v.code}")

        joined.loader = piece_at
        kb.loop_nest(kb.root, p.dims, emit)
        offset = kb.dim(f"{offset} + {p.dims[axis]}")
    joined.loader = None
    return True


def _concat(kb: KernelBuilder, attrs: dict, args: list, out: str) -> Tensor:
    pieces = args[0]
    return join(kb, pieces, attrs["axis"] % pieces[0].ndim, out)


def _stack(kb: KernelBuilder, attrs: dict, args: list, out: str) -> Tensor:
    pieces = args[0]
    nd = pieces[0].ndim + 1
    axis = attrs["axis"] % nd
    expanded = compute[ops.expand_dims]
    grown = [expanded(kb, {"axis": (axis,)}, [p], p.dtype) for p in pieces]
    return join(kb, grown, axis, out)


def _pad(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    (x,) = args
    widths = attrs["pad_width"]
    dims = [kb.dim(f"{d} + {lo + hi}") if lo + hi else d for d, (lo, hi) in zip(x.dims, widths)]
    mode = attrs.get("mode", "constant")
    if mode != "constant":
        return _pad_copying(kb, x, widths, dims, mode)
    t = Tensor(tuple(dims), out, kind="anchor")
    value = lit(attrs["pad_value"], out)

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        kb.root.lines.append(f"{t.array}[...] = {value}")
        _store(kb, t.array, x, {a: str(lo) for a, (lo, _) in enumerate(widths) if lo}, out)

    t.fill = fill
    return t


def _pad_copying(
    kb: KernelBuilder, x: Tensor, widths: Sequence[Sequence[int]], dims: Sequence[str], mode: str
) -> Tensor:
    """Edge, reflect or wrap padding: each element reads the input element it copies."""
    for d, (lo, hi) in zip(x.dims, widths):
        if lo + hi and not (d.isdigit() and int(d) > 0):  # the type rule rejects a static 0
            kb.check(eq(d, 0), f"{kb.kernel}: {kb.op}: {mode} padding of an empty axis")

    def source(body: Body, index: Sequence[Scalar]) -> list[Scalar]:
        src = []
        for i, d, (lo, hi) in zip(index, x.dims, widths):
            if not lo + hi:
                src.append(i)
                continue
            at = f"({i.code} - {lo})"
            if mode == "edge":
                code = f"min(max({at}, 0), {d} - 1)"
            elif mode == "wrap":
                code = f"{at} % {d}"
            else:  # reflect: a triangle wave of period 2 * (d - 1) (NumPy's repeated mirroring)
                period = kb.dim(f"max(2 * {d} - 2, 1)")
                t = kb.let(body, idx(f"{at} % {period}", i), "r")
                code = f"({t.code} if {t.code} < {d} else {period} - {t.code})"
            src.append(kb.let(body, idx(code, i), "s"))
        return src

    return kb.index_map(x, dims, source)


def _cumsum(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    (x,) = args
    axis = attrs["axis"]
    if axis is None:
        x, axis = reshape_to(kb, x, [kb.dim(product(x.dims))], checked=True), 0
    axis %= x.ndim
    t = Tensor(x.dims, out, kind="anchor")
    buf: list[str] = []

    def fill() -> None:
        name = kb.buffer(x.dims, out)
        buf.append(name)

        def emit(body: Body, index: list[Scalar]) -> None:
            v = kb.let(body, convert(kb.load(x, body, index), out))
            here = kb.ref(name, index)
            prev = [idx(f"{i.code} - 1", i) if a == axis else i for a, i in enumerate(index)]
            body.lines += [
                f"if {index[axis].code} == 0:",
                f"    {here} = {v.code}",
                "else:",
                f"    {here} = {kb.ref(name, prev)} + {v.code}",
            ]

        kb.loop_nest(kb.root, x.dims, emit)

    def loader(body: Body, index: Sequence[Scalar]) -> Scalar:
        if not buf:
            fill()
        v = Scalar(f"{buf[0]}[{', '.join(i.code for i in index)}]", deps_of(*index), out)
        if attrs["exclusive"]:
            xv = convert(kb.load(x, body, index), out)
            return Scalar(f"({v.code} - {xv.code})", deps_of(v, xv), out)
        return v

    t.loader = loader
    return t


compute[ops.concat] = _concat
compute[ops.stack] = _stack
compute[ops.pad] = _pad
compute[ops.cumsum] = _cumsum
