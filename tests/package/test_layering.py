"""The package layering of docs/architecture.md, enforced: each package imports only the layers
below it. Every import counts, at module level or inside a function, and so does
``importlib.import_module("rvm....")`` with a literal name, so a cycle cannot hide in a string.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rvm

SRC = Path(rvm.__file__).parent

# What each package may import besides itself. `rvm` alone is the package root (always loaded
# first); `rvm.errors`, `rvm._html` and `rvm._hooks` (where higher layers supply the IR's
# printer and op set) import only the standard library; `rvm.dtypes` adds numpy (and
# ml_dtypes, lazily) and `rvm.errors`.
BASE = ("rvm.errors", "rvm._html", "rvm._hooks", "rvm.dtypes")
ALLOWED: dict[str, tuple[str, ...]] = {
    "runtime": (),
    "ir": (),
    "op": ("rvm.ir",),
    "script": ("rvm.ir", "rvm.op"),
    "transform": ("rvm.ir", "rvm.op"),
    "interp": ("rvm.ir", "rvm.op", "rvm.runtime"),
    "frontend": ("rvm.ir", "rvm.op"),
    "jit": ("rvm.ir", "rvm.op", "rvm.runtime"),
    "codegen": ("rvm.ir", "rvm.op", "rvm.transform", "rvm.jit", "rvm.runtime"),
}


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
