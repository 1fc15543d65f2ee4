"""Compute definitions of layout and indexing ops: index maps over their input.

transpose, expand_dims, squeeze, broadcast_to, strided_slice, split, tile, take, gather and
one_hot map an output index to an input index (no data moves until the consumer loads).
reshape and flatten view the input's array with the new shape (an array is materialized first
when the input is computed; as a kernel's output, the input is computed straight into it).
Indices read from data (take, gather) are bounds-checked.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.jit.compute import compute
from rvm.jit.cond import all_of, any_of, eq, gt, mod, ne
from rvm.jit.kernel import KernelBuilder
from rvm.jit.scalar import lit
from rvm.jit.te import Body, Scalar, Tensor, Unsupported, deps_of, idx, is_int, product, shape_tuple
from rvm.jit.views import check_size, reshape_to
from rvm.op import ops


def _transpose(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    (x,) = args
    perm = attrs["axes"]
    perm = list(reversed(range(x.ndim))) if perm is None else [a % x.ndim for a in perm]
    t = kb.index_map(x, [x.dims[a] for a in perm], _permuted(perm))
    lead = x.ndim - _kept_tail(perm)
    if lead <= x.ndim - 2 and x.loader is None and sum(d != "1" for d in x.dims[lead:]) >= 2:
        # The trailing axes the transpose keeps in place are one contiguous run of the input
        # and of the output: written whole (`KernelBuilder.write`), the transpose is written
        # with them merged into one axis (a channel shuffle's copies whole planes, one
        # vectorized inner loop each, not rows of W).
        def merged() -> Tensor:
            m = reshape_to(kb, x, [*x.dims[:lead], kb.dim(product(x.dims[lead:]))], True)
            return kb.index_map(m, [m.dims[a] for a in perm[:lead]] + [m.dims[lead]],
                                _permuted([*perm[:lead], lead]))  # fmt: skip

        t.info["merged"] = merged
    return t


def _kept_tail(perm: Sequence[int]) -> int:
    """How many of a permutation's trailing axes stay in place."""
    n = len(perm)
    k = 0
    while k < n and perm[n - 1 - k] == n - 1 - k:
        k += 1
    return k


def _permuted(perm: Sequence[int]):  # type: ignore[no-untyped-def]
    """The index map of a transpose by ``perm``: output index -> input index."""
    inv = [perm.index(a) for a in range(len(perm))]
    return lambda body, index: [index[inv[a]] for a in range(len(perm))]


