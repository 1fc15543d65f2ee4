"""Importers of models from other frameworks into rvm IR (`rvm.frontend.onnx` first)."""
