"""Writes ``release_62992ee5_bf16.rvmx`` and ``release_62992ee5_bf16.npz``: a bf16 executable
saved by rvm at commit 62992ee5 (session 75), without its native section, and an input with
the output that rvm computed for it. Its jit kernels call the bf16 convolution's entry point
with the 20 parameters it took then (26 since session 76), so the file proves that kernels of
an earlier library, rebuilt from their source, still call it right.

Run with the OLD tree on the path, never the current one::

    git worktree add /tmp/rvm-old 62992ee5
    RVM_CACHE_DIR=$(mktemp -d) PYTHONPATH=/tmp/rvm-old/src python make_release_bf16_rvmx.py
"""

from __future__ import annotations

import pathlib

import numpy as np

import rvm
from rvm import op
from rvm.ir import Builder, Var, const, tensor


def main() -> None:
    rng = np.random.default_rng(0)
    img = Var("img", tensor((1, 32, 12, 12), "float32"))
    bb = Builder()
    with bb.function("main", [img]):
        w1 = const(rng.standard_normal((64, 32, 1, 1)).astype("float32") / 6)
        a = bb.emit(op.relu(bb.emit(op.conv2d(img, w1))))
        w2 = const(rng.standard_normal((32, 64, 3, 3)).astype("float32") / 20)
        bb.emit_output(bb.emit(op.conv2d(a, w2, padding=1)))
    ex = rvm.compile(bb.get(), precision="bf16")
    x = rng.standard_normal((1, 32, 12, 12)).astype("float32")
    y = rvm.VirtualMachine(ex)["main"](x)
    here = pathlib.Path(__file__).parent
    (here / "release_62992ee5_bf16.rvmx").write_bytes(ex.to_bytes(native=False))
    np.savez(here / "release_62992ee5_bf16.npz", x=x, y=y)
    print(rvm.__file__)


if __name__ == "__main__":
    main()
