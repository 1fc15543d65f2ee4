"""Native functions calling jit kernels by symbol (`rvm.runtime.modes.native_symbols`): the
kernels native code does not inline give the compiled mode's results in every exec mode, their
errors read as there, a second process loads the native code with the symbols (compiling
nothing), and an address comes only from a kernel a native file bound."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm.errors import VMError
from rvm.runtime import VirtualMachine
from rvm.runtime.modes import native_codegen, native_symbols
from rvm.testing.programs import MLP

MODES = ("bytecode", "compiled", "native")

# Two functions, a loop and a call between native functions: kernels of several sizes.
PROGRAM = rvm.script.parse(
    textwrap.dedent(
        """
        @module
        class Cells:
            @func
            def cell(h: T[(1, 8), "float32"], w: T[(8, 8), "float32"]):
                return op.tanh(op.matmul(h, w)) + op.sigmoid(h) * 0.5

            @func
            def main(h: T[(1, 8), "float32"], w: T[(8, 8), "float32"], steps: T[(), "int64"]):
                i = rvm.const(0, "int64")
                while i < steps:
                    h = cell(h, w)
                    i = i + 1
                return op.exp(h) - 1.0
        """
    )
)


def _args() -> tuple:
    rng = np.random.default_rng(3)
    h = rng.standard_normal((1, 8)).astype("float32")
    w = (rng.standard_normal((8, 8)) * 0.3).astype("float32")
    return h, w, np.array(5, "int64")


@pytest.fixture(params=["by_symbol", "inlined"])
def calls(request, monkeypatch) -> str:
    """Every kernel called by symbol, or every kernel inlined (the cost threshold moved)."""
    monkeypatch.setattr(
        native_codegen, "INLINE_COST", -1 if request.param == "by_symbol" else 10**9
    )
    return request.param


@pytest.mark.parametrize("mode", MODES)
def test_kernels_called_by_symbol_give_the_compiled_modes_results(mode: str, calls: str) -> None:
    ex = rvm.compile(PROGRAM)
    want = VirtualMachine(ex, exec_mode="compiled")["main"](*_args())
    vm = VirtualMachine(ex, exec_mode=mode)
    got = vm["main"](*_args())
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got, rvm.interpret(PROGRAM, "main", *_args()), rtol=1e-5)
    if mode == "native":
        report = vm.native_report()
        assert report.fallbacks == {}
        text = Path(report.path).read_text()
        assert ("= _by_symbol(k" in text) == (calls == "by_symbol")


def test_a_kernels_error_called_by_symbol_reads_as_in_the_compiled_mode(calls: str) -> None:
    # The native run meets the kernel's own shape check (the VM's entry checks skipped): its
    # exception crosses the call by symbol, and the compiled mode reruns it and reports it.
    from rvm.runtime.modes.compiled import CompiledMode
    from rvm.runtime.modes.native import NativeMode

    ex = rvm.compile(MLP)
    rng = np.random.default_rng(0)
    shapes = [(2, 700), (784, 128), (128,), (128, 10), (10,)]
    bad = [rng.standard_normal(s).astype("float32") for s in shapes]
    messages = set()
    for mode in ("compiled", "native"):
        vm = VirtualMachine(ex, exec_mode=mode)
        run = (NativeMode if mode == "native" else CompiledMode)(vm.context).run
        with pytest.raises(VMError) as info:
            run(0, bad)
        messages.add(str(info.value))
    assert len(messages) == 1


_CHILD = """
import sys
import numpy as np, rvm
from rvm.runtime.modes import native_codegen
native_codegen.INLINE_COST = -1  # every kernel by symbol
sys.path.insert(0, {tests!r})
from test_native_symbols import PROGRAM, _args
ex = rvm.compile(PROGRAM)
vm = rvm.VirtualMachine(ex, exec_mode="native")
got = vm["main"](*_args())
want = rvm.VirtualMachine(ex, exec_mode="compiled")["main"](*_args())
np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
report = vm.native_report(compile=True)
assert report.fallbacks == {{}}, report.fallbacks
print(report.path, report.compiled, report.loaded)
"""


def test_a_second_process_loads_code_calling_by_symbol_and_compiles_nothing(tmp_path) -> None:
    env = dict(os.environ, RVM_CACHE_DIR=str(tmp_path / "rvm"))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(rvm.__file__).parents[1]), *sys.path])
    env["RVM_JIT_ISOLATE"] = "0"  # the first process compiles itself (a helper's would load)
    code = _CHILD.format(tests=str(Path(__file__).parent))
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        runs.append(out.stdout.split())
    (path1, compiled1, _), (path2, compiled2, loaded2) = runs
    assert path1 == path2 and "= _by_symbol(k" in Path(path1).read_text()
    assert int(compiled1) >= 1
    assert int(compiled2) == 0 and int(loaded2) >= 1


def test_a_symbol_comes_only_from_a_kernel_a_native_file_bound() -> None:
    with pytest.raises(RuntimeError, match="no native file of this process bound it"):
        native_symbols.reload_symbol("rvm_jit_k_000000000000000000000000", "nothing", ())


def test_symbol_names_are_the_same_in_every_process() -> None:
    from numba import types as nt

    args = (nt.Array(nt.float32, 2, "C"), nt.Array(nt.float32, 2, "C", readonly=True))
    name = native_symbols.symbol_name(("rvm_jit_k_0123", "fused_add"), args)
    assert name == native_symbols.symbol_name(("rvm_jit_k_0123", "fused_add"), tuple(args))
    assert name != native_symbols.symbol_name(("rvm_jit_k_0123", "fused_add"), args[::-1])
    assert name.startswith("rvm_kernel_rvm_jit_k_0123.fused_add.")
