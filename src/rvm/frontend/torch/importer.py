"""The graph walk: a ``torch.export.ExportedProgram`` to an IRModule with entry ``"main"``.

Steps, each failing before the next starts:

1. export (an ``nn.Module`` with ``args``) and decompose to Core ATen, keeping the ops rvm
   converts whole because they fuse better than their pieces (`KEPT`);
2. refuse programs that mutate buffers or inputs, and list every overload no converter
   handles, with its node names, in one `rvm.TorchImportError`;
3. bind the user inputs (then parameters and buffers, as constants or as parameters) and
   convert the nodes in order through the registry; higher-order ops (``torch.cond``,
   ``torch.while_loop``) convert their subgraphs in place (`converters.control`).

Symbolic sizes: each sympy symbol torch.export made for a ``Dim`` becomes an rvm symbolic
dimension named after the ``Dim`` (when ``dynamic_shapes`` is given, else torch's own name,
``s0``); its range is recorded in ``mod.attrs["torch_dim_ranges"]``.
"""

from __future__ import annotations

import keyword
import operator
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from rvm import op
from rvm.errors import RVMError, TorchImportError
from rvm.frontend.torch import converters  # noqa: F401 - registers every converter
from rvm.frontend.torch.context import NodeContext, SymInt, rvm_dtype, sym_value
from rvm.frontend.torch.registry import lookup
from rvm.ir import Builder, Constant, Expr, IRModule, TensorType, Tuple, Var
from rvm.ir import const as ir_const
from rvm.ir import dims as dim_exprs

PARAMS_MODES = ("constants", "inputs")
_DIM_ARITHMETIC = {
    "Add": dim_exprs.add,
    "Mul": dim_exprs.mul,
    "FloorDiv": dim_exprs.floordiv,
    "Mod": dim_exprs.mod,
    "PythonMod": dim_exprs.mod,
}
"""Sympy's integer arithmetic (its class names) as dimension arithmetic."""

# Ops kept whole through run_decompositions: rvm has fused forms for them, or one op where the
# decomposition spells gathers or scatters (the pads, select_scatter, embedding_dense_backward),
# or the same op under another overload (these are Core ATen overloads, which a converter then
# reaches).
KEPT = (
    "linear.default",
    "layer_norm.default",
    "scaled_dot_product_attention.default",
    "conv1d.default",
    "conv2d.default",
    "conv1d.padding",
    "conv2d.padding",
    "silu.default",
    "gelu.default",
    "reflection_pad1d.default",
    "reflection_pad2d.default",
    "reflection_pad3d.default",
    "replication_pad2d.default",
    "replication_pad3d.default",
    "select_scatter.default",
    "squeeze.dim",
    "var.dim",
    "fill.Scalar",
    "embedding_dense_backward.default",
    "avg_pool1d.default",
    "adaptive_avg_pool1d.default",
)

# Nodes that only check or constrain sizes at export time: nothing to run.
NO_OPS = (
    "aten._assert_scalar.default",
    "aten._assert_tensor_metadata.default",
    "aten.sym_constrain_range_for_size.default",
    "aten.sym_constrain_range.default",
    "aten._assert_async.msg",
)


def target_name(target: Any) -> str:
    """The registry key of an FX node's target: ``aten.add.Tensor``, ``higher_order.cond``,
    ``operator.mul``."""
    import torch

    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    module = getattr(target, "__module__", None) or "?"
    return f"{module}.{getattr(target, '__name__', target)}"


def identifier(name: str) -> str:
    out = re.sub(r"\W", "_", name) or "v"
    if out[0].isdigit():
        out = "v_" + out
    return out + "_" if keyword.iskeyword(out) else out


def _symbolic(val: Any) -> bool:
    import torch

    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


