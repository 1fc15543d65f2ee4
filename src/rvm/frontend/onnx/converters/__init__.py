"""Converters by op category; importing this package registers all of them."""

from rvm.frontend.onnx.converters import (
    activation,
    bitwise,
    cast,
    control,
    conv,
    elemwise,
    image,
    index,
    nn,
    optional,
    pool,
    quantize,
    reduce,
    sequence,
    shape,
    tensor,
)

__all__ = [
    "activation",
    "bitwise",
    "cast",
    "control",
    "conv",
    "elemwise",
    "image",
    "index",
    "nn",
    "pool",
    "optional",
    "quantize",
    "reduce",
    "sequence",
    "shape",
    "tensor",
]
