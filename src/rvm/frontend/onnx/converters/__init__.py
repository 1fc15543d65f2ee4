"""Converters by op category; importing this package registers all of them."""

from rvm.frontend.onnx.converters import (
    activation,
    bitwise,
    control,
    elemwise,
    image,
    index,
    nn,
    reduce,
    shape,
    tensor,
)

__all__ = [
    "activation",
    "bitwise",
    "control",
    "elemwise",
    "image",
    "index",
    "nn",
    "reduce",
    "shape",
    "tensor",
]
