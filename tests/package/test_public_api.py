"""The top-level `rvm` namespace as users see it: `dir`, `help`, typing marker, lazy imports."""

from __future__ import annotations

import pydoc
import subprocess
import sys
from importlib import resources

import rvm

USER_NAMES = [
    "compile",
    "interpret",
    "const",
    "op",
    "script",
    "VirtualMachine",
    "Executable",
    "load_executable",
    "RVMError",
    "ShapeError",
]


def test_dir_lists_what_users_call_and_nothing_else():
    names = dir(rvm)
    for name in USER_NAMES:
        assert name in names
    for internal in ("annotations", "importlib", "Any", "_LAZY", "errors"):
        assert internal not in names


def test_every_listed_name_resolves():
    for name in rvm.__all__:
        assert getattr(rvm, name) is not None


def test_help_shows_the_public_surface():
    text = pydoc.render_doc(rvm, renderer=pydoc.plaintext)
    for name in ("compile", "interpret", "VirtualMachine", "load_executable"):
        assert name in text
    for internal in ("importlib", "_LAZY"):
        assert internal not in text


def test_package_ships_py_typed():
    assert resources.files("rvm").joinpath("py.typed").is_file()


def test_import_rvm_does_not_import_the_compiler():
    code = (
        "import sys, rvm; dir(rvm); "
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['rvm', 'ir'], ['rvm', 'codegen'], ['rvm', 'transform'], ['rvm', 'jit'])))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
