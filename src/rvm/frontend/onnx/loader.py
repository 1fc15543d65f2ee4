"""Reading and vetting an ONNX model before anything is converted.

`load_model` accepts a ModelProto, a path or serialized bytes; a file that cannot be read or
parsed, or a model that fails ``onnx.checker``, raises `rvm.OnnxImportError`, except for the
checker's findings ONNX Runtime tolerates (`TOLERATED`), which warn (`rvm.OnnxCheckerWarning`).
The weights of a file or bytes are read in place (`rvm.frontend.onnx.weights`): the model is
held once. `check_supported` walks every node, subgraphs (If/Loop/Scan bodies) included, and
raises one error listing every op type and version that no converter implements, with the names
of its nodes.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from rvm.errors import OnnxCheckerWarning, OnnxImportError
from rvm.frontend.onnx.functions import (
    MAX_DEPTH,
    LocalFunctions,
    TypeLookup,
    body_types,
    function_body,
)
from rvm.frontend.onnx.registry import lookup, normalize_domain
from rvm.frontend.onnx.weights import external_weights, split_weights, weight_views


def load_model(model: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """``model`` (ModelProto, path or bytes) as a checked ``onnx.ModelProto``, and the graph
    initializers already read, by name: read-only views of a file's or the bytes' data, and
    arrays of the data a path keeps in external files.

    The initializers in that dict have no data left in the ModelProto.
    """
    import onnx

    weights: dict[str, np.ndarray] = {}
    if isinstance(model, onnx.ModelProto):
        proto, where = model, "the model"
    elif isinstance(model, (bytes, bytearray, memoryview)):
        where = "the given bytes"
        proto, weights = _parse_in_place(bytes(model), where)
    elif isinstance(model, (str, os.PathLike)):
        where = repr(os.fspath(model))
        proto, weights = _load_path(os.fspath(model))
    else:
        raise TypeError(
            f"rvm.from_onnx expects an onnx.ModelProto, a path or bytes, got {type(model).__name__}"
        )
    _check(proto, where)
    _check_opsets(proto, where)
    if not proto.graph.output:
        raise OnnxImportError(f"{where} has an empty graph: it declares no outputs")
    return proto, weights


def _parse_in_place(data: bytes, where: str) -> tuple[Any, dict[str, np.ndarray]]:
    """The model parsed without its initializers' raw data, which become views of ``data``;
    the whole model parsed when that cannot be done."""
    split = split_weights(data)
    if split is not None:
        proto = _parse(split[0], where)
        views = weight_views(data, split[1], proto.graph.initializer)
        if views is not None:
            return proto, views
    return _parse(data, where), {}


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


def _load_path(path: str) -> tuple[Any, dict[str, np.ndarray]]:
    import onnx

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise OnnxImportError(f"cannot read the ONNX model {path!r}: {err}") from None
    proto, weights = _parse_in_place(data, f"{path!r}")
    base_dir = os.path.dirname(os.path.abspath(path))
    try:  # data stored beside the model file: initializers, then any tensor in an attribute
        weights.update(external_weights(proto.graph.initializer, base_dir))
        onnx.load_external_data_for_model(proto, base_dir)
    except OnnxImportError:
        raise
    except Exception as err:
        raise OnnxImportError(f"cannot load the external data of {path!r}: {err}") from None
    return proto, weights


def _check(proto: Any, where: str) -> None:
    """Runs ``onnx.checker`` on ``proto``; a finding ONNX Runtime tolerates (`TOLERATED`) is
    a warning, and the check goes on past it; any other finding is an error."""
    import onnx

    skeleton: Any = None
    found: list[str] = []
    while True:
        try:  # the skeleton inside: a corrupt name (invalid UTF-8) fails already in the copy
            skeleton = _skeleton(proto) if skeleton is None else skeleton
            onnx.checker.check_model(skeleton)
            break
        except Exception as err:  # ValidationError, and C++ errors surfacing as others
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            tolerated = next((t for t in TOLERATED if t.message in first), None)
            mendable = skeleton is not None and tolerated is not None
            if not mendable or tolerated.message in found or not tolerated.mend(skeleton):
                raise OnnxImportError(f"{where} fails onnx.checker: {first}") from None
            found.append(tolerated.message)
    for message in found:
        warnings.warn(
            f"{where} fails onnx.checker ({message}), which ONNX Runtime tolerates: imported "
            "anyway",
            OnnxCheckerWarning,
            stacklevel=5,  # the caller of rvm.from_onnx
        )


@dataclass(frozen=True)
class Tolerated:
    """An ``onnx.checker`` finding ONNX Runtime accepts, and how the checked copy is mended
    so the checker goes on to the rest.

    Attributes:
        message: The start of the checker's message.
        meaning: What the model means by it, as ONNX Runtime reads it.
        mend: Changes the checked copy (never the model imported) so the finding is gone;
            returns whether it changed anything.
    """

    message: str
    meaning: str
    mend: Callable[[Any], bool]


def _value_infos(graph: Any) -> Iterator[Any]:
    """Every ValueInfoProto of ``graph`` and of its subgraphs (If/Loop/Scan bodies)."""
    yield from (*graph.input, *graph.output, *graph.value_info)
    for node in graph.node:
        for attr in node.attribute:
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                yield from _value_infos(sub)


def _give_shapes(model: Any) -> bool:
    """Gives each tensor type without a ``shape`` field an empty shape (checker copy only)."""
    changed = False
    stack = [info.type for info in _value_infos(model.graph)]
    while stack:
        ty = stack.pop()
        kind = ty.WhichOneof("value")
        if kind == "tensor_type" and not ty.tensor_type.HasField("shape"):
            ty.tensor_type.shape.SetInParent()
            changed = True
        elif kind == "sequence_type":
            stack.append(ty.sequence_type.elem_type)
        elif kind == "optional_type":
            stack.append(ty.optional_type.elem_type)
        elif kind == "map_type":
            stack.append(ty.map_type.value_type)
    return changed


TOLERATED = (
    Tolerated(
        "Field 'shape' of 'type' is required but missing",
        "a tensor type without a shape field (a graph input's, output's or value_info's): a "
        "tensor of unknown rank",
        _give_shapes,
    ),
)
"""The ``onnx.checker`` findings ONNX Runtime tolerates, which `rvm.from_onnx` warns about
(`rvm.OnnxCheckerWarning`) instead of refusing the model (the README lists them)."""


def _check_opsets(proto: Any, where: str) -> None:
    """Refuse an opset version that ONNX does not define for a domain it defines (``opset
    99`` of the default domain): its ops' meaning is unknown."""
    import onnx.defs

    known = onnx.defs.C.schema_version_map()  # domain: (first, last) opset version
    for opset in proto.opset_import:
        domain = normalize_domain(opset.domain)
        if domain in known and not known[domain][0] <= opset.version <= known[domain][1]:
            first, last = known[domain]
            raise OnnxImportError(
                f"{where} imports opset {opset.version} of domain {domain or 'ai.onnx'!r}, "
                f"which ONNX {onnx.__version__} does not define: expected {first} to {last}"
            )


