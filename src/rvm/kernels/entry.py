"""C entry points of the kernel library (`rvm.kernels.conv`, `.pool`, `.blas`' matmul...).

A kernel that called a library function directly would link the function's code into its own
module, and LLVM would optimize it again in every kernel (1-3 s per kernel for the
convolution). Instead each library function has a C entry point per float dtype (a cached
`numba.cfunc`) whose address is registered with llvmlite under a fixed symbol, as
`rvm.kernels.blas` does with NumPy's CBLAS: a kernel calls the symbol like a C library, and a
cached kernel's call is resolved when it is linked.

An entry point is compiled (or loaded from Numba's cache) only for the dtypes a process uses,
when first required: the first compile after an install then builds the float32 convolution
alone, not every dtype's (each is seconds of LLVM). A kernel that calls one requires it at
import (its generated source has ``require("conv2d", "float32")`` before its function), so the
symbol is registered before a cached kernel is linked; typing a call requires it too.
Processes sharing the cache that need one at once build it once: the others wait for that
build, then load it (`rvm.kernels.apart.built_once`, as for every function Numba caches).

Every float entry point has one C signature, so one caller serves them all: three data
pointers (up to three 4-d arrays of the dtype; null past the last), their dims (an int64 array
of 12), the integer parameters (an int64 array), and an int64 status back (0: done). The
quantized products' (`MIXED`) take arrays of several dtypes and ranks: a data pointer per
array, typed by its dtype, then the dims of them all, the parameters and the status; their
variant (the ``dtype`` below) names every array's dtype, joined by ``_`` (`variant`; their
byte arrays as uint8, the sign a parameter: `BYTES`).

- `export(name, body)` declares ``body(a, b, c, dims, params)`` as entry point ``name``;
- `require(name, dtype)` compiles and registers it for ``dtype``, once per process;
- `caller(name, n_params)` is the intrinsic ``call((arrays...), (params...))`` that a jit
  function uses to call it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import numba as nb
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.core.compiler_lock import global_compiler_lock
from numba.extending import intrinsic

from rvm.kernels import DTYPES
from rvm.kernels.numba_cache import light_loads
from rvm.progress import Progress

MAX_ARRAYS = 3
NDIMS = 4

# The library's entry points and the modules exporting them (imported by `require`).
MODULES = {
    "conv2d": "rvm.kernels.conv",
    "conv2d_fused": "rvm.kernels.conv",
    "conv2d_winograd": "rvm.kernels.conv",
    "conv2d_packed": "rvm.kernels.direct",
    "conv2d_packed_fused": "rvm.kernels.direct",
    "conv_epilogue": "rvm.kernels.epipass",
    "channel_affine": "rvm.kernels.affine",
    "pool2d": "rvm.kernels.pool",
    "lrn": "rvm.kernels.lrn",
    "norm_rows": "rvm.kernels.norms",
    "join_rows": "rvm.kernels.joins",
    "qconv2d": "rvm.kernels.qentry",
    "qconv2d_turned": "rvm.kernels.qentry",
    "qdense": "rvm.kernels.qentry",
    "qmax_pool2d": "rvm.kernels.qpool",
    "max_pool2d_pairs": "rvm.kernels.bf16pool",
    "pair_image": "rvm.kernels.bf16planes",
    "qadd": "rvm.kernels.qadd",
    "conv2d_bf16": "rvm.kernels.bf16entry",
    "dense_bf16": "rvm.kernels.bf16entry",
    "matmul": "rvm.kernels.blas",
    "dense_packed": "rvm.kernels.packed",
}
# The entry points whose arrays are of several dtypes: each array's rank, and the dtypes an
# array may have. A kernel calls them through its module's ``<name>_call``, the others through
# ``entry_call`` (`caller_attribute`).
MIXED = {
    "conv2d_fused": (4, 4, 4, 4, 4),
    "conv2d_winograd": (4, 4, 4, 4, 4),
    "conv2d_packed_fused": (4, 4, 4, 4, 4),
    "qconv2d": (4, 4, 1, 1, 4),
    "qconv2d_turned": (4, 4, 1, 1, 4),
    "qdense": (2, 2, 1, 1, 2),
    "qmax_pool2d": (4, 4),
    "max_pool2d_pairs": (4, 4),
    "qadd": (1, 1, 1),
    "conv2d_bf16": (4, 2, 4, 1, 4, 2),
    "dense_bf16": (2, 2, 2),
    "matmul": (2, 2, 2),
    "dense_packed": (2, 3, 2, 1, 2),
    "norm_rows": (2, 1, 1, 2),
}
MIXED_DTYPES = ("uint8", "int8", "int16", "int32", "float32")
# The dtypes a `MIXED` entry point's arrays may have where they are not `MIXED_DTYPES`.
MIXED_DTYPES_OF = {"matmul": ("float32", "float64"), "norm_rows": ("float32", "float64")}
# The `MIXED` entry points' byte arrays (by position): an int8 one is passed as uint8 and its
# sign as one more parameter after the caller's (bit i: the i-th of these arrays is int8), so
# one build serves every variant of signs (the integer products' input and output: each
# build is seconds of LLVM).
BYTES = {"qconv2d": (0, 4), "qconv2d_turned": (0, 4), "qdense": (0, 4), "qadd": (0, 1, 2)}

_bodies: dict[str, Callable[..., int]] = {}  # exported entry points by name
_compiled: dict[tuple[str, str], object] = {}  # (name, dtype) -> its cfunc, kept alive


def symbol(name: str, dtype: str) -> str:
    """The registered symbol of entry point ``name`` for ``dtype``."""
    return f"rvm_{name}_{dtype}"


def export(name: str, body: Callable[..., int]) -> None:
    """Declare ``body(a, b, c, dims, params) -> int`` (module level, for Numba's cache) as the
    C entry point ``name``; `require` compiles it for a dtype."""
    _bodies[name] = body


def require(name: str, dtype: str) -> None:
    """Compile entry point ``name`` for ``dtype`` (or load it from Numba's cache) and register
    its symbol, unless this process already has.

    Raises:
        ValueError: ``name`` is not one of `MODULES`, or ``dtype`` not one of `DTYPES`.
    """
    if (name, dtype) in _compiled:
        return
    if name not in MODULES or not _known(name, dtype):
        if name in MIXED:
            want = f"the dtypes of its {len(MIXED[name])} arrays joined by '_', each one of "
            want += ", ".join(_mixed_dtypes(name))
        else:
            want = f"dtypes {', '.join(DTYPES)}"
        raise ValueError(
            f"no entry point {name!r} for {dtype!r}: entry points are {', '.join(MODULES)}, {want}"
        )
    dtype = variant(dtype.split("_"), name) if name in BYTES else dtype
    if (name, dtype) in _compiled:
        return
    if name not in _bodies:
        importlib.import_module(MODULES[name])  # exports it
    body = _bodies[name]
    # A task it splits its loop into is built when first run (`rvm.kernels.parfor`).
    with light_loads():  # a cached entry point loads without starting Numba's compiler
        _build(name, dtype, body)


def _known(name: str, dtype: str) -> bool:
    if name not in MIXED:
        return dtype in DTYPES
    parts = dtype.split("_")
    return len(parts) == len(MIXED[name]) and all(p in _mixed_dtypes(name) for p in parts)


def _mixed_dtypes(name: str) -> tuple[str, ...]:
    """The dtypes the arrays of `MIXED` entry point ``name`` may have."""
    return MIXED_DTYPES_OF.get(name, MIXED_DTYPES)


def variant(dtypes: Sequence[str], name: str = "") -> str:
    """The variant of a `MIXED` entry point (``name``'s, its `BYTES` as uint8) whose arrays
    have ``dtypes``, in order."""
    byte = BYTES.get(name, ())
    return "_".join("uint8" if k in byte and d == "int8" else d for k, d in enumerate(dtypes))


def signs(name: str, dtypes: Sequence[str]) -> int:
    """The parameter saying which of entry point ``name``'s `BYTES` are int8 among arrays of
    ``dtypes`` (bit i: the i-th)."""
    return sum(1 << i for i, k in enumerate(BYTES.get(name, ())) if dtypes[k] == "int8")


def caller_attribute(name: str) -> str:
    """The name of entry point ``name``'s `caller` in its module (`MODULES`)."""
    return f"{name}_call" if name in MIXED else "entry_call"


def _build(name: str, dtype: str, body: Callable[..., int]) -> None:
    # Numba's own (reentrant) lock: typing a call requires the entry point while holding it.
    with global_compiler_lock:
        if (name, dtype) in _compiled:
            return
        dtypes = dtype.split("_") if name in MIXED else [dtype] * MAX_ARRAYS
        ptrs = [nt.CPointer(nb.from_dtype(np.dtype(d))) for d in dtypes]
        sig = nt.int64(*ptrs, nt.CPointer(nt.int64), nt.CPointer(nt.int64))
        with Progress(f"building rvm's library: {name} ({dtype})"):  # seconds, once per machine
            cfunc = nb.cfunc(sig, cache=True, error_model="numpy", boundscheck=False)(body)
        llvm.add_symbol(symbol(name, dtype), cfunc.address)
        _compiled[name, dtype] = cfunc


def require_line(name: str, dtype: str) -> str:
    """The statement of a kernel's source requiring entry point ``name`` for ``dtype`` (after
    ``from rvm.kernels.entry import require``)."""
    return f"require({name!r}, {dtype!r})"


def required() -> list[tuple[str, str]]:
    """The (entry point, dtype) pairs this process has compiled or loaded."""
    return sorted(_compiled)


def caller(name: str, n_params: int, older: tuple[int, ...] = ()):  # type: ignore[no-untyped-def]
    """The intrinsic ``call(arrays, params) -> int64`` of entry point ``name``: ``arrays`` a
    tuple of up to `MAX_ARRAYS` C-contiguous 4-d arrays of one float dtype (of a `MIXED` one:
    its C-contiguous arrays of their ranks), ``params`` a tuple of ``n_params`` integers (each
    passed as int64), or of as many as an earlier library's entry took (``older``): a kernel
    of an executable saved then, rebuilt from its source here, passes those, and the entry's
    later parameters are passed as 0, which means what the earlier entry did (an entry point
    only grows parameters at its end, each 0 for its old behaviour)."""
    ranks = MIXED.get(name)

    @intrinsic
    def call(typingctx, arrays, params):  # type: ignore[no-untyped-def]
        if not (_mixed_ok(arrays, ranks, _mixed_dtypes(name)) if ranks else _arrays_ok(arrays)):
            return None
        given = len(params) if isinstance(params, nt.BaseTuple) else -1
        if not _params_ok(params, given if given in older else n_params):
            return None
        dtypes = [str(t.dtype) for t in arrays.types]
        dtype = variant(dtypes, name) if ranks else dtypes[0]
        require(name, dtype)  # before the caller is linked

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            i64 = ir.IntType(64)
            values = cgutils.unpack_tuple(builder, args[0], len(arrays))
            ptrs, dims = [], []
            for aty, av in zip(arrays.types, values):
                arr = context.make_array(aty)(context, builder, av)
                ptrs.append(arr.data)
                dims += cgutils.unpack_tuple(builder, arr.shape, aty.ndim)
            if not ranks:
                ptrs += [ir.Constant(ptrs[0].type, None)] * (MAX_ARRAYS - len(ptrs))
                dims += [i64(0)] * (MAX_ARRAYS * NDIMS - len(dims))
            pvals = [
                context.cast(builder, v, t, nt.int64)
                for v, t in zip(cgutils.unpack_tuple(builder, args[1], given), params.types)
            ]
            pvals += [i64(0)] * (n_params - given)  # an earlier library's call: the rest 0
            if name in BYTES:  # int8 and uint8 pointers are both i8*: the sign as data
                pvals.append(i64(signs(name, dtypes)))
            bufs = [_stack_array(builder, dims), _stack_array(builder, pvals)]
            fnty = ir.FunctionType(i64, [p.type for p in ptrs] + [b.type for b in bufs])
            fn = cgutils.get_or_insert_function(builder.module, fnty, symbol(name, dtype))
            return builder.call(fn, ptrs + bufs)

        return nt.int64(arrays, params), codegen

    return call


def _params_ok(params: nt.Type, n_params: int) -> bool:
    """A tuple of ``n_params`` integers: int64 values, or plain int literals and variables
    (a kernel passes its attributes as they are, with no ``np.int64(...)`` call to type)."""
    if not isinstance(params, nt.BaseTuple) or len(params) != n_params:
        return False
    return all(isinstance(t, (nt.Integer, nt.IntegerLiteral)) for t in params.types)


def _arrays_ok(arrays: nt.Type) -> bool:
    if not isinstance(arrays, nt.BaseTuple) or not 1 <= len(arrays) <= MAX_ARRAYS:
        return False
    types = list(arrays.types)
    if not all(isinstance(t, nt.Array) and t.ndim == NDIMS and t.layout == "C" for t in types):
        return False
    return len({t.dtype for t in types}) == 1 and str(types[0].dtype) in DTYPES


def _mixed_ok(arrays: nt.Type, ranks: tuple[int, ...], dtypes: tuple[str, ...]) -> bool:
    if not isinstance(arrays, nt.BaseTuple) or len(arrays) != len(ranks):
        return False
    return all(
        isinstance(t, nt.Array) and t.ndim == r and t.layout == "C" and str(t.dtype) in dtypes
        for t, r in zip(arrays.types, ranks)
    )


def _stack_array(builder: ir.IRBuilder, values: list) -> ir.Value:
    """An int64 array on the stack holding ``values``."""
    i64 = ir.IntType(64)
    buf = cgutils.alloca_once(builder, i64, size=len(values))
    for k, v in enumerate(values):
        builder.store(v, builder.gep(buf, [i64(k)]))
    return buf
