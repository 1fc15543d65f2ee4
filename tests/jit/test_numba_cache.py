"""Cached kernels load without Numba's compiler (`rvm.kernels.numba_cache`): a warm start
compiles nothing and imports none of Numba's lowering registries; a light load that fails falls
back to Numba's own; a corrupt object-code file is recompiled with a log line, not a crash."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from jit_helpers import numpy_run, prim, rand, var

from rvm import op
from rvm.jit import jit_kernel, load_kernel
from rvm.kernels import numba_cache
from rvm.kernels.numba_cache import object_code_dir
from rvm.runtime.loading import loader
from rvm.runtime.loading.cache import kernel_path

SRC = str(Path(__file__).resolve().parents[2] / "src")

# A model with a convolution (a library entry point), tanh (mathlib) and a softmax. The
# convolution is 1x1 (the pointwise method: its two library tasks build in about a third of
# the CPU of a 3x3's im2col and GEMM tasks where the suite's library cache lacks them).
SCRIPT = """
import json, sys
sys.path.insert(0, {src!r})
import numpy as np
import rvm
from rvm import op
from rvm.script import T, module, func

@module
class M:
    @func
    def main(x: T[(1, 3, 9, 9), "float32"], w: T[(4, 3, 1, 1), "float32"]):
        y = op.tanh(op.conv2d(x, w))
        return op.softmax(op.reshape(y, (1, 324)), axis=1)

