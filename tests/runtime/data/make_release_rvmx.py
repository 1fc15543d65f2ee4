"""Writes ``release_a1d17c9.rvmx``: an executable saved by rvm at commit a1d17c9 (before the
runtime's layout moved to `rvm.kernels`, `rvm.runtime.modes` and `rvm.runtime.loading`).

Run with the OLD tree on the path, never the current one (the file proves that executables
saved by that release still load and run)::

    git worktree add /tmp/rvm-old a1d17c9
    RVM_CACHE_DIR=$(mktemp -d) PYTHONPATH=/tmp/rvm-old/src python make_release_rvmx.py

The program has jit kernels that import the kernel library by its old paths (a matmul
through ``rvm.runtime.native.blas``, ``tanh``/``exp`` through ``rvm.runtime.native.mathlib``),
control flow, and runs in the native exec mode by default, so the file carries a native section too.
"""

from __future__ import annotations

import pathlib

import rvm
from rvm import op
from rvm.script import T, func, module


@module
class Release:
    @func
    def main(
        x: T[("n", 16), "float32"],
        w: T[(16, 8), "float32"],
        t: T[(), "float32"],
    ):
        y = op.tanh(op.matmul(x, w)) + op.exp(op.negative(op.abs(op.matmul(x, w))))
        c = op.sum(y)
        if op.greater(c, t):
            z = y * c
        else:
            z = y - c
        return z


def main() -> None:
    ex = rvm.compile(Release, exec_mode="native")
    out = pathlib.Path(__file__).with_name("release_a1d17c9.rvmx")
    ex.save(str(out))
    print(rvm.__file__, out, out.stat().st_size)


if __name__ == "__main__":
    main()
