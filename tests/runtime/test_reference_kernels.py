"""Numpy kernels import the NumPy reference kernels by name (`rvm.kernels.reference`), the way
jit kernels import the kernel library: a saved executable names the package and embeds none of
its source. A file saved before (``data/release_1443fe2_numpy.rvmx``, written by
``data/make_release_numpy_rvmx.py`` with rvm at 1443fe2) embeds the old ``rvm.op.numpy_ref``
source as its library ``ref``, and its kernels call names the package no longer has
(``ref._conv``): it still loads and runs, and only when trusted."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.script import T, func, module

RELEASE = pathlib.Path(__file__).with_name("data") / "release_1443fe2_numpy.rvmx"


@module
class Prog:
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


def _inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 2, 8, 8)).astype("float32")
    w = rng.standard_normal((4, 2, 3, 3)).astype("float32") * 0.3
    return x, w


def _expected(x: np.ndarray, w: np.ndarray, t: np.float32) -> np.ndarray:
    """The program in NumPy alone (no rvm code)."""
    n = x.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    h = np.zeros((n, 4, 8, 8), np.float32)
    for i in range(3):
        for j in range(3):
            h += np.einsum("nchw,oc->nohw", xp[:, :, i : i + 8, j : j + 8], w[:, :, i, j])
    h = np.maximum(h, 0)
    p = h.reshape(n, 4, 4, 2, 4, 2).max(axis=(3, 5)).reshape(n, 64)
    e = np.exp(p - p.max(axis=-1, keepdims=True))
    s = e / e.sum(axis=-1, keepdims=True)
    c = s.sum(dtype=np.float32)
    return s * c if c > t else s - c


@pytest.fixture(autouse=True)
def _cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path / "rvm"))
    monkeypatch.setenv("RVM_CONFIG_DIR", str(tmp_path / "config"))  # a fresh local key


def test_new_numpy_kernels_name_the_reference_package() -> None:
    ex = rvm.compile(Prog, kernels="numpy")
    assert dict(ex.libraries) == {}
    records = list(ex.kernels.values())
    assert records and all(r.imports == ("rvm.kernels.reference",) for r in records)
    again = rvm.Executable.from_bytes(ex.to_bytes())
    assert dict(again.libraries) == {}
    assert [r.imports for r in again.kernels.values()] == [r.imports for r in records]
    assert len(ex.to_bytes()) < 20_000  # the old file carried ~35 kB of library source


@pytest.mark.parametrize("n", [1, 3])
def test_a_new_numpy_file_runs(tmp_path: pathlib.Path, exec_mode: str, n: int) -> None:
    path = tmp_path / "prog.rvmx"
    rvm.compile(Prog, kernels="numpy").save(str(path))
    ex = rvm.load_executable(str(path), trusted=True).with_exec_mode(exec_mode)
    vm = rvm.VirtualMachine(ex)
    x, w = _inputs(n)
    for t in (np.float32(-1e9), np.float32(1e9)):  # both branches
        np.testing.assert_allclose(vm["main"](x, w, t), _expected(x, w, t), rtol=1e-4, atol=1e-5)


def test_the_old_file_embeds_the_old_library() -> None:
    ex = rvm.load_executable(str(RELEASE), trusted=True)
    assert list(ex.libraries) == ["ref"] and "def _conv(" in ex.libraries["ref"]
    sources = "".join(r.source for r in ex.kernels.values())
    assert "ref._conv(" in sources and "import" not in sources


@pytest.mark.parametrize("n", [1, 3])
def test_an_old_numpy_file_runs(exec_mode: str, n: int) -> None:
    ex = rvm.load_executable(str(RELEASE), trusted=True).with_exec_mode(exec_mode)
    vm = rvm.VirtualMachine(ex)
    x, w = _inputs(n)
    for t in (np.float32(-1e9), np.float32(1e9)):
        np.testing.assert_allclose(vm["main"](x, w, t), _expected(x, w, t), rtol=1e-4, atol=1e-5)


def test_an_untrusted_old_file_runs_none_of_its_library(monkeypatch) -> None:
    ran = []
    monkeypatch.setattr("rvm.runtime.kernels._exec_source", lambda *a: ran.append(a))
    ex = rvm.load_executable(str(RELEASE))
    assert not ex.trusted
    with pytest.raises(rvm.UntrustedExecutableError, match="rvm does not trust"):
        rvm.VirtualMachine(ex)["main"](*_inputs(1), np.float32(0))
    assert ran == []


@pytest.mark.parametrize("path", ["new", "old"])
def test_numpy_files_run_without_the_compiler(tmp_path: pathlib.Path, path: str) -> None:
    target = RELEASE
    if path == "new":
        target = tmp_path / "prog.rvmx"
        rvm.compile(Prog, kernels="numpy").save(str(target))
    script = (
        "import sys, numpy as np, rvm\n"
        f"ex = rvm.load_executable({str(target)!r}, trusted=True)\n"
        "x = np.ones((2, 2, 8, 8), np.float32); w = np.full((4, 2, 3, 3), 0.1, np.float32)\n"
        "out = rvm.VirtualMachine(ex)['main'](x, w, np.float32(0))\n"
        "print(out.shape, repr(float(out[0, 0])))\n"
        "bad = [m for m in sys.modules if m.startswith(('rvm.jit', 'rvm.codegen', 'rvm.op'))]\n"
        "print(sorted(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shape, bad = done.stdout.splitlines()[-2:]
    x, w = np.ones((2, 2, 8, 8), np.float32), np.full((4, 2, 3, 3), 0.1, np.float32)
    want = _expected(x, w, np.float32(0))
    assert shape.startswith("(2, 64)") and np.isclose(float(shape.split()[-1]), want[0, 0])
    assert bad == "[]"
