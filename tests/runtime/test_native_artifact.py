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


class _Ex:  # what `install` notes on an executable
    def __init__(self) -> None:
        self._native_entries: dict = {}


def test_install_writes_an_isolated_entry_named_by_its_bytes_and_nothing_shared(caches, caplog):
    kernels, group = _kernel_group()
    native = NativeCode(artifact.native_key(), (group,))
    ex = _Ex()
    with caplog.at_level(logging.DEBUG, logger="rvm"):
        assert artifact.install(native, kernels, ex) == 3  # the kernel file, data, index
    entry = ex._native_entries[group.ident]
    assert entry.path.parent.name == artifact.entry_hash(group)
    assert entry.path.read_text() == SOURCE and entry.path.stat().st_mtime_ns == group.mtime_ns
    folder = object_code_dir(entry.path)
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == dict(group.files)
    assert not kernel_path(SOURCE).exists()  # rvm's own entry of that source: untouched
    assert artifact.install(native, kernels, _Ex()) == 0  # intact: nothing rewritten
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]


def test_an_entry_changed_on_disk_is_detected_and_rewritten_from_the_file(caches, caplog):
    kernels, group = _kernel_group()
    ex = _Ex()
    artifact.install(NativeCode(artifact.native_key(), (group,)), kernels, ex)
    entry = ex._native_entries[group.ident]
    index = object_code_dir(entry.path) / group.files[1][0]
    for tamper in (
        lambda: index.write_bytes(b"a payload"),
        lambda: (object_code_dir(entry.path) / f"{entry.path.stem}.x-1.py311.nbi").write_bytes(b""),
        lambda: entry.path.write_text("import os\n"),
    ):
        tamper()
        assert not artifact.verify_entry(entry.path, group, SOURCE)
        with caplog.at_level(logging.WARNING, logger="rvm"):
            assert artifact.use_entry(entry, SOURCE) == entry.path
        assert artifact.verify_entry(entry.path, group, SOURCE)
        assert index.read_bytes() == b"index"
    assert sum("changed on disk" in r.getMessage() for r in caplog.records) == 3


def test_library_and_native_mode_groups_are_never_written_from_a_file(caches):
    files = (("mathlib.exp32-10.py311.nbi", b"a payload"),)
    module = NativeGroup("module", "rvm.kernels.mathlib", 0, files)
    assert artifact.install(NativeCode(artifact.native_key(), (module,)), {}, _Ex()) == 0
    folder = artifact.module_cache_folder("rvm.kernels.mathlib")
    assert not (folder / files[0][0]).exists()
    assert not (caches / "rvm").exists()


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


def test_install_of_a_bad_modification_time_skips_that_group_and_says_why(
    caches, caplog, monkeypatch
):
    kernels, group = _kernel_group(mtime_ns=-(2**63))

    real = artifact.os.utime

    def utime(path, ns):  # as where the system refuses the time (Linux clamps it instead)
        raise OverflowError("timestamp out of range for platform time_t")

    monkeypatch.setattr(artifact.os, "utime", utime)
    ex = _Ex()
    with caplog.at_level(logging.DEBUG, logger="rvm"):
        assert artifact.install(NativeCode(artifact.native_key(), (group,)), kernels, ex) == 0
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any(f"native code of {group.ident} not installed" in m for m in said)
    assert group.ident not in ex._native_entries  # the kernel compiles from its source
    assert not kernel_path(SOURCE, ()).exists()  # and nothing of the file reached rvm's own
    # The same kernel's group installs, into its isolated entry, where the time is accepted.
    monkeypatch.setattr(artifact.os, "utime", real)
    _, good = _kernel_group()
    assert artifact.install(NativeCode(artifact.native_key(), (good,)), kernels, ex) == 3
    folder = object_code_dir(ex._native_entries[good.ident].path)
    assert {f.name: f.read_bytes() for f in folder.iterdir()} == dict(good.files)
