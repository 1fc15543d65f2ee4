"""PyTorch import: ``rvm.from_torch(program) -> IRModule``, from ``torch.export``.

``torch`` is an optional dependency (``pip install 'rvm[torch]'``; the CPU wheel is
``pip install torch --index-url https://download.pytorch.org/whl/cpu``); importing this package
does not need it, calling `from_torch` does.

Layout, as the ONNX frontend's: `program` exports, decomposes and vets a program, `importer`
walks its graph, `context` is what a converter sees (output dtypes and shapes, symbolic
sizes), `registry` maps an ATen overload to its converter, and `converters/` holds the
converters by category (`converters.control` the higher-order ops).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rvm.ir import IRModule


def from_torch(
    program: Any,
    *,
    args: Sequence[Any] | None = None,
    dynamic_shapes: Any = None,
    params: str = "constants",
) -> IRModule:
    """Import a ``torch.export.ExportedProgram`` (or an ``nn.Module`` with ``args``) as an
    IRModule with entry ``"main"``.

    See `rvm.frontend.torch.program.from_torch` for the arguments.
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ImportError(
            "rvm.from_torch needs PyTorch: pip install torch --index-url "
            "https://download.pytorch.org/whl/cpu"
        ) from None
    from rvm.frontend.torch.program import from_torch as _from_torch

    return _from_torch(program, args=args, dynamic_shapes=dynamic_shapes, params=params)


__all__ = ["from_torch"]
