"""The kernel builder: parameters, run-time shape checks, broadcasting, elementwise maps.

`KernelBuilder` extends the `Emitter` with what the compute definitions share: reading the
parameters' dimensions at the kernel's start (checking fixed and symbolic dimensions),
broadcasting dimension lists with run-time checks, and building elementwise and index-map
tensors. Every check raises `ValueError` with a constant message before any loop runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rvm.ir.dims import DimExpr, source, symbols
from rvm.jit.cond import all_of, ne
from rvm.jit.flatten import merged_write
from rvm.jit.scalar import convert, wrap_result
from rvm.jit.te import (
    Body,
    Emitter,
    Scalar,
    Tensor,
    Unsupported,
    deps_of,
    idx,
    is_int,
    shape_tuple,
)
from rvm.kernels import entry


class KernelBuilder(Emitter):
    """Builds one kernel; see the module docstring."""

    def __init__(self, kernel: str) -> None:
        super().__init__(kernel)
        self.symbols: dict[str, str] = {}
        self.origins: dict[str, str] = {}  # symbol -> where it was first read
        self.sizes: dict[int, str] = {}  # fixed sizes read at run time -> their symbols
        self.op = "kernel"
        # Library entry points (name, dtype) the kernel calls: its module requires them at
        # import, before its function is compiled or loaded (`rvm.kernels.entry`).
        self.entries: set[tuple[str, str]] = set()

    def call_entry(
        self,
        name: str,
        arrays: Sequence[str],
        params: Sequence[object],
        dtype: str,
        body: Body | None = None,
    ) -> None:
        """A call of the library's entry point ``name`` (`rvm.kernels.entry`) on the arrays
        ``arrays`` of ``dtype`` (4-d; a `entry.MIXED` one's, of its ranks and dtypes) and the
        int ``params``, in ``body`` (the root by default), raising ValueError when the library
        finds their shapes do not match. The kernel's module requires the entry point at
        import, so its cached object code links."""
        self.imports.add((entry.MODULES[name], entry.caller_attribute(name), f"{name}_entry"))
        self.entries.add((name, dtype))
        values = "".join(f"{v}, " for v in params)  # plain ints: no np.int64 call to type
        lines = (body or self.root).lines
        lines.append(f"if {name}_entry(({', '.join(arrays)},), ({values})) != 0:")
        message = f"{self.kernel}: {name}: the operands' shapes do not match the geometry"
        lines.append(f"    raise ValueError({message!r})")

    # -- parameters ----------------------------------------------------------------------

    def param(self, name: str, shape: Sequence[object], dtype: str, what: str) -> Tensor:
        """The tensor of array parameter ``name``, its dims read and checked at run time.

        The dims a parameter fixes (literals, symbols read before) are checked by one
        comparison of its whole shape, whose message lists them all: one statement per
        parameter rather than one per dimension, which Numba compiles much faster.
        """
        dims: list[str] = []
        clauses: list[str] = []
        for axis, d in enumerate(shape):
            if isinstance(d, int):
                clauses.append(f"{what} must have {d} at axis {axis}")
                dims.append(str(d))
            elif isinstance(d, str) and d in self.symbols:
                clauses.append(self._disagree(d, what, axis))
                dims.append(self.symbols[d])
            else:
                var = self.dim(f"{name}.shape[{axis}]")
                if isinstance(d, str):
                    self.symbols[d] = var
                    self.origins[d] = f"{what} at axis {axis}"
                dims.append(var)
        if clauses:
            self.check(ne(f"{name}.shape", shape_tuple(dims)), self.expect(clauses))
        return Tensor(tuple(dims), dtype, array=name, kind="array")

    def expect(self, clauses: Sequence[str]) -> str:
        """The message of a check of several conditions, each a clause (one failed)."""
        return f"{self.kernel}: {'; '.join(clauses)}"

    def _disagree(self, d: str, what: str, axis: int) -> str:
        if d.startswith("#"):  # a size made generic (`rvm.jit.signature.generic_shapes`)
            return f"{what} at axis {axis} must equal {self.origins[d]}"
        return f"{what} disagrees on dimension {d!r} (axis {axis})"

    def resolve(self, d: object) -> str:
        """A dim of an attribute (int or symbolic name) as source; an int equal to a size
        read at run time (`sizes`, generic kernels) is that size's variable."""
        if isinstance(d, int):
            name = self.sizes.get(d)
            return self.symbols[name] if name in self.symbols else str(d)
        if isinstance(d, str) and d in self.symbols:
            return self.symbols[d]
        if isinstance(d, DimExpr) and symbols(d) <= self.symbols.keys():
            return source(d, self.symbols.__getitem__)  # past + seq from past and seq
        raise Unsupported(f"dimension {d!r} is not known from the inputs")

    # -- broadcasting --------------------------------------------------------------------

    def broadcast_dims(self, shapes: Sequence[Sequence[str]]) -> tuple[str, ...]:
        """NumPy broadcasting of dim lists, checked at run time (ValueError)."""
        n = max((len(s) for s in shapes), default=0)
        out: list[str] = []
        for axis in range(n):
            ds: list[str] = []
            for s in shapes:
                k = axis - (n - len(s))
                if k >= 0 and s[k] != "1" and s[k] not in ds:
                    ds.append(s[k])
            out.append(self._broadcast_axis(ds, axis))
        return tuple(out)

    def _broadcast_axis(self, ds: list[str], axis: int) -> str:
        if not ds:
            return "1"
        if len(ds) == 1:
            return ds[0]
        lits = sorted({d for d in ds if is_int(d)})
        msg = f"{self.kernel}: {self.op}: shapes do not broadcast at axis {axis}"
        if len(lits) > 1:
            raise Unsupported(msg)
        if lits:
            target = lits[0]
        else:
            target = ds[0]
            for d in ds[1:]:
                target = self.dim(f"{d} if {target} == 1 else {target}")
        for d in ds:
            if d != target:
                self.check(all_of(ne(d, 1), ne(d, target)), msg)
        return target

    def broadcast_index(self, dims: Sequence[str], out: Sequence[str], index: Sequence[Scalar]):
        """The index into a tensor of ``dims`` broadcast to ``out`` at ``index``."""
        k = len(out) - len(dims)
        res: list[Scalar] = []
        for d, o, i in zip(dims, out[k:], index[k:]):
            if d == o:
                res.append(i)
            elif d == "1":
                res.append(idx(0))
            else:
                flag = self.dim(f"{d} != 1", "b")
                res.append(idx(f"({i.code} if {flag} else 0)", i))
        return res

    # -- tensors -------------------------------------------------------------------------

    def elemwise(
        self,
        fn: Callable[..., str],
        dtype: str,
        args: Sequence[Tensor],
        compute_dtype: str | None = None,
        arg_dtypes: Sequence[str] | None = None,
    ) -> Tensor:
        """The broadcast elementwise map ``fn(*operand_sources)`` over ``args``.

        Operands are converted to ``arg_dtypes`` (default: ``compute_dtype``, default
        ``dtype``) before ``fn``; the result is narrowed to ``dtype``.
        """
        dims = self.broadcast_dims([a.dims for a in args])
        ct = compute_dtype or dtype
        types = list(arg_dtypes) if arg_dtypes is not None else [ct] * len(args)

        def loader(body: Body, index: Sequence[Scalar]) -> Scalar:
            vals = []
            for a, t in zip(args, types):
                v = self.load(a, body, self.broadcast_index(a.dims, dims, index))
                vals.append(self.let(body, convert(v, t)))
            code = wrap_result(fn(*(v.code for v in vals)), dtype)
            return convert(Scalar(code, deps_of(*vals), ct), dtype)

        recipe = (fn, tuple(args), compute_dtype, arg_dtypes)
        return Tensor(dims, dtype, loader, info={"elemwise": recipe})

    def index_map(
        self,
        x: Tensor,
        dims: Sequence[str],
        fn: Callable[[Body, Sequence[Scalar]], Sequence[Scalar]],
    ) -> Tensor:
        """A tensor of ``dims`` whose element at ``index`` is ``x`` at ``fn(body, index)``."""

        def loader(body: Body, index: Sequence[Scalar]) -> Scalar:
            return self.load(x, body, fn(body, index))

        return Tensor(tuple(dims), x.dtype, loader)

    def materialize(self, x: Tensor, dtype: str | None = None) -> str:
        """A C-contiguous array holding ``x`` (converted to ``dtype``): its own if it has one."""
        dtype = dtype or x.dtype
        if x.fill is not None and id(x) not in self.filled:
            self.filled.add(id(x))
            x.fill()
        if x.array is not None and x.dtype == dtype and x.loader is None:
            return x.array
        name = self.fresh("m")
        self.root.lines.append(f"{name} = np.empty({shape_tuple(x.dims)}, dtype=np.{dtype})")
        self.write(x, name, dtype)
        return name

    def write(self, x: Tensor, name: str, dtype: str) -> None:
        """Loops storing ``x`` (converted to ``dtype``) into the array ``name`` of its
        shape; their contiguous trailing axes merged into one loop where every operand allows
        (`rvm.jit.flatten`)."""
        merged = merged_write(self, x, name)
        if merged is not None:
            x, name = merged
        elif "merged" in x.info:  # a transpose keeping trailing axes (`rvm.jit.layout`)
            x = x.info["merged"]()
            view = self.fresh("w")
            self.root.lines.append(f"{view} = {name}.reshape({shape_tuple(x.dims)})")
            name = view

        def emit(body: Body, index: list[Scalar]) -> None:
            v = self.let(body, convert(self.load(x, body, index), dtype))
            body.lines.append(f"{self.ref(name, index)} = {v.code}")

        self.loop_nest(self.root, x.dims, emit)

    def buffer(self, dims: Sequence[str], dtype: str, alias: str | None = None) -> str:
        """A new array of ``dims`` (or the given output array) allocated at the start."""
        if alias is not None:
            return alias
        name = self.fresh("buf")
        self.root.lines.append(f"{name} = np.empty({shape_tuple(dims)}, dtype=np.{dtype})")
        return name