class GraphImporter:
    """Converts one exported program's graphs to IR."""

    def __init__(self, sym_names: Mapping[Any, str]) -> None:
        self.builder = Builder()
        self.sym_names = dict(sym_names)
        self.sym_sources: dict[Any, tuple[Var, int]] = {}
        self.used: set[str] = set()

    def name(self, hint: str) -> str:
        base = identifier(hint)
        out, k = base, 1
        while out in self.used:
            out, k = f"{base}_{k}", k + 1
        self.used.add(out)
        return out

    # -- symbolic sizes -----------------------------------------------------------------------
    def dim(self, value: Any) -> int | str | None:
        """An int or `SymInt` as an rvm dimension: an int, a symbol's name, an expression of
        symbols (``s0 + s1``, ``12*s0``: `rvm.ir.dims`), else None."""
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, SymInt):
            if value.static is not None:
                return value.static
            return self.sym_dim(value.expr)
        if hasattr(value, "node") and hasattr(value.node, "expr"):  # a torch.SymInt
            return self.dim(SymInt(value.node.expr))
        return None

    def sym_dim(self, expr: Any) -> Any:
        """Sympy ``expr`` as an rvm dimension when it is integer arithmetic (+, *, //, %) on
        symbols and integers; None otherwise (a max, a power)."""
        if expr.is_Integer:
            return int(expr)
        if expr.is_Symbol:
            return self.sym_name(expr)
        combine = _DIM_ARITHMETIC.get(type(expr).__name__)
        args = [self.sym_dim(a) for a in expr.args] if combine is not None else [None]
        if not args or any(a is None for a in args):
            return None
        out = args[0]
        for a in args[1:]:
            out = combine(out, a)
        return out

    def sym_name(self, symbol: Any) -> str:
        if symbol not in self.sym_names:
            self.sym_names[symbol] = identifier(str(symbol))
        return self.sym_names[symbol]

    def note_sources(self, var: Var, val: Any) -> None:
        """Remember where each symbol in ``val``'s shape can be read at run time."""
        for axis, d in enumerate(val.shape):
            expr = getattr(getattr(d, "node", None), "expr", None)
            if getattr(expr, "is_Symbol", False) and expr not in self.sym_sources:
                self.sym_sources[expr] = (var, axis)

    def sym_tensor(self, expr: Any) -> Expr:
        """A run-time 0-d int64 tensor (bool for a comparison) computing sympy ``expr``."""
        emit = self.builder.emit
        if expr.is_Integer:
            return ir_const(int(expr), "int64")
        if expr.is_Boolean and expr.is_Atom and not expr.is_Symbol:  # sympy's true, false
            return ir_const(bool(expr), "bool")
        if expr.is_Symbol:
            if expr not in self.sym_sources:
                raise TorchImportError(f"symbolic size {expr} is not the size of any input")
            var, axis = self.sym_sources[expr]
            return emit(op.take(op.shape_of(var), ir_const(axis, "int64")))
        args = [self.sym_tensor(a) for a in expr.args]
        kind = type(expr).__name__
        binary = {
            "Add": op.add,
            "Mul": op.multiply,
            "FloorDiv": op.floor_divide,
            "Mod": op.mod,
            "PythonMod": op.mod,
            "Max": op.maximum,
            "Min": op.minimum,
            "StrictGreaterThan": op.greater,
            "StrictLessThan": op.less,
            "GreaterThan": op.greater_equal,
            "LessThan": op.less_equal,
            "Equality": op.equal,
            "Unequality": op.not_equal,
            "And": op.logical_and,
            "Or": op.logical_or,
        }
        if kind in binary:
            out = args[0]
            for a in args[1:]:
                out = emit(binary[kind](out, a))
            return out
        if kind == "Not":
            return emit(op.logical_not(args[0]))
        raise TorchImportError(f"rvm cannot compute the symbolic size {expr} ({kind}) at run time")

    # -- graphs -------------------------------------------------------------------------------
    def convert_graph(self, graph: Any, env: dict[Any, Any]) -> list[Any]:
        """Convert ``graph``'s nodes (placeholders already in ``env``); its output values."""
        for node in graph.nodes:
            if node.op == "placeholder":
                if node not in env:
                    raise TorchImportError(f"graph input {node.name!r} is not bound")
            elif node.op == "get_attr":
                env[node] = _attr(graph.owning_module, node.target)
            elif node.op == "call_function":
                env[node] = self.convert_node(node, env)
            elif node.op == "output":
                out = _map(node.args[0], env)
                return out if isinstance(out, list) else [out]
            else:
                raise TorchImportError(f"node {node.name!r}: unsupported FX op {node.op!r}")
        raise TorchImportError("the graph has no output node")

    def convert_node(self, node: Any, env: dict[Any, Any]) -> Any:
        name = target_name(node.target)
        if node.target is operator.getitem:
            seq, index = _map(node.args, env)
            return seq[index]
        if name in NO_OPS:
            return None
        fn = lookup(name)
        val = node.meta.get("val")
        if fn is None and _symbolic(val):
            return sym_value(val)
        if fn is None:
            raise _node_error(f"node {node.name!r}: no converter for {name}", name, node.name)
        ctx = NodeContext(node, self)
        args, kwargs = _map(node.args, env), _map(node.kwargs, env)
        try:
            return ctx.conform(fn(ctx, *args, **kwargs))
        except TorchImportError as err:
            if not err.overloads:
                err.overloads = {name: [node.name]}
            raise
        except RVMError as err:
            raise _node_error(f"node {node.name!r} ({name}): {err}", name, node.name) from None
        except Exception as err:  # a converter meeting a case it does not handle
            raise _node_error(
                f"node {node.name!r} ({name}): {type(err).__name__}: {err}", name, node.name
            ) from err


def _node_error(message: str, overload: str, node: str) -> TorchImportError:
    """An import error carrying, as data, the overload that failed and its node."""
    return TorchImportError(message, {overload: [node]})


def _attr(module: Any, target: str) -> Any:
    value = module
    for part in target.split("."):
        value = getattr(value, part)
    if hasattr(value, "graph"):  # a subgraph of a higher-order op
        return value
    return Constant(tensor_array(value))


