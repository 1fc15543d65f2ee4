"""The first run builds only the library code it needs: pool tasks when a loop first splits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import rvm
    from rvm import op
    from rvm.kernels import parfor
    from rvm.script import T, func, module

    @module
    class M:
        @func
        def main(x: T[("n", "k"), "float32"], w: T[("k", "m"), "float32"]):
            return op.matmul(x, w)

    import rvm.kernels.blas  # the GEMM's tasks are exported, none built
    seen = {"import": parfor.required_tasks()}
    vm = rvm.VirtualMachine(rvm.compile(M))
    rng = np.random.default_rng(0)
    for n in map(int, sys.argv[1:]):
        x = rng.standard_normal((n, n)).astype("float32")
        w = rng.standard_normal((n, n)).astype("float32")
        np.testing.assert_allclose(vm["main"](x, w), x @ w, rtol=1e-3, atol=1e-3)
        seen[str(n)] = parfor.required_tasks()
    print(json.dumps(seen))
    """
)


def _child(caches: Path, *sizes: int) -> dict:
    script = caches.parent / "child.py"  # a file: rvm script reads its classes' source
    script.write_text(CHILD)
    env = dict(os.environ)
    env["RVM_CACHE_DIR"] = str(caches / "rvm")
    env["NUMBA_CACHE_DIR"] = str(caches / "numba")
    env["RVM_NUM_THREADS"] = "2"  # a large product splits even on one CPU
    run = subprocess.run(
        [sys.executable, str(script), *map(str, sizes)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process model")
def test_a_pool_task_is_built_when_a_loop_first_splits(tmp_path: Path) -> None:
    """Importing the GEMM builds no task and a product of two rows (a row loop, no GEMM) runs
    without one; a GEMM builds its dtype's task at its first run (the product's code, split
    on the pool or not), in a process that compiled the kernel and in one that loaded it from
    the cache (whose object code links without the task)."""
    gemm = [["gemm", "float32"]]
    caches = tmp_path / "caches"
    first = _child(caches, 2, 512)
    assert first == {"import": [], "2": [], "512": gemm}
    again = _child(caches, 512)  # the kernel cached, the task too: loaded at the first split
    assert again == {"import": [], "512": gemm}
    other = tmp_path / "kernel-only" / "caches"
    other.parent.mkdir()
    _child(other, 2)  # caches the kernel, not the task
    assert _child(other, 512) == {"import": [], "512": gemm}  # the task built at its first run
