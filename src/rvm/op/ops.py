"""Every op of rvm, registered once: its name, fusion pattern and number of inputs.

This module is the one list of operators (``rvm.op.ops.relu`` is the `Op`; ``rvm.op.relu`` is
the builder that calls it). The rules of each op sit beside its builder in the category
modules: ``infer[ops.relu]`` (`rvm.ir.op.infer`), ``reference[ops.relu]`` (`rvm.op.reference`,
the functions of `rvm.op.numpy_ref`). Other layers own their own tables (the jit's compute).

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

from rvm.ir.op import OpPattern, register_op

_E = OpPattern.ELEMWISE
_B = OpPattern.BROADCAST
_I = OpPattern.INJECTIVE
_R = OpPattern.REDUCTION
_F = OpPattern.OUT_ELEMWISE_FUSABLE
_O = OpPattern.OPAQUE

# Binary arithmetic (numpy broadcasting, dtype promotion).
add = register_op("add", _B, 2)
subtract = register_op("subtract", _B, 2)
multiply = register_op("multiply", _B, 2)
divide = register_op("divide", _B, 2)
floor_divide = register_op("floor_divide", _B, 2)
mod = register_op("mod", _B, 2)
power = register_op("power", _B, 2)
maximum = register_op("maximum", _B, 2)
minimum = register_op("minimum", _B, 2)
fmod = register_op("fmod", _B, 2)

# Bitwise ops on integers (and bools for and/or/xor/not).
bitwise_and = register_op("bitwise_and", _B, 2)
bitwise_or = register_op("bitwise_or", _B, 2)
bitwise_xor = register_op("bitwise_xor", _B, 2)
bitwise_not = register_op("bitwise_not", _E, 1)
left_shift = register_op("left_shift", _B, 2)
right_shift = register_op("right_shift", _B, 2)

# Comparisons and logic (bool results).
equal = register_op("equal", _B, 2)
not_equal = register_op("not_equal", _B, 2)
less = register_op("less", _B, 2)
less_equal = register_op("less_equal", _B, 2)
greater = register_op("greater", _B, 2)
greater_equal = register_op("greater_equal", _B, 2)
logical_and = register_op("logical_and", _B, 2)
logical_or = register_op("logical_or", _B, 2)
logical_not = register_op("logical_not", _E, 1)
where = register_op("where", _B, 3)

# Unary math and activations.
negative = register_op("negative", _E, 1)
exp = register_op("exp", _E, 1)
log = register_op("log", _E, 1)
sqrt = register_op("sqrt", _E, 1)
rsqrt = register_op("rsqrt", _E, 1)
tanh = register_op("tanh", _E, 1)
sigmoid = register_op("sigmoid", _E, 1)
erf = register_op("erf", _E, 1)
abs = register_op("abs", _E, 1)
sign = register_op("sign", _E, 1)
sin = register_op("sin", _E, 1)
cos = register_op("cos", _E, 1)
asin = register_op("asin", _E, 1)
acos = register_op("acos", _E, 1)
atan = register_op("atan", _E, 1)
asinh = register_op("asinh", _E, 1)
acosh = register_op("acosh", _E, 1)
atanh = register_op("atanh", _E, 1)
floor = register_op("floor", _E, 1)
ceil = register_op("ceil", _E, 1)
round = register_op("round", _E, 1)
relu = register_op("relu", _E, 1)
leaky_relu = register_op("leaky_relu", _E, 1)
gelu = register_op("gelu", _E, 1)
silu = register_op("silu", _E, 1)
softplus = register_op("softplus", _E, 1)
clip = register_op("clip", _E, 1)
cast = register_op("cast", _E, 1)
bitcast = register_op("bitcast", _O, 1)  # no jit compute: a numpy kernel of its own

# Reductions.
sum = register_op("sum", _R, 1)
mean = register_op("mean", _R, 1)
max = register_op("max", _R, 1)
min = register_op("min", _R, 1)
prod = register_op("prod", _R, 1)
argmax = register_op("argmax", _R, 1)
argmin = register_op("argmin", _R, 1)
variance = register_op("variance", _R, 1)
cumsum = register_op("cumsum", _O, 1)
cumprod = register_op("cumprod", _O, 1)

# Neural-network ops.
softmax = register_op("softmax", _O, 1)
log_softmax = register_op("log_softmax", _O, 1)
layer_norm = register_op("layer_norm", _O, 3)
batch_norm = register_op("batch_norm", _B, 5)
lrn = register_op("lrn", _O, 1)
matmul = register_op("matmul", _F, 2)
dense = register_op("dense", _F, 2)
conv1d = register_op("conv1d", _F, 2)
conv2d = register_op("conv2d", _F, 2)
conv3d = register_op("conv3d", _O, 2)
conv1d_transpose = register_op("conv1d_transpose", _O, 2)
conv2d_transpose = register_op("conv2d_transpose", _O, 2)
conv3d_transpose = register_op("conv3d_transpose", _O, 2)
max_pool1d = register_op("max_pool1d", _O, 1)
max_pool2d = register_op("max_pool2d", _F, 1)
max_pool3d = register_op("max_pool3d", _O, 1)
avg_pool1d = register_op("avg_pool1d", _O, 1)
avg_pool2d = register_op("avg_pool2d", _F, 1)
avg_pool3d = register_op("avg_pool3d", _O, 1)
max_pool_indices = register_op("max_pool_indices", _O, 1)
global_avg_pool2d = register_op("global_avg_pool2d", _F, 1)
global_max_pool2d = register_op("global_max_pool2d", _F, 1)

# Layout and indexing.
reshape = register_op("reshape", _I, 1)
transpose = register_op("transpose", _I, 1)
expand_dims = register_op("expand_dims", _I, 1)
squeeze = register_op("squeeze", _I, 1)
flatten = register_op("flatten", _I, 1)
concat = register_op("concat", _I, 1)  # one Tuple argument
split = register_op("split", _I, 1)
stack = register_op("stack", _I, 1)  # one Tuple argument
strided_slice = register_op("strided_slice", _I, 1)
# bounds from run-time tensors: the output shape depends on data, so it is opaque
dynamic_slice = register_op("dynamic_slice", _O, 3)
take = register_op("take", _I, 2)
gather = register_op("gather", _I, 2)
gather_nd = register_op("gather_nd", _I, 2)
scatter_elements = register_op("scatter_elements", _O, 3)
scatter_nd = register_op("scatter_nd", _O, 3)
broadcast_to = register_op("broadcast_to", _B, 1)
pad = register_op("pad", _I, 1)
tile = register_op("tile", _I, 1)
trilu = register_op("trilu", _O, 1)

# Image ops.
resize = register_op("resize", _O, 1)

# Searching and sorting.
topk = register_op("topk", _O, 1)
nonzero = register_op("nonzero", _O, 1)
unique = register_op("unique", _O, 1)

# Creation.
zeros = register_op("zeros", _E, 0)
ones = register_op("ones", _E, 0)
full = register_op("full", _E, 0)
arange = register_op("arange", _I, 0)
one_hot = register_op("one_hot", _I, 1)
shape_of = register_op("shape_of", _O, 1)

# Ops that take the storage-only dtypes (`rvm.ir.types.STORAGE_DTYPES`: int4, uint4, int2,
# uint2): conversion, data movement, selection and comparison, none of which computes new
# values in the dtype. Every other op refuses them (`rvm.op.shapes.rule`).
STORAGE_OPS = frozenset(
    {
        cast,
        reshape,
        transpose,
        expand_dims,
        squeeze,
        flatten,
        concat,
        split,
        stack,
        strided_slice,
        take,
        gather,
        gather_nd,
        broadcast_to,
        pad,
        tile,
        where,
        equal,
        not_equal,
        less,
        less_equal,
        greater,
        greater_equal,
        shape_of,
    }
)
