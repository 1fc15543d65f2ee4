"""Expanding ONNX functions: ops defined by a body of other ops.

Many ONNX ops are *functions*. Their schema gives a body of simpler ops (MeanVarianceNormalization,
ReduceLogSumExp-18, Range...), or builds one from the node's attributes and input types (a
*context-dependent* function: Attention, NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss,
LayerNormalization...). A model may define functions of its own too (``model.functions``).

A node that no converter implements but that has such a body is expanded: the body's nodes are
converted in a scope of their own (`Scope` with no parent, so body names never meet the graph's)
where the function's formal inputs are bound to the node's inputs, under the body's own opset
imports. Attributes the body refers to (``ref_attr_name``) take the node's values, else the
declared defaults; an optional input or attribute the node omits is omitted in the body too. A
converter always takes precedence over expansion, and bodies expand recursively (the
SoftmaxCrossEntropyLoss body calls NegativeLogLikelihoodLoss).

A context-dependent body needs its input types. At conversion they come from the IR; the
up-front support check (`loader.check_supported`) takes them from ONNX shape inference
(`graph_types`, `body_types`), run on a copy of the graph without its large weights.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rvm.frontend.onnx.registry import normalize_domain
from rvm.ir import TensorType

# domain, op_type -> FunctionProto: the functions a model defines
LocalFunctions = Mapping[tuple[str, str], Any]
TypeLookup = Callable[[str], Any]  # value name -> its TypeProto, or None when unknown
MAX_DEPTH = 32  # function bodies nested deeper than this are taken for recursion
_SMALL_INITIALIZER = 1 << 12  # bytes; larger ones are inputs for shape inference


@dataclass(frozen=True)
class Body:
    """A function body bound to one node: nodes to convert and how they connect to it."""

    nodes: list[Any]  # NodeProto, attributes bound to the node's
    inputs: list[str]  # the formal inputs, in the node's input order
    outputs: list[str]  # the formal outputs, in the node's output order
    opsets: dict[str, int]  # the opset imports the body is written for


def local_functions(model: Any) -> dict[tuple[str, str], Any]:
    """The functions ``model`` defines, by (domain, name)."""
    return {(normalize_domain(f.domain), f.name): f for f in model.functions}


def function_body(
    node: Any,
    opsets: Mapping[str, int],
    functions: LocalFunctions,
    input_types: Sequence[Any | None],
) -> Body | None:
    """``node`` expanded to its function body, or None if it has none (or it cannot be built).

    Args:
        node: the NodeProto.
        opsets: the opset imports in force where the node is.
        functions: the model's local functions.
        input_types: a TypeProto (or None when unknown) per node input, for context-dependent
            function bodies.
    """
    domain = normalize_domain(node.domain)
    local = functions.get((domain, node.op_type))
    if local is not None:
        proto, defaults = local, {a.name: a for a in local.attribute_proto}
    else:
        proto, defaults = _schema_body(node, opsets.get(domain), input_types)
    if proto is None or not proto.node:
        return None
    given = {a.name: a for a in node.attribute}
    attrs = {name: given.get(name, defaults.get(name)) for name in {*given, *defaults}}
    provided = list(node.input) + [""] * max(0, len(proto.input) - len(node.input))
    # a formal input the node omits reads as omitted ("") inside the body
    renames = {formal: "" for formal, actual in zip(proto.input, provided) if not actual}
    body_opsets = {normalize_domain(o.domain): o.version for o in proto.opset_import}
    return Body(
        nodes=[_bind(n, attrs, renames) for n in proto.node],
        inputs=list(proto.input),
        outputs=list(proto.output),
        opsets={**opsets, **body_opsets},
    )


def _schema_body(node: Any, opset: int | None, input_types: Sequence[Any | None]):
    """The body the op's schema gives at ``opset`` (a FunctionProto or None) and the
    schema's attribute defaults."""
    import onnx
    import onnx.defs

    if opset is None:
        return None, {}
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, normalize_domain(node.domain))
    except onnx.defs.SchemaError:
        return None, {}
    defaults = {
        name: a.default_value
        for name, a in schema.attributes.items()
        if a.default_value.type != onnx.AttributeProto.UNDEFINED
    }
    try:
        if schema.has_function:
            version = _function_version(schema.function_opset_versions, opset)
            data = schema.get_function_with_opset_version(version)
        elif schema.has_context_dependent_function:
            version = _function_version(schema.context_dependent_function_opset_versions, opset)
            types = [(t or onnx.TypeProto()).SerializeToString() for t in input_types]
            data = schema.get_context_dependent_function_with_opset_version(
                version, node.SerializeToString(), types
            )
        else:
            return None, defaults
    except Exception:  # a body the schema cannot build for these types: no body
        return None, defaults
    proto = onnx.FunctionProto()
    proto.ParseFromString(data)
    return proto, defaults


