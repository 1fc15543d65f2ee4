"""Deployment: a saved executable loads and runs in a fresh process without the compiler, and
its jit kernels come from the on-disk cache (nothing recompiles)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
import zlib
from dataclasses import replace

import numpy as np
import pytest

import rvm
from rvm import progress
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


def test_compile_builds_kernels_with_a_progress_bar_or_defers_them(monkeypatch):
    from rvm.runtime import kernels as runtime_kernels

    loads: list[str] = []
    real = runtime_kernels._load_numpy_kernel

    def spy(ex, rec):
        loads.append(rec.name)
        return real(ex, rec)

    monkeypatch.setattr(runtime_kernels, "_load_numpy_kernel", spy)
    tty = io.StringIO()
    tty.isatty = lambda: True  # a terminal, and the bar drawn at once (no 0.5 s delay)
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    ex = rvm.compile(MLP, kernels="numpy", progress=True)
    err = tty.getvalue()
    assert "compiling kernels [" in err and f"{len(ex.kernels)}/{len(ex.kernels)} done" in err
    assert sorted(loads) == sorted(ex.kernels)  # built by compile ...
    rvm.VirtualMachine(ex)
    assert len(loads) == len(ex.kernels)  # ... so the VM builds nothing
    lazy = rvm.compile(MLP, kernels="numpy", build_kernels=False)
    assert len(loads) == len(ex.kernels) and tty.getvalue() == err
    rvm.VirtualMachine(lazy)
    assert len(loads) == 2 * len(ex.kernels)


# -- native code in the artifact (format 1.4, section NATV) --------------------------------

FRESH = textwrap.dedent(
    """
    import json, logging, sys
    import numpy as np
    lines = []
    class Spy(logging.Handler):
        def emit(self, record):
            lines.append((record.name, record.levelname, record.getMessage()))
    logging.getLogger("rvm").addHandler(Spy())
    logging.getLogger("rvm").setLevel(logging.DEBUG)
    import rvm
    from rvm.kernels import numba_cache
    from rvm.runtime.loading.loader import kernel_counts
    ex = rvm.load_executable(sys.argv[1])
    data = np.load(sys.argv[2])
    args = [data[f"arr_{i}"] for i in range(len(data.files))]
    out = rvm.VirtualMachine(ex)["main"](*args)
    np.testing.assert_allclose(out, np.load(sys.argv[3]), rtol=1e-6)
    compiler = ("rvm.ir", "rvm.op", "rvm.script", "rvm.transform", "rvm.codegen", "rvm.jit",
                "rvm.frontend", "rvm.interp")
    leaked = sorted(m for m in sys.modules if m.startswith(compiler))
    import os
    cached = sorted(f for _, _, fs in os.walk(os.environ["NUMBA_CACHE_DIR"]) for f in fs)
    print(json.dumps({"kernels": kernel_counts(), "numba": numba_cache.counts(),
                      "leaked": leaked, "log": lines, "cached": cached}))
    """
)


def _mlp_files(tmp_path):
    ex = rvm.compile(MLP, kernels="jit")
    args = PROGRAMS[0].args()
    np.savez(tmp_path / "args.npz", *args)
    np.save(tmp_path / "expected.npy", rvm.VirtualMachine(ex)["main"](*args))
    return ex


def _fresh_load(tmp_path, name: str, data: bytes) -> dict:
    """Load ``data`` in a new process whose kernel caches are new empty folders."""
    path = tmp_path / f"{name}.rvmx"
    path.write_bytes(data)
    env = dict(os.environ)
    env["RVM_CACHE_DIR"] = str(tmp_path / f"{name}_rvm_cache")
    env["NUMBA_CACHE_DIR"] = str(tmp_path / f"{name}_numba_cache")
    env["RVM_JIT_ISOLATE"] = "0"  # what it compiles, it compiles itself (counted as compiled)
    argv = [str(path), str(tmp_path / "args.npz"), str(tmp_path / "expected.npy")]
    run = subprocess.run(
        [sys.executable, "-c", FRESH, *argv], capture_output=True, text=True, env=env, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _base(name: str) -> str:
    """A Numba cache file's function: ``m.f-3.py311`` of ``m.f-3.py311.nbi`` and ``.2.nbc``."""
    return re.sub(r"\.(\d+\.nbc|nbi)$", "", name)


def test_saved_native_code_loads_with_empty_caches_and_compiles_no_kernel(tmp_path):
    ex = _mlp_files(tmp_path)
    native = ex.native_code()
    assert native is not None
    kinds = [g.kind for g in native.groups]
    assert kinds.count("kernel") == len(ex.kernels)
    got = _fresh_load(tmp_path, "mlp", ex.to_bytes())
    assert got["kernels"] == {"loaded": len(ex.kernels), "compiled": 0}
    assert got["numba"]["fallback"] == 0
    assert got["leaked"] == []
    # Nothing of the file compiled. rvm's own library tasks (a small product's row loop here)
    # are built at their first run on a machine whose library is not built yet: they are
    # rvm's code, built into this machine's cache, never loaded from a file.
    noisy = [
        line
        for line in got["log"]
        if line[1] in ("INFO", "WARNING") and not line[2].startswith("building rvm's library")
    ]
    assert not noisy, got["log"]
    # The kernels' object code came from the file, into isolated entries; the library's
    # entries are never written from a file: this process built them.
    shipped = {n for g in native.groups if g.kind == "kernel" for n, _ in g.files}
    assert shipped <= set(got["cached"])
    # (The pool's tasks are left out: they are built when a loop first splits, and this small
    # model's loops never do.)
    # Compared by function: the saving process may hold other overloads of an entry point
    # (a float64 matmul another test built) that this model never loads.
    library = {
        _base(n)
        for g in native.groups
        if g.kind == "module"
        for n, _ in g.files
        if not n.split("-")[0].endswith("_task")
    }
    assert library and library <= {_base(n) for n in got["cached"]}