ex = rvm.compile(M)
x = np.linspace(-1, 1, 243, dtype=np.float32).reshape(1, 3, 9, 9)
w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3, 1, 1)
out = np.asarray(rvm.VirtualMachine(ex)["main"](x, w))
from rvm.kernels import numba_cache
from rvm.runtime.loading import loader
print(json.dumps({{
    "kernels": loader.kernel_counts(),
    "loads": numba_cache.counts(),
    "registries": "numba.np.arraymath" in sys.modules,
    "sum": float(out.sum()),
}}))
"""


def _start(tmp_path: Path) -> dict:
    script = tmp_path / "model.py"
    script.write_text(SCRIPT.format(src=SRC))
    env = {
        **os.environ,
        "RVM_CACHE_DIR": str(tmp_path / "cache"),
        "RVM_JIT_WORKERS": "0",
    }
    # The library's cache (Numba's) is the suite's: a cold library is not what this test is
    # about (its own one took ~20 CPU-s a run), and what another pytest-xdist worker adds to
    # it meanwhile is written whole (`numba_cache`), so the warm start loads all it needs.
    out = subprocess.run(
        [sys.executable, str(script)], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_warm_start_compiles_nothing(tmp_path: Path) -> None:
    cold = _start(tmp_path)
    assert cold["kernels"]["compiled"] >= 1
    warm = _start(tmp_path)
    assert warm["kernels"] == {"loaded": cold["kernels"]["compiled"], "compiled": 0}
    assert warm["loads"]["light"] >= warm["kernels"]["loaded"]
    assert warm["loads"]["fallback"] == 0 and warm["loads"]["normal"] == 0
    assert not warm["registries"]  # Numba's compiler was not started
    assert np.isclose(warm["sum"], 1.0) and np.isclose(cold["sum"], 1.0)


@pytest.mark.slow  # two library builds at once: about a minute quiet
def test_two_processes_filling_one_empty_cache_leave_it_whole(tmp_path: Path) -> None:
    """Two cold starts at once on one empty cache (what pytest-xdist workers do): both right,
    and a third start loads everything, the library included (a save seen without its seal
    used to drop a library module's object code, `numba_cache._locked`)."""
    script = tmp_path / "model.py"
    script.write_text(SCRIPT.format(src=SRC))
    env = {
        **os.environ,
        "RVM_CACHE_DIR": str(tmp_path / "cache"),
        "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
        "RVM_JIT_WORKERS": "0",
    }
    procs = [
        subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    for out in outs:
        assert np.isclose(json.loads(out.strip().splitlines()[-1])["sum"], 1.0)
    warm = subprocess.run(
        [sys.executable, str(script)], env=env, check=True, capture_output=True, text=True
    )
    counts = json.loads(warm.stdout.strip().splitlines()[-1])
    assert counts["kernels"]["compiled"] == 0 and counts["kernels"]["loaded"] >= 1
    assert not counts["registries"], warm.stderr  # Numba's compiler was not started


def _record(tag: str):
    x = var("x", ("n",))
    func = prim([x], op.tanh(x) * 3.0)
    return func, jit_kernel(f"k_numba_cache_{tag}", func, "return", generic=False)


def test_a_failing_light_load_falls_back_to_numbas_own(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    func, rec = _record("fallback")
    x = rand((7,))
    load_kernel(rec)  # compiled (or loaded) and cached
    monkeypatch.setattr(loader, "_modules", {})  # forget it: the next load reads the cache

    def broken(*args: object) -> None:
        raise AttributeError("no _load_overload in this Numba")

    monkeypatch.setattr(numba_cache, "light_load", broken)
    before = numba_cache.counts()
    k = load_kernel(rec)
    assert numba_cache.counts()["fallback"] == before["fallback"] + 1
    assert sum(k.stats.cache_hits.values()) == 1  # Numba's own load found it
    np.testing.assert_allclose(k(x), numpy_run(func, x), rtol=1e-5)


def test_a_corrupt_object_code_file_is_recompiled_with_a_log_line(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RVM_JIT_ISOLATE", "0")  # the compile again is this process's, counted
    func, rec = _record("corrupt")
    load_kernel(rec)
    path = kernel_path(rec.source, rec.imports)
    data = list(object_code_dir(path).glob(f"{path.stem}.*.nbc"))
    assert data
    for f in data:
        f.write_bytes(b"not a pickle")
    monkeypatch.setattr(loader, "_modules", {})  # forget it: the next load reads the cache
    with caplog.at_level(logging.WARNING, logger="rvm.jit"):
        k = load_kernel(rec)
    assert "is not what rvm sealed" in caplog.text  # seen before Numba unpickles it
    assert sum(k.stats.cache_misses.values()) == 1  # compiled again
    x = rand((9,))
    np.testing.assert_allclose(k(x), numpy_run(func, x), rtol=1e-5)


STAMP_SCRIPT = """
import sys
sys.path.insert(0, {src!r})
from rvm.kernels import numba_cache
numba_cache.install()
print(numba_cache.object_code_dir(numba_cache.Path(numba_cache.__file__)))
"""


def test_the_librarys_object_code_is_dropped_after_its_source_changes(tmp_path: Path) -> None:
    """A change to the library's source (the stamp beside its object code no longer matches)
    drops every cached library function, once, before the first load: stale code compiled
    against another version of a sibling module would abort the process in LLVM."""
    script = tmp_path / "stamp.py"
    script.write_text(STAMP_SCRIPT.format(src=SRC))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}

    def start() -> Path:
        out = subprocess.run(
            [sys.executable, str(script)], env=env, check=True, capture_output=True, text=True
        )
        return Path(out.stdout.strip().splitlines()[-1])

    folder = start()
    stamp = folder / "rvm-native-library.stamp"
    digest = stamp.read_text()
    planted = [folder / "conv.f-1.py311.nbi", folder / "conv.f-1.py311.1.nbc"]
    other = folder / "notes.txt"
    for f in [*planted, other]:
        f.write_bytes(b"x")
    start()  # the stamp matches: nothing dropped
    assert all(f.exists() for f in planted)
    stamp.write_text("an older library")
    start()
    assert not any(f.exists() for f in planted)
    assert other.exists() and stamp.read_text() == digest


def test_a_user_modules_object_code_is_dropped_after_the_library_changes(
    tmp_path: Path, monkeypatch
) -> None:
    """A module outside the library whose cached functions compile library code in (the
    native mode's helpers inline `blocks`' slots) loses its object code when the library's
    source changes: Numba checks it against its own file only, and the helpers' stale code
    read the slots of an older layout, so the native mode never took a kept block back."""
    from numba.core import config

    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba"))
    user = tmp_path / "src" / "user.py"
    folder = object_code_dir(user)
    folder.mkdir(parents=True)
    planted = [folder / "user.f-1.py311.nbi", folder / "user.f-1.py311.1.nbc"]
    other = folder / "other.f-1.py311.nbi"
    for f in [*planted, other]:
        f.write_bytes(b"x")
    assert numba_cache.drop_stale_user_code(user)  # no stamp yet: dropped
    assert not any(f.exists() for f in planted) and other.exists()
    stamp = folder / "user.library"
    assert stamp.read_text() == numba_cache.library_digest()
    for f in planted:
        f.write_bytes(b"x")
    assert not numba_cache.drop_stale_user_code(user)  # the stamp matches: kept
    assert all(f.exists() for f in planted)
    stamp.write_text("an older library")
    assert numba_cache.drop_stale_user_code(user)
    assert not any(f.exists() for f in planted) and other.exists()


NATIVE_STAMP = """
import sys
sys.path.insert(0, {src!r})
from pathlib import Path
from rvm.kernels import numba_cache
from rvm.runtime.modes import native_support
path = Path(native_support.__file__)
stamp = numba_cache.object_code_dir(path) / f"{{path.stem}}.library"
assert stamp.read_text() == numba_cache.library_digest(), stamp
print(stamp)
"""


def test_the_native_helpers_object_code_follows_the_library(tmp_path) -> None:
    """Importing `native_support` stamps its object code with the library's digest. In a
    process of its own, with its own cache: in this one the module was imported by whichever
    test came first, perhaps while that test pointed Numba's cache elsewhere."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    env["RVM_CACHE_DIR"] = str(tmp_path / "rvm")
    done = subprocess.run(
        [sys.executable, "-c", NATIVE_STAMP.format(src=SRC)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert Path(done.stdout.strip()).is_relative_to(tmp_path / "numba")


LEVELS = """
import json, sys
sys.path.insert(0, {src!r})
sys.path.insert(0, {folder!r})
from rvm.kernels import cpu, numba_cache
from rvm.runtime.loading.cache import target_key
numba_cache.install()
import opt_mod
assert opt_mod.twice(3.0) == 6.0
print(json.dumps({{"key": cpu.opt_key(), "target": target_key().endswith(cpu.opt_key()),
                  "hits": sum(opt_mod.twice.stats.cache_hits.values())}}))
"""


def test_code_built_at_another_optimization_level_is_not_loaded_at_the_default(tmp_path) -> None:
    """Numba's cache index leaves LLVM's optimization level out: code the suite builds at
    ``NUMBA_OPT=1`` would load in a process at the default. rvm's keys hold it where it is not
    the default (`rvm.kernels.cpu.opt_key`): each level compiles its own, then loads it."""
    folder = tmp_path / "mod"
    folder.mkdir()
    (folder / "opt_mod.py").write_text(
        "import numba\n\n@numba.njit(cache=True)\ndef twice(x):\n    return 2 * x\n"
    )
    script = LEVELS.format(src=SRC, folder=str(folder))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_OPT"}
    env.update(NUMBA_CACHE_DIR=str(tmp_path / "numba"), RVM_CACHE_DIR=str(tmp_path / "rvm"))
    env["RVM_JIT_ISOLATE"] = "0"  # compiled in the process that runs it: its stats count

    def run(level: str | None) -> dict:
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=env if level is None else {**env, "NUMBA_OPT": level},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert run("1") == {"key": "opt=1", "target": True, "hits": 0}
    assert run(None) == {"key": "", "target": True, "hits": 0}  # not the level-1 code
    assert run("1")["hits"] == 1 and run(None)["hits"] == 1


# A function calling what Numba declares (the runtime's allocation, libm's exp and tanh).
DECLARING = """
import numpy as np

def f(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = np.exp(x[i]) * 0.5 + np.tanh(x[i])
    return out
"""


def test_function_passes_skip_declarations_and_build_the_same_code(monkeypatch) -> None:
    """Numba's function passes run on the functions a module defines, not on those it only
    declares (`numba_cache._skip_declarations`, put in place by `install`): fewer pass
    pipelines, and the same optimized module as Numba's own method builds."""
    import numba as nb
    from numba.core.codegen import CPUCodegen, CPUCodeLibrary

    numba_cache.install()
    skipping = CPUCodeLibrary._optimize_functions
    assert skipping.__wrapped__ is not None  # installed on this Numba
    pipelines: list[int] = []
    made = CPUCodegen._function_pass_manager

    def counted(self, **kwargs):  # type: ignore[no-untyped-def]
        pipelines.append(1)
        return made(self, **kwargs)

    monkeypatch.setattr(CPUCodegen, "_function_pass_manager", counted)

    def build() -> tuple[str, int]:
        namespace: dict = {}
        exec(DECLARING, namespace)  # noqa: S102 - a fresh function: compiled, not reused
        pipelines.clear()
        f = nb.njit("float32[::1](float32[::1])")(namespace["f"])
        (sig,) = f.signatures
        x = np.linspace(-2, 2, 7, dtype=np.float32)
        np.testing.assert_allclose(f(x), np.exp(x) * 0.5 + np.tanh(x), rtol=1e-6)
        # Its ids (`B<n>v<m>`), also where a string constant holds them: the constant's length
        # follows the ids' digits, which grow with the functions this process compiled before.
        text = re.sub(r"B\d+v\d+", "Bv", f.inspect_llvm(sig))
        return re.sub(r"\[\d+ x i8\](?= c\"[^\"]*Bv)", "[n x i8]", text), len(pipelines)

    skipped, few = build()
    monkeypatch.setattr(CPUCodeLibrary, "_optimize_functions", skipping.__wrapped__)
    own, many = build()
    assert skipped == own
    assert "\ndeclare " in own and few < many


_NO_WRAPPER: dict = {}


def test_kernels_and_the_library_build_no_c_wrapper(exec_mode) -> None:
    """Jit kernels, the library's functions and the native mode's are built without Numba's C
    wrapper (`rvm.kernels.jitting.NO_C_WRAPPER`: nothing takes them as first-class function
    values); a program whose kernels call the library (a convolution) and mathlib (tanh) runs
    in every exec mode as the interpreter computes it."""
    import rvm
    from rvm.jit import kernel_llvm
    from rvm.kernels import blas, jitting
    from rvm.runtime.modes.native import native_file
    from rvm.script import T, func, module

    assert blas.matmul.targetoptions["no_cfunc_wrapper"] is True
    assert jitting.alive.targetoptions["no_cfunc_wrapper"] is True
    if not _NO_WRAPPER:

        @module
        class M:
            @func
            def main(x: T[(1, 3, 9, 9), "float32"], w: T[(4, 3, 1, 1), "float32"]):
                y = op.tanh(op.conv2d(x, w))
                return op.softmax(op.reshape(y, (1, 324)), axis=1)

        _NO_WRAPPER["module"], _NO_WRAPPER["ex"] = M, rvm.compile(M)
        records = [r for r in _NO_WRAPPER["ex"].kernels.values() if r.backend == "jit"]
        assert records and all("no_cfunc_wrapper=True" in r.source for r in records)
        assert "define" in kernel_llvm(records[0]) and "cfunc." not in kernel_llvm(records[0])
    x = np.linspace(-1, 1, 243, dtype=np.float32).reshape(1, 3, 9, 9)
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3, 1, 1)
    vm = rvm.VirtualMachine(_NO_WRAPPER["ex"], exec_mode=exec_mode)
    got = np.asarray(vm["main"](x, w))
    want = np.asarray(rvm.interpret(_NO_WRAPPER["module"], "main", x, w))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    if exec_mode == "native":
        assert vm.native_report().fallbacks == {}
        path = native_file(_NO_WRAPPER["ex"])
        assert path is not None and "no_cfunc_wrapper=True" in Path(path).read_text()


def test_an_overload_compiles_once_for_callers_agreeing_on_the_flags_it_inherits() -> None:
    """Numba keys an ``@overload``'s compiled implementation by its caller's whole flags; rvm's
    key keeps those the overload's compile inherits (`numba_cache._share_overloads`, put in
    place by `install`): callers differing in nogil, bounds checks or the C wrapper share one
    compile, one of another fastmath or error model gets its own, and each computes the same."""
    import numba as nb
    from numba.core import event
    from numba.core.typing.templates import _OverloadFunctionTemplate
    from numba.extending import overload

    numba_cache.install()
    assert _OverloadFunctionTemplate._get_impl.__wrapped__ is not None  # on this Numba

    def halve(x):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    @overload(halve)
    def _halve(x):  # type: ignore[no-untyped-def]
        def halve_impl(x):  # type: ignore[no-untyped-def]
            out = np.empty(x.shape[0], np.float32)
            for i in range(x.shape[0]):
                out[i] = x[i] / np.float32(2.0)
            return out

        return halve_impl

    def caller(x):  # type: ignore[no-untyped-def]
        return halve(x)

    compiled: list[str] = []

    class Count(event.Listener):
        def on_start(self, ev) -> None:  # type: ignore[no-untyped-def]
            pass

        def on_end(self, ev) -> None:  # type: ignore[no-untyped-def]
            fn = getattr(ev.data["dispatcher"], "py_func", None)
            if getattr(fn, "__name__", "") == "halve_impl":
                compiled.append(fn.__name__)

    x = np.linspace(-3, 3, 11, dtype=np.float32)
    shared = (
        dict(nogil=True, boundscheck=False, error_model="numpy"),
        dict(error_model="numpy"),
        dict(error_model="numpy", no_cfunc_wrapper=True),
    )
    own = (dict(error_model="numpy", fastmath=True), dict(error_model="python"))
    with event.install_listener("numba:compile", Count()):
        for options in shared:
            np.testing.assert_array_equal(nb.njit(**options)(caller)(x), x / 2)
        assert len(compiled) == 1
        for options in own:
            np.testing.assert_array_equal(nb.njit(**options)(caller)(x), x / 2)
        assert len(compiled) == 3
