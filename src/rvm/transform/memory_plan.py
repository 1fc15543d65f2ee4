"""memory_plan: explicit allocation for every kernel call, with storage reuse.

Needs: a fused module (primitive calls bound to variables: ``y = prim(args)``), ideally after
dead_code and tail_call. Types recorded on every variable.

Guarantees: no binding calls a primitive function directly. A result ``y`` of static shape (a
TensorType with int dims) becomes::

    st = vm.alloc_storage(size=<bytes>, dtype=d)
    y = vm.alloc_tensor(st, offset=0, shape=(...), dtype=d)
    _ = vm.call_dps(prim, *args, y)

a result whose symbolic dims are all bound by the function's parameters' shapes gets ``s =
vm.make_shape(shape=(...))``, ``st = vm.alloc_storage(s, dtype=d)`` and ``y = vm.alloc_tensor(st, s,
offset=0, shape=(...), dtype=d)``; a tuple of such tensors gets one output per field and ``y = (o0,
o1, ...)``; anything else (a dim that depends on data, unknown rank or dtype) is ``y =
vm.call_alloc(prim, *args)``. Storage reuse never changes results: a static tensor that does not
escape its region (its only uses are as inputs of later ``vm.call_dps`` in the same region: not
returned, not in a tuple, not passed to a function, not used in a branch) gives its block back after
its last use, and a later non-escaping static tensor of the same dtype takes the smallest free block
that is large enough instead of a new one. A kernel that only concatenates pieces that other
kernels of the region make, each a contiguous run of its output (`rvm.transform.concat_plan`),
is dropped: the output's storage is made at the first piece, the pieces' kernels write into views
of it at their offsets, and the result is a view of it too; a piece that is such a concatenation
itself is a view of the outermost one's storage, which lives until the last use of any of them.
Likewise a kernel that only slices one contiguous run of another kernel's result
(`rvm.transform.concat_plan.slice_offset`: `rvm.transform.merge_convs`' channel slices) is
dropped: the slice is a view of that result's storage, which lives until the slice's last use.
Figures go to one debug line per function and to ``mod.attrs["memory_plan"][name]``.

Algorithm: per region, find which tensors escape and where each is last used, then rewrite the
bindings in order, keeping a free list of blocks per dtype.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from rvm.dtypes import numpy_dtype
from rvm.ir import dims as D
from rvm.ir import expr as E
from rvm.ir.module import IRModule
from rvm.ir.types import TensorType, TupleType, Type
from rvm.transform import vm_ops
from rvm.transform.concat_plan import ConcatSite, concat_members, concat_sites, slice_offset
from rvm.transform.legalize import Namer, count_uses, hoist_result, map_regions, primitive_callee

logger = logging.getLogger("rvm.transform")


@dataclass
class _Stats:
    """Storage figures of one function: bytes without reuse, bytes allocated, counts."""

    before: int = 0
    after: int = 0
    tensors: int = 0
    blocks: int = 0


@dataclass
class _Region:
    """What the rewrite of one region needs: free blocks, owners, last uses."""

    last_use: dict[E.Var, int]
    local: set[E.Var]  # non-escaping static tensors of this region
    free: dict[str, list[tuple[int, E.Var]]] = field(default_factory=dict)  # dtype -> blocks
    owned: dict[E.Var, tuple[str, int, E.Var]] = field(default_factory=dict)  # tensor -> block
    shapes: dict[tuple, E.Var] = field(default_factory=dict)  # make_shape results
    concats: dict[E.Var, ConcatSite] = field(default_factory=dict)  # written in place
    pieces: dict[E.Var, tuple[E.Var, int]] = field(default_factory=dict)  # -> outermost, offset
    concat_storage: dict[E.Var, E.Var] = field(default_factory=dict)  # concat -> its storage
    views: dict[E.Var, tuple[E.Var, int]] = field(default_factory=dict)  # slice -> input, offset
    storage_of: dict[E.Var, E.Var] = field(default_factory=dict)  # static tensor -> its storage


class _Planner:
    """Rewrites the regions of one function."""

    def __init__(self, func: E.Function, funcs: dict[str, E.Function]) -> None:
        self.funcs = funcs
        self.fresh = Namer(func)
        self.uses = count_uses(func.body)
        self.dims = _param_dims(func.params)
        self.stats = _Stats()

    def region(
        self, bindings: list[E.VarBinding], body: E.Expr, depth: int
    ) -> tuple[list[E.VarBinding], E.Expr]:
        bindings, body = hoist_result(bindings, body, self._is_prim_call, self.fresh("out"))
        if not any(self._is_prim_call(b.value) for b in bindings):
            return bindings, body
        concats = concat_sites(bindings, self.funcs, self.uses)
        members = concat_members(concats)
        self._pieces = set(members)
        views = self._slice_views(bindings, members)
        state = self._analyse(bindings, members, views)
        state.concats = concats
        state.pieces = members
        state.views = views
        dropped = {site.tuple_var for site in state.concats.values()}
        out: list[E.VarBinding] = []
        for i, b in enumerate(bindings):
            if b.var in dropped:
                continue
            if not self._is_prim_call(b.value):
                out.append(b)
                continue
            call: E.Call = b.value  # type: ignore[assignment]
            if b.var in state.views:  # a run of its input: a view of the input's storage
                source, offset = state.views[b.var]
                ty: TensorType = b.var.type  # type: ignore[assignment]
                attrs = {"offset": offset, "shape": ty.shape, "dtype": ty.dtype}
                storage = state.concat_storage.get(source)
                storage = state.storage_of[source] if storage is None else storage
                alloc = E.Call(vm_ops.alloc_tensor, (storage,), attrs)
                out.append(E.VarBinding(b.var, alloc))
                self._release(state, i, [b.var, *call.args])
                continue
            view = None if b.var in state.pieces else self._view_shape(call, b.var.type)
            if view is not None:  # a reshape: a view of its input (RESHAPE_TENSOR)
                value = self._reshape_view(call.args[0], view, b, state, out)
                out.append(E.VarBinding(b.var, value))
                continue
            if _lone_op(primitive_callee(call, self.funcs), "shape_of") is not None:  # SHAPE_OF
                out.append(E.VarBinding(b.var, E.Call(vm_ops.shape_of, (call.args[0],))))
                continue
            if b.var in state.concats:  # its pieces are in place: the result is a view
                self._alloc(b.var, b.var.type, state, out)  # type: ignore[arg-type]
                self._release(state, i, [b.var])
                continue
            outputs = self._outputs(b.var, state, out)
            if outputs is None:
                alloc = E.Call(vm_ops.call_alloc, (call.callee, *call.args))
                out.append(E.VarBinding(b.var, alloc))
            else:
                out.append(
                    E.VarBinding(self._unit(), vm_ops.dps_call(call.callee, call.args, outputs))
                )  # type: ignore[arg-type]
            self._release(state, i, [b.var, *call.args])
        return out, body

    def _is_prim_call(self, value: E.Expr) -> bool:
        return primitive_callee(value, self.funcs) is not None

    def _view_shape(self, call: E.Call, result_type: Type | None) -> tuple | None:
        """The shape a call of a lone reshape makes, when it can be a view of its input (every
        VM tensor is C-contiguous, so a reshape never needs a copy), built from constants and
        the dims the parameters bind; None: the kernel runs."""
        prim = primitive_callee(call, self.funcs)
        inner = _lone_op(prim, "reshape")
        if inner is None or not call.args or not isinstance(call.args[0], E.Var):
            return None
        for shape in (getattr(result_type, "shape", None), inner.attrs.get("shape")):
            if shape is not None and all(self._known(d) for d in shape) and 0 not in shape:
                return tuple(shape)
        return None

    def _known(self, d: object) -> bool:
        return (type(d) is int and d >= -1) or (isinstance(d, str) and self._bound(d))

    def _bound(self, d: str) -> bool:
        """Whether symbolic dim ``d`` (a name or an expression of names) is computable from
        the dims the parameters bind."""
        return D.symbols(d) <= self.dims

    def _reshape_view(
        self, x: E.Expr, shape: tuple, b: E.VarBinding, state: _Region, out: list
    ) -> E.Call:
        """``vm.reshape(x, s)`` with the shape value ``s`` (MAKE_SHAPE: every mode reads it)."""
        value = state.shapes.get(shape)
        if value is None:
            value = state.shapes[shape] = self._bind(
                out, "shape", E.Call(vm_ops.make_shape, (), {"shape": shape})
            )
        ty = b.var.type
        return E.Call(vm_ops.reshape_view, (x, value), {"shape": getattr(ty, "shape", None)})

    def _unit(self) -> E.Var:
        var = E.Var("_")
        var.with_type(vm_ops.UNIT)
        return var

    def _slice_views(
        self, bindings: list[E.VarBinding], members: dict[E.Var, tuple[E.Var, int]]
    ) -> dict[E.Var, tuple[E.Var, int]]:
        """The lone slices of the region that are views of their input's storage, by result:
        the tensor that owns that storage and the byte offset there (`concat_plan.slice_offset`).
        The input is a static result of an earlier kernel of the region, no view itself: with a
        storage of its own, or a concatenation written in place or a piece of one (``members``),
        whose storage is its outermost concatenation's (`rvm.transform.concat_images` slices
        such a concatenation's images); the slice is no such piece."""
        made: set[E.Var] = set()
        views: dict[E.Var, tuple[E.Var, int]] = {}
        for b in bindings:
            if not self._is_prim_call(b.value):
                continue
            offset = slice_offset(b.value, self.funcs)
            source = b.value.args[0] if offset is not None else None  # type: ignore[attr-defined]
            if (
                source in made
                and source not in views
                and b.var not in members
                and isinstance(b.var.type, TensorType)
                and b.var.type.is_static
            ):
                root, at = members.get(source, (source, 0))  # type: ignore[arg-type]
                views[b.var] = (root, at + offset)  # type: ignore[operator]
            elif (
                isinstance(b.var.type, TensorType)
                and b.var.type.is_static
                and self._view_shape(b.value, b.var.type) is None  # type: ignore[arg-type]
                and _lone_op(primitive_callee(b.value, self.funcs), "shape_of") is None
            ):
                made.add(b.var)  # a kernel's result in a storage of its own (`_alloc`)
        return views

    def _analyse(
        self,
        bindings: list[E.VarBinding],
        members: dict[E.Var, tuple[E.Var, int]],
        views: dict[E.Var, tuple[E.Var, int]],
    ) -> _Region:
        """Last uses of kernel inputs and the tensors that do not escape the region; a
        concatenation written in place (``members``: `concat_members`) is last used where any
        of its members is, and escapes when any of them does; so is the input of a slice
        made a view (``views``: `_slice_views`) where the slice is."""
        last_use: dict[E.Var, int] = {}
        dps_uses: dict[E.Var, int] = {}
        for i, b in enumerate(bindings):
            if not self._is_prim_call(b.value):
                continue
            # A reshape's result views its input: the input's block must outlive it.
            dps = self._plannable(b.var.type) is not None and (
                b.var in self._pieces or self._view_shape(b.value, b.var.type) is None  # type: ignore[arg-type]
            )
            for a in b.value.args:  # type: ignore[attr-defined]
                if isinstance(a, E.Var):
                    last_use[a] = i
                    # The inputs of a kernel that allocates may come back as views: escaping.
                    dps_uses[a] = dps_uses.get(a, 0) + (1 if dps else 1 << 30)
        local = set()
        for b in bindings:
            ty = b.var.type
            if (
                self._is_prim_call(b.value)
                and isinstance(ty, TensorType)
                and ty.is_static
                and self.uses.get(b.var, 0) == dps_uses.get(b.var, 0)
            ):
                local.add(b.var)
        for var, (root, _) in members.items():
            if var in last_use:
                last_use[root] = max(last_use[var], last_use.get(root, -1))
            # A piece is also used by its concatenation's tuple, which is dropped.
            if var is not root and self.uses.get(var, 0) != dps_uses.get(var, 0) + 1:
                local.discard(root)
        for var, (source, _) in views.items():
            if var in last_use:
                last_use[source] = max(last_use[var], last_use.get(source, -1))
            if var not in local:
                local.discard(source)
            local.discard(var)  # its storage is its input's
        return _Region(last_use, local)

    def _plannable(self, ty: Type | None) -> list[TensorType] | None:
        """The tensors a kernel writes for a result of type ``ty``; None: it allocates.

        A 0-d result (the counters and conditions of control code) is left to the kernel too:
        one CallPacked whose kernel allocates costs less than four allocation instructions and
        a pool lookup, and there is nothing worth planning in 8 bytes.
        """
        fields = ty.fields if isinstance(ty, TupleType) else (ty,)
        for f in fields:
            if not isinstance(f, TensorType) or f.shape is None or f.dtype is None:
                return None
            if any(d is None or (isinstance(d, str) and not self._bound(d)) for d in f.shape):
                return None
        return list(fields)  # type: ignore[arg-type]

    def _outputs(self, var: E.Var, state: _Region, out: list[E.VarBinding]) -> list[E.Var] | None:
        """Emit the allocations of ``var``'s kernel outputs into ``out``; None: call_alloc."""
        tensors = self._plannable(var.type)
        if tensors is None:
            return None
        if not isinstance(var.type, TupleType):
            self._alloc(var, tensors[0], state, out)
            return [var]
        fields = []
        for j, ty in enumerate(tensors):
            field_var = E.Var(self.fresh(f"{var.name}_{j}"))
            field_var.with_type(ty)
            self._alloc(field_var, ty, state, out)
            fields.append(field_var)
        out.append(E.VarBinding(var, E.Tuple(tuple(fields))))
        return fields

    def _alloc(self, var: E.Var, ty: TensorType, state: _Region, out: list) -> None:
        """Bind ``var`` to a new tensor of type ``ty`` (and its storage, unless reused); a
        piece of a concat written in place, and the concat, to views of the concat's storage,
        made at its first piece."""
        concat, offset = state.pieces.get(var, (var, 0))
        if concat in state.concats:
            storage = state.concat_storage.get(concat)
            if storage is None:
                storage = self._static_storage(concat, concat.type, state, out)  # type: ignore[arg-type]
                state.concat_storage[concat] = storage
            attrs = {"offset": offset, "shape": ty.shape, "dtype": ty.dtype}
            out.append(E.VarBinding(var, E.Call(vm_ops.alloc_tensor, (storage,), attrs)))
            return
        dtype: str = ty.dtype  # type: ignore[assignment]
        if not ty.is_static:
            shape = state.shapes.get(ty.shape)  # type: ignore[arg-type]
            if shape is None:
                shape = state.shapes[ty.shape] = self._bind(  # type: ignore[index]
                    out, "shape", E.Call(vm_ops.make_shape, (), {"shape": ty.shape})
                )
            storage = self._bind(
                out, "storage", E.Call(vm_ops.alloc_storage, (shape,), {"dtype": dtype})
            )
            attrs = {"offset": 0, "shape": ty.shape, "dtype": dtype}
            out.append(E.VarBinding(var, E.Call(vm_ops.alloc_tensor, (storage, shape), attrs)))
            return
        storage = state.storage_of[var] = self._static_storage(var, ty, state, out)
        attrs = {"offset": 0, "shape": ty.shape, "dtype": dtype}
        out.append(E.VarBinding(var, E.Call(vm_ops.alloc_tensor, (storage,), attrs)))

    def _static_storage(self, var: E.Var, ty: TensorType, state: _Region, out: list) -> E.Var:
        """The storage of static tensor ``var``: a free block if it is local and one fits
        (owned by it until its last use), else a new one."""
        dtype: str = ty.dtype  # type: ignore[assignment]
        size = int(np.prod(ty.shape, dtype=np.int64)) * numpy_dtype(dtype).itemsize
        self.stats.before += size
        self.stats.tensors += 1
        storage = self._take(state, dtype, size) if var in state.local else None
        if storage is None:
            storage = self._bind(
                out, "storage", E.Call(vm_ops.alloc_storage, (), {"size": size, "dtype": dtype})
            )
            self.stats.after += size
            self.stats.blocks += 1
            block = size
        else:
            storage, block = storage
        if var in state.local:
            state.owned[var] = (dtype, block, storage)
        return storage

    def _bind(self, out: list, hint: str, value: E.Expr) -> E.Var:
        var = E.Var(self.fresh(hint))
        out.append(E.VarBinding(var, value))
        return var

    @staticmethod
    def _take(state: _Region, dtype: str, size: int) -> tuple[E.Var, int] | None:
        """The smallest free block of ``dtype`` holding ``size`` bytes, removed from the list."""
        blocks = state.free.get(dtype, [])
        fits = [blk for blk in blocks if blk[0] >= size]
        if not fits:
            return None
        best = min(fits, key=lambda blk: blk[0])
        blocks.remove(best)
        return best[1], best[0]

    def _release(self, state: _Region, index: int, vars_: list[E.Expr]) -> None:
        """Give back the blocks of local tensors whose last use is binding ``index``."""
        for v in dict.fromkeys(vars_):
            if isinstance(v, E.Var) and v in state.pieces:
                v = state.pieces[v][0]  # a view: its storage is its outermost concatenation's
            elif isinstance(v, E.Var) and v in state.views:
                v = state.views[v][0]  # a slice's view: its storage is its input's
            if not isinstance(v, E.Var) or v not in state.owned:
                continue
            if state.last_use.get(v, index) == index:
                dtype, size, storage = state.owned.pop(v)
                state.free.setdefault(dtype, []).append((size, storage))


