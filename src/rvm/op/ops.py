"""The `Op` objects of rvm by name, and the rules that choose each op's fusion pattern.

``rvm.op.ops.relu`` is the `Op`; ``rvm.op.relu`` is the builder that calls it. Each op is
registered (name, fusion pattern, number of inputs) at the top of its category module
(`rvm.op.elemwise`, `rvm.op.nn`...), beside its builder and type rule (``infer[ops.relu]``,
`rvm.ir.op.infer`); its NumPy reference is the function of `rvm.kernels.reference` with its name
(``reference[ops.relu]``, `rvm.op.reference`). Other layers own their own tables (the jit's
compute). Attribute lookup here finds any registered op, so ``ops.relu`` works once
`rvm.op` is imported.

Fusion patterns follow TVM's OpPatternKind, with these choices:

- binary arithmetic, comparisons, ``where``, ``broadcast_to``: BROADCAST;
- unary math, activations, ``cast``, ``clip``, ``zeros``/``ones``/``full``: ELEMWISE;
- ``batch_norm`` (inference only: per-channel arithmetic on given statistics): BROADCAST;
- layout and indexing (reshape, transpose, concat, take, strided_slice, one_hot...): INJECTIVE;
- sum/mean/max/min/prod/argmax/argmin/variance: REDUCTION;
- matmul, dense, conv1d/conv2d and the 2-d pools: OUT_ELEMWISE_FUSABLE (they absorb an
  epilogue);
- softmax, log_softmax, layer_norm, lrn, cumsum, cumprod, shape_of: OPAQUE (several
  reductions broadcast back, or a scan; as in Relay they get a kernel of their own);
- ops that the jit has no compute definition for (bitcast, scatters, topk, nonzero, unique, trilu,
  einsum, det, conv3d, the transposed convolutions, resize, the 1-d/3-d pools,
  max_pool_indices...): OPAQUE, so that their numpy kernel stands alone and does not pull
  fusable neighbours out of the jit.
"""

from __future__ import annotations

from rvm.errors import IRError
from rvm.ir.expr import Op
from rvm.ir.op import get_op

# Ops that take the storage-only dtypes (`rvm.ir.types.STORAGE_DTYPES`: int4, uint4, int2,
# uint2): conversion, data movement, selection and comparison, none of which computes new
# values in the dtype. Every other op refuses them (`rvm.op.shapes.rule`).
STORAGE_OP_NAMES = frozenset(
    {
        "cast",
        "reshape",
        "transpose",
        "expand_dims",
        "squeeze",
        "flatten",
        "concat",
        "split",
        "stack",
        "strided_slice",
        "take",
        "gather",
        "gather_nd",
        "broadcast_to",
        "pad",
        "tile",
        "where",
        "equal",
        "not_equal",
        "less",
        "less_equal",
        "greater",
        "greater_equal",
        "shape_of",
    }
)


def __getattr__(name: str) -> Op:
    """``ops.NAME``: the registered op NAME (looked up on first read)."""
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        op = get_op(name)
    except IRError as e:
        raise AttributeError(f"module 'rvm.op.ops' has no op {name!r}: {e}") from None
    globals()[name] = op  # found once: later reads are plain attribute reads
    return op
