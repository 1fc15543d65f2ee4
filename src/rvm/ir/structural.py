"""Structural equality and hashing, iterative (no recursion limit on deep expressions).

Two expressions are structurally equal when they have the same shape of nodes, equal leaves
(op identity, constants' values, attrs, types) and variables that correspond one to one:
variables defined inside (parameters, bindings, pattern variables) are matched by position
(alpha-equivalence); free variables must be the same object unless ``map_free_vars``.
"""

from __future__ import annotations

from typing import Any

from rvm.errors import IRError
from rvm.ir import expr as E
from rvm.ir.module import ADTDef, IRModule

_DEF, _NODE, _LEAF, _USE = 0, 1, 2, 3


def _items(node: object) -> list[tuple[int, Any]]:  # noqa: C901 - one case per node kind
    """The ordered parts of a node: definitions come before their uses."""
    if isinstance(node, E.Var):
        return [(_USE, node)]
    if isinstance(node, E.GlobalVar):
        return [(_LEAF, node.name)]
    if isinstance(node, E.Constant):
        d = node.data
        return [(_LEAF, (d.dtype.str, d.shape, d.tobytes()))]
    if isinstance(node, E.Tuple):
        return [(_LEAF, len(node.fields))] + [(_NODE, f) for f in node.fields]
    if isinstance(node, E.TupleGetItem):
        return [(_LEAF, node.index), (_NODE, node.tuple_value)]
    if isinstance(node, E.Call):
        callee = node.callee
        head = (_LEAF, ("op", callee.name)) if isinstance(callee, E.Op) else (_NODE, callee)
        attrs = (_LEAF, tuple(sorted(node.attrs.items())))
        return [head, attrs, (_LEAF, len(node.args))] + [(_NODE, a) for a in node.args]
    if isinstance(node, E.Function):
        items = [(_LEAF, len(node.params))] + [(_DEF, p) for p in node.params]
        return items + [
            (_LEAF, node.ret_type),
            (_LEAF, tuple(sorted(node.attrs.items()))),
            (_NODE, node.body),
        ]
    if isinstance(node, E.If):
        return [(_NODE, node.cond), (_NODE, node.true_branch), (_NODE, node.false_branch)]
    if isinstance(node, E.SeqExpr):
        bindings = list(node.bindings)  # block boundaries carry no meaning
        return [(_LEAF, len(bindings))] + [(_NODE, b) for b in bindings] + [(_NODE, node.body)]
    if isinstance(node, E.VarBinding):
        return [(_DEF, node.var), (_NODE, node.value)]
    if isinstance(node, E.Match):
        return [(_NODE, node.data), (_LEAF, len(node.clauses))] + [(_NODE, c) for c in node.clauses]
    if isinstance(node, E.Clause):
        return [(_NODE, node.pattern), (_NODE, node.body)]
    if isinstance(node, E.PatternVar):
        return [(_DEF, node.var)]
    if isinstance(node, E.PatternWildcard):
        return []
    if isinstance(node, E.PatternTuple):
        return [(_LEAF, len(node.patterns))] + [(_NODE, p) for p in node.patterns]
    if isinstance(node, E.PatternConstructor):
        c = node.constructor
        return [(_LEAF, (c.adt_name, c.name, c.tag, len(node.patterns)))] + [
            (_NODE, p) for p in node.patterns
        ]
    if isinstance(node, E.Constructor):
        return [(_LEAF, (node.adt_name, node.name, node.tag, node.field_types))]
    raise IRError(f"structural comparison does not know {type(node).__name__}")


def _mismatch(a: object, b: object, why: str) -> str:
    return f"{why}\n  lhs: {E._print(a)}\n  rhs: {E._print(b)}"


