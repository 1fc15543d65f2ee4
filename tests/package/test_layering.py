"""The package layering of docs/architecture.md, enforced: each package imports only the layers
below it. Every import counts, at module level or inside a function, and so does
``importlib.import_module("rvm....")`` with a literal name, so a cycle cannot hide in a string.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rvm
from rvm.testing.import_graph import cycles, graph

SRC = Path(rvm.__file__).parent

# What each package may import besides itself. `rvm` alone is the package root (always loaded
# first); `rvm.errors`, `rvm._html` and `rvm._hooks` (where higher layers supply the IR's
# printer and op set) import only the standard library; `rvm.progress` (progress of long work)
# adds IPython's display and ipywidgets where a notebook has them; `rvm.dtypes` adds numpy (and
# ml_dtypes, lazily) and `rvm.errors`.
BASE = ("rvm.errors", "rvm._html", "rvm._hooks", "rvm.progress", "rvm.dtypes")
ALLOWED: dict[str, tuple[str, ...]] = {
    "kernels": (),
    "runtime": ("rvm.kernels",),
    "ir": (),
    "op": ("rvm.ir", "rvm.kernels"),
    "script": ("rvm.ir", "rvm.op"),
    "transform": ("rvm.ir", "rvm.op"),
    "interp": ("rvm.ir", "rvm.op", "rvm.runtime"),
    "frontend": ("rvm.ir", "rvm.op"),
    "generation": ("rvm.ir", "rvm.op"),
    "jit": ("rvm.ir", "rvm.op", "rvm.runtime", "rvm.kernels"),
    "codegen": ("rvm.ir", "rvm.op", "rvm.transform", "rvm.jit", "rvm.runtime", "rvm.kernels"),
}

# Inside these, no import cycle at all (lazy imports in functions count; TYPE_CHECKING ones do
# not, they never run): the runtime with its modes and loading, the kernel library, the jit's
# compute modules and the ONNX converters (`rvm.testing.import_graph` builds the graph).
ACYCLIC = ("rvm.runtime", "rvm.kernels", "rvm.jit", "rvm.frontend.onnx.converters")


def rvm_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every rvm module `path` imports, however it imports it."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "rvm":
                out += [(node.lineno, f"rvm.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and _called(node.func) == "import_module":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                out.append((node.lineno, first.value))
    return [(line, n) for line, n in out if n == "rvm" or n.startswith("rvm.")]


def _called(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_the_layers_below(package: str) -> None:
    root = SRC / package
    if not root.is_dir():
        pytest.skip(f"no package rvm.{package}")
    allowed = (f"rvm.{package}", *BASE, *ALLOWED[package])
    wrong = [
        f"{path.relative_to(SRC)}:{line} imports {name}"
        for path in sorted(root.rglob("*.py"))
        for line, name in rvm_imports(path)
        if name != "rvm" and not _within(name, allowed)
    ]
    assert not wrong, "\n".join(wrong)


def _imported(name: str) -> list[str]:
    """The modules the source file ``name`` (under src/rvm) imports, anywhere in it."""
    mods: list[str] = []
    for node in ast.walk(ast.parse((SRC / name).read_text())):
        if isinstance(node, ast.Import):
            mods += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods.append(node.module or "")
    return mods


def test_shared_helpers_import_only_the_standard_library() -> None:
    import sys

    for name in ("errors.py", "_html.py", "_hooks.py"):
        for mod in _imported(name):
            assert mod.split(".")[0] in sys.stdlib_module_names | {"__future__"}, (name, mod)
    notebook = {"IPython", "ipywidgets"}
    for mod in _imported("progress.py"):
        assert mod.split(".")[0] in sys.stdlib_module_names | {"__future__"} | notebook, mod


def test_dtypes_imports_only_numpy_ml_dtypes_and_errors() -> None:
    import sys

    outside = sys.stdlib_module_names | {"__future__", "numpy", "ml_dtypes"}
    for mod in _imported("dtypes.py"):
        top = mod.split(".")[0]
        assert mod == "rvm.errors" if top == "rvm" else top in outside, mod


def test_every_package_is_placed_in_a_layer() -> None:
    """A new package must say where it stands (add it to ALLOWED and to the docs' table)."""
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    assert packages - {"testing"} <= set(ALLOWED), packages - set(ALLOWED)


def test_the_scanner_sees_hidden_imports(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "import importlib\n"
        "def f():\n"
        "    from rvm.script import parse\n"
        "    return importlib.import_module('rvm.op')\n"
    )
    assert [n for _, n in rvm_imports(path)] == ["rvm.script", "rvm.op"]


@pytest.fixture(scope="module")
def src_graph() -> dict[str, set[str]]:
    """rvm's import graph (`rvm.testing.import_graph.graph`), built once for the tests that
    read it: each build parses every source file (seconds)."""
    return graph(SRC)


def test_no_import_cycles_in_the_runtime_kernels_jit_and_converters(src_graph) -> None:
    comps = cycles(src_graph)
    inside = [c for c in comps if any(_within(m, ACYCLIC) for m in c)]
    assert not inside, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in inside)


