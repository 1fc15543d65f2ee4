"""Jit compute definitions of the ops whose shape is read from data at run time
(`rvm.op.dynamic`, `rvm.op.index.dynamic_slice`) and of the run-time check (`rvm.op.checks`).

The result's dimensions are ints the kernel computes at its start from the shape tensor (its
bounds, its repeats...), with the semantics of the NumPy reference (`rvm.kernels.reference`):
ONNX Reshape's 0 and -1, Expand's broadcasting both ways, ``arange``'s length, Python's
slicing. Each is then checked against what the program promised (``dims``: an int is compared,
a name binds or is compared like a parameter's), and the result is the static op's tensor over
those run-time dims (`rvm.jit.layout`), so it is a view, an index map or a fill like theirs. A
failed check raises `rvm.ShapeError` naming the sizes, as the reference does. These ops are
opaque, so each kernel holds one of them; their kernels are "return" style (the VM cannot
allocate a result whose size only the kernel knows).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rvm.jit import layout
from rvm.jit.compute import compute
from rvm.jit.kernel import KernelBuilder
from rvm.jit.scalar import lit
from rvm.jit.te import Body, Scalar, Tensor, Unsupported, idx, product
from rvm.jit.views import reshape_to
from rvm.op import ops

# A kernel's errors: `rvm.ShapeError` and ValueError, raised as a message template and the
# ints it names, formatted by Python (`rvm.errors.filled`): Numba builds no string in the
# kernel (``str`` and ``+`` on its unicode type cost a kernel 0.5-4 CPU-s of compile).
_ERRORS = {"shape": "KernelShapeError", "value": "KernelValueError"}
_WRONG = "=_wrong"  # a message part: the axes that disagree (`_promised`)


def _raise(
    kb: KernelBuilder,
    cond: str,
    parts: Sequence[str],
    error: str = "shape",
    axes: Sequence[str] = (),
) -> None:
    """At the kernel's start: raise `rvm.ShapeError` (or ValueError) when ``cond`` holds, its
    message ``parts`` joined: a literal piece as it is, ``=expr`` an int's value, ``=_wrong``
    those of ``axes`` (each ``"axis, got, expected"``) that disagree."""
    kb.root.lines.append(f"if {cond}:")
    kb.root.lines.append(f"    raise {_error(kb, error, parts, axes)}")


def _error(kb: KernelBuilder, error: str, parts: Sequence[str], axes: Sequence[str]) -> str:
    """The exception `_raise` raises (see there)."""
    cls = _ERRORS[error]
    kb.imports.add(("rvm.errors", cls, None))
    values = [p[1:] for p in parts if p.startswith("=") and p != _WRONG]
    if not values and not axes:
        return f"{cls}({''.join(parts)!r})"
    template = "".join(
        "{wrong}" if p == _WRONG else "{}" if p.startswith("=") else _escaped(p) for p in parts
    )
    return f"{cls}({', '.join([repr(template), *values, *axes])})"


def _escaped(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _values(kb: KernelBuilder, t: Tensor, count: int, what: str) -> list[str]:
    """The ``count`` elements of the 1-d int tensor ``t`` as ints computed at the start."""
    arr = kb.materialize(t, "int64")
    _raise(
        kb,
        f"{arr}.shape[0] != {count}",
        [f"{kb.op}: {what} must have {count} elements, got ", f"={arr}.shape[0]"],
    )
    return [kb.dim(f"{arr}[{i}]") for i in range(count)]


def _scalar(kb: KernelBuilder, t: Tensor) -> Scalar:
    """The value of a 0-d tensor (or a one-element 1-d one) at the kernel's start."""
    if t.ndim == 0:
        return kb.let(kb.root, kb.load(t, kb.root, []))
    arr = kb.materialize(t)
    _raise(kb, f"{arr}.size != 1", [f"{kb.op}: expected one value, got ", f"={arr}.size"])
    return Scalar(kb.dim(f"{arr}.ravel()[0]"), frozenset(), t.dtype)


def _promised(kb: KernelBuilder, dims: Sequence[str], promised: Sequence[object]) -> None:
    """Checks the run-time ``dims`` against the dims the program promised: an int must be
    equal, a name the kernel knows must be equal, one it does not is bound here. The message
    is the reference's (`rvm.kernels.reference.dynamic`): both shapes, then each axis that
    disagrees."""
    expected: list[str] = []  # per axis: a literal, a known size's local, or its spelling
    tests: list[tuple[int, str, str]] = []
    for axis, (d, want) in enumerate(zip(dims, promised)):
        if isinstance(want, int) or (isinstance(want, str) and want in kb.symbols):
            e = str(want) if isinstance(want, int) else kb.symbols[want]
            expected.append(f"={e}")
            tests.append((axis, d, e))
        else:
            expected.append(repr(want))
            if isinstance(want, str):
                kb.symbols[want] = d
                kb.origins[want] = f"the shape {kb.op} computed at axis {axis}"
    if not tests:
        return
    text = [
        f"{kb.op}: the shape computed at run time, ",
        *_dims_text(dims),
        ", contradicts the shape the program promised, ",
        *_tuple_text(expected),
        " (",
        _WRONG,
        ": the inputs' dimensions disagree with the sizes computed from them)",
    ]
    axes = [f"{axis}, {d}, {e}" for axis, d, e in tests]
    _raise(kb, " or ".join(f"{d} != {e}" for _, d, e in tests), text, axes=axes)


