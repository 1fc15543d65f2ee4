"""Deployment: a saved executable loads and runs in a fresh process without the compiler, and
its jit kernels come from the on-disk cache (nothing recompiles)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

import rvm
from rvm.testing.programs import MLP, PROGRAMS


def test_fresh_process_runs_saved_executable_without_compiler(tmp_path, kernels):
    path = tmp_path / "mlp.rvmx"
    ex = rvm.compile(MLP, kernels=kernels)  # builds the kernels (the disk cache has them)
    ex.save(str(path))  # saved before any VM ran
    args = PROGRAMS[0].args()
    np.savez(tmp_path / "args.npz", *args)
    expected = rvm.VirtualMachine(ex)["main"](*args)
    np.save(tmp_path / "expected.npy", expected)
    script = textwrap.dedent(
        f"""
        import logging, sys
        import numpy as np
        import rvm
        compiled = []
        class Spy(logging.Handler):
            def emit(self, record):
                if "compil" in record.getMessage().lower() and "hit" not in record.getMessage():
                    compiled.append(record.getMessage())
        logging.getLogger("rvm.jit").addHandler(Spy())
        logging.getLogger("rvm.jit").setLevel(logging.DEBUG)
        ex = rvm.load_executable({str(path)!r})
        data = np.load({str(tmp_path / "args.npz")!r})
        args = [data[f"arr_{{i}}"] for i in range(len(data.files))]
        out = rvm.VirtualMachine(ex)["main"](*args)
        np.testing.assert_allclose(out, np.load({str(tmp_path / "expected.npy")!r}), rtol=1e-6)
        for mode in ("bytecode", "compiled"):
            out = rvm.VirtualMachine(ex, exec_mode=mode)["main"](*args)
            np.testing.assert_allclose(out, np.load({str(tmp_path / "expected.npy")!r}), rtol=1e-6)
        compiler = ("rvm.ir", "rvm.op", "rvm.script", "rvm.transform", "rvm.codegen", "rvm.jit",
                    "rvm.frontend", "rvm.interp")
        leaked = sorted(m for m in sys.modules if m.startswith(compiler))
        assert not leaked, leaked
        print("compiles:", compiled)
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert "compiles: []" in run.stdout, run.stdout


def test_compile_builds_kernels_with_a_progress_bar_or_defers_them(capsys, monkeypatch):
    from rvm.runtime import kernels as runtime_kernels

    loads: list[str] = []
    real = runtime_kernels._load_numpy_kernel

    def spy(ex, rec):
        loads.append(rec.name)
        return real(ex, rec)

    monkeypatch.setattr(runtime_kernels, "_load_numpy_kernel", spy)
    ex = rvm.compile(MLP, kernels="numpy", progress=True)
    err = capsys.readouterr().err
    assert "compiling kernels [" in err and f"{len(ex.kernels)}/{len(ex.kernels)} done" in err
    assert sorted(loads) == sorted(ex.kernels)  # built by compile ...
    rvm.VirtualMachine(ex)
    assert len(loads) == len(ex.kernels)  # ... so the VM builds nothing
    lazy = rvm.compile(MLP, kernels="numpy", build_kernels=False)
    assert len(loads) == len(ex.kernels) and capsys.readouterr().err == ""
    rvm.VirtualMachine(lazy)
    assert len(loads) == 2 * len(ex.kernels)