def _lone_op(prim: E.Function | None, name: str) -> E.Call | None:
    """The call of op ``name`` when primitive ``prim`` is that one call on its first
    parameter (None otherwise)."""
    if prim is None or prim.attrs.get("ops") != (name,):
        return None
    body = prim.body
    bindings = list(body.bindings) if isinstance(body, E.SeqExpr) else []
    inner = bindings[0].value if len(bindings) == 1 else None
    if isinstance(inner, E.Call) and inner.args and inner.args[0] is prim.params[0]:
        return inner
    return None


def _param_dims(params: tuple[E.Var, ...]) -> set[str]:
    """Symbolic dimension names bound by the shapes of ``params``."""
    names: set[str] = set()
    stack: list[Type | None] = [p.annotation or p.type for p in params]
    while stack:
        ty = stack.pop()
        if isinstance(ty, TensorType) and ty.shape is not None:
            names.update(d for d in ty.shape if D.is_symbol(d))  # expressions bind nothing
        elif isinstance(ty, TupleType):
            stack.extend(ty.fields)
    return names


def memory_plan(mod: IRModule) -> IRModule:
    """Lower every primitive call of ``mod`` to explicit allocation (see the docstring)."""
    funcs = mod.functions
    replaced: dict[str, E.Function] = {}
    figures: dict[str, dict[str, int]] = {}
    for name, func in funcs.items():
        if func.is_primitive:
            continue
        planner = _Planner(func, funcs)
        body = map_regions(func.body, planner.region)
        if body is func.body:
            continue
        replaced[name] = E.Function(func.params, body, func.ret_type, func.attrs)
        st = planner.stats
        figures[name] = {
            "before": st.before,
            "after": st.after,
            "tensors": st.tensors,
            "blocks": st.blocks,
        }
        logger.debug(
            "memory_plan %s: storage %.2f MB -> %.2f MB (%d tensors, %d blocks)",
            name,
            st.before / 2**20,
            st.after / 2**20,
            st.tensors,
            st.blocks,
        )
    if not replaced:
        return mod
    out = mod.with_functions(replaced)
    out.attrs["memory_plan"] = figures
    return out