def tensor_array(t: Any) -> np.ndarray:
    """A torch tensor's data as a NumPy array (bfloat16 through ml_dtypes)."""
    import torch

    t = t.detach().cpu().contiguous()
    dtype = rvm_dtype(t.dtype)
    if dtype == "bfloat16":
        from rvm.dtypes import numpy_dtype

        return t.view(torch.int16).numpy().view(numpy_dtype("bfloat16")).copy()
    return t.numpy().copy()


def _map(value: Any, env: dict[Any, Any]) -> Any:
    import torch

    if isinstance(value, torch.fx.Node):
        return env[value]
    if isinstance(value, (list, tuple)):
        return [_map(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _map(v, env) for k, v in value.items()}
    return value


def output_expr(ctx_importer: GraphImporter, value: Any) -> Expr:
    """A graph output as an expression: numbers and symbolic sizes as 0-d tensors."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, SymInt):
        return ctx_importer.sym_tensor(value.expr)
    if isinstance(value, (bool, int, float)):
        dtype = (
            "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else "float32"
        )
        return ir_const(value, dtype)
    raise TorchImportError(f"rvm cannot return a {type(value).__name__} from main")


def pack(values: list[Expr]) -> Expr:
    return values[0] if len(values) == 1 else Tuple(tuple(values))


def make_var(importer: GraphImporter, name: str, val: Any) -> Var:
    """The parameter for a placeholder whose example value is ``val``."""
    import torch

    if not isinstance(val, torch.Tensor):
        raise TorchImportError(
            f"input {name!r}: rvm takes tensor inputs, got {type(val).__name__} {val!r}"
        )
    shape = tuple(importer.dim(d) for d in val.shape)
    shape = tuple(importer.name(f"{name}_dim{i}") if d is None else d for i, d in enumerate(shape))
    var = Var(importer.name(name), TensorType(shape, rvm_dtype(val.dtype, f"input {name!r}: ")))
    importer.note_sources(var, val)
    return var


def build_main(importer: GraphImporter, ep: Any, params: str, attrs: dict[str, Any]) -> IRModule:
    """The module of the decomposed program ``ep``."""
    from torch.export.graph_signature import InputKind

    gm = ep.graph_module
    nodes = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    env: dict[Any, Any] = {}
    user: list[Var] = []
    weights: list[Var] = []
    origin: dict[str, str] = {}
    for spec in ep.graph_signature.input_specs:
        node = nodes[spec.arg.name]
        if spec.kind == InputKind.USER_INPUT:
            val = node.meta.get("val")
            if not hasattr(val, "shape"):  # a constant non-tensor input, specialized away
                env[node] = sym_value(val)
                continue
            var = make_var(importer, spec.arg.name, val)
            env[node] = var
            user.append(var)
            origin[var.name] = spec.arg.name
            continue
        tensor = ep.state_dict.get(spec.target)
        if tensor is None:
            tensor = ep.constants.get(spec.target)
        if tensor is None:
            raise TorchImportError(f"input {spec.arg.name!r}: no value for {spec.target!r}")
        if not hasattr(tensor, "shape"):  # a script object or the like
            raise TorchImportError(f"input {spec.arg.name!r}: rvm cannot hold {type(tensor)}")
        inputs = params == "inputs" and spec.kind in (InputKind.PARAMETER, InputKind.BUFFER)
        if inputs:
            var = Var(
                importer.name(spec.target), TensorType(tuple(tensor.shape), rvm_dtype(tensor.dtype))
            )
            env[node] = var
            weights.append(var)
            origin[var.name] = spec.target
        else:
            env[node] = Constant(tensor_array(tensor))
    ranges = attrs.get("torch_dim_ranges", {})
    used = {d for v in user for d in v.type.shape if isinstance(d, str)}  # type: ignore[union-attr]
    checked = {n: r for n, r in ranges.items() if n in used and r != (0, None)}
    func_attrs = {"dim_ranges": checked} if checked else None
    with importer.builder.function("main", [*user, *weights], attrs=func_attrs):
        outs = importer.convert_graph(gm.graph, env)
        user_outs = [o for o, s in zip(outs, ep.graph_signature.output_specs) if _user(s)]
        values = [output_expr(importer, o) for o in user_outs]
        leaf = ep.call_spec.out_spec is not None and ep.call_spec.out_spec.is_leaf()
        importer.builder.emit_output(
            values[0] if leaf and len(values) == 1 else Tuple(tuple(values))
        )
    mod = importer.builder.get()
    all_attrs = {**mod.attrs, **attrs, "torch_input_names": origin}
    return IRModule(mod.functions, mod.adts, mod.global_vars, all_attrs)


def _user(spec: Any) -> bool:
    from torch.export.graph_signature import OutputKind

    return spec.kind == OutputKind.USER_OUTPUT
