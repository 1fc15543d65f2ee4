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
    ex = rvm.compile(MLP, kernels=kernels)
    rvm.VirtualMachine(ex)  # builds (and caches) the kernels in this process
    ex.save(str(path))
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
        leaked = [m for m in ("rvm.ir", "rvm.transform", "rvm.codegen", "rvm.script", "rvm.op")
                  if m in sys.modules]
        assert not leaked, leaked
        print("compiles:", compiled)
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert "compiles: []" in run.stdout, run.stdout
