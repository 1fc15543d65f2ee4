"""Converters by op category; importing this package registers all of them."""

from rvm.frontend.onnx.converters import control, elemwise, nn, reduce, shape, tensor

__all__ = ["control", "elemwise", "nn", "reduce", "shape", "tensor"]
