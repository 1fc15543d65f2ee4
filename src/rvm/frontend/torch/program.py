"""From a module or an exported program to a vetted, decomposed ``ExportedProgram``.

`from_torch` exports (when given an ``nn.Module``), decomposes to Core ATen keeping the ops
rvm fuses whole, refuses mutations, lists unsupported overloads, names the symbolic sizes
after the user's ``Dim``\\ s, and hands the program to `rvm.frontend.torch.importer`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rvm.errors import TorchImportError
from rvm.frontend.torch.importer import (
    KEPT,
    NO_OPS,
    PARAMS_MODES,
    GraphImporter,
    build_main,
    identifier,
    target_name,
)
from rvm.frontend.torch.registry import lookup
from rvm.ir import IRModule


def from_torch(
    program: Any,
    *,
    args: Sequence[Any] | None = None,
    dynamic_shapes: Any = None,
    params: str = "constants",
) -> IRModule:
    """Import a PyTorch program as an IRModule whose entry function is ``"main"``.

    Args:
        program: a ``torch.export.ExportedProgram``, or an ``nn.Module`` that rvm exports
            with ``args`` and ``dynamic_shapes``.
        args: example inputs (a tuple) for an ``nn.Module``.
        dynamic_shapes: as ``torch.export.export`` takes them (``{"x": {0: Dim("batch")}}``).
            For a module, rvm exports with them; for an exported program, they name its
            symbolic sizes (torch.export keeps only ``s0``, ``s1``...). Each ``Dim`` becomes
            an rvm symbolic dimension of the same name.
        params: ``"constants"`` embeds parameters and buffers; ``"inputs"`` makes them
            parameters of ``main`` after the user inputs (in the program's order), so weights
            can be swapped.

    Returns:
        The module: ``main`` takes the program's user inputs in order and returns a tensor or
        a tuple, flattened as torch.export flattens outputs. ``mod.attrs["torch_dim_ranges"]``
        holds each symbolic dimension's ``(min, max)`` (max None when unbounded).

    Raises:
        rvm.TorchImportError: export fails, the program mutates buffers or inputs, uses
            overloads rvm does not convert (all listed with their nodes), or a node cannot be
            converted.
    """
    import torch

    if params not in PARAMS_MODES:
        raise ValueError(f"params must be one of {PARAMS_MODES}, got {params!r}")
    if isinstance(program, torch.nn.Module) and not isinstance(
        program, torch.export.ExportedProgram
    ):
        program = _export(program, args, dynamic_shapes)
    elif not isinstance(program, torch.export.ExportedProgram):
        raise TypeError(
            f"from_torch takes a torch.export.ExportedProgram or an nn.Module, got "
            f"{type(program).__name__}"
        )
    elif args is not None:
        raise ValueError("args are for an nn.Module; an ExportedProgram has its own")
    ep = decompose(program)
    check_mutations(ep)
    check_supported(ep.graph_module)
    names, ranges = symbol_names(ep, dynamic_shapes)
    importer = GraphImporter(names)
    return build_main(importer, ep, params, {"torch_dim_ranges": ranges})


def _export(module: Any, args: Sequence[Any] | None, dynamic_shapes: Any) -> Any:
    import torch

    if args is None:
        raise ValueError("from_torch(nn.Module) needs args=(example inputs...)")
    if not isinstance(args, tuple):
        args = tuple(args) if isinstance(args, list) else (args,)
    try:
        return torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
    except Exception as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise TorchImportError(
            f"torch.export could not export {type(module).__name__}: {type(err).__name__}: {first}"
        ) from err


def decomposition_table() -> dict[Any, Any]:
    """Core ATen decompositions, without those of the ops rvm converts whole (`KEPT`)."""
    import torch

    table = dict(torch.export.default_decompositions())
    for name in KEPT:
        packet, overload = name.split(".")
        table.pop(getattr(getattr(torch.ops.aten, packet), overload), None)
    return table


def decompose(ep: Any) -> Any:
    """``ep`` in Core ATen plus `KEPT`."""
    try:
        return ep.run_decompositions(decomposition_table())
    except Exception as err:
        raise TorchImportError(
            f"torch could not decompose the program: {type(err).__name__}: {err}"
        ) from err


def check_mutations(ep: Any) -> None:
    """Refuse programs that write their buffers or inputs: rvm functions are pure."""
    from torch.export.graph_signature import OutputKind

    writes = {
        OutputKind.BUFFER_MUTATION: "buffer",
        OutputKind.USER_INPUT_MUTATION: "input",
        OutputKind.PARAMETER_MUTATION: "parameter",
    }
    found = [
        f"{writes[s.kind]} {s.target!r}"
        for s in ep.graph_signature.output_specs
        if s.kind in writes
    ]
    if found:
        raise TorchImportError(
            f"the program writes {', '.join(found)} in place; rvm runs pure functions. Export "
            f"it in eval mode (model.eval() keeps BatchNorm's running stats) or without the "
            f"in-place update"
        )


def graphs(gm: Any) -> list[Any]:
    """``gm``'s graph and its subgraphs' (the branches and bodies of higher-order ops)."""
    out, stack = [], [gm]
    while stack:
        module = stack.pop()
        out.append(module.graph)
        stack.extend(m for _, m in module.named_children() if hasattr(m, "graph"))
    return out


def check_supported(gm: Any) -> None:
    """One error listing every overload no converter handles, with its node names."""
    missing: dict[str, list[str]] = {}
    for graph in graphs(gm):
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            name = target_name(node.target)
            if name in NO_OPS or name == "_operator.getitem" or lookup(name) is not None:
                continue
            if not name.startswith(("aten.", "higher_order.")) and _scalar(node):
                continue  # size arithmetic (operator.mul, torch.sym_max...), read from meta
            if name.startswith("aten.sym_") and _scalar(node):
                continue
            missing.setdefault(name, []).append(node.name)
    if missing:
        lines = [f"  {name}: {', '.join(nodes)}" for name, nodes in sorted(missing.items())]
        raise TorchImportError(
            f"{len(missing)} unsupported op(s), with the nodes that use them:\n" + "\n".join(lines),
            missing,
        )


def _scalar(node: Any) -> bool:
    import torch

    val = node.meta.get("val")
    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


def symbol_names(ep: Any, dynamic_shapes: Any) -> tuple[dict[Any, str], dict[str, tuple]]:
    """Each symbol's rvm name (its ``Dim``'s where ``dynamic_shapes`` names it) and ranges."""
    from torch.export.graph_signature import InputKind

    names: dict[Any, str] = {}
    placeholders = {n.name: n for n in ep.graph_module.graph.nodes if n.op == "placeholder"}
    users = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    specs = _spec_per_input(dynamic_shapes, users)
    for user, spec in zip(users, specs):
        val = placeholders[user].meta.get("val")
        if spec is None or not hasattr(val, "shape"):
            continue
        axes = spec.items() if isinstance(spec, Mapping) else enumerate(spec)
        for axis, dim in axes:
            expr = getattr(getattr(val.shape[axis], "node", None), "expr", None)
            label = getattr(dim, "__name__", None)
            if label and getattr(expr, "is_Symbol", False):
                names.setdefault(expr, identifier(label))
    ranges: dict[str, tuple] = {}
    for symbol, vr in ep.range_constraints.items():
        if getattr(symbol, "is_Symbol", False):
            lo, hi = vr.lower, vr.upper
            name = names.setdefault(symbol, identifier(str(symbol)))
            ranges[name] = (int(lo) if lo.is_Integer else None, int(hi) if hi.is_Integer else None)
    return names, ranges


def _spec_per_input(dynamic_shapes: Any, users: list[str]) -> list[Any]:
    if dynamic_shapes is None:
        return [None] * len(users)
    if isinstance(dynamic_shapes, Mapping):
        return [dynamic_shapes.get(u) for u in users]
    specs = list(dynamic_shapes)
    return (specs + [None] * len(users))[: len(users)]


__all__ = ["from_torch"]
