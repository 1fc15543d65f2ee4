"""Converters by op category; importing this package registers all of them."""

from rvm.frontend.onnx.converters import (
    activation,
    control,
    elemwise,
    nn,
    optional,
    reduce,
    sequence,
    shape,
    tensor,
)

__all__ = [
    "activation",
    "control",
    "elemwise",
    "nn",
    "optional",
    "reduce",
    "sequence",
    "shape",
    "tensor",
]