def _compare(lhs: object, rhs: object, map_free_vars: bool) -> str | None:
    """None when equal, else a description of the first difference."""
    fwd: dict[E.Var, E.Var] = {}
    bwd: dict[E.Var, E.Var] = {}
    stack: list[tuple[object, object]] = [(lhs, rhs)]
    while stack:
        a, b = stack.pop()
        if a is b and not isinstance(a, (E.Var, E.Function, E.SeqExpr)):
            continue
        if type(a) is not type(b):
            return _mismatch(a, b, f"node kinds differ: {type(a).__name__} vs {type(b).__name__}")
        ia, ib = _items(a), _items(b)
        if len(ia) != len(ib):
            return _mismatch(a, b, "different number of parts")
        pending = []
        for (ka, va), (_, vb) in zip(ia, ib):
            if ka == _LEAF:
                if va != vb:
                    return _mismatch(a, b, f"values differ: {va!r} vs {vb!r}"[:400])
            elif ka == _DEF:
                if va.annotation != vb.annotation:
                    return _mismatch(
                        a, b, f"variable types differ: {va.annotation} vs {vb.annotation}"
                    )
                fwd[va], bwd[vb] = vb, va
            elif ka == _USE:
                mapped = fwd.get(va)
                if mapped is None:
                    if vb in bwd:
                        return _mismatch(a, b, f"variable {va.name} vs bound {vb.name}")
                    if map_free_vars and va.annotation == vb.annotation:
                        fwd[va], bwd[vb] = vb, va
                    elif va is not vb:
                        return _mismatch(a, b, f"free variables differ: {va.name} vs {vb.name}")
                elif mapped is not vb:
                    return _mismatch(a, b, f"variables differ: {va.name} vs {vb.name}")
            else:
                pending.append((va, vb))
        stack.extend(reversed(pending))
    return None


def _module_pairs(a: IRModule, b: IRModule) -> tuple[str | None, list[tuple[object, object]]]:
    if set(a) != set(b):
        return f"functions differ: {sorted(a)} vs {sorted(b)}", []
    if set(a.adts) != set(b.adts):
        return f"data types differ: {sorted(a.adts)} vs {sorted(b.adts)}", []
    for name in a.adts:
        if not _adt_equal(a.adts[name], b.adts[name]):
            return f"data type {name} differs", []
    return None, [(a[name], b[name]) for name in a]


def _adt_equal(a: ADTDef, b: ADTDef) -> bool:
    return len(a.constructors) == len(b.constructors) and all(
        (x.name, x.tag, x.field_types) == (y.name, y.tag, y.field_types)
        for x, y in zip(a.constructors, b.constructors)
    )


def structural_diff(lhs: object, rhs: object, map_free_vars: bool = False) -> str | None:
    """None when ``lhs`` and ``rhs`` are structurally equal, else the first difference."""
    if isinstance(lhs, IRModule) or isinstance(rhs, IRModule):
        if not (isinstance(lhs, IRModule) and isinstance(rhs, IRModule)):
            return "a module compared with a non-module"
        why, pairs = _module_pairs(lhs, rhs)
        if why:
            return why
        for name, (fa, fb) in zip(lhs, pairs):
            diff = _compare(fa, fb, map_free_vars)
            if diff:
                return f"in function {name}: {diff}"
        return None
    return _compare(lhs, rhs, map_free_vars)


def structural_equal(lhs: object, rhs: object, map_free_vars: bool = False) -> bool:
    """True when ``lhs`` and ``rhs`` (expressions or modules) are structurally equal."""
    return structural_diff(lhs, rhs, map_free_vars) is None


def assert_structural_equal(lhs: object, rhs: object, map_free_vars: bool = False) -> None:
    """Raise AssertionError describing the first difference, with both sides printed."""
    diff = structural_diff(lhs, rhs, map_free_vars)
    if diff is not None:
        raise AssertionError(
            f"not structurally equal: {diff}\n--- lhs ---\n{E._print(lhs)}\n"
            f"--- rhs ---\n{E._print(rhs)}"
        )


def structural_hash(node: object) -> int:
    """A hash consistent with `structural_equal` (free variables hash by name)."""
    if isinstance(node, IRModule):
        return hash(tuple((name, structural_hash(node[name])) for name in sorted(node)))
    numbering: dict[E.Var, int] = {}
    tokens: list[object] = []
    stack: list[object] = [node]
    while stack:
        n = stack.pop()
        tokens.append(type(n).__name__)
        children = []
        for kind, value in _items(n):
            if kind == _LEAF:
                tokens.append(value)
            elif kind == _DEF:
                numbering[value] = len(numbering)
                tokens.append(("def", value.annotation))
            elif kind == _USE:
                idx = numbering.get(value)
                tokens.append(("var", idx) if idx is not None else ("free", value.name))
            else:
                children.append(value)
        stack.extend(reversed(children))
    return hash(tuple(tokens))
