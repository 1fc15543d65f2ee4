"""Lowering of fused primitive functions to Numba kernel source: `jit_kernel`.

The function's bindings are lowered in order through the per-op `compute` table into
`Tensor`s (elementwise maps, index maps, reduce loops, anchor stages); nothing is emitted for
a value until a consumer loads it, so a chain of elementwise, broadcast and injective ops
becomes one expression inside the output's loop nest. Each output gets one loop nest; an
anchor (matmul, dense, conv, concat...) whose value reaches the single output only through
same-shape elementwise ops writes straight into the output array, and the epilogue then runs
in place over it (a float32 convolution's bias, residual and ReLU as the library's pass, split
over the pool: `rvm.kernels.epipass`), or, for a concat or stack, on each piece's elements as
they are stored (`rvm.jit.assemble.write_joined`: one pass over the output, not two). Ops
the jit cannot lower make `jit_kernel` return the numpy kernel instead (logged); see
`FALLBACK_NOTE`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.op import OpPattern
from rvm.ir.types import TensorType, TupleType
from rvm.jit import (  # noqa: F401  (register compute definitions)
    assemble,
    attention,
    bf16,
    dynamic,
    layout,
    packed,
    quantized,
    stages,
)
from rvm.jit.channel_affine import affine_chain, coefficients
from rvm.jit.channel_epilogue import channel_ops
from rvm.jit.compute import compute
from rvm.jit.cond import ne
from rvm.jit.kernel import KernelBuilder
from rvm.jit.numpy_kernel import numpy_kernel
from rvm.jit.scalar import convert, counting_mathlib, lit
from rvm.jit.signature import (
    JIT_DTYPES,
    conv_windows,
    generic_shapes,
    numba_array_type,
    numba_dtype,
    param_leaves,
    param_type,
    tensor_type,
)
from rvm.jit.split import IMPORTS as SPLIT_IMPORTS
from rvm.jit.split import SplitForm, split_form, splits, static_work, symbol_for
from rvm.jit.te import Body, Scalar, Tensor, Unsupported, shape_tuple
from rvm.jit.views import array_view
from rvm.kernels.entry import require_line
from rvm.op.core import precision_of
from rvm.op.dynamic import DYNAMIC_OPS
from rvm.runtime.executable import SCALAR_META, KernelRecord

logger = logging.getLogger("rvm.jit")

# The dynamic ops `rvm.jit.dynamic` lowers (their dims computed at the kernel's start).
JIT_DYNAMIC_OPS = frozenset(
    {
        "dynamic_arange",
        "dynamic_expand",
        "dynamic_full",
        "dynamic_reshape",
        "dynamic_slice",
        "dynamic_tile",
    }
)
# The ops with no jit compute at all: their kernels are always the numpy kernel. Every other op
# of rvm.op has an entry in `rvm.jit.compute.compute` (tests/jit/test_coverage.py checks both).
NO_JIT_COMPUTE = (DYNAMIC_OPS - JIT_DYNAMIC_OPS) | {  # shapes read from data at run time
    "avg_pool1d",
    "avg_pool3d",
    "bitcast",
    "conv1d_transpose",
    "conv2d_transpose",
    "conv3d",
    "conv3d_transpose",
    "cumprod",
    "einsum",
    "fmod",
    "left_shift",
    "max_pool1d",
    "max_pool3d",
    "max_pool_indices",
    "nonzero",
    "resize",
    "right_shift",
    "scatter_elements",
    "scatter_nd",
    "shape_of",
    "topk",
    "trilu",
    "unique",
}
FALLBACK_NOTE = (
    f"falls back to numpy: {', '.join(sorted(NO_JIT_COMPUTE))}; integer power, float16, "
    "uint16/32/64 and the narrow dtypes (bfloat16, float8, int4...: Numba has no such types), "
    "arange with float bounds, squeeze(axis=None) of symbolic shapes, parameters of unknown rank"
)
FAST_ELEMWISE = ("nsz", "arcp", "contract", "afn")
FAST_REDUCE = ("reassoc", "nsz", "arcp", "contract", "afn")
SCALAR_SUFFIX = "__scalar"


def jit_kernel(
    name: str, func: E.Function, style: str = "dps", generic: bool = True
) -> KernelRecord:
    """The jit kernel record of primitive function ``func`` (numpy's when it cannot lower).

    Args:
        name: The kernel's packed-function name.
        func: A primitive function (``attrs["primitive"]``) with typed tensor parameters.
        style: "dps" (``kernel(*inputs, *outputs)`` writes the outputs) or "return"
            (``kernel(*inputs)`` returns the result or a tuple of results).
        generic: Read the parameters' fixed sizes other than 1 at run time (see
            `generic_shapes`) and leave the kernel's name out of its source, so the layers
            of a model that differ only in sizes share one source, hence one compile.
            False checks every fixed size against the parameter types.
    """
    ops_used = _ops(func)
    meta = {"ops": ",".join(ops_used), "precision": precision_of(func)}
    try:
        lowering = None
        with counting_mathlib() as calls:
            if _scalar_kernel(func, style):
                try:
                    lowering = _KernelLowering(name, func, style, generic)
                    lowered = lowering.build_scalar()
                    meta[SCALAR_META] = lowered[1] + SCALAR_SUFFIX
                except Unsupported as err:  # the plain kernel may still lower
                    logger.debug("kernel %s has no scalar form: %s", name, err)
                    lowering = None
            if lowering is None:
                calls[0] = 0
                lowering = _KernelLowering(name, func, style, generic)
                lowered = lowering.build()
    except Unsupported as err:
        logger.info("kernel %s (%s) falls back to numpy: %s", name, ",".join(ops_used), err)
        rec = numpy_kernel(name, func, style)
        return replace(rec, meta={**rec.meta, "jit_fallback": str(err)})
    source, entry, sig = lowered
    kb = lowering.kb
    return KernelRecord(
        name,
        "jit",
        source,
        entry,
        style,
        {**meta, "signature": sig},
        requires=tuple(sorted(kb.entries)),
        imports=_imported_modules(kb),
        cost=compile_cost(source.count("\n"), kb.loops, calls[0]),
    )


def compile_cost(lines: int, loops: int, inlined: int) -> int:
    """An estimate of the time Numba takes to compile a kernel (arbitrary units): its lines,
    each loop (what LLVM's optimizer spends its time on) and each call of a mathlib function
    (inlined) weighing more."""
    return 10 + lines + 8 * loops + 6 * inlined


# The modules every kernel's header imports (`_KernelLowering._source`).
_HEADER_MODULES = ("rvm.kernels.mathlib",)


def _imported_modules(kb: KernelBuilder) -> tuple[str, ...]:
    """The rvm modules a kernel's source imports (its header's and the builder's)."""
    modules = set(_HEADER_MODULES) | {m for m, _, _ in kb.imports}
    if kb.entries:
        modules.add("rvm.kernels.entry")
    return tuple(sorted(modules))


def _import_line(module: str, name: str, alias: str | None) -> str:
    return f"from {module} import {name}" + (f" as {alias}" if alias else "")


def _scalar_kernel(func: E.Function, style: str) -> bool:
    """Whether ``func`` maps 0-d tensors to one 0-d tensor (a dps kernel): its kernel also
    has a scalar form (`SCALAR_META`)."""
    if style != "dps":
        return False
    body = func.body
    ret = func.ret_type or infer_type(body.body if isinstance(body, E.SeqExpr) else body)
    types = [p.type for p in func.params] + [ret]
    return all(isinstance(t, TensorType) and t.shape == () for t in types)


def _ops(func: E.Function) -> list[str]:
    body = func.body
    bindings = body.bindings if isinstance(body, E.SeqExpr) else ()
    return [
        b.value.callee.name
        for b in bindings
        if isinstance(b.value, E.Call) and isinstance(b.value.callee, E.Op)
    ]


def _label(name: str, generic: bool) -> str:
    """The name the kernel's source uses: generic kernels drop the packed name's ``_<n>``
    suffix (the VM's errors name the packed function anyway)."""
    if generic:
        name = re.sub(r"_\d+$", "", name)
    return name if name.isidentifier() else "k_" + re.sub(r"\W", "_", name)


class _KernelLowering:
    def __init__(self, name: str, func: E.Function, style: str, generic: bool) -> None:
        if style not in ("dps", "return"):
            raise ValueError(f"style must be 'dps' or 'return', got {style!r}")
        self.func, self.style, self.generic = func, style, generic
        self.name = self.entry = _label(name, generic)
        self.kb = KernelBuilder(self.name)
        self.env: dict[E.Var, object] = {}
        self.consts: list[str] = []
        self.uses_reduction = False

    def build(self) -> tuple[str, str, str]:
        body = self.func.body
        if not isinstance(body, E.SeqExpr):
            body = E.seq([], body)
        leaves = param_leaves(self.func.params)
        in_types = [ty for _, ty in leaves]
        shapes = [ty.shape or () for ty in in_types]
        if self.generic:
            leaf = {i: k for k, ((i, j), _) in enumerate(leaves) if j is None}
            keep = {(leaf[i], a) for i, a in conv_windows(self.func) if i in leaf}
            shapes, self.kb.sizes = generic_shapes(shapes, frozenset(keep))
        fields: dict[E.Var, list[Tensor]] = {}
        for i, p in enumerate(self.func.params):
            if isinstance(p.type, TupleType):  # unpacked at the start: p0_0, p0_1 = p0
                names = [f"p{i}_{j}" for j in range(len(p.type.fields))]
                self.kb.root.lines.append(f"{', '.join(names)}, = p{i}")
        for k, ((i, j), ty) in enumerate(leaves):
            p = self.func.params[i]
            name, what = (f"p{i}", f"input {i} ({p.name!r})") if j is None else (
                f"p{i}_{j}", f"input {i} ({p.name!r}) field {j}")  # fmt: skip
            t = self.kb.param(name, shapes[k], ty.dtype, what)
            if j is None:
                self.env[p] = t
            else:
                self.env[p] = fields.setdefault(p, [])
                fields[p].append(t)
        if self.style == "dps":
            self._output_symbols(body.body)
        for b in body.bindings:
            self.env[b.var] = self._binding(b)
        results = self._results(body.body)
        out_types = self._out_types(body.body, len(results))
        outs = self._outputs(results, out_types)
        self._emit_outputs(results, outs, out_types)
        return self._source(in_types, out_types, outs)

    def _output_symbols(self, result: E.Expr) -> None:
        """A dps kernel's symbolic output dims that no input has (a reshape to ``past + seq``,
        a name the program computed) are read from the outputs, which the VM allocated to the
        bound sizes; the kernel's own checks then compare what it computes with them."""
        ty = self.func.ret_type or infer_type(result)
        kb = self.kb
        for i, f in enumerate(ty.fields if isinstance(ty, TupleType) else (ty,)):
            if not isinstance(f, TensorType) or f.shape is None:
                continue
            for axis, d in enumerate(f.shape):
                if isinstance(d, str) and d not in kb.symbols:
                    kb.symbols[d] = kb.dim(f"out{i}.shape[{axis}]")
                    kb.origins[d] = f"output {i} at axis {axis}"

    def build_scalar(self) -> tuple[str, str, str]:
        """The source of a kernel of 0-d tensors (`_scalar_kernel`) as its scalar form, a
        function of the parameters' values returning the result's, and the kernel, which
        checks its output's shape and stores the scalar form's value of its inputs'."""
        body = self.func.body
        if not isinstance(body, E.SeqExpr):
            body = E.seq([], body)
        in_types = [tensor_type(p.type, f"parameter {p.name!r}") for p in self.func.params]
        for i, (p, ty) in enumerate(zip(self.func.params, in_types)):
            value = Scalar(f"p{i}", frozenset(), ty.dtype or "")
            self.env[p] = Tensor((), ty.dtype or "", lambda body, index, v=value: v)
        for b in body.bindings:
            self.env[b.var] = self._binding(b)
        results = self._results(body.body)
        (out_type,) = self._out_types(body.body, len(results))
        kb = self.kb
        if kb.entries or kb.imports or self.consts:
            raise Unsupported("library calls or array constants")
        v = kb.let(kb.root, convert(kb.load(results[0], kb.root, []), out_type.dtype))
        kb.root.lines.append(f"return {v.code}")
        scalar = self.entry + SCALAR_SUFFIX
        params = [f"p{i}" for i in range(len(in_types))]
        types = [f"nt.{numba_dtype(t.dtype)}" for t in in_types]
        ret = f"nt.{numba_dtype(out_type.dtype)}"
        fast = FAST_REDUCE if self.uses_reduction else FAST_ELEMWISE
        lines = [
            f"@nb.njit({ret}({', '.join(types)}), {_flags(fast)})",
            f"def {scalar}({', '.join(params)}):",
            *kb.root.render(1),
            "",
            "",
        ]
        kb.root = Body(None, None)
        self._outputs(results, [out_type])
        reads = ", ".join(f"{p}[()]" for p in params)
        kb.root.lines.append(f"out0[()] = {scalar}({reads})")
        return self._source(in_types, [out_type], ["out0"], lines)

    # -- bindings ------------------------------------------------------------------------

    def _arg(self, e: E.Expr) -> object:
        if isinstance(e, E.Var):
            if e not in self.env:
                raise Unsupported(f"free variable {e.name!r}")
            return self.env[e]
        if isinstance(e, E.Constant):
            return self._constant(e.data)
        if isinstance(e, E.Tuple):
            return [self._arg(f) for f in e.fields]
        if isinstance(e, E.TupleGetItem):
            return self._arg(e.tuple_value)[e.index]  # type: ignore[index]
        raise Unsupported(f"argument {type(e).__name__}")

    def _constant(self, data: np.ndarray) -> Tensor:
        dt = data.dtype.name
        if dt not in JIT_DTYPES:
            raise Unsupported(f"constant of dtype {dt}")
        if data.ndim == 0:
            code = lit(data.item(), dt)
            return Tensor((), dt, lambda body, index: Scalar(code, frozenset(), dt))
        name = f"_c{len(self.consts)}"
        self.consts.append(f"{name} = np.array({data.tolist()!r}, dtype=np.{dt})")
        return Tensor(tuple(str(d) for d in data.shape), dt, array=name, kind="array")

    def _binding(self, b: E.VarBinding) -> object:
        value = b.value
        if not isinstance(value, E.Call):
            return self._arg(value)
        op = value.callee
        if not isinstance(op, E.Op):
            raise Unsupported("a primitive function may only call ops")
        fn = compute.get(op)
        if fn is None:
            raise Unsupported(f"op {op.name} has no jit compute definition")
        if op.pattern >= OpPattern.REDUCTION:
            self.uses_reduction = True
        ty = b.var.type or infer_type(value)
        args = [self._arg(a) for a in value.args]
        self.kb.op = op.name
        if isinstance(ty, TupleType):
            pieces = fn(self.kb, dict(value.attrs), args, tensor_type(ty.fields[0], "").dtype)
            for t, f in zip(pieces, ty.fields):
                self._check_rank(t, tensor_type(f, f"result of {op.name}"), op.name)
            return pieces
        tt = tensor_type(ty, f"result of {op.name}")
        t = fn(self.kb, dict(value.attrs), args, tt.dtype)
        self._check_rank(t, tt, op.name)
        return t

    def _check_rank(self, t: Tensor, ty: TensorType, op: str) -> None:
        if t.ndim != len(ty.shape or ()):
            raise Unsupported(f"{op}: lowered rank {t.ndim} differs from the type's {ty}")

    # -- outputs -------------------------------------------------------------------------

    def _results(self, result: E.Expr) -> list[Tensor]:
        value = self._arg(result)
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(t, Tensor) for t in items):
            raise Unsupported("nested tuple results")
        return items  # type: ignore[return-value]

    def _out_types(self, result: E.Expr, n: int) -> list[TensorType]:
        ty = self.func.ret_type or infer_type(result)
        fields = ty.fields if isinstance(ty, TupleType) else (ty,)
        if len(fields) != n:
            raise Unsupported("result arity differs from its type")
        return [tensor_type(f, "the result") for f in fields]

    def _outputs(self, results: list[Tensor], types: list[TensorType]) -> list[str]:
        kb, outs = self.kb, []
        for i, (t, ty) in enumerate(zip(results, types)):
            name = f"out{i}"
            outs.append(name)
            if self.style == "return":
                kb.root.lines.append(
                    f"{name} = np.empty({shape_tuple(t.dims)}, dtype=np.{ty.dtype})"
                )
                continue
            kb.check(
                ne(f"{name}.shape", shape_tuple(t.dims)),
                f"{self.name}: output {i} does not have the result's shape",
            )
        return outs

    def _alias(self, results: list[Tensor], types: list[TensorType]) -> tuple[Tensor, int] | None:
        """The anchor that may compute straight into the single output, and its binding's
        index, if any."""
        if len(results) != 1:
            return None
        target = results[0]
        body = self.func.body
        bindings = list(body.bindings) if isinstance(body, E.SeqExpr) else []
        for k, b in enumerate(bindings):
            a = self.env.get(b.var)
            if not (isinstance(a, Tensor) and a.kind == "anchor" and a.loader is None):
                continue
            if a.dtype != types[0].dtype or a.dims != target.dims:
                continue
            if _epilogue_ok(b.var, bindings[k + 1 :], self.env, target):
                return a, k
        return None

    def _emit_outputs(self, results, outs, types) -> None:
        kb = self.kb
        aliased = self._alias(results, types)
        anchor = aliased[0] if aliased else None
        if anchor is not None and id(anchor) not in kb.filled:
            anchor.array = outs[0]
        for t, name, ty in zip(results, outs, types):
            if t is anchor:
                kb.materialize(t)
                continue
            if aliased and anchor.array == name:
                if self._channel_epilogue(aliased[1], t, name):
                    continue  # a convolution's epilogue, the library's pass
                if assemble.write_joined(kb, t, anchor, name, ty.dtype):
                    continue  # a concat's, piece by piece
            if len(results) == 1 and self._channel_affine(name):
                continue  # a per-channel affine map and ReLU, the library's pass
            if not layout.write_reshaped(kb, t, name, ty.dtype):
                kb.write(t, name, ty.dtype)
        if self.style == "return":
            kb.root.lines.append(
                f"return {outs[0]}" if len(outs) == 1 else f"return ({', '.join(outs)},)"
            )

    def _channel_epilogue(self, k: int, target: Tensor, out: str) -> bool:
        """Emit the library's pass (`rvm.kernels.epipass`) for the epilogue of the float32
        convolution of binding ``k``, computed into the output ``out``, when the epilogue is
        `rvm.jit.channel_epilogue.channel_ops`' (the convolution first, called here); else
        False."""
        body = self.func.body
        bindings = list(body.bindings) if isinstance(body, E.SeqExpr) else []
        found = channel_ops(bindings[k], bindings[k + 1 :], self.env, target)
        if found is None:
            return False
        bias, res, act = found
        kb = self.kb
        rows = (target.dims[0], target.dims[1], *(("1",) * (4 - target.ndim)), *target.dims[2:])
        view = array_view(kb, out, target.dims, rows)
        arrays = [view, view, view]  # an absent operand is passed as out, unread
        if bias is not None:
            channels = (("1",) * (target.ndim - bias.ndim) + bias.dims)[1]
            arrays[1] = array_view(kb, bias.array, bias.dims, ("1", channels, "1", "1"))
        if res is not None:
            arrays[2] = array_view(kb, res.array, res.dims, rows)
        flags = (act, int(bias is not None), int(res is not None))
        conv = self.env[bindings[k].var]
        # The convolution, into out; with its epilogue where the library takes both at once
        # (`rvm.jit.stages`: float32 ``conv2d``, applied in its GEMM's store where it can).
        conv.info["epilogue"] = (arrays[1], arrays[2], flags)
        kb.materialize(conv)
        if not conv.info.get("fused"):
            kb.call_entry("conv_epilogue", arrays, flags, "float32")
        return True

    def _channel_affine(self, out: str) -> bool:
        """Emit each channel's scale and shift and the library's pass (`rvm.kernels.affine`)
        for a function that is `rvm.jit.channel_affine.affine_chain`'s, into the output
        ``out``; else False."""
        found = affine_chain(self.func, self.env, self._arg)
        if found is None:
            return False
        x, steps, act = found
        kb = self.kb
        coef = kb.materialize(coefficients(kb, x, steps))
        rows = (x.dims[0], x.dims[1], *(("1",) * (4 - x.ndim)), *x.dims[2:])
        arrays = [array_view(kb, a, x.dims, rows) for a in (x.array, out)]
        arrays.append(array_view(kb, coef, (x.dims[1], "2"), ("1", "1", x.dims[1], "2")))
        kb.call_entry("channel_affine", arrays, (act,), "float32")
        return True

    # -- source --------------------------------------------------------------------------

    def _source(self, in_types, out_types, outs, before=()) -> tuple[str, str, str]:
        ins = [param_type(p) for p in self.func.params]
        res = [numba_array_type(t, False) for t in out_types]
        if self.style == "dps":
            sig = f"nt.void({', '.join(ins + res)})"
            params = [f"p{i}" for i in range(len(ins))] + outs
        else:
            ret = res[0] if len(res) == 1 else f"nt.Tuple(({', '.join(res)},))"
            sig = f"{ret}({', '.join(ins)})"
            params = [f"p{i}" for i in range(len(ins))]
        fast = FAST_REDUCE if self.uses_reduction else FAST_ELEMWISE
        ops_used = ", ".join(_ops(self.func))
        split = self._split(in_types, out_types, params, fast) if not before else None
        body = [f"    {line}" for line in split.body] if split else self.kb.root.render(1)
        lines = [
            f"# rvm jit kernel {self.name} ({ops_used})",
            "import math",
            "",
            "import numba as nb",
            "import numpy as np",
            "from numba import types as nt",
            "",
            "from rvm.kernels.mathlib import erf32, exp32, gelu32, gelu_tanh32, sigmoid32, tanh32",
            *sorted(_import_line(*i) for i in self.kb.imports),
            *(["from rvm.kernels.entry import require"] if self.kb.entries else []),
            "",
            "CACHE = True",
            *(require_line(n, d) for n, d in sorted(self.kb.entries)),
            *self.consts,
            f"SIGNATURE = {sig}",
            "",
            "",
            *before,
            *(split.before if split else ()),
            f"@nb.njit(SIGNATURE, {_flags(fast)})",
            f"def {self.entry}({', '.join(params)}):",
            *body,
        ]
        if not body:
            lines.append("    pass")
        source = "\n".join(lines) + "\n"
        return (symbol_for(source) if split else source), self.entry, sig

    def _split(self, in_types, out_types, params, fast) -> SplitForm | None:
        """The kernel's split form (`rvm.jit.split`), when its loop is worth cutting; its
        imports are then the kernel's too."""
        kb = self.kb
        if self.style != "dps" or any(isinstance(p.type, TupleType) for p in self.func.params):
            return None
        types = [*in_types, *out_types]
        work = static_work([t.shape for t in types])
        loop = splits(kb.root, bool(kb.entries), bool(kb.filled), work)
        if loop is None:
            return None
        arrays = [(n, t.dtype, len(t.shape or ())) for n, t in zip(params, types)]
        kb.imports.update(SPLIT_IMPORTS)
        return split_form(kb.root, loop, arrays, _flags(fast))