def _function_version(versions: Sequence[int], opset: int) -> int:
    """The newest body written for an opset no newer than the model's."""
    older = [v for v in versions if v <= opset]
    return max(older) if older else min(versions)


def _bind(node: Any, attrs: Mapping[str, Any], renames: Mapping[str, str]) -> Any:
    """A copy of body ``node`` with referenced attributes bound and inputs renamed."""
    import onnx

    out = onnx.NodeProto()
    out.CopyFrom(node)
    if renames:
        out.input[:] = [renames.get(n, n) for n in node.input]
    del out.attribute[:]
    for a in node.attribute:
        if a.ref_attr_name:
            actual = attrs.get(a.ref_attr_name)
            if actual is None:  # the node omits it and there is no default: omitted here too
                continue
            bound = onnx.AttributeProto()
            bound.CopyFrom(actual)
            bound.name = a.name
        else:
            bound = onnx.AttributeProto()
            bound.CopyFrom(a)
            for g in [bound.g] if bound.HasField("g") else list(bound.graphs):
                nodes = [_bind(n, attrs, renames) for n in g.node]
                del g.node[:]
                g.node.extend(nodes)
        out.attribute.append(bound)
    return out


# -- types for the up-front check -------------------------------------------------------------
def graph_types(model: Any) -> Callable[[str], Any | None]:
    """A lookup of the TypeProto ONNX shape inference gives each value of ``model`` (subgraphs
    included); inference runs at the first call, on a copy without large initializers."""
    cache: dict[str, Any] | None = None

    def lookup(name: str) -> Any | None:
        nonlocal cache
        if cache is None:
            cache = _infer(_light_copy(model))
        return cache.get(name)

    return lookup


def body_types(
    body: Body, input_types: Sequence[Any | None], functions: LocalFunctions
) -> Callable[[str], Any | None]:
    """The types ONNX shape inference gives the values of ``body`` for these input types."""
    import onnx
    from onnx import helper

    inputs = [
        helper.make_value_info(name, t)
        for name, t in zip(body.inputs, input_types)
        if name and t is not None
    ]
    graph = helper.make_graph(
        body.nodes,
        "body",
        inputs,
        [helper.make_value_info(o, onnx.TypeProto()) for o in body.outputs],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(d, v) for d, v in body.opsets.items()],
        functions=list(functions.values()),
    )
    types = _infer(model)
    return types.get


def _light_copy(model: Any) -> Any:
    """``model`` with its large initializers turned into typed graph inputs."""
    import onnx
    from onnx import helper

    out = onnx.ModelProto(
        ir_version=model.ir_version, opset_import=model.opset_import, functions=model.functions
    )
    g = model.graph
    out.graph.name = g.name
    out.graph.node.extend(g.node)
    out.graph.input.extend(g.input)
    out.graph.output.extend(g.output)
    out.graph.value_info.extend(g.value_info)
    declared = {i.name for i in g.input}
    for t in g.initializer:
        if t.ByteSize() <= _SMALL_INITIALIZER:
            out.graph.initializer.append(t)
        elif t.name not in declared:
            out.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, t.dims))
    return out


def _infer(model: Any) -> dict[str, Any]:
    """Every value's TypeProto after ONNX shape inference (partial if inference fails)."""
    import onnx

    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # inference is a help here, not a requirement
        pass
    types: dict[str, Any] = {}
    stack = [model.graph]
    while stack:
        g = stack.pop()
        for v in [*g.input, *g.value_info, *g.output]:
            if v.type.WhichOneof("value") is not None:
                types.setdefault(v.name, v.type)
        for t in g.initializer:
            types.setdefault(t.name, onnx.helper.make_tensor_type_proto(t.data_type, t.dims))
        for node in g.node:
            for a in node.attribute:
                stack.extend([a.g] if a.HasField("g") else a.graphs)
    return types


def type_proto(ty: Any) -> Any | None:
    """The ONNX TypeProto of an IR tensor type (None for other types)."""
    from onnx import helper

    if not isinstance(ty, TensorType) or ty.dtype is None:
        return None
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(ty.dtype))
    shape = (
        None if ty.shape is None else [d if isinstance(d, (int, str)) else None for d in ty.shape]
    )
    return helper.make_tensor_type_proto(elem, shape)
