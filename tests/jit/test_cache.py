"""The disk cache across processes, corrupt entries, introspection and the progress bar."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import rvm.jit as jit
from rvm import progress

SRC = str(Path(__file__).resolve().parents[2] / "src")

SCRIPT = """
import sys
sys.path.insert(0, {src!r})
from rvm import op
from rvm.ir import Call, Function, TensorType, Var, VarBinding, infer_type, seq
from rvm.jit import jit_kernel, load_kernel
import numpy as np
x = Var("x", TensorType(("n",), "float32"))
call = op.tanh(x)
t = Var("t", infer_type(call))
f = Function((x,), seq([VarBinding(t, call)], t), attrs={{"primitive": True}})
k = load_kernel(jit_kernel("fused_tanh_cache_test", f, "return"))
assert np.allclose(k(np.ones(3, np.float32)), np.tanh(1.0))
print(sum(k.stats.cache_hits.values()), sum(k.stats.cache_misses.values()))
"""


def _run(cache: Path) -> tuple[int, int]:
    # what it compiles, it compiles itself: Numba counts it a miss, not a load of a helper's code
    env = {**os.environ, "RVM_CACHE_DIR": str(cache), "RVM_JIT_ISOLATE": "0"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(src=SRC)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


def test_second_process_hits(tmp_path: Path) -> None:
    assert _run(tmp_path) == (0, 1)
    assert _run(tmp_path) == (1, 0)
    entries = list((tmp_path / "kernels").glob("k_*.py"))
    assert len(entries) == 1
    entries[0].write_text("garbage (")  # a corrupt entry is a miss, then rewritten
    assert _run(tmp_path) == (0, 1)
    assert _run(tmp_path) == (1, 0)


def test_cache_info_clear_and_introspection(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    tty = io.StringIO()
    tty.isatty = lambda: True  # a terminal, and the bar drawn at once (no 0.5 s delay)
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    from jit_helpers import prim, var

    from rvm import op

    x = var("x", ("n",))
    rec = jit.jit_kernel("fused_relu_info", prim([x], op.relu(x)), "dps")
    loaded = jit.compile_kernels([rec], progress=True)
    assert "fused_relu_info" in loaded
    assert "compiling kernels" in tty.getvalue()
    info = jit.cache_info()
    assert info["dir"] == str(tmp_path) and info["entries"] == 1 and info["bytes"] > 0
    assert "def fused_relu_info" in jit.kernel_source(rec)
    assert "define" in jit.kernel_llvm(rec)
    assert jit.kernel_asm(rec).strip()
    from numba.core import config

    # Not this checkout's library code, which the suite's other processes load (clearing it
    # made them build the library again); test_trust clears a library cache of its own.
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba"))
    jit.clear_cache()
    assert jit.cache_info()["entries"] == 0


INSPECT = """
import sys
sys.path.insert(0, {src!r})
import warnings
import rvm
ex = rvm.compile(rvm.script.parse('''
from rvm import op
from rvm.script import T, module, func

@module
class M:
    @func
    def main(x: T[("n", 8), "float32"]):
        return op.tanh(x) * 2.0
'''), kernels="jit")
rvm.VirtualMachine(ex)  # loads the kernel: compiled, or from the cache
name = sorted(ex.kernels)[0]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    llvm, asm = ex.kernel_llvm(name), ex.kernel_asm(name)
assert not caught, [str(w.message) for w in caught]  # Numba's "Inspection disabled for cached code"
assert "define" in llvm and name in llvm, llvm
print(len(llvm.splitlines()), len(asm.splitlines()))
"""


def test_inspection_of_a_kernel_loaded_from_a_warm_cache(tmp_path: Path) -> None:
    # Numba's own cache holds no IR for what it loads: it warned and gave 4 lines
    env = {**os.environ, "RVM_CACHE_DIR": str(tmp_path), "NUMBA_CACHE_DIR": str(tmp_path / "nb")}
    runs = [
        subprocess.run(
            [sys.executable, "-c", INSPECT.format(src=SRC)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        for _ in range(2)
    ]
    cold, warm = [(int(r[0]), int(r[1])) for r in runs]
    assert warm[0] > 100 and warm[1] > 20  # the whole IR, not Numba's stub of 4 lines
    assert abs(warm[0] - cold[0]) < cold[0] // 10


def test_cache_dir_default(monkeypatch) -> None:
    monkeypatch.delenv("RVM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/tmp/xdg-test")
    assert jit.cache_dir() == Path("/tmp/xdg-test/rvm")


def test_the_key_covers_every_module_the_kernels_import(monkeypatch) -> None:
    """Editing mathlib.py or blas.py (or anything they import from rvm) changes the key of
    the kernels that import them (the modules each kernel's record says it imports)."""
    from jit_helpers import prim, var

    from rvm import op
    from rvm.kernels import blas
    from rvm.runtime.loading import cache

    x = var("x", ("n",))
    tanh = jit.jit_kernel("fused_tanh_key", prim([x], op.tanh(x)), "return")
    img, k = var("img", ("b", 16, 5, 5)), var("k", (4, 16, 3, 3))
    conv = jit.jit_kernel("fused_conv_key", prim([img, k], op.conv2d(img, k)), "return")
    assert "rvm.kernels.mathlib" in tanh.imports  # set by the generator, not read off source
    assert "rvm.kernels.mathlib" in cache.imported_modules(tanh.imports)
    if blas.AVAILABLE:
        assert {"rvm.kernels.blas", "rvm.kernels.mathlib"} <= set(
            cache.imported_modules(conv.imports)
        )
    both = cache.imported_modules(("rvm.kernels.blas", "rvm.runtime.native.mathlib"))
    native = {"rvm.kernels.blas", "rvm.kernels.mathlib", "rvm.runtime.native.mathlib"}
    assert native <= set(both)

    def key(rec):
        return cache.source_hash(rec.source, rec.imports)

    before = {rec.name: key(rec) for rec in (tanh, conv)}
    real = cache.module_source
    for edited in cache.imported_modules(conv.imports):
        monkeypatch.setattr(
            cache, "module_source", lambda m, e=edited: real(m) + ("\n# edited" if m == e else "")
        )
        assert key(conv) != before[conv.name], edited
        if edited in cache.imported_modules(tanh.imports):
            assert key(tanh) != before[tanh.name], edited
        else:  # a kernel is not recompiled for a module it does not import
            assert key(tanh) == before[tanh.name], edited
    monkeypatch.setattr(cache, "module_source", real)
    assert {rec.name: key(rec) for rec in (tanh, conv)} == before


def test_a_numpy_kernels_key_covers_every_reference_module(monkeypatch) -> None:
    """A numpy kernel imports `rvm.kernels.reference`, which star-imports one module per
    category: editing the one defining its op (`qconv2d` gaining ``weight_layout=``) changes
    its key, so a kernel written by other code is never loaded (it called the old function)."""
    from jit_helpers import prim, var

    from rvm import op
    from rvm.jit.numpy_kernel import numpy_kernel
    from rvm.runtime.loading import cache

    x = var("x", ("n",))
    rec = numpy_kernel("fused_tanh_numpy_key", prim([x], op.tanh(x)), "return")
    modules = cache.imported_modules(rec.imports)
    assert {"rvm.kernels.reference.elemwise", "rvm.kernels.reference.quantized"} <= set(modules)
    before = cache.source_hash(rec.source, rec.imports)
    real = cache.module_source
    for edited in ("rvm.kernels.reference.quantized", "rvm.kernels.reference.elemwise"):
        monkeypatch.setattr(
            cache, "module_source", lambda m, e=edited: real(m) + ("\n# edited" if m == e else "")
        )
        assert cache.source_hash(rec.source, rec.imports) != before, edited


def test_a_library_module_imported_in_parentheses_counts() -> None:
    """A library module's ``from rvm.kernels.x import (a, b)`` over several lines counts
    ``rvm.kernels.x`` as imported (`rvm.runtime.loading.cache.imported_modules`), and so does a
    module named in the parentheses: an edit of it changes the key of every kernel that reaches
    it (``avgrows`` imports ``maxrows`` only that way: its kernels' keys missed it before)."""
    from rvm.runtime.loading import cache

    source = cache.module_source("rvm.kernels.qgemm")
    assert "from rvm.kernels.qtile import (\n" in source
    assert "from rvm.kernels.qsplit import (  # noqa" in source
    found = set(cache.imported_modules(("rvm.kernels.qgemm",)))
    assert {"rvm.kernels.qtile", "rvm.kernels.qsplit"} <= found
    found = set(cache.imported_modules(("rvm.kernels.avgrows",)))
    assert "rvm.kernels.maxrows" in found