def _expand_dims(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    (x,) = args
    nd = x.ndim + len(attrs["axis"])
    new = {a % nd for a in attrs["axis"]}
    dims, it = [], iter(x.dims)
    for a in range(nd):
        dims.append("1" if a in new else next(it))
    return kb.index_map(x, dims, lambda body, index: [index[a] for a in range(nd) if a not in new])


def _squeeze(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    (x,) = args
    if attrs["axis"] is None:
        if not all(is_int(d) for d in x.dims):
            raise Unsupported("squeeze of every size-1 axis of a symbolic shape")
        drop = {a for a, d in enumerate(x.dims) if d == "1"}
    else:
        drop = {a % x.ndim for a in attrs["axis"]}
    for a in drop:
        kb.check(ne(x.dims[a], 1), f"{kb.kernel}: squeeze: axis {a} does not have size 1")
    keep = [a for a in range(x.ndim) if a not in drop]

    def fn(body: Body, index: Sequence[Scalar]) -> list[Scalar]:
        it = iter(index)
        return [idx(0) if a in drop else next(it) for a in range(x.ndim)]

    return kb.index_map(x, [x.dims[a] for a in keep], fn)


def write_reshaped(kb: KernelBuilder, t: Tensor, name: str, dtype: str) -> bool:
    """When ``t``, the kernel's output ``name`` of ``dtype``, is a reshape or flatten of a
    computed tensor (an index map, elementwise work: not an array), that tensor is written
    straight into the output viewed with its own shape, with no buffer and no copy (a
    channel shuffle's transpose is one pass); False, nothing emitted, otherwise."""
    source = t.info.get("reshape_of")
    if source is None or id(t) in kb.filled:
        return False
    x, checked = source
    if x.loader is None or x.fill is not None or x.array is not None or x.dtype != dtype:
        return False
    if not checked:
        check_size(kb, x, t.dims)
    kb.filled.add(id(t))
    view = kb.fresh("r")
    kb.root.lines.append(f"{view} = {name}.reshape({shape_tuple(x.dims)})")
    kb.write(x, view, dtype)
    return True


def _generic_target(kb: KernelBuilder, target: list) -> list:
    """In a generic kernel, a reshape's largest target size that is not a size read at run
    time (`KernelBuilder.sizes`) is inferred from the input's size instead (as -1), so layers
    whose reshapes differ in that size only share the kernel (a channel shuffle's channels per
    group; the largest is the one most likely to vary with the layer). Only where the other
    dims cannot be 0: beside a symbolic dim, an empty input would leave the -1 undetermined."""
    if not kb.sizes or -1 in target or 0 in target:
        return target
    if any(isinstance(d, str) for d in target):
        return target
    fixed = [d for d in target if isinstance(d, int) and d != 1 and d not in kb.sizes]
    if not fixed:
        return target
    k = target.index(max(fixed))
    return [-1 if a == k else d for a, d in enumerate(target)]


def _reshape(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    (x,) = args
    target = list(attrs["shape"])
    # the one name no input gives (types re-inferred by passes lose it) is inferred as a -1
    # (as the numpy kernel does), and bound to what it solves to
    missing = [i for i, d in enumerate(target) if isinstance(d, str) and d not in kb.symbols]
    named = None
    if len(missing) == 1 and -1 not in target:
        named, target[missing[0]] = target[missing[0]], -1
    target = _generic_target(kb, target)
    known = [kb.resolve(d) for d in target if d != -1]
    if -1 in target:
        size, part = product(x.dims), product(known)
        what = "-1" if named is None else f"{named!r} (no input or output gives it)"
        kb.check(  # numpy's error too: beside a 0 dim, any size would do
            any_of(eq(part, 0), ne(mod(size, part), 0)),
            f"{kb.kernel}: reshape: cannot infer {what} for the input's size "
            "(not a multiple of the other dims' product, or that product is 0)",
        )
        solved = kb.dim(f"({size}) // ({part})")
        it = iter(known)
        dims = [solved if d == -1 else next(it) for d in target]
        if named is not None:
            kb.symbols[named] = solved
            kb.origins[named] = f"the size {kb.op} infers"
    else:
        dims = known
    return _lazy_view(kb, x, dims, checked=-1 in target)  # -1's check covers the size


def _lazy_view(kb: KernelBuilder, x: Tensor, dims: list[str], checked: bool = False) -> Tensor:
    """A reshape that materializes (and views) the input only when first loaded (see
    `reshape_to` for ``checked``)."""
    out = Tensor(tuple(dims), x.dtype, array=None, kind="view")
    out.info["reshape_of"] = (x, checked)  # see `write_reshaped`
    view: list[Tensor] = []

    def fill() -> None:
        view.append(reshape_to(kb, x, dims, checked))
        out.array = view[0].array

    out.fill = fill
    return out


def _flatten(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    (x,) = args
    return _lazy_view(kb, x, [x.dims[0], kb.dim(product(x.dims[1:]))], checked=True)


def _broadcast_to(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    (x,) = args
    dims = [kb.resolve(d) for d in attrs["shape"]]
    lead = len(dims) - x.ndim
    for a, d in enumerate(x.dims):
        o = dims[lead + a]
        if d != o and d != "1":
            kb.check(
                all_of(ne(d, 1), ne(d, o)),
                f"{kb.kernel}: broadcast_to: the input does not broadcast at axis {a}",
            )
    return kb.index_map(x, dims, lambda body, index: kb.broadcast_index(x.dims, dims, index))


def _slice(kb: KernelBuilder, n: str, b: int, e: int, s: int) -> tuple[str, str]:
    """(start, length) of Python's ``range(n)[b:e:s]`` as run-time ints."""

    def norm(v: int, lo: str, hi: str) -> str:
        raw = f"({v} + {n})" if v < 0 else str(v)
        return kb.dim(f"min(max({raw}, {lo}), {hi})")

    if s > 0:
        start, stop = norm(b, "0", n), norm(e, "0", n)
        length = kb.dim(f"max(0, ({stop} - {start} + {s - 1}) // {s})")
    else:
        start, stop = norm(b, "-1", f"{n} - 1"), norm(e, "-1", f"{n} - 1")
        length = kb.dim(f"max(0, ({start} - {stop} + {-s - 1}) // {-s})")
    return start, length


def _strided_slice(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    (x,) = args
    dims = list(x.dims)
    starts: dict[int, tuple[str, int]] = {}
    for a, b, e, s in zip(attrs["axes"], attrs["begin"], attrs["end"], attrs["strides"]):
        a %= x.ndim
        start, length = _slice(kb, x.dims[a], b, e, s)
        dims[a] = length
        starts[a] = (start, s)
    return strided_view(kb, x, dims, starts)


def strided_view(
    kb: KernelBuilder, x: Tensor, dims: list, starts: dict[int, tuple[str, int]]
) -> Tensor:
    """`x` read at ``start + i * step`` along each axis of `starts` (axis: (start, step)), with
    result dims `dims`: the index map of every slice, static or run-time."""

    def fn(body: Body, index: Sequence[Scalar]) -> list[Scalar]:
        res = list(index)
        for a, (start, s) in starts.items():
            res[a] = idx(f"({start} + {index[a].code} * {s})", index[a])
        return res

    return kb.index_map(x, dims, fn)


def _split(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> list[Tensor]:
    (x,) = args
    axis = attrs["axis"] % x.ndim
    spec, n = attrs["indices_or_sections"], x.dims[axis]
    if isinstance(spec, int):
        kb.check(ne(mod(n, spec), 0), f"{kb.kernel}: split: the axis does not divide evenly")
        size = kb.dim(f"{n} // {spec}")
        bounds = [(kb.dim(f"{k} * {size}"), size) for k in range(spec)]
    else:
        cuts = [0, *spec]
        bounds = []
        for k, lo in enumerate(cuts):
            hi = spec[k] if k < len(spec) else 2**62
            bounds.append(_slice(kb, n, lo, hi, 1))
    pieces = []
    for start, length in bounds:
        dims = list(x.dims)
        dims[axis] = length

        def fn(body: Body, index: Sequence[Scalar], start: str = start) -> list[Scalar]:
            res = list(index)
            res[axis] = idx(f"({start} + {index[axis].code})", index[axis])
            return res

        pieces.append(kb.index_map(x, dims, fn))
    return pieces


def _tile(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    (x,) = args
    reps = list(attrs["reps"])
    nd = max(len(reps), x.ndim)
    xdims = ["1"] * (nd - x.ndim) + list(x.dims)
    reps = [1] * (nd - len(reps)) + reps
    dims = [kb.dim(f"{d} * {r}") if r != 1 else d for d, r in zip(xdims, reps)]

    def fn(body: Body, index: Sequence[Scalar]) -> list[Scalar]:
        res = []
        for i, d, r in zip(index, xdims, reps):
            res.append(i if r == 1 else (idx(0) if d == "1" else idx(f"({i.code} % {d})", i)))
        return res[nd - x.ndim :]

    return kb.index_map(x, dims, fn)


def checked_index(kb: KernelBuilder, body: Body, v: Scalar, n: str, op: str) -> Scalar:
    """A data index ``v`` into an axis of size ``n``: negative counts from the end; checked."""
    k = kb.let(body, Scalar(f"np.int64({v.code})", v.deps, "int64"))
    k = kb.let(body, Scalar(f"({k.code} + {n} if {k.code} < 0 else {k.code})", k.deps, "int64"))
    kb.stmt(body, f"if {k.code} < 0 or {k.code} >= {n}:", k.deps)
    kb.stmt(
        body, f"    raise IndexError({kb.kernel + ': ' + op + ': index out of range'!r})", k.deps
    )
    return k


def _take(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, ind = args
    axis = attrs["axis"]
    if axis is None:
        x = _lazy_view(kb, x, [kb.dim(product(x.dims))], checked=True)
        axis = 0
    axis %= x.ndim
    dims = list(x.dims[:axis]) + list(ind.dims) + list(x.dims[axis + 1 :])
    m = ind.ndim

    def fn(body: Body, index: Sequence[Scalar]) -> list[Scalar]:
        k = checked_index(
            kb, body, kb.load(ind, body, index[axis : axis + m]), x.dims[axis], "take"
        )
        return list(index[:axis]) + [k] + list(index[axis + m :])

    return kb.index_map(x, dims, fn)


def _gather(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, ind = args
    axis = attrs["axis"] % x.ndim
    for a in range(x.ndim):
        if a != axis and ind.dims[a] != x.dims[a]:
            kb.check(
                gt(ind.dims[a], x.dims[a]),
                f"{kb.kernel}: gather: indices are larger than the input at axis {a}",
            )

    def fn(body: Body, index: Sequence[Scalar]) -> list[Scalar]:
        k = checked_index(kb, body, kb.load(ind, body, index), x.dims[axis], "gather")
        res = list(index)
        res[axis] = k
        return res

    return kb.index_map(x, ind.dims, fn)


def _one_hot(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    (ind,) = args
    depth = attrs["depth"]
    nd = ind.ndim + 1
    axis = attrs["axis"] % nd
    dims = list(ind.dims)
    dims.insert(axis, str(depth))
    on, off = lit(attrs["on_value"], out), lit(attrs["off_value"], out)

    def loader(body: Body, index: Sequence[Scalar]) -> Scalar:
        rest = [i for a, i in enumerate(index) if a != axis]
        k = kb.load(ind, body, rest)
        k = kb.let(body, Scalar(f"({k.code} + {depth} if {k.code} < 0 else {k.code})", k.deps))
        return Scalar(
            f"({on} if {k.code} == {index[axis].code} else {off})", deps_of(k, index[axis]), out
        )

    return Tensor(tuple(dims), out, loader)


def _arange(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    start, stop, step = attrs["start"], attrs["stop"], attrs.get("step", 1)
    n = (
        len(range(start, stop, step))
        if all(isinstance(v, int) for v in (start, stop, step))
        else None
    )
    if n is None:
        raise Unsupported("arange with float bounds")
    return Tensor(
        (str(n),),
        out,
        lambda body, index: Scalar(
            f"np.{out}({start} + {index[0].code} * {step})", index[0].deps, out
        ),
    )


for _op, _fn in (
    (ops.transpose, _transpose),
    (ops.expand_dims, _expand_dims),
    (ops.squeeze, _squeeze),
    (ops.reshape, _reshape),
    (ops.flatten, _flatten),
    (ops.broadcast_to, _broadcast_to),
    (ops.strided_slice, _strided_slice),
    (ops.split, _split),
    (ops.tile, _tile),
    (ops.take, _take),
    (ops.gather, _gather),
    (ops.one_hot, _one_hot),
    (ops.arange, _arange),
):
    compute[_op] = _fn
