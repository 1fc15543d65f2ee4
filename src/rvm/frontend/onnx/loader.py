"""Reading and vetting an ONNX model before anything is converted.

`load_model` accepts a ModelProto, a path or serialized bytes; a file that cannot be read or
parsed, or a model that fails ``onnx.checker``, raises `rvm.OnnxImportError`. `check_supported`
walks every node, subgraphs (If/Loop/Scan bodies) included, and raises one error listing every
op type and version that no converter implements, with the names of its nodes.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from rvm.errors import OnnxImportError
from rvm.frontend.onnx.registry import lookup, normalize_domain
from rvm.ir.types import DTYPES


def load_model(model: Any) -> Any:
    """``model`` (ModelProto, path or bytes) as a checked ``onnx.ModelProto``."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        proto, where = model, "the model"
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto, where = _parse(bytes(model), "the given bytes"), "the given bytes"
    elif isinstance(model, (str, os.PathLike)):
        proto, where = _load_path(os.fspath(model)), repr(os.fspath(model))
    else:
        raise TypeError(
            f"rvm.from_onnx expects an onnx.ModelProto, a path or bytes, got {type(model).__name__}"
        )
    _check(proto, where)
    return proto


def _parse(data: bytes, where: str) -> Any:
    import onnx

    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError and friends
        raise OnnxImportError(
            f"{where} is not a valid ONNX model (truncated or corrupt): {err}"
        ) from None
    return proto


def _load_path(path: str) -> Any:
    import onnx

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise OnnxImportError(f"cannot read the ONNX model {path!r}: {err}") from None
    proto = _parse(data, f"{path!r}")
    try:  # weights stored beside the model file
        onnx.load_external_data_for_model(proto, os.path.dirname(os.path.abspath(path)))
    except Exception as err:
        raise OnnxImportError(f"cannot load the external data of {path!r}: {err}") from None
    return proto


def _check(proto: Any, where: str) -> None:
    import onnx

    try:
        onnx.checker.check_model(proto)
    except Exception as err:  # ValidationError, and C++ errors surfacing as others
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise OnnxImportError(f"{where} fails onnx.checker: {first}") from None


def model_opsets(proto: Any) -> dict[str, int]:
    """The opset version the model imports for each domain ("" is the default domain)."""
    return {normalize_domain(o.domain): o.version for o in proto.opset_import}


def subgraphs(node: Any) -> list[Any]:
    """The graphs held in a node's attributes (If branches, Loop and Scan bodies)."""
    import onnx

    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def check_supported(graph: Any, opsets: dict[str, int]) -> None:
    """Raise one OnnxImportError naming every unsupported op, version and node."""
    missing: dict[str, list[str]] = {}
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.node:
            domain = normalize_domain(node.domain)
            label = node.name or (node.output[0] if node.output else "?")
            if domain not in opsets:
                key = f"{node.op_type} (domain {domain!r}, which the model does not import)"
            else:
                version, conv = lookup(node.op_type, opsets[domain], domain)
                if conv is not None:
                    stack.extend(subgraphs(node))
                    continue
                qualified = f"{domain}.{node.op_type}" if domain else node.op_type
                key = (
                    f"{qualified} (no such op at opset {opsets[domain]})"
                    if version is None
                    else f"{qualified}-{version} (opset {opsets[domain]})"
                )
            missing.setdefault(key, []).append(label)
            stack.extend(subgraphs(node))
    if missing:
        lines = [
            f"  {key}: {len(names)} node{'s' if len(names) > 1 else ''}: "
            + ", ".join(repr(n) for n in names[:20])
            + (", ..." if len(names) > 20 else "")
            for key, names in sorted(missing.items())
        ]
        raise OnnxImportError(
            "the model uses ONNX ops rvm cannot import:\n"
            + "\n".join(lines)
            + "\n(rvm.frontend.onnx.registry.supported() lists what rvm supports)"
        )


def np_dtype(elem_type: int, what: str) -> str:
    """The rvm dtype of an ONNX element type; OnnxImportError for one rvm lacks."""
    import onnx

    try:
        name = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:
        name = None
    if name not in DTYPES:
        type_name = onnx.TensorProto.DataType.Name(elem_type) if elem_type else "undefined"
        raise OnnxImportError(
            f"{what} has ONNX element type {type_name}, which rvm does not support "
            f"(supported: {', '.join(DTYPES)})"
        )
    return name


def tensor_to_array(tensor: Any, what: str) -> np.ndarray:
    """An ONNX TensorProto as a NumPy array of an rvm dtype."""
    from onnx import numpy_helper

    dtype = np_dtype(tensor.data_type, what)
    try:
        arr = numpy_helper.to_array(tensor)
    except Exception as err:
        raise OnnxImportError(f"{what}: cannot read the tensor data: {err}") from None
    return np.asarray(arr, dtype=dtype)
