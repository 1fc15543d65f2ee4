"""Batch inference on Dask: run a function of an executable on each block of a dask array.

    import dask.array as da
    import rvm.dask

    x = da.from_array(inputs, chunks=(256, 784))          # chunked along the batch axis
    y = rvm.dask.map_batches(ex, x, w1, b1, w2, b2)       # a dask array, nothing runs yet
    y.compute()                                           # any scheduler: threads, processes,
                                                          # or a distributed.Client

Each block of `x` is the first argument of one call of the function; the other arguments go
whole to every call. The output's chunks and dtype come from the function's result type
(`VMFunction.result`): a result of shape ``("n", 10)``, where ``"n"`` is the batch dimension
of the first parameter, gives blocks of ``(block_rows, 10)``.

Workers: the executable travels as its RVMX bytes (`Executable.__reduce__`) with its content
hash. Each worker process keeps one `Executable` per hash, and each of its threads one
`VirtualMachine` per (hash, exec mode), made at its first block and reused for the next ones (a
VM runs one call at a time, so threads never share one). Kernels load as `load_executable`
loads them: from the executable when it carries native code, else from the kernel cache or
by compiling them, once per process.

Dask is an optional dependency (``pip install 'rvm[dask]'``); ``import rvm`` does not import
this module or dask.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

from rvm.dtypes import numpy_dtype
from rvm.errors import ShapeError
from rvm.runtime.executable import Executable, ParamSpec, VMFunction
from rvm.runtime.vm import VirtualMachine

try:
    import dask.array as da
    from dask.base import tokenize
except ImportError:  # pragma: no cover - the error says what to install
    raise ImportError(
        "rvm.dask needs dask: pip install 'rvm[dask]' (or pip install 'dask[array]')"
    ) from None

__all__ = ["map_batches", "worker_vm"]

# Per process: executables by content hash, held as long as a VM (or a task) uses them. Per
# thread: VMs by (hash, exec mode); past this many, the least recently used goes.
MAX_VMS_PER_THREAD = 8
_executables: weakref.WeakValueDictionary[str, Executable] = weakref.WeakValueDictionary()
_executables_lock = threading.Lock()
_local = threading.local()


class _Shipped:
    """An executable as tasks carry it: its content hash, and its RVMX bytes when pickled.

    In the process that made it, it holds the executable itself (the threaded scheduler ships
    nothing); unpickled elsewhere, it holds the bytes, decoded at most once per process.
    """

    __slots__ = ("key", "ex", "data", "trusted")

    def __init__(
        self, key: str, ex: Executable | None, data: bytes | None, trusted: bool = False
    ) -> None:
        self.key, self.ex, self.data = key, ex, data
        self.trusted = ex.trusted if ex is not None else trusted

    def __reduce__(self) -> tuple[Any, tuple]:
        data = self.data if self.data is not None else self.ex.to_bytes()  # type: ignore[union-attr]
        self.data = data  # encode once, however many tasks pickle it
        return _Shipped, (self.key, None, data, self.trusted)

    def executable(self) -> Executable:
        if self.ex is not None:
            return self.ex
        with _executables_lock:
            ex = _executables.get(self.key)
            if ex is None:
                # As trusted as in the client: a Dask worker already runs whatever its client
                # sends (the tasks are pickled functions), the bytes as much as the code.
                ex = Executable.from_bytes(self.data, trusted=self.trusted)  # type: ignore[arg-type]
                _executables[self.key] = ex
        self.ex = ex
        return ex


def worker_vm(ex: Executable, exec_mode: str | None = None) -> VirtualMachine:
    """This thread's `VirtualMachine` over `ex` (by content hash) in `exec_mode`, made on
    first use and reused after: what `map_batches` runs each block on."""
    return _thread_vm(_Shipped(ex.content_hash(), ex, None), exec_mode)


def _thread_vm(shipped: _Shipped, exec_mode: str | None) -> VirtualMachine:
    vms: OrderedDict[tuple[str, str | None], VirtualMachine] | None = getattr(_local, "vms", None)
    if vms is None:
        vms = _local.vms = OrderedDict()
    key = (shipped.key, exec_mode)
    vm = vms.get(key)
    if vm is None:
        vm = vms[key] = VirtualMachine(shipped.executable(), exec_mode=exec_mode)
        while len(vms) > MAX_VMS_PER_THREAD:
            vms.popitem(last=False)
    vms.move_to_end(key)
    return vm


Layout = tuple[tuple[int, ...], np.dtype]  # an output block's shape after axis 0, its dtype


def _run_block(
    block: np.ndarray,
    *args: Any,
    shipped: _Shipped,
    fname: str,
    exec_mode: str | None,
    layouts: tuple[Layout, ...],
    is_tuple: bool,
) -> Any:
    out = _thread_vm(shipped, exec_mode)[fname](block, *args)
    outs = out if is_tuple and isinstance(out, tuple) else (out,)
    if len(outs) != len(layouts):
        raise ShapeError(
            f"map_batches: @{fname} returned {len(outs)} values; its result type promised "
            f"{len(layouts)}"
        )
    for value, (tail, dtype) in zip(outs, layouts):
        expect = (block.shape[0], *tail)
        if not isinstance(value, np.ndarray) or value.dtype != dtype or value.shape != expect:
            got = (
                f"{value.shape} {value.dtype}"
                if isinstance(value, np.ndarray)
                else type(value).__name__
            )
            raise ShapeError(
                f"map_batches: @{fname} returned {got} for a block of {block.shape[0]} rows; "
                f"its result type promised {expect} {dtype}"
            )
    return out


def _field(block: tuple, i: int) -> np.ndarray:
    return block[i]


def map_batches(
    ex: Executable,
    x: Any,
    *args: Any,
    fname: str = "main",
    exec_mode: str | None = None,
) -> Any:
    """Runs function `fname` of `ex` on each block of the dask array `x`, along axis 0.

    Args:
        ex: The executable.
        x: A dask array, the function's first argument, split into batches along axis 0.
            Chunks along other axes are merged first (`x.rechunk`), as each call takes whole
            rows.
        *args: The function's other arguments (numpy arrays or anything the function takes;
            a dask array is computed), given whole to every call. Arrays enter the graph once
            each, so a distributed cluster ships them to a worker once.
        fname: The function to run.
        exec_mode: The VMs' exec mode; None takes the executable's default.

    Returns:
        A dask array with x's chunks along axis 0 and one chunk along every other axis, its
        shape and dtype from the function's result type; for a function returning a tuple of
        tensors, a tuple of such arrays (computing them together runs each block once).

    Raises:
        TypeError: `x` is not a dask array.
        ValueError: The function's result type does not say the blocks' shape and dtype: not
            a tensor or a tuple of tensors, an unknown dtype or dimension, or a first dimension
            that is not the batch dimension of the first parameter.
        FunctionNotFoundError: `ex` has no function `fname`.
    """
    if not isinstance(x, da.Array):
        raise TypeError(f"map_batches: x must be a dask array, got {type(x).__name__}")
    if x.ndim == 0:
        raise ValueError("map_batches: x is 0-d; it needs a batch axis 0 to split along")
    fn = ex.get_function(fname)
    if len(fn.params) != 1 + len(args):
        raise TypeError(
            f"map_batches: @{fname} takes {len(fn.params)} arguments ({', '.join(fn.params)}); "
            f"got x and {len(args)} more"
        )
    if any(len(c) > 1 for c in x.chunks[1:]):
        x = x.rechunk({axis: -1 for axis in range(1, x.ndim)})
    args = tuple(a.compute() if isinstance(a, da.Array) else a for a in args)
    layouts, is_tuple = _block_layouts(fn, x, args)
    shipped = _Shipped(ex.content_hash(), ex, None)
    # Block indices: "b" the batch axis, x's other axes contracted (one chunk each), each
    # array argument's axes its own (one chunk each), the output's other axes new. A tuple
    # result is a 1-d array of tuple blocks, each field a dask array taken from it.
    tail, dtype = layouts[0] if not is_tuple else ((), np.dtype(object))
    out_ind = ("b", *(f"o{i}" for i in range(1, 1 + len(tail))))
    operands: list[Any] = [x, ("b", *(f"x{i}" for i in range(1, x.ndim)))]
    for k, a in enumerate(args):
        if isinstance(a, np.ndarray):
            # One key per array: a distributed scheduler moves it to each worker once.
            whole = da.from_array(a, chunks=a.shape, name=f"rvm-arg-{tokenize(a)}")
            operands += [whole, tuple(f"a{k}_{i}" for i in range(a.ndim))]
        else:
            operands += [a, None]
    blocks = da.blockwise(
        _run_block,
        out_ind,
        *operands,
        concatenate=True,
        new_axes={f"o{i}": d for i, d in enumerate(tail, start=1)},
        dtype=dtype,
        meta=np.empty((0,) * len(out_ind), dtype=dtype),
        name=f"rvm-{fname}-{tokenize(shipped.key, fname, exec_mode, x, *args)}",
        shipped=shipped,
        fname=fname,
        exec_mode=exec_mode,
        layouts=layouts,
        is_tuple=is_tuple,
    )
    if not is_tuple:
        return blocks
    return tuple(
        blocks.map_blocks(
            _field,
            i,
            dtype=dtype,
            chunks=(x.chunks[0], *((d,) for d in tail)),
            new_axis=list(range(1, 1 + len(tail))) or None,
            meta=np.empty((0,) * (1 + len(tail)), dtype=dtype),
        )
        for i, (tail, dtype) in enumerate(layouts)
    )


def _block_layouts(
    fn: VMFunction, x: Any, args: tuple[Any, ...]
) -> tuple[tuple[Layout, ...], bool]:
    """Per output (one tensor, or each field of a tuple of tensors) the shape of its blocks
    after the batch axis and its dtype, from `fn`'s result type, with symbolic dims resolved
    from the shapes of `x` (after axis 0) and `args`; and whether the result is a tuple."""
    where = f"map_batches: @{fn.name}"
    result = fn.result
    if result is None:
        raise ValueError(
            f"{where} has no result type in this executable (saved before rvm format 1.3, or "
            "built by hand): recompile it"
        )
    fields = result.fields if result.kind == "tuple" else None
    outputs = fields if fields is not None else (result,)
    first = fn.param_specs[0]
    batch = first.shape[0] if first.shape else None
    if not isinstance(batch, str):
        raise ValueError(
            f"{where}: its first parameter {first.name!r} has shape {first.shape}; map_batches "
            "needs a symbolic batch dimension first (such as 'n')"
        )
    known = _bind_dims(fn, x, args, batch)
    return tuple(_layout(where, out, batch, known) for out in outputs), fields is not None


def _layout(where: str, out: ParamSpec, batch: str, known: dict[str, int]) -> Layout:
    if out.kind != "tensor" or out.dtype is None or out.shape is None:
        raise ValueError(
            f"{where} returns {_describe(out)}; map_batches needs a tensor of known rank and "
            "dtype, or a tuple of them"
        )
    if not out.shape or out.shape[0] != batch:
        raise ValueError(
            f"{where} returns shape {out.shape}, whose first dimension is not the batch "
            f"dimension {batch!r}: its blocks could not be stacked along axis 0"
        )
    tail = []
    for d in out.shape[1:]:
        if isinstance(d, int):
            tail.append(d)
        elif isinstance(d, str) and d in known:
            tail.append(known[d])
        else:
            raise ValueError(
                f"{where} returns shape {out.shape}, and dimension {d!r} is known only when it "
                "runs: map_batches needs every output dimension but the batch one from the "
                "arguments' shapes"
            )
    return tuple(tail), numpy_dtype(out.dtype)


def _bind_dims(fn: VMFunction, x: Any, args: tuple[Any, ...], batch: str) -> dict[str, int]:
    """Symbolic dim name -> size, from the parameters' specs and the arguments' shapes."""
    known: dict[str, int] = {}
    shapes = [(fn.param_specs[0], (None, *x.shape[1:]))]
    shapes += [
        (spec, a.shape)
        for spec, a in zip(fn.param_specs[1:], args)
        if spec.kind == "tensor" and isinstance(a, np.ndarray)
    ]
    for spec, shape in shapes:
        if spec.shape is None or len(spec.shape) != len(shape):
            continue  # the VM's entry check reports a wrong rank at the first block
        for d, size in zip(spec.shape, shape):
            if isinstance(d, str) and d != batch and size is not None:
                known.setdefault(d, int(size))
    return known


def _describe(spec: ParamSpec) -> str:
    if spec.kind == "tensor":
        return f"a tensor of shape {spec.shape} and dtype {spec.dtype}"
    return f"a {spec.kind}"
