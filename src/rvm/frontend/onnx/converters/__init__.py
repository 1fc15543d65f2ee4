"""Converters by op category; importing this package registers all of them."""

from rvm.frontend.onnx.converters import (
    activation,
    bitwise,
    control,
    conv,
    elemwise,
    image,
    index,
    nn,
    optional,
    pool,
    reduce,
    sequence,
    shape,
    tensor,
)

__all__ = [
    "activation",
    "bitwise",
    "control",
    "conv",
    "elemwise",
    "image",
    "index",
    "nn",
    "pool",
    "optional",
    "reduce",
    "sequence",
    "shape",
    "tensor",
]