def _skeleton(proto: Any) -> Any:
    """A copy of ``proto`` whose graph initializers are empty stand-ins of the same names
    and element types.

    ``onnx.checker`` serializes the model it checks, and C++ parses it again: on the whole
    model that holds the weights three times over (vgg19: 3 x 548 MB); and initializers read
    in place have no data left. The weights' sizes are checked when they are read.
    """
    import onnx

    graph = onnx.GraphProto()
    _copy_fields(proto.graph, graph, skip="initializer")
    for tensor in proto.graph.initializer:
        graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=[0])
    model = onnx.ModelProto()
    _copy_fields(proto, model, skip="graph")
    model.graph.CopyFrom(graph)
    return model


def _copy_fields(src: Any, dst: Any, skip: str) -> None:
    """Copy every set field of protobuf message ``src`` but ``skip`` into ``dst``."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(dst, field.name).extend(value)
        elif hasattr(value, "CopyFrom"):  # a message
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


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


def check_supported(
    graph: Any,
    opsets: dict[str, int],
    functions: LocalFunctions | None = None,
    types: TypeLookup | None = None,
    custom: frozenset[str] = frozenset(),
) -> None:
    """Raise one OnnxImportError naming every unsupported op, version and node.

    A node whose ``"domain.op_type"`` is in ``custom`` is supported (`from_onnx`'s custom_ops).

    An op no converter implements is supported when it has a function body (in ``functions``
    or its schema) whose ops all are, recursively; ``types`` gives the input types that
    context-dependent bodies need (see `rvm.frontend.onnx.functions`).
    """
    missing: dict[str, list[str]] = {}
    _check_graph(graph.node, opsets, functions or {}, types or _unknown, missing, 0, custom)
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


def _unknown(name: str) -> None:
    return None


def _check_graph(
    nodes: Any,
    opsets: dict[str, int],
    functions: LocalFunctions,
    types: TypeLookup,
    missing: dict[str, list[str]],
    depth: int,
    custom: frozenset[str] = frozenset(),
) -> None:
    """Add the unsupported ops among ``nodes`` and their subgraphs to ``missing``."""
    stack = [list(nodes)]
    while stack:
        for node in stack.pop():
            stack.extend(list(g.node) for g in subgraphs(node))
            if f"{node.domain}.{node.op_type}" in custom:
                continue
            key = _unsupported(node, opsets, functions, types, depth)
            if key is not None:
                label = node.name or (node.output[0] if node.output else "?")
                missing.setdefault(key, []).append(label)


def _unsupported(
    node: Any, opsets: dict[str, int], functions: LocalFunctions, types: TypeLookup, depth: int
) -> str | None:
    """Why ``node`` cannot be imported (its line in the error), or None if it can."""
    domain = normalize_domain(node.domain)
    if domain not in opsets:
        return f"{node.op_type} (domain {domain!r}, which the model does not import)"
    version, conv = lookup(node.op_type, opsets[domain], domain)
    if conv is not None:
        return None
    qualified = f"{domain}.{node.op_type}" if domain else node.op_type
    what = (
        f"{qualified} (no such op at opset {opsets[domain]})"
        if version is None
        else f"{qualified}-{version} (opset {opsets[domain]})"
    )
    input_types = [types(n) if n else None for n in node.input]
    body = function_body(node, opsets, functions, input_types)
    if body is None or depth >= MAX_DEPTH:
        return what
    inner: dict[str, list[str]] = {}
    inner_types = body_types(body, input_types, functions)
    _check_graph(body.nodes, body.opsets, functions, inner_types, inner, depth + 1)
    if not inner:
        return None
    uses = ", ".join(sorted(k.split(" ")[0] for k in inner))
    return f"{what}, whose function body uses {uses}"
