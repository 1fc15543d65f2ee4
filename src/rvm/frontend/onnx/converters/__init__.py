"""Converters by op category; importing this package registers all of them."""

from rvm.frontend.onnx.converters import elemwise, nn, reduce, shape, tensor

__all__ = ["elemwise", "nn", "reduce", "shape", "tensor"]
