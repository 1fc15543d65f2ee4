"""ONNX import: ``rvm.from_onnx(model) -> IRModule``.

The ``onnx`` package is an optional dependency (``pip install 'rvm[onnx]'``); importing this
package does not need it, calling `from_onnx` does.

Layout: `loader` reads and vets a model, `weights` reads tensor data (a file's weights in
place, as views of its bytes), `importer` walks the graph, `context` is what a converter sees
(scopes, constant folding, shape values), `registry` maps an op and its opset to a
converter, and `converters/` holds the converters by category.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rvm.ir import IRModule


def from_onnx(
    model: Any,
    shape_dict: Mapping[str, Sequence[int | str]] | None = None,
    dtype_dict: Mapping[str, str] | None = None,
    params: str = "constants",
    custom_ops: Mapping[str, Any] | None = None,
) -> IRModule:
    """Import an ONNX model (ModelProto, path or bytes) as an IRModule with entry "main".

    See `rvm.frontend.onnx.importer.from_onnx` for the arguments.
    """
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise ImportError(
            "rvm.from_onnx needs the onnx package: pip install 'rvm[onnx]' (or pip install onnx)"
        ) from None
    from rvm.frontend.onnx.importer import from_onnx as _from_onnx

    return _from_onnx(model, shape_dict, dtype_dict, params, custom_ops)


__all__ = ["from_onnx"]
