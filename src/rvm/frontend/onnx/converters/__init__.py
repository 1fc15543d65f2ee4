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
    pool,
    quantize,
    reduce,
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
    "quantize",
    "reduce",
    "shape",
    "tensor",
]