def _tuple_text(items: Sequence[str]) -> list[str]:
    """Message parts spelling a tuple of ``items`` (each a literal or ``=expr``)."""
    parts = ["("]
    for i, item in enumerate(items):
        parts += [item, ", " if i + 1 < len(items) else "," if len(items) == 1 else ""]
    return [*parts, ")"]


def _dims_text(dims: Sequence[str]) -> list[str]:
    """Message parts spelling ``dims`` (locals or literals) as a tuple."""
    return _tuple_text([f"={d}" for d in dims])


def _dynamic_reshape(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, shape = args
    promised = attrs["dims"]
    raw = _values(kb, shape, len(promised), "the shape")
    dims = []
    for i, t in enumerate(raw):
        if not attrs["allowzero"] and i < x.ndim:
            t = kb.dim(f"{x.dims[i]} if {t} == 0 else {t}")
        dims.append(t)
    if dims:
        size = kb.dim(product(x.dims))
        negs = " + ".join(f"({d} == -1)" for d in dims)
        known = kb.dim(" * ".join(f"({d} if {d} != -1 else 1)" for d in dims))
        bad = f"({negs}) > 1 or " + " or ".join(f"{d} < -1" for d in dims)
        cannot = [
            f"{kb.op}: cannot reshape a tensor of shape ",
            *_dims_text(x.dims),
            " to ",
            *_dims_text(dims),
        ]
        _raise(kb, bad, cannot)
        _raise(kb, f"({negs}) == 1 and ({known} == 0 or {size} % {known} != 0)", cannot)
        dims = [kb.dim(f"{size} // {known} if {d} == -1 else {d}") for d in dims]
        _raise(kb, f"{product(dims)} != {size}", cannot)
    _promised(kb, dims, promised)
    return reshape_to(kb, x, dims, checked=True)


def _dynamic_expand(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, shape = args
    promised = attrs["dims"]
    rank = len(promised)
    arr = kb.materialize(shape, "int64")
    n = kb.dim(f"{arr}.shape[0]")
    _raise(
        kb,
        f"{n} > {rank} or {rank} != max({n}, {x.ndim})",
        [f"{kb.op}: a shape of ", f"={n}", f" dims does not expand rank {x.ndim} to rank {rank}"],
    )
    lead = rank - x.ndim
    dims = []
    for i in range(rank):
        t = kb.dim(f"({arr}[{i} - {rank} + {n}] if {i} >= {rank} - {n} else 1)")
        if i < lead:
            dims.append(t)
            continue
        d = x.dims[i - lead]
        o = kb.dim(f"{d} if {t} == 1 else {t}")
        _raise(
            kb,
            f"{d} != 1 and {d} != {o}",
            [
                f"{kb.op}: cannot expand a tensor of shape ",
                *_dims_text(x.dims),
                " to a shape with ",
                f"={t}",
                f" at axis {i}",
            ],
        )
        dims.append(o)
    _raise(kb, " or ".join(f"{d} < 0" for d in dims) or "False", [f"{kb.op}: negative size"])
    _promised(kb, dims, promised)
    return kb.index_map(x, dims, lambda body, index: kb.broadcast_index(x.dims, dims, index))


def _dynamic_full(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    (shape,) = args
    promised = attrs["dims"]
    dims = _values(kb, shape, len(promised), "the shape")
    if dims:
        _raise(
            kb,
            " or ".join(f"{d} < 0" for d in dims),
            [f"{kb.op}: negative dimension in the shape ", *_dims_text(dims)],
        )
    _promised(kb, dims, promised)
    code = lit(attrs["fill_value"], out)
    return Tensor(tuple(dims), out, lambda body, index: Scalar(code, frozenset(), out))


def _dynamic_arange(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    a, b, s = (_scalar(kb, t).code for t in args)
    floats = any(t.dtype.startswith("float") for t in args)
    _raise(kb, f"{s} == 0", [f"{kb.op}: step must not be 0"], "value")
    if floats:
        n = kb.dim(f"max(0, int(math.ceil((float({b}) - float({a})) / float({s}))))")
    else:
        up = f"({b} - {a} + {s} - 1) // {s}"
        down = f"({a} - {b} - {s} - 1) // -{s}"
        n = kb.dim(f"max(0, {up} if {s} > 0 else {down})")
    _promised(kb, [n], [attrs["length"]])
    compute_type = "float64" if floats else "int64"

    def loader(body: Body, index: Sequence[Scalar]) -> Scalar:
        i = index[0]
        code = f"np.{out}(np.{compute_type}({a}) + np.{compute_type}({s}) * {i.code})"
        return Scalar(code, i.deps, out)

    return Tensor((n,), out, loader)


def _dynamic_slice(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, begin, end = args
    axes, strides = attrs["axes"], attrs["strides"]
    begins = _values(kb, begin, len(axes), "begin")
    ends = _values(kb, end, len(axes), "end")
    dims = list(x.dims)
    starts: dict[int, tuple[str, int]] = {}
    for a, b, e, s in zip(axes, begins, ends, strides):
        a %= x.ndim
        n = x.dims[a]
        lo, hi = ("0", n) if s > 0 else ("-1", f"{n} - 1")

        def norm(v: str, lo: str = lo, hi: str = hi, n: str = n) -> str:
            return kb.dim(f"min(max({v} + {n} if {v} < 0 else {v}, {lo}), {hi})")

        start, stop = norm(b), norm(e)
        if s > 0:
            length = kb.dim(f"max(0, ({stop} - {start} + {s - 1}) // {s})")
        else:
            length = kb.dim(f"max(0, ({start} - {stop} + {-s - 1}) // {-s})")
        dims[a] = length
        starts[a] = (start, s)
    return layout.strided_view(kb, x, dims, starts)


def _dynamic_tile(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, reps = args
    promised = attrs["dims"]
    counts = _values(kb, reps, x.ndim, "the repeats")
    if counts:
        _raise(kb, " or ".join(f"{r} < 0" for r in counts), [f"{kb.op}: negative repeats"])
    dims = [kb.dim(f"{d} * {r}") for d, r in zip(x.dims, counts)]
    _promised(kb, dims, promised)

    def fn(body: Body, index: Sequence[Scalar]) -> list[Scalar]:
        return [idx(f"({i.code} % {d})", i) for i, d in zip(index, x.dims)]

    return kb.index_map(x, dims, fn)


def _fixed_size(kb: KernelBuilder, d: str) -> int | None:
    """The fixed size dim ``d`` holds: a literal, or a size a generic kernel reads at run
    time (`KernelBuilder.sizes`)."""
    if d.isdigit():
        return int(d)
    for size, symbol in kb.sizes.items():
        if kb.symbols.get(symbol) == d:
            return size
    for code, name in kb._dims.items():  # a sum of literals (a concat's axis)
        if name == d and _LITERAL_SUM.fullmatch(code):
            return sum(int(t) for t in code.split("+"))
    return None


_LITERAL_SUM = re.compile(r"\d+(\s*\+\s*\d+)*")


_FIELD = re.compile(r"\{(\d+)\}")


def _check(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, cond, detail = args
    message = attrs["message"]
    pieces = _FIELD.split(message)
    if any(c in piece for piece in pieces[::2] for c in "{}"):
        raise Unsupported("check: a message with braces other than {<n>} fields")
    if detail.dtype not in ("int8", "int16", "int32", "int64", "uint8", "bool"):
        raise Unsupported(f"check: a detail of dtype {detail.dtype}")
    test = kb.let(kb.root, kb.load(cond, kb.root, []))
    arr = kb.materialize(detail, "int64") if len(pieces) > 1 else ""
    parts = [p if k % 2 == 0 else f"={arr}[{p}]" for k, p in enumerate(pieces) if p or k % 2]
    _raise(kb, f"not {test.code}", parts, attrs.get("error", "value"))
    return x


def _gather_nd(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, ind = args
    b = attrs.get("batch_dims", 0)
    k = _fixed_size(kb, ind.dims[-1])
    if k is None:
        raise Unsupported("gather_nd: index tuples of a size not fixed")
    dims = list(x.dims[:b]) + list(ind.dims[b:-1]) + list(x.dims[b + k :])
    m = ind.ndim - 1 - b  # the index axes past the batch

    def fn(body: Body, index: Sequence[Scalar]) -> list[Scalar]:
        batch, picks, rest = index[:b], index[b : b + m], index[b + m :]
        where = []
        for j in range(k):
            v = kb.load(ind, body, [*batch, *picks, idx(j)])
            where.append(layout.checked_index(kb, body, v, x.dims[b + j], "gather_nd"))
        return [*batch, *where, *rest]

    return kb.index_map(x, dims, fn)


for _op, _fn in (
    (ops.dynamic_reshape, _dynamic_reshape),
    (ops.dynamic_expand, _dynamic_expand),
    (ops.dynamic_full, _dynamic_full),
    (ops.dynamic_arange, _dynamic_arange),
    (ops.dynamic_slice, _dynamic_slice),
    (ops.dynamic_tile, _dynamic_tile),
    (ops.check, _check),
    (ops.gather_nd, _gather_nd),
):
    compute[_op] = _fn