def _flags(fast: Sequence[str]) -> str:
    """The njit options every kernel function is compiled with, its signature aside: no C
    wrapper (`rvm.kernels.jitting.NO_C_WRAPPER`), the VM and native code call it through
    Numba's own."""
    fastmath = ", ".join(repr(f) for f in sorted(fast))
    return (
        f'nogil=True, cache=CACHE, error_model="numpy", fastmath={{{fastmath}}}, '
        "boundscheck=False, no_cfunc_wrapper=True"
    )


_SAFE = (OpPattern.ELEMWISE, OpPattern.BROADCAST)


def _epilogue_ok(anchor: E.Var, rest: list[E.VarBinding], env: dict, target: Tensor) -> bool:
    """Whether every use of ``anchor`` (transitively) is a same-shape elementwise op that ends
    in the output, so the output can hold the anchor and be updated in place."""
    chain = {anchor}
    for b in rest:
        v = b.value
        args = v.args if isinstance(v, E.Call) else (v,)
        if not any(isinstance(a, E.Var) and a in chain for a in args):
            if any(isinstance(a, E.Tuple) and any(f in chain for f in a.fields) for a in args):
                return False
            continue
        t = env.get(b.var)
        ok = (
            isinstance(v, E.Call)
            and isinstance(v.callee, E.Op)
            and v.callee.pattern in _SAFE
            and v.callee.name != "broadcast_to"
            and isinstance(t, Tensor)
            and t.dims == target.dims
        )
        if not ok:
            return False
        chain.add(b.var)
    return any(env.get(c) is target for c in chain)
