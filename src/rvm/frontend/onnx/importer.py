"""The graph walk: ONNX graph inputs, initializers and nodes to one rvm function "main".

The model is loaded and vetted first (`rvm.frontend.onnx.loader`), so an unsupported model
fails before anything is converted. Then nodes are converted in graph order (ONNX requires a
topological order) through the registry; each converter builds IR through a `NodeContext`,
which folds constants and tracks shape values as it emits.

Names: IR variables are ONNX names made identifiers (``gpu_0/data_0`` becomes
``gpu_0_data_0``); the module's ``attrs["onnx_input_names"]`` maps each parameter back to its
ONNX name. Symbolic dimensions are the ONNX ``dim_param`` names, made identifiers the same way;
a dynamic dimension without a name gets a fresh one (``dim0``, ``dim1``...).
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rvm.dtypes import dtype_kind
from rvm.errors import OnnxImportError, RVMError
from rvm.frontend.onnx import converters  # noqa: F401 - registers every converter
from rvm.frontend.onnx.context import Emitter, NodeContext, Scope
from rvm.frontend.onnx.converters import optional
from rvm.frontend.onnx.converters.conv import window_attrs
from rvm.frontend.onnx.functions import (
    MAX_DEPTH,
    LocalFunctions,
    function_body,
    graph_types,
    local_functions,
    type_proto,
)
from rvm.frontend.onnx.loader import check_supported, load_model, model_opsets
from rvm.frontend.onnx.qdq import FusedQAdd, FusedQDQ, convert_add, convert_fused, fuse_qdq
from rvm.frontend.onnx.registry import lookup, normalize_domain
from rvm.frontend.onnx.signature import check_declared, check_inputs, check_outputs
from rvm.frontend.onnx.weights import np_dtype, tensor_to_array
from rvm.ir import (
    Builder,
    Constant,
    Expr,
    IRModule,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
    infer_type,
)
from rvm.ir.module import ADTDef
from rvm.ir.types import Type, check_dtype

PARAMS_MODES = ("constants", "inputs")


def identifier(name: str | bytes) -> str:
    """``name`` made a valid Python identifier (the IR's names must be).

    Protobuf hands back bytes for a string field that is not valid UTF-8.
    """
    if isinstance(name, bytes):
        name = name.decode("utf-8", errors="replace")
    out = re.sub(r"\W", "_", name) or "v"
    if out[0].isdigit():
        out = "v_" + out
    return out + "_" if keyword.iskeyword(out) else out


class _Names:
    """Unique identifiers for ONNX names."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, name: str) -> str:
        base = identifier(name)
        out, k = base, 1
        while out in self.used:
            out, k = f"{base}_{k}", k + 1
        self.used.add(out)
        return out


def from_onnx(
    model: Any,
    shape_dict: Mapping[str, Sequence[int | str]] | None = None,
    dtype_dict: Mapping[str, str] | None = None,
    params: str = "constants",
    custom_ops: Mapping[str, str | tuple] | None = None,
) -> IRModule:
    """Import an ONNX model as an IRModule whose entry function is ``"main"``.

    Args:
        model: an ``onnx.ModelProto``, a path to a ``.onnx`` file, or its serialized bytes.
            The weights of a path or bytes are not copied: their constants are read-only
            views of the bytes read. A path's external data (``onnx.save(...,
            save_as_external_data=True)``) is read from its directory.
        shape_dict: ``{input_name: shape}`` fixing input shapes (ints or symbolic names).
        dtype_dict: ``{input_name: dtype}`` overriding input dtypes.
        params: ``"constants"`` embeds initializers as constants; ``"inputs"`` makes every
            float initializer a parameter after the graph inputs (in initializer order), so
            weights can be swapped at run time. Integer initializers (shapes, axes, indices)
            stay constants: the graph's structure depends on them.
        custom_ops: ``{"Domain.OpType": "registered.name"}``: a node of a custom domain's op
            becomes ``rvm.call_packed("registered.name", *inputs, out=...)``, a call of the
            function registered with `rvm.register_func` (its output checked at run time
            against its type: the model's value_info or graph output type for it, or the type
            given as ``("registered.name", T[shape, dtype])``). A node of several outputs
            calls a function returning a tuple of them (each checked; types given as
            ``("registered.name", (T[...], T[...]))``).

    Returns:
        The module. ``main`` takes the graph inputs that are not initializers, in graph
        order, and returns one tensor for one graph output, else a tuple.

    Raises:
        rvm.OnnxImportError: the model cannot be read, fails ``onnx.checker``, uses ops rvm
            does not support (all of them listed), imports an opset version ONNX does not
            define, declares no outputs, has a node whose tensor types break its schema's type
            constraints (`rvm.frontend.onnx.signature`) or that cannot be converted, or an
            output whose element type contradicts its declaration.
    """
    if params not in PARAMS_MODES:
        raise ValueError(f"params must be one of {PARAMS_MODES}, got {params!r}")
    proto, weights = load_model(model)
    opsets = model_opsets(proto)
    functions = local_functions(proto)
    custom = _custom_ops(custom_ops)
    types = graph_types(proto)
    check_supported(proto.graph, opsets, functions, types, frozenset(custom))
    try:
        importer = GraphImporter(opsets, functions)
        importer.custom_ops, importer.types = custom, types
        return importer.import_model(proto, shape_dict or {}, dtype_dict or {}, params, weights)
    except RVMError:
        raise
    except Exception as err:  # a malformed model the checker let through: an error, no crash
        raise OnnxImportError(f"cannot import the model: {type(err).__name__}: {err}") from err


class GraphImporter:
    """Converts ONNX graphs to IR; one instance per model."""

    def __init__(self, opsets: dict[str, int], functions: LocalFunctions | None = None) -> None:
        self.opsets = opsets
        self.functions = functions or {}
        self.depth = 0  # function bodies being expanded, nested
        self.adts: dict[str, ADTDef] = {}
        self.python_forms: dict[str, str] = {}  # data type -> its Python form (declare_adt)
        self.builder = Builder()
        self.emitter = Emitter(self.builder)
        self.names = _Names()
        self.dim_names: dict[str, str] = {}
        self.fresh_dims = 0
        self.custom_ops: dict[str, tuple[str, TensorType | tuple[TensorType, ...] | None]] = {}
        self.types: Any = lambda name: None  # ONNX shape inference's types, by value name

    def import_model(
        self,
        proto: Any,
        shape_dict: Mapping[str, Sequence[int | str]],
        dtype_dict: Mapping[str, str],
        params: str,
        weights: Mapping[str, np.ndarray] | None = None,
    ) -> IRModule:
        """The module of ``proto``; ``weights`` holds initializers already read (by name)."""
        graph = proto.graph
        weights = weights or {}
        scope = Scope(opsets=self.opsets)
        inits = {t.name: t for t in graph.initializer}
        unknown = set(shape_dict) | set(dtype_dict)
        unknown -= {i.name for i in graph.input if i.name not in inits}
        if unknown:
            raise OnnxImportError(
                f"shape_dict/dtype_dict name {sorted(unknown)}, which are not graph inputs; "
                f"the inputs are {[i.name for i in graph.input if i.name not in inits]}"
            )
        param_vars: list[Var] = []
        origin: dict[str, str] = {}
        arrays: dict[str, np.ndarray] = {}
        for inp in graph.input:
            if inp.name in inits:
                continue
            var = self._input_var(inp, shape_dict.get(inp.name), dtype_dict.get(inp.name))
            scope.bind(inp.name, var)
            param_vars.append(var)
            origin[var.name] = inp.name
        for name, tensor in inits.items():
            arr = weights.get(name)
            if arr is None:
                arr = tensor_to_array(tensor, f"initializer {name!r}")
            arrays[name] = arr
            if params == "inputs" and dtype_kind(arr.dtype.name) == "f":
                var = Var(self.names(name), TensorType(arr.shape, arr.dtype.name))
                scope.bind(name, var)
                param_vars.append(var)
                origin[var.name] = name
            else:
                scope.bind(name, Constant(arr))
        constants = {n: a for n, a in arrays.items() if isinstance(scope.lookup(n), Constant)}
        nodes = fuse_qdq(graph.node, constants.get, {o.name for o in graph.output})
        with self.builder.function("main", param_vars):
            self.convert_nodes(nodes, scope)
            outs = [self._lookup(scope, o.name, "graph output") for o in graph.output]
            for info, value in zip(graph.output, outs):
                if not dtype_dict:  # inputs the caller re-typed may re-type the outputs
                    check_declared(info, value, f"graph output {info.name!r}")
            self.builder.emit_output(outs[0] if len(outs) == 1 else Tuple(tuple(outs)))
        mod = self.builder.get()
        attrs = {**mod.attrs, "onnx_input_names": origin}
        if self.python_forms:  # sequences and optionals cross the VM's boundary as ORT's do
            attrs["python_forms"] = dict(self.python_forms)
        return IRModule(mod.functions, mod.adts, mod.global_vars, attrs)

    def declare_adt(
        self,
        name: str,
        constructors: Sequence[tuple[str, Sequence[Type]]],
        python: str | None = None,
    ) -> ADTDef:
        """The module's data type ``name``, declared with ``constructors`` on first use;
        ``python`` is its values' form at the VM's boundary (`ADTInfo.python`)."""
        if name not in self.adts:
            self.adts[name] = self.builder.add_adt(name, constructors)
            if python is not None:
                self.python_forms[name] = python
        return self.adts[name]

    # -- inputs -----------------------------------------------------------------------------
    def _input_var(self, inp: Any, shape: Sequence[int | str] | None, dtype: str | None) -> Var:
        what = f"graph input {inp.name!r}"
        if not inp.type.HasField("tensor_type"):
            return Var(self.names(inp.name), optional.adt_type(self, inp.type, what))
        tt = inp.type.tensor_type
        if dtype is not None:
            try:
                dtype = check_dtype(dtype)
            except RVMError as err:
                raise OnnxImportError(f"dtype_dict[{inp.name!r}]: {err}") from None
        else:
            dtype = np_dtype(tt.elem_type, what)
        if shape is None:
            shape = self._onnx_shape(tt) if tt.HasField("shape") else None
        else:
            shape = tuple(self._dim_name(d) if isinstance(d, str) else d for d in shape)
        try:
            return Var(self.names(inp.name), TensorType(shape, dtype))
        except RVMError as err:
            raise OnnxImportError(f"{what}: {err}") from None

    def _onnx_shape(self, tt: Any) -> tuple[int | str, ...]:
        dims: list[int | str] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            elif d.dim_param:
                dims.append(self._dim_name(d.dim_param))
            else:
                dims.append(self._fresh_dim())
        return tuple(dims)

    def _dim_name(self, name: str) -> str:
        """The IR dim of ONNX ``dim_param`` ``name``: a name, or the expression it spells
        (optimum's ``"past_sequence_length + sequence_length"``: a computed ``past + seq`` is
        that dimension, and the VM checks an input of it against its terms)."""
        if name not in self.dim_names:
            value = self.emitter.dims.parse(name, self._dim_name)
            self.dim_names[name] = identifier(name) if value is None else value
        return self.dim_names[name]

    def _fresh_dim(self) -> str:
        taken = set(self.dim_names.values())
        while f"dim{self.fresh_dims}" in taken:
            self.fresh_dims += 1
        name = f"dim{self.fresh_dims}"
        self.fresh_dims += 1
        return name

    # -- nodes ------------------------------------------------------------------------------
    def _lookup(self, scope: Scope, name: str, what: str) -> Expr:
        value = scope.lookup(name)
        if value is None:
            raise OnnxImportError(f"{what} {name!r} is not defined by any input or node")
        return value

    def convert_nodes(self, nodes: Sequence[Any], scope: Scope) -> None:
        """Convert ``nodes`` in order, binding their outputs in ``scope``."""
        for node in nodes:
            self.convert_node(node, scope)

    def convert_node(self, node: Any, scope: Scope) -> None:
        if isinstance(node, FusedQDQ):
            self._convert_fused(node, scope)
            return
        if isinstance(node, FusedQAdd):
            self._convert_add(node, scope)
            return
        if self.custom_ops and f"{node.domain}.{node.op_type}" in self.custom_ops:
            self._bind_outputs(node, scope, self.custom_call(node, scope))
            return
        domain = normalize_domain(node.domain)
        version, conv = lookup(node.op_type, scope.opsets.get(domain, 0), domain)
        label = node.name or (node.output[0] if node.output else "?")
        inputs = [
            self._lookup(scope, n, f"input of node {label!r}:") if n else None for n in node.input
        ]
        where = f"node {label!r} ({node.op_type}-{version})"
        types = check_inputs(node, version, domain, inputs, where)
        if conv is None:
            outs = self.expand(node, scope, inputs, label)
            check_outputs(types, node, outs)
            self._bind_outputs(node, scope, outs)
            return
        attrs = parse_attributes(node)
        ctx = NodeContext(node, version, attrs, inputs, self.emitter, self, scope)
        try:
            result = conv.fn(ctx)
        except OnnxImportError:
            raise
        except RVMError as err:
            raise OnnxImportError(f"{where}: {err}") from None
        except Exception as err:  # a converter meeting a malformed node: an error, not a crash
            raise OnnxImportError(f"{where}: {type(err).__name__}: {err}") from err
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        for i, name in enumerate(node.output):
            if name and (i >= len(results) or results[i] is None):
                ctx.fail(f"rvm cannot produce output {i} ({name!r})")
        check_outputs(types, node, results)
        self._bind_outputs(node, scope, results)

    def _convert_fused(self, fused: FusedQDQ, scope: Scope) -> None:
        """A quantized chain as its integer op (`rvm.frontend.onnx.qdq`), or its nodes."""
        anchor = fused.anchor
        x = self._lookup(scope, fused.x, f"input of node {anchor.name!r}:")

        def window(x: Expr) -> dict:
            version, _ = lookup("Conv", scope.opsets.get("", 0))
            w = Constant(fused.weight)
            ctx = NodeContext(anchor, version or 1, parse_attributes(anchor), [x, w],
                              self.emitter, self, scope)  # fmt: skip
            return {"groups": ctx.attr("group", 1), **window_attrs(ctx, x, fused.weight.shape[2:])}

        try:
            expr = convert_fused(fused, x, window)
        except RVMError as err:
            raise OnnxImportError(f"node {anchor.name!r} ({fused.op_type}): {err}") from None
        if expr is None:
            self.convert_nodes(fused.nodes, scope)
            return
        scope.bind(fused.output, self.emitter.emit(expr))

    def _convert_add(self, fused: FusedQAdd, scope: Scope) -> None:
        """A quantized residual as `rvm.op.qadd` (`rvm.frontend.onnx.qdq`), or its nodes."""
        where = f"input of node {fused.nodes[0].name!r}:"
        a, b = self._lookup(scope, fused.a, where), self._lookup(scope, fused.b, where)
        try:
            expr = convert_add(fused, a, b)
        except RVMError as err:
            raise OnnxImportError(
                f"node {fused.nodes[0].name!r} ({fused.op_type}): {err}"
            ) from None
        if expr is None:
            self.convert_nodes(fused.nodes, scope)
            return
        scope.bind(fused.output, self.emitter.emit(expr))

    def custom_call(self, node: Any, scope: Scope) -> list[Expr]:
        """A node of a custom op as a packed call of the registered function (`custom_ops`);
        a node of several outputs calls a function returning a tuple of them."""
        from rvm.op.effects import call_packed

        key = f"{node.domain}.{node.op_type}"
        label = node.name or (node.output[0] if node.output else "?")
        where = f"node {label!r} ({key})"
        func, out = self.custom_ops[key]
        count = len(node.output)
        if count == 0:
            raise OnnxImportError(f"{where}: a custom op needs an output")
        given = None if out is None else (out if isinstance(out, tuple) else (out,))
        if given is not None and len(given) != count:
            raise OnnxImportError(
                f"{where}: custom_ops gives {len(given)} output types, the node has {count} outputs"
            )
        types = given or tuple(self._custom_output_type(where, key, func, n) for n in node.output)
        inputs = [self._lookup(scope, n, f"input of {where}:") for n in node.input if n]
        call = self.emitter.emit(call_packed(func, *inputs, out=types if count > 1 else types[0]))
        if count == 1:
            return [call]
        return [self.emitter.emit(TupleGetItem(call, i)) for i in range(count)]

    def _custom_output_type(self, where: str, key: str, func: str, name: str) -> TensorType:
        """A custom op's output type from the model's value_info."""
        proto = self.types(name)
        if proto is None or not proto.HasField("tensor_type"):
            raise OnnxImportError(
                f"{where}: the model gives no type for its output {name!r}; give it: "
                f"custom_ops={{{key!r}: ({func!r}, T[shape, dtype])}} (a tuple of them for "
                "several outputs)"
            )
        tt = proto.tensor_type
        shape = self._onnx_shape(tt) if tt.HasField("shape") else None
        return TensorType(shape, np_dtype(tt.elem_type, where))

    @staticmethod
    def _bind_outputs(node: Any, scope: Scope, results: Sequence[Expr | None]) -> None:
        for name, value in zip(node.output, results):
            if name:
                scope.bind(name, value)  # type: ignore[arg-type]

    def expand(
        self, node: Any, scope: Scope, inputs: Sequence[Expr | None], label: str
    ) -> list[Expr]:
        """The outputs of ``node``, which no converter implements, from its function body
        (see `rvm.frontend.onnx.functions`)."""
        where = f"node {label!r} ({node.op_type})"
        types = [None if v is None else type_proto(infer_type(v)) for v in inputs]
        body = function_body(node, scope.opsets, self.functions, types)
        if body is None:
            raise OnnxImportError(f"{where}: no converter and no function body for its inputs")
        if self.depth >= MAX_DEPTH:
            raise OnnxImportError(f"{where}: function bodies nest deeper than {MAX_DEPTH}")
        inner = Scope(opsets=body.opsets)  # no parent: the body sees only its inputs
        for name, value in zip(body.inputs, inputs):
            if name and value is not None:
                inner.bind(name, value)
        self.depth += 1
        try:
            self.convert_nodes(body.nodes, inner)
        finally:
            self.depth -= 1
        outs = []
        for i, name in enumerate(body.outputs[: len(node.output)]):
            value = inner.lookup(name)
            if value is None and node.output[i]:
                raise OnnxImportError(f"{where}: its function body does not define {name!r}")
            outs.append(value)
        return outs


def parse_attributes(node: Any) -> dict[str, Any]:
    """A node's attributes as Python values: strings decoded, tensors as arrays."""
    import onnx

    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.TENSOR:
            out[a.name] = tensor_to_array(a.t, f"attribute {a.name!r} of node {node.name!r}")
            continue
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", errors="replace") for v in value]
        out[a.name] = value
    return out


def _custom_ops(
    custom_ops: Mapping[str, str | tuple] | None,
) -> dict[str, tuple[str, TensorType | tuple[TensorType, ...] | None]]:
    """``custom_ops`` checked, each as (registered name, declared output type(s) or None)."""
    out: dict[str, tuple[str, TensorType | tuple[TensorType, ...] | None]] = {}
    for key, value in (custom_ops or {}).items():
        if not isinstance(key, str) or "." not in key:
            raise ValueError(f"custom_ops keys are 'Domain.OpType', got {key!r}")
        if isinstance(value, str):
            out[key] = (value, None)
        elif (
            isinstance(value, tuple)
            and len(value) == 2
            and isinstance(value[0], str)
            and _output_types(value[1])
        ):
            out[key] = (value[0], tuple(value[1]) if isinstance(value[1], list) else value[1])
        else:
            raise ValueError(
                f"custom_ops[{key!r}] must be a registered function's name or (name, "
                f"T[shape, dtype]) (a tuple of types for several outputs), got {value!r}"
            )
    return out


def _output_types(value: Any) -> bool:
    if isinstance(value, TensorType):
        return True
    return (
        isinstance(value, (tuple, list))
        and len(value) > 0
        and all(isinstance(t, TensorType) for t in value)
    )
