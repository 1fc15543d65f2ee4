"""Writes ``release_1443fe2_numpy.rvmx``: an executable of numpy kernels saved by rvm at commit
1443fe2, before the NumPy reference kernels moved from ``rvm.op.numpy_ref`` to
`rvm.kernels.reference`: the file embeds the old module's source as its library ``ref``, and
its kernels call it by the old names (``ref._conv``, ``ref._max_pool``, ``ref._contiguous``).

Run with the OLD tree on the path, never the current one (the file proves that executables
saved by that release still load and run)::

    git worktree add /tmp/rvm-old 1443fe2
    RVM_CACHE_DIR=$(mktemp -d) PYTHONPATH=/tmp/rvm-old/src python make_release_numpy_rvmx.py
"""

from __future__ import annotations

import pathlib

import rvm
from rvm import op
from rvm.script import T, func, module


@module
class ReleaseNumpy:
    @func
    def main(
        x: T[("n", 2, 8, 8), "float32"],
        w: T[(4, 2, 3, 3), "float32"],
        t: T[(), "float32"],
    ):
        h = op.relu(op.conv2d(x, w, padding=(1, 1, 1, 1)))
        p = op.max_pool2d(h, pool_size=(2, 2), strides=(2, 2))
        s = op.softmax(op.reshape(p, ("n", 64)), axis=-1)
        c = op.sum(s)
        if op.greater(c, t):
            z = s * c
        else:
            z = s - c
        return z


def main() -> None:
    ex = rvm.compile(ReleaseNumpy, kernels="numpy")
    out = pathlib.Path(__file__).with_name("release_1443fe2_numpy.rvmx")
    ex.save(str(out))
    print(rvm.__file__, out, out.stat().st_size)


if __name__ == "__main__":
    main()
