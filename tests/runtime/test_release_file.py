"""An executable saved by an earlier release still loads and runs (`data/release_a1d17c9.rvmx`,
written by `data/make_release_rvmx.py` with rvm at a1d17c9, before the kernel library moved
from ``rvm.runtime.native`` to `rvm.kernels`: its jit kernels import the old paths)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import rvm
from rvm.runtime.serialize import decode

RELEASE = pathlib.Path(__file__).with_name("data") / "release_a1d17c9.rvmx"


@pytest.fixture(autouse=True)
def _cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path / "rvm"))


def _inputs(n: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 16)).astype("float32")
    w = rng.standard_normal((16, 8)).astype("float32") * 0.3
    return x, w


def _expected(x: np.ndarray, w: np.ndarray, t: np.ndarray) -> np.ndarray:
    p = x @ w
    y = np.tanh(p) + np.exp(-np.abs(p))
    c = y.sum(dtype=np.float32)
    return y * c if c > t else y - c


def test_the_file_is_from_the_old_layout() -> None:
    ex = rvm.load_executable(str(RELEASE), trusted=True)
    sources = "".join(r.source for r in ex.kernels.values())
    assert "rvm.runtime.native.blas" in sources and "rvm.runtime.native.mathlib" in sources
    assert ex.default_exec_mode == "native"
    # its native section names the library's modules by their old paths (still valid names)
    native = decode(RELEASE.read_bytes())["native"]
    modules = {g.ident for g in native.groups if g.kind == "module"}
    assert "rvm.runtime.native.mathlib" in modules
    assert {g.kind for g in native.groups} == {"kernel", "module", "native"}


def test_an_old_files_kernels_get_their_facts_and_new_files_carry_them() -> None:
    """A file before format 1.5 has no FACT section: its jit kernels' facts (the modules they
    import, the entry points they require, the compile cost) are recovered once at load. A
    file saved now carries the facts the generator set, and reads them back as they were."""
    ex = rvm.load_executable(str(RELEASE))
    jit = [r for r in ex.kernels.values() if r.backend == "jit"]
    imports = {m for r in jit for m in r.imports}
    assert {"rvm.runtime.native.blas", "rvm.runtime.native.mathlib"} <= imports
    assert all(r.cost > 10 and r.requires == () for r in jit)
    again = rvm.Executable.from_bytes(ex.to_bytes(native=False))
    assert [(r.requires, r.imports, r.cost) for r in again.kernels.values()] == [
        (r.requires, r.imports, r.cost) for r in ex.kernels.values()
    ]
    assert int.from_bytes(RELEASE.read_bytes()[6:8], "little") == 4  # saved as format 1.4


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """One cache for the exec modes of `test_a_release_file_runs`: the first mode's load builds
    the file's kernels, the others load them (4 CPU-s each saved)."""
    return tmp_path_factory.mktemp("release") / "rvm"


def test_a_release_file_runs(
    exec_mode: str, shared_cache: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RVM_CACHE_DIR", str(shared_cache))
    ex = rvm.load_executable(str(RELEASE), trusted=True).with_exec_mode(exec_mode)
    vm = rvm.VirtualMachine(ex)
    for n in (1, 5):  # one load for both sizes: a load of this file builds its kernels
        x, w = _inputs(n)
        for t in (np.float32(-1e9), np.float32(1e9)):  # both branches
            out = vm["main"](x, w, t)
            np.testing.assert_allclose(out, _expected(x, w, t), rtol=1e-4, atol=1e-4)


def test_a_release_file_runs_without_the_compiler(tmp_path: pathlib.Path) -> None:
    script = (
        "import sys, numpy as np, rvm\n"
        f"ex = rvm.load_executable({str(RELEASE)!r}, trusted=True)\n"
        "x = np.ones((3, 16), np.float32); w = np.full((16, 8), 0.1, np.float32)\n"
        "out = rvm.VirtualMachine(ex)['main'](x, w, np.float32(0))\n"
        "print(out.shape, float(out[0, 0]))\n"
        "bad = [m for m in sys.modules if m.startswith(('rvm.jit.', 'rvm.codegen'))]\n"
        "print(sorted(bad))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    shape, bad = done.stdout.splitlines()[-2:]
    x = np.ones((3, 16), np.float32)
    want = _expected(x, np.full((16, 8), 0.1, np.float32), np.float32(0))
    assert shape.startswith("(3, 8)") and np.isclose(float(shape.split()[-1]), want[0, 0])
    assert bad == "[]"


BF16 = RELEASE.with_name("release_62992ee5_bf16.rvmx")


def test_an_earlier_bf16_file_runs(exec_mode: str) -> None:
    """A bf16 executable saved at 62992ee5 (`data/make_release_bf16_rvmx.py`), whose kernels,
    rebuilt from their source, call the bf16 convolution's entry point with the 20 parameters
    it took then: the entry takes 26 now, the later ones 0 for their old meaning."""
    ex = rvm.load_executable(str(BF16), trusted=True)  # signed by the key that saved it
    assert ex.precision == "bf16"
    assert "conv2d_bf16_call" in "".join(r.source for r in ex.kernels.values())
    saved = np.load(BF16.with_suffix(".npz"))
    got = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](saved["x"])
    # the same products; a CPU without AMX sums them in another order
    np.testing.assert_allclose(got, saved["y"], rtol=1e-4, atol=1e-4 * np.abs(saved["y"]).max())