def test_within_runtime_the_record_sits_below_what_uses_it(src_graph) -> None:
    """`Executable` is data plus validation: it imports none of the modules that encode,
    print, package, load or run it (they bind its methods from `rvm.runtime.methods`)."""
    g = src_graph
    above = ("rvm.runtime.serialize", "rvm.runtime.text", "rvm.runtime.vm")
    above += ("rvm.runtime.loading", "rvm.runtime.modes")
    wrong = [m for m in g["rvm.runtime.executable"] if _within(m, above)]
    assert not wrong, wrong
    assert not [m for m in g["rvm.runtime.loading.artifact"] if _within(m, ("rvm.runtime.modes",))]


def test_the_lowering_toolkit_stands_below_the_modes_that_use_it(src_graph) -> None:
    """`rvm.runtime.modes.lowering` reads bytecode and the opcode table: it imports no exec
    mode, no loading, no VM and no kernel library (lazy imports included)."""
    g = src_graph
    toolkit = [m for m in g if _within(m, ("rvm.runtime.modes.lowering",))]
    assert len(toolkit) >= 5, toolkit
    banned = ("rvm.runtime.loading", "rvm.runtime.vm", "rvm.kernels")
    for module in toolkit:
        for dep in g[module]:
            inside = _within(dep, ("rvm.runtime.modes.lowering",))
            assert inside or not _within(dep, ("rvm.runtime.modes", *banned)), (module, dep)


def test_the_graph_sees_lazy_imports_and_skips_type_checking(tmp_path: Path) -> None:
    pkg = tmp_path / "rvm"
    (pkg / "a").mkdir(parents=True)
    for name in ("__init__.py", "a/__init__.py", "b.py", "c.py"):
        (pkg / name).write_text("")
    (pkg / "a" / "x.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "if TYPE_CHECKING:\n"
        "    from rvm import c\n"
        "def f():\n"
        "    from rvm import b\n"
        "    return importlib.import_module('rvm.a')\n"
    )
    (pkg / "b.py").write_text("from rvm.a import x\n")
    g = graph(pkg)
    assert g["rvm.a.x"] == {"rvm.b", "rvm.a"}
    assert cycles(g) == [["rvm.a.x", "rvm.b"]]


@pytest.mark.parametrize("frontend", ["onnx", "torch"])
def test_a_frontend_imports_only_the_ir_the_ops_its_library_and_shared_helpers(
    frontend: str,
) -> None:
    """A frontend imports rvm.ir, rvm.op, the shared errors and dtypes, and, outside rvm,
    the standard library, numpy and its own framework; never another frontend."""
    import sys

    root = SRC / "frontend" / frontend
    allowed = (f"rvm.frontend.{frontend}", "rvm.ir", "rvm.op", "rvm.errors", "rvm.dtypes")
    outside = sys.stdlib_module_names | {"__future__", "numpy", frontend, "ml_dtypes"}
    wrong = []
    for path in sorted(root.rglob("*.py")):
        for mod in _imported(str(path.relative_to(SRC))):
            top = mod.split(".")[0]
            if top == "rvm" and mod != "rvm" and not _within(mod, allowed):
                wrong.append(f"{path.relative_to(SRC)} imports {mod}")
            elif top not in ("rvm", "") and top not in outside:
                wrong.append(f"{path.relative_to(SRC)} imports {mod}")
    assert not wrong, "\n".join(wrong)
