"""The decorators find the source of the very object they decorate, wherever Python code runs.

Notebook cells (IPython registers each cell's text in `linecache`), ``python -m cProfile``,
modules run by `importlib` before they are in `sys.modules`, two classes of one name in a file,
and code with no source text at all (``python -c``), which gets a clear error. Fresh
interpreters also check that `rvm.script` and `rvm.ir` need no ``from rvm import op`` first.
"""

from __future__ import annotations

import importlib.util
import linecache
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm import ScriptError
from rvm.ir import IRModule

SRC_DIR = str(Path(rvm.__file__).resolve().parents[1])

CELL = """\
import rvm
from rvm import op
from rvm.script import T, func, module

Vec = T[(2,), "float32"]

@rvm.script.adt
class List:
    Nil: ()
    Cons: (Vec, "List")

@module
class Model:
    @func
    def total(xs: List, acc: T[(2,), "float32"]):
        match xs:
            case Cons(h, t):
                return total(t, acc + h)
            case Nil():
                return acc

    @func
    def main(x: T[(2,), "float32"]):
        return total(Cons(x, Cons(x * 2.0, Nil())), op.relu(x))

@func
def double(x: T[(2,), "float32"]):
    return x + x
"""


def run_cell(text: str, filename: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Run ``text`` as IPython runs a cell: compiled under a name only `linecache` knows
    (and without this file's ``from __future__ import annotations``)."""
    monkeypatch.setitem(
        linecache.cache, filename, (len(text), None, text.splitlines(True), filename)
    )
    namespace: dict = {"__name__": "__main__"}
    exec(compile(text, filename, "exec", dont_inherit=True), namespace)
    return namespace


def run_python(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """A fresh interpreter on this checkout's sources (no `rvm.op` imported beforehand)."""
    path = os.pathsep.join(p for p in (SRC_DIR, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def import_file(path: Path, monkeypatch: pytest.MonkeyPatch):
    """Import ``path`` under a fresh name as `import` does (in `sys.modules` for the test)."""
    name = f"{path.stem}_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("future", [False, True], ids=["values", "future-annotations"])
def test_notebook_style_cell(tmp_path, monkeypatch, future):
    head = "from __future__ import annotations\n" if future else ""
    ns = run_cell(head + CELL, str(tmp_path / "cell_1.py"), monkeypatch)
    assert isinstance(ns["Model"], IRModule) and list(ns["Model"].functions) == ["total", "main"]
    x = np.array([1.0, -2.0], "float32")
    np.testing.assert_allclose(rvm.interpret(ns["Model"], "main", x), [4.0, -6.0])
    np.testing.assert_allclose(rvm.interpret(ns["double"], "double", x), [2.0, -4.0])
    cons = ns["List"].constructors[1]
    assert cons.field_types == (rvm.ir.TensorType((2,), "float32"), rvm.ir.ADTType("List"))


def test_notebook_style_cell_compiles_and_runs(tmp_path, monkeypatch, exec_mode, kernels):
    ns = run_cell(CELL, str(tmp_path / "cell_2.py"), monkeypatch)
    vm = rvm.VirtualMachine(rvm.compile(ns["Model"], kernels=kernels), exec_mode=exec_mode)
    np.testing.assert_allclose(vm["main"](np.array([1.0, -2.0], "float32")), [4.0, -6.0])


def test_indented_cell_error_has_cell_line_and_caret(tmp_path, monkeypatch):
    text = (
        "from rvm import op\nfrom rvm.script import T, func, module\n\n"
        "if True:\n"
        "    @module\n"
        "    class Bad:\n"
        "        @func\n"
        '        def main(x: T[(2,), "float32"]):\n'
        "            y = op.relux(x)\n"
        "            return y\n"
    )
    with pytest.raises(ScriptError) as info:
        run_cell(text, str(tmp_path / "cell_3.py"), monkeypatch)
    head, line, caret = str(info.value).splitlines()
    assert head.startswith("line 9: unknown op 'relux'")
    assert (line, caret) == ("    y = op.relux(x)", "        ^^^^^^^^")


def test_two_classes_of_one_name_each_compile_their_own_body(tmp_path, monkeypatch):
    path = tmp_path / "two_models.py"
    path.write_text(
        textwrap.dedent(
            """\
            from rvm import op
            from rvm.script import T, func, module

            @module
            class Model:
                @func
                def main(x: T[(4,), "float32"]):
                    return op.relu(x) * 100.0

            first = Model

            @module
            class Model:
                @func
                def main(x: T[(4,), "float32"]):
                    return x + x
            """
        )
    )
    mod = import_file(path, monkeypatch)
    x = np.ones(4, "float32")
    np.testing.assert_allclose(rvm.interpret(mod.first, "main", x), [100.0] * 4)
    np.testing.assert_allclose(rvm.interpret(mod.Model, "main", x), [2.0] * 4)


def test_error_in_the_second_class_of_one_name_has_its_line(tmp_path, monkeypatch):
    text = (
        "from rvm import op\nfrom rvm.script import T, func, module\n\n"
        '@module\nclass Model:\n    @func\n    def main(x: T[(2,), "float32"]):\n'
        "        return op.relu(x)\n\n"
        '@module\nclass Model:\n    @func\n    def main(x: T[(2,), "float32"]):\n'
        "        return op.relux(x)\n"
    )
    (tmp_path / "two_bad.py").write_text(text)
    with pytest.raises(ScriptError) as info:
        import_file(tmp_path / "two_bad.py", monkeypatch)
    head, line, caret = str(info.value).splitlines()
    assert head.startswith("line 14: unknown op 'relux'")
    assert (line, caret) == ("    return op.relux(x)", "           ^^^^^^^^")


EXEC_HOST = '''\
from rvm import op
from rvm.script import T, func, module

@module
class Model:
    @func
    def main(x: T[(4,), "float32"]):
        return op.relu(x) * 100.0

SRC = """
@module
class Model:
    @func
    def main(x: T[(4,), "float32"]):
        return x + x
"""
'''


def test_exec_of_a_string_never_compiles_the_files_class(tmp_path, monkeypatch):
    path = tmp_path / "host.py"
    path.write_text(EXEC_HOST)
    host = import_file(path, monkeypatch)
    ns = dict(vars(host))
    with pytest.raises(ScriptError, match="the source is not available"):
        exec(host.SRC, ns)  # compiled as "<string>": there is no text to read
    filename = str(tmp_path / "exec_cell.py")
    monkeypatch.setitem(
        linecache.cache, filename, (len(host.SRC), None, host.SRC.splitlines(True), filename)
    )
    exec(compile(host.SRC, filename, "exec"), ns)
    x = np.ones(4, "float32")
    np.testing.assert_allclose(rvm.interpret(ns["Model"], "main", x), [2.0] * 4)
    np.testing.assert_allclose(rvm.interpret(host.Model, "main", x), [100.0] * 4)


RAN = """\
from rvm.script import T, func, module

@module
class Model:
    @func
    def main(x: T[(4,), "float32"]):
        return x + x
"""


@pytest.mark.parametrize(
    "shown",
    [
        "\n\n" + RAN,  # lines added above the class since it ran
        RAN.replace("class Model", "class Other"),  # another class where it was
        RAN.replace("def main", "def helper"),
    ],
    ids=["moved", "renamed-class", "renamed-function"],
)
def test_changed_source_is_an_error_not_another_class(tmp_path, monkeypatch, shown):
    filename = str(tmp_path / "changed.py")
    monkeypatch.setitem(
        linecache.cache, filename, (len(shown), None, shown.splitlines(True), filename)
    )
    with pytest.raises(ScriptError, match=r"no class Model there defines main \(line 5\)"):
        exec(compile(RAN, filename, "exec"), {"__name__": "__main__"})


def test_module_without_functions_is_a_clear_error(tmp_path, monkeypatch):
    text = "from rvm.script import module\n\n@module\nclass Empty:\n    pass\n"
    with pytest.raises(ScriptError, match="class Empty defines no functions"):
        run_cell(text, str(tmp_path / "cell_4.py"), monkeypatch)


def test_module_from_spec_before_sys_modules(tmp_path):
    path = tmp_path / "loaded.py"
    path.write_text(CELL)
    spec = importlib.util.spec_from_file_location("rvm_loaded_by_spec", path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    assert "rvm_loaded_by_spec" not in sys.modules
    x = np.array([1.0, 3.0], "float32")
    np.testing.assert_allclose(rvm.interpret(loaded.Model, "main", x), [4.0, 12.0])
    np.testing.assert_allclose(rvm.interpret(loaded.double, "double", x), [2.0, 6.0])


RUN_MODEL = CELL + (
    "\nimport numpy as np\n"
    'x = np.array([1.0, -2.0], "float32")\n'
    'print(rvm.interpret(Model, "main", x).tolist(), rvm.interpret(double, "double", x).tolist())\n'
)


def test_script_under_cprofile(tmp_path):
    (tmp_path / "profiled.py").write_text(RUN_MODEL)
    out = run_python(["-m", "cProfile", "-o", "profile.out", "profiled.py"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[4.0, -6.0] [2.0, -4.0]"


NO_SOURCE = {
    "module": '@module\nclass Model:\n    @func\n    def main(x: T[(2,), "float32"]):\n'
    "        return x\n",
    "func": '@func\ndef main(x: T[(2,), "float32"]):\n    return x\n',
}


@pytest.mark.parametrize("kind", sorted(NO_SOURCE))
def test_python_c_has_no_source_and_says_what_works(tmp_path, kind):
    code = "from rvm.script import T, func, module\n" + NO_SOURCE[kind]
    out = run_python(["-c", code], tmp_path)
    assert out.returncode != 0
    error = out.stderr[out.stderr.index("rvm.errors.ScriptError") :]
    assert "the source is not available" in error
    assert "rvm.script.parse('''" in error and "@module" in error


def test_script_and_ir_work_without_importing_rvm_op(tmp_path):
    (tmp_path / "no_op_import.py").write_text(
        textwrap.dedent(
            """\
            from rvm.script import T, func, module

            @module
            class Model:
                @func
                def main(x: T[(2,), "float32"], y: T[(2,), "float32"]):
                    return x + y

            print("op.add(x, y)" in Model.script())
            """
        )
    )
    out = run_python(["no_op_import.py"], tmp_path)
    assert (out.returncode, out.stdout.strip()) == (0, "True"), out.stderr
    code = (
        "import rvm.ir as ir\n"
        "x = ir.Var('x', ir.TensorType((2,), 'float32'))\n"
        "print(x + x, ir.infer_type(-x) == ir.TensorType((2,), 'float32'))\n"
    )
    out = run_python(["-c", code], tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "op.add(x, x) True"


def test_jupyter_kernel_cell(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    path = os.pathsep.join(p for p in (SRC_DIR, os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)  # the kernel runs this checkout's rvm
    cells = [CELL + "print(rvm.__file__)\n", RUN_MODEL[len(CELL) :]]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,
        startup_timeout=120,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    first, second = (c.outputs[0]["text"].strip() for c in nb.cells)
    assert first == str(Path(SRC_DIR) / "rvm" / "__init__.py")
    assert second == "[4.0, -6.0] [2.0, -4.0]"


ADT_TEXT = """\
import rvm
from rvm.script import T

Vec = T[(2,), "float32"]

@rvm.script.adt
class List:
    Nil: ()
    Cons: (Vec, "List")
"""


@pytest.mark.parametrize("future", [False, True], ids=["values", "future-annotations"])
def test_adt_reads_annotations_and_needs_no_source(future):
    head = "from __future__ import annotations\n" if future else ""
    ns: dict = {}
    exec(compile(head + ADT_TEXT, "<string>", "exec", dont_inherit=True), ns)  # no source text
    nil, cons = ns["List"].constructors
    assert nil.field_types == ()
    assert cons.field_types == (rvm.ir.TensorType((2,), "float32"), rvm.ir.ADTType("List"))


def test_adt_error_names_the_constructor():
    text = "from __future__ import annotations\n" + ADT_TEXT + "\n@rvm.script.adt\nclass Bad:\n"
    text += "    Leaf: (Vec, Missing)\n"  # read from the annotation's text, never evaluated
    with pytest.raises(
        ScriptError, match="data type Bad, constructor Leaf: unknown type 'Missing'"
    ):
        exec(compile(text, "<string>", "exec", dont_inherit=True), {})