def test_native_code_for_another_key_rebuilds_and_says_so_once(tmp_path):
    from rvm.runtime.loading.trust import local_key
    from rvm.runtime.serialize import encode

    ex = _mlp_files(tmp_path)
    native = ex.native_code()
    key = native.key.replace("cpu=", "cpu=other-", 1)
    signed = encode(ex, replace(native, key=key), local_key())  # a trusted file
    got = _fresh_load(tmp_path, "other", signed)
    assert got["kernels"] == {"loaded": 0, "compiled": len(ex.kernels)}
    said = [line for line in got["log"] if line[0] == "rvm"]
    assert len(said) == 1 and said[0][1] == "INFO", got["log"]
    assert "rebuild from source" in said[0][2] and "cpu" in said[0][2]


def test_native_section_round_trips_and_is_left_out_of_the_content_hash(tmp_path):
    from rvm.runtime.serialize import decode

    ex = rvm.compile(MLP, kernels="jit")
    with_native, without = ex.to_bytes(), ex.to_bytes(native=False)
    assert b"NATV" in with_native and b"NATV" not in without
    assert decode(with_native)["native"] == ex.native_code()
    assert "native" not in decode(without)
    loaded = rvm.Executable.from_bytes(with_native)
    assert loaded.content_hash() == ex.content_hash()
    assert rvm.compile(MLP, kernels="numpy").native_code() is None


def test_corrupt_native_section_raises_format_error():
    from rvm.errors import ExecutableFormatError
    from rvm.runtime.loading.artifact import NativeCode, NativeGroup
    from rvm.runtime.serialize import encode

    ex = rvm.compile(MLP, kernels="numpy")
    ok = ("mathlib.f-1.py311.nbi", b"x")
    good = NativeGroup("module", "rvm.kernels.mathlib", 0, (ok,))
    assert rvm.Executable.from_bytes(encode(ex, NativeCode("k", (good,)))).kernels
    bad_groups = [
        replace(good, kind="shared"),
        replace(good, ident="os.path"),
        replace(good, files=(("../../evil.nbi", b"x"),)),
        replace(good, files=(("other.f-1.py311.nbi", b"x"),)),
        replace(good, files=(("mathlib.f-1.py311.so", b"x"),)),
        NativeGroup("kernel", "../k_0123456789abcdef01234567.py", 0, ()),
    ]
    for group in bad_groups:
        with pytest.raises(ExecutableFormatError, match="native code section"):
            rvm.Executable.from_bytes(encode(ex, NativeCode("k", (group,))))
    data = bytearray(encode(ex, NativeCode("k", (good,))))
    cut = data.rindex(b"NATV")
    length = int.from_bytes(data[cut + 4 : cut + 12], "little")
    data[cut + 4 : cut + 12] = (5).to_bytes(8, "little")  # the payload cut to 5 bytes
    data = data[: cut + 16 + 5] + data[cut + 16 + length :]  # the sections after it kept
    crc = zlib.crc32(bytes(data[cut + 16 : cut + 21]))
    data[cut + 12 : cut + 16] = crc.to_bytes(4, "little")
    with pytest.raises(ExecutableFormatError, match="native code section"):
        rvm.Executable.from_bytes(bytes(data))


FRESH_NATIVE = FRESH.replace(
    'out = rvm.VirtualMachine(ex)["main"](*args)',
    'vm = rvm.VirtualMachine(ex)\nout = vm["main"](*args)\nreport = vm.native_report()',
).replace('"cached": cached}', '"cached": cached,\n "native": [report.compiled, report.loaded]}')


def test_a_native_executable_ships_its_native_functions_too(tmp_path):
    """Saved with exec_mode="native", the native mode's functions travel with the kernels: a
    fresh process with empty caches compiles neither."""
    ex = rvm.compile(MLP, kernels="jit", exec_mode="native")
    args = PROGRAMS[0].args()
    np.savez(tmp_path / "args.npz", *args)
    np.save(tmp_path / "expected.npy", rvm.VirtualMachine(ex)["main"](*args))
    kinds = [g.kind for g in ex.native_code().groups]
    assert kinds.count("native") == 1
    (group,) = [g for g in ex.native_code().groups if g.kind == "native"]
    assert b"= _by_symbol(k" in dict(group.files)[group.ident]  # its kernels called by symbol
    path = tmp_path / "mlp_native.rvmx"
    path.write_bytes(ex.to_bytes())
    env = dict(os.environ)
    env["RVM_CACHE_DIR"] = str(tmp_path / "rvm_cache")
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba_cache")
    env["RVM_JIT_ISOLATE"] = "0"  # what it compiles, it compiles itself (counted as compiled)
    argv = [str(path), str(tmp_path / "args.npz"), str(tmp_path / "expected.npy")]
    run = subprocess.run(
        [sys.executable, "-c", FRESH_NATIVE, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["kernels"]["compiled"] == 0
    compiled, loaded = got["native"]
    assert compiled == 0 and loaded >= 1, got["native"]
    assert got["leaked"] == []


def test_a_native_file_whose_source_does_not_match_its_name_is_not_installed(tmp_path, monkeypatch):
    from rvm.runtime.loading import artifact

    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    name = "n_" + "0" * 24 + ".py"
    group = artifact.NativeGroup("native", name, 0, ((name, b"x = 1\n"),))
    native = artifact.NativeCode(artifact.native_key(), (group,))
    assert artifact.check(native) is None
    assert artifact.install(native, {}) == 0
    assert not list(tmp_path.rglob(name))
