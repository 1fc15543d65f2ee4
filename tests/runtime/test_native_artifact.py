"""Installing an executable's native code (`rvm.runtime.loading.artifact`) into the caches,
in process and without compiling: where files go, what is never overwritten, what is said."""

from __future__ import annotations

import logging

import pytest

from rvm.kernels.numba_cache import object_code_dir
from rvm.runtime.executable import KernelRecord
from rvm.runtime.loading import artifact
from rvm.runtime.loading.artifact import NativeCode, NativeGroup
from rvm.runtime.loading.cache import kernel_path

SOURCE = "# a kernel's source (installing writes it; nothing compiles it here)\n"


@pytest.fixture
def caches(tmp_path, monkeypatch):
    from numba.core import config

    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path / "rvm"))
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba"))
    return tmp_path


def _kernel_group(mtime_ns: int = 1_000_000_000) -> tuple[dict, NativeGroup]:
    record = KernelRecord("k", "jit", SOURCE, "k")
    stem = kernel_path(SOURCE).stem
    files = ((f"{stem}.k-3.py311.1.nbc", b"data"), (f"{stem}.k-3.py311.nbi", b"index"))
    return {"k": record}, NativeGroup("kernel", f"{stem}.py", mtime_ns, files)


def test_install_writes_the_kernel_file_then_its_cache_files_once(caches, caplog):
    kernels, group = _kernel_group()
    native = NativeCode(artifact.native_key(), (group,))
    with caplog.at_level(logging.DEBUG, logger="rvm"):
        assert artifact.install(native, kernels) == 2
    path = kernel_path(SOURCE)
    assert path.read_text() == SOURCE and path.stat().st_mtime_ns == group.mtime_ns
    folder = object_code_dir(path)
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == dict(group.files)
    (folder / group.files[1][0]).write_bytes(b"the cache's own")  # never overwritten
    assert artifact.install(native, kernels) == 0
    assert (folder / group.files[1][0]).read_bytes() == b"the cache's own"
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]


def test_install_of_another_key_or_other_sources_writes_nothing_and_says_so_once(caches, caplog):
    kernels, group = _kernel_group()
    other = NativeCode(artifact.native_key().replace("numba=", "numba=0.0.0-", 1), (group,))
    stale = NativeCode(artifact.native_key(), (group,))
    for native, records, said in ((other, kernels, "numba differ"), (stale, {}, "1 of its")):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="rvm"):
            assert artifact.install(native, records) == 0
        lines = [r for r in caplog.records if r.name == "rvm"]
        assert len(lines) == 1 and lines[0].levelno == logging.INFO
        assert said in lines[0].getMessage()
    assert not (caches / "rvm").exists()
    assert not object_code_dir(kernel_path(SOURCE)).exists()


def test_install_of_a_bad_modification_time_skips_that_group_and_says_why(
    caches, caplog, monkeypatch
):
    kernels, group = _kernel_group(mtime_ns=-(2**63))

    real = artifact.os.utime

    def utime(path, ns):  # as where the system refuses the time (Linux clamps it instead)
        raise OverflowError("timestamp out of range for platform time_t")

    monkeypatch.setattr(artifact.os, "utime", utime)
    with caplog.at_level(logging.DEBUG, logger="rvm"):
        assert artifact.install(NativeCode(artifact.native_key(), (group,)), kernels) == 0
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any(f"native code of {group.ident} not installed" in m for m in said)
    path = kernel_path(SOURCE)
    assert path.read_text() == SOURCE  # the kernel still compiles from its source
    folder = object_code_dir(path)
    assert not folder.exists() or not any(folder.iterdir())  # no object code for it
    # The same group installs where the time is accepted.
    monkeypatch.setattr(artifact.os, "utime", real)
    _, good = _kernel_group()
    assert artifact.install(NativeCode(artifact.native_key(), (good,)), kernels) == 2
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == dict(good.files)
