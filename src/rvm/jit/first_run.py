"""The library tasks a compiled module's first run will take, from its calls' shapes.

The kernel library builds each method of its convolutions, pools and lrn, and its product on
packed weights, as a task of its own (`rvm.kernels.parfor`), when a call first takes it:
seconds of LLVM each on a first run, one after the other, while the other cores sit idle. The
compiler knows every such call's shapes before any kernel runs, and the library says which
tasks a call of those shapes takes (`rvm.kernels.convmethod.first_run_tasks` and the like: the same
rule the call follows), so `library_tasks` lists them, in the order the module's functions
call them, for `rvm.jit.parallel.precompile` to build in the background
(`rvm.kernels.parfor.prefetch`) while the kernels compile.

A kernel that copies a concatenation's pieces with the library (`rvm.kernels.joins`) says so
in its record (``requires`` holds ``join_rows``: the generator's choice, which depends on how the
pieces are made); the largest piece's size comes from the call's static types, and
`rvm.kernels.joins.first_run_tasks` says whether its copy splits over the pool.

A guess is only a head start: a task left out is built when first run, as without it, and one
listed but never run costs a helper's time, nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from rvm.ir import expr as E
from rvm.ir.analysis import walk
from rvm.ir.module import IRModule
from rvm.ir.types import TensorType
from rvm.jit.channel_affine import is_affine
from rvm.jit.channel_epilogue import CONVS
from rvm.kernels.numba_cache import light_loads
from rvm.op import ops
from rvm.runtime.executable import KernelRecord

__all__ = ["library_tasks"]


def library_tasks(
    mod: IRModule, kernels: Mapping[str, KernelRecord] | None = None
) -> list[tuple[str, str]]:
    """The (task, dtype) pairs the jit kernels of ``mod`` (lowered: primitive functions with
    static types) will likely run on their first call, first needed first. ``kernels``, the
    executable's records by name (`rvm.codegen.vm_codegen`), tell which kernels copy a
    concatenation's pieces with the library (`_join_tasks`); without them none is listed.

    The library's rules it asks (`rvm.kernels.convmethod.method`...) are compiled functions: their
    cached code loads without a refresh of Numba's compiler (`light_loads`), as a warm start
    loads everything else."""
    with light_loads():
        return _library_tasks(mod, kernels or {})


def _library_tasks(mod: IRModule, kernels: Mapping[str, KernelRecord]) -> list[tuple[str, str]]:
    funcs = dict(mod.items())
    seen: set[str] = set()
    tasks: dict[tuple[str, str], None] = {}
    for name in sorted(funcs, key=lambda n: n != "main"):  # main's calls first
        if funcs[name].is_primitive:
            continue
        for node in walk(funcs[name].body):  # a kernel is named where it is called
            if not isinstance(node, E.GlobalVar) or node.name in seen:
                continue
            func = funcs.get(node.name)
            if func is not None and func.is_primitive:
                seen.add(node.name)
                tasks.update(dict.fromkeys(_primitive_tasks(func)))
                tasks.update(dict.fromkeys(_join_tasks(func, node.name, kernels)))
    return list(tasks)


def _join_tasks(
    func: E.Function, name: str, kernels: Mapping[str, KernelRecord]
) -> Iterator[tuple[str, str]]:
    """The library task of the concatenations primitive ``func`` copies with `join_rows`, if
    its kernel (``name``'s record, a ``dps`` or ``return`` one: `vm_codegen`) calls it: the
    largest piece of static size decides whether a copy splits (`joins.first_run_tasks`)."""
    records = (kernels.get(name), kernels.get(f"{name}_alloc"))
    dtypes = {d for r in records if r is not None for n, d in r.requires if n == "join_rows"}
    if not dtypes:
        return
    from rvm.kernels import joins

    for dtype in sorted(dtypes):
        largest = max(_piece_sizes(func, dtype), default=0)
        yield from ((task, dtype) for task in joins.first_run_tasks(largest))


def _piece_sizes(func: E.Function, dtype: str) -> Iterator[int]:
    """The elements of each piece of ``dtype`` and static shape that ``func``'s concat and
    stack calls join (a stack's piece is as large as its input)."""
    for node in walk(func.body):
        if isinstance(node, E.Call) and node.callee in (ops.concat, ops.stack):
            pieces = getattr(node.args[0], "type", None)
            for t in getattr(pieces, "fields", ()):
                if isinstance(t, TensorType) and t.dtype == dtype and t.shape is not None:
                    if all(isinstance(d, int) for d in t.shape):
                        yield math.prod(t.shape)


def _primitive_tasks(func: E.Function) -> Iterator[tuple[str, str]]:
    calls = [
        node
        for node in walk(func.body)
        if isinstance(node, E.Call) and not isinstance(node.callee, (E.GlobalVar, E.Var))
    ]
    for node in calls:
        for task in _call_tasks(node):
            yield task, "float32"
    # a float32 convolution's bias, residual or ReLU that the library leaves to its pass
    convs = [c for c in calls if c.callee in CONVS and _shape(c, None)]
    if convs and any(c.callee in (ops.add, ops.relu) for c in calls):
        residual = any(_adds_tensors(c) for c in calls)
        if any(_leaves_epilogue(c, residual) for c in convs):
            from rvm.kernels import epipass

            yield from ((task, "float32") for task in epipass.FIRST_RUN_TASKS)
    # a per-channel affine map (a batch norm) and ReLU: the library's pass (`rvm.jit.lower`)
    shape = _shape(func.body.body, None) if is_affine(func) else None  # type: ignore[attr-defined]
    if shape is not None:
        from rvm.kernels import affine

        if affine.splits(math.prod(shape)):
            yield from ((task, "float32") for task in affine.FIRST_RUN_TASKS)


def _adds_tensors(call: E.Call) -> bool:
    """Whether ``call`` adds two tensors of one size (a residual, not a bias a channel)."""
    if call.callee is not ops.add or len(call.args) != 2:
        return False
    a, b = (_shape(arg, None) for arg in call.args)
    return a is not None and b is not None and math.prod(a) == math.prod(b)


def _leaves_epilogue(call: E.Call, residual: bool) -> bool:
    """Whether the float32 convolution ``call`` may leave its epilogue (a bias, a ReLU, with
    ``residual`` a residual too) to the library's pass (`rvm.kernels.epipass`) rather than
    apply it as it stores (`rvm.kernels.convmethod.fuses_epilogue`): Winograd's never, the
    direct method's with a residual, the library's by the method it takes."""
    from rvm.kernels import convmethod

    if call.callee is ops.conv2d_winograd:
        return False
    if call.callee is ops.conv2d_packed:
        return residual
    found = _conv_geometry(call)
    if found is None:
        return True
    geometry, _ = found
    c, _, groups, kh, kw = geometry[:5]
    how = convmethod.float32_method(*geometry)
    return not convmethod.fuses_epilogue.py_func(how, c // groups * kh * kw, (1, 1, 1, residual))


def _shape(expr: E.Expr, rank: int | None) -> tuple[int, ...] | None:
    """The static float32 shape of ``expr``'s tensor of ``rank`` axes (any: None), else None."""
    dims = _dims(expr)
    if dims is None or rank not in (None, len(dims)) or None in dims:
        return None
    return dims  # type: ignore[return-value]


def _dims(expr: E.Expr) -> tuple[int | None, ...] | None:
    """The float32 tensor ``expr``'s dimensions (None: one known at run time only), else None."""
    t = getattr(expr, "type", None)
    if not isinstance(t, TensorType) or t.dtype != "float32" or t.shape is None:
        return None
    return tuple(d if isinstance(d, int) else None for d in t.shape)


def _call_tasks(call: E.Call) -> tuple[str, ...]:
    """The float32 library tasks one op call of static shapes runs (an integer product's
    too: `rvm.kernels.qgemm`'s task is built as float32's)."""
    callee, attrs = call.callee, call.attrs
    if callee in (ops.matmul, ops.dense):
        return _matmul_tasks(call, callee is ops.dense)
    if callee in (ops.conv1d, ops.conv2d):
        return _conv_tasks(call)
    if callee is ops.conv2d_packed:
        from rvm.kernels import direct

        return direct.FIRST_RUN_TASKS if _shape(call.args[0], 4) else ()
    if callee is ops.conv2d_winograd:
        from rvm.kernels import winograd

        out = _shape(call, 4)
        if not _shape(call.args[0], 4) or out is None:
            return ()
        bf16 = attrs.get("precision") == "bf16"
        return winograd.FIRST_RUN_TASKS_BF16 if bf16 else winograd.first_run_tasks(out[1])
    # A packed product and attention run their task at any size: rows (a sequence's, a
    # batch's) known at run time only are listed too (a transformer's first run).
    if callee is ops.dense_packed:
        from rvm.kernels import packed

        return packed.FIRST_RUN_TASKS if _dims(call.args[0]) is not None else ()
    if callee is ops.dense_packed_bf16:
        from rvm.kernels import bf16dense

        return bf16dense.FIRST_RUN_TASKS if _dims(call.args[0]) is not None else ()
    if callee is ops.attention:
        from rvm.kernels import attention

        if _dims(call) is None:
            return ()
        bf16 = attrs.get("precision") == "bf16"
        return attention.FIRST_RUN_TASKS_BF16 if bf16 else attention.FIRST_RUN_TASKS
    if callee in (ops.qconv2d, ops.qdense) and attrs.get("weight_layout") != "turned":
        from rvm.kernels import qgemm

        return qgemm.first_run_tasks(attrs.get("weight_pairs") == "int16")
    if callee in (ops.max_pool2d, ops.avg_pool2d):
        x, out = _shape(call.args[0], 4), _shape(call, 4)
        if x is None or out is None:
            return ()
        from rvm.kernels import pool

        (kh, kw), (sh, sw), (dh, dw) = attrs["pool_size"], attrs["strides"], attrs["dilation"]
        is_max = callee is ops.max_pool2d
        pads = attrs["padding"]
        return pool.first_run_tasks(
            is_max, x[3], out[2], out[3], kh, kw, sh, sw, dh, dw, x[2], pads[0], pads[1]
        )
    if callee is ops.lrn:
        x = _shape(call.args[0], 4)
        if x is None or attrs["axis"] % 4 != 1:
            return ()
        from rvm.kernels import lrn

        return lrn.first_run_tasks(x[0] * x[1] * x[2] * x[3], attrs["size"])
    if callee in (ops.layer_norm, ops.rms_norm):
        return _norm_tasks(call)
    return ()


def _norm_tasks(call: E.Call) -> tuple[str, ...]:
    """A float32 norm's task over trailing axes of static size (`rvm.kernels.norms`; rows
    known at run time only count as many, as a sequence's)."""
    from rvm.kernels import norms

    x, k = _dims(call.args[0]), len(call.attrs["axes"])
    if not x or not norms.over_rows(len(x), [a % len(x) for a in call.attrs["axes"]]):
        return ()
    n, rows = x[len(x) - k :], x[: len(x) - k]
    if None in n:
        return ()
    return norms.first_run_tasks(None if None in rows else math.prod(rows), math.prod(n))  # type: ignore[arg-type]


def _matmul_tasks(call: E.Call, dense: bool) -> tuple[str, ...]:
    """A float32 matmul's or dense's tasks (`rvm.kernels.blas.first_run_tasks`, on each
    product of its batch: `rvm.jit.stages`): rows known at run time only (a batch) count as
    one row and many; a depth or column count known then only, as every method's
    (`blas.FIRST_RUN_TASKS`)."""
    from rvm.kernels import blas, cblas

    a, b = (_dims(e) for e in call.args)
    if a is None or b is None or not cblas.AVAILABLE:
        return ()
    m, k = (1 if len(a) == 1 else a[-2]), a[-1]
    n = b[0] if dense else (1 if len(b) == 1 else b[-1])
    if k is None or n is None:
        return blas.FIRST_RUN_TASKS
    return blas.first_run_tasks(m, k, n, dense)


def _conv_tasks(call: E.Call) -> tuple[str, ...]:
    """A float32 convolution's tasks (`rvm.kernels.convmethod.first_run_tasks`)."""
    from rvm.kernels import cblas, convmethod

    found = _conv_geometry(call)
    if found is None or not cblas.AVAILABLE:
        return ()
    geometry, n = found
    return convmethod.first_run_tasks(*geometry, n=n)


def _conv_geometry(call: E.Call) -> tuple[tuple, int] | None:
    """(`rvm.kernels.convmethod.float32_method`'s arguments, the batch) for the float32
    convolution ``call`` of static shapes (a 1-d one runs as a 2-d one of height 1), else
    None."""
    nsp = 1 if call.callee is ops.conv1d else 2
    x, w, out = (_shape(e, 2 + nsp) for e in (call.args[0], call.args[1], call))
    if x is None or w is None or out is None:
        return None
    if nsp == 1:
        x, w, out = ((*s[:2], 1, s[2]) for s in (x, w, out))
    (sh, sw), groups = (1, *call.attrs["strides"])[-2:], call.attrs["groups"]
    unpadded = not any(call.attrs["padding"])
    c, ih, iw = x[1:]
    o, _, kh, kw = w
    dh, dw = (1, *call.attrs["dilation"])[-2:]
    return (c, o, groups, kh, kw, sh, sw, out[2], out[3], ih, iw, unpadded, dh, dw), x[0]
