"""The import graph of an rvm source tree, for the layering test and `benchmarks/import_graph.py`.

Every import counts, at module level or inside a function, and so does
``importlib.import_module("rvm...")`` with a literal name; imports under ``if TYPE_CHECKING:``
do not (they never run). ``from rvm.a import b`` is an edge to ``rvm.a.b`` when that is a
module, else to ``rvm.a``. A package's ``__init__`` is not implied by importing its modules.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cycles", "graph", "imports", "module_files"]


def module_files(src: Path) -> dict[str, Path]:
    """Module name -> file, for every module under ``src`` (the ``rvm`` package folder)."""
    out = {}
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not _type_checking(child):
                todo.append(child)


def imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The rvm modules the file imports (resolved to modules of ``modules``)."""
    out: set[str] = set()
    for node in _nodes(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                names.append(sub if sub in modules else node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.append(first.value)
        out |= {n for n in names if n in modules}
    return out


def graph(src: Path) -> dict[str, set[str]]:
    """Module -> the rvm modules it imports, for the ``rvm`` package folder ``src``."""
    modules = module_files(src)
    return {name: imports(path, modules) - {name} for name, path in modules.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), biggest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out, key=len, reverse=True)
