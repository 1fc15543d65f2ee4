"""`rvm.compile_onnx` and its compile cache (`rvm.compile_cache`): hits in new processes
without compiler code, misses when the model, an option or rvm changes, refused entries
(tampered, foreign, unsigned) rebuilt, the opt-outs, the size bound, every exec mode."""

from __future__ import annotations

import inspect
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import rvm  # noqa: E402
from rvm import compile_cache  # noqa: E402
from rvm.runtime.loading import trust  # noqa: E402

COMPILER = ("rvm.codegen", "rvm.frontend", "rvm.transform", "rvm.jit", "rvm.ir", "rvm.op")


def _model(seed: int = 0, external: bool = False, folder: Path | None = None) -> onnx.ModelProto:
    """y = relu(x @ w + b), x of shape (n, 4); w 4x64 so that it is a big constant."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 64)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["t"]),
            helper.make_node("Add", ["t", "b"], ["u"]),
            helper.make_node("Relu", ["u"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _expected(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    return np.maximum(x @ w + b, 0)


X = np.arange(12, dtype=np.float32).reshape(3, 4) / 7 - 0.5


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One cache and config dir for the module (kernels compile once); each test starts
    with an empty compile cache."""
    root = tmp_path_factory.mktemp("compile_cache")
    return {"cache": root / "cache", "config": root / "config"}


@pytest.fixture
def env(dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setenv("RVM_CACHE_DIR", str(dirs["cache"]))
    monkeypatch.setenv("RVM_CONFIG_DIR", str(dirs["config"]))
    monkeypatch.delenv("RVM_COMPILE_CACHE", raising=False)
    monkeypatch.delenv("RVM_COMPILE_CACHE_SIZE", raising=False)
    compile_cache.clear()
    return dirs


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times `compile_onnx` imported and compiled (a miss) in this test."""
    count: list[int] = []
    build = compile_cache._build

    def counting(*args, **kwargs):
        count.append(1)
        return build(*args, **kwargs)

    monkeypatch.setattr(compile_cache, "_build", counting)
    return count


@pytest.fixture
def path(tmp_path: Path) -> Path:
    p = tmp_path / "model.onnx"
    onnx.save(_model(), str(p))
    return p


def _entries() -> list[Path]:
    return sorted((compile_cache._folder()).glob("*.rvmx"))


def _run(ex: rvm.Executable, mode: str | None = None) -> np.ndarray:
    return rvm.VirtualMachine(ex, exec_mode=mode)["main"](X)


CHILD = r"""
import json, sys
import numpy as np, rvm
ex = rvm.compile_onnx(sys.argv[1])
y = rvm.VirtualMachine(ex)["main"](np.load(sys.argv[2]))
np.save(sys.argv[3], y)
mods = [m for m in sys.modules if m.startswith(tuple(sys.argv[4].split(",")))]
print(json.dumps({"compiler": sorted(mods), "signed_by": ex.signed_by}))
"""


def test_a_second_process_loads_the_entry_and_imports_no_compiler_code(env, path, tmp_path):
    np.save(tmp_path / "x.npy", X)
    out = []
    for _ in range(2):
        argv = [sys.executable, "-c", CHILD, str(path), str(tmp_path / "x.npy")]
        argv += [str(tmp_path / "y.npy"), ",".join(COMPILER)]
        run = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        out.append(json.loads(run.stdout.strip().splitlines()[-1]))
        np.testing.assert_allclose(np.load(tmp_path / "y.npy"), _expected(_model(), X), rtol=1e-5)
    assert "rvm.codegen" in out[0]["compiler"] and out[0]["signed_by"] is None  # built
    assert out[1]["compiler"] == []  # loaded: no compiler package imported
    assert out[1]["signed_by"] is not None
    assert len(_entries()) == 1


def test_every_exec_mode_builds_once_then_loads(env, path, builds, exec_mode):
    first = rvm.compile_onnx(path, exec_mode=exec_mode)
    again = rvm.compile_onnx(str(path), exec_mode=exec_mode)
    assert len(builds) == 1
    assert again.default_exec_mode == exec_mode and again.trusted
    for ex in (first, again):
        for mode in (None, exec_mode):
            np.testing.assert_allclose(_run(ex, mode), _expected(_model(), X), rtol=1e-5)
    assert again.signed_by == trust.key_id(compile_cache._derived_key(_entries()[0].stem))


def test_an_option_at_its_default_keys_as_if_not_given(env, path, builds):
    rvm.compile_onnx(path)
    rvm.compile_onnx(path, opt_level=2, exec_mode="bytecode", progress=False)
    assert len(builds) == 1


@pytest.mark.parametrize(
    "change",
    [
        {"opt_level": 0},
        {"exec_mode": "compiled"},
        {"kernels": "numpy"},
        {"shape_dict": {"x": [3, 4]}},
        {"params": "inputs"},
    ],
)
def test_another_option_misses(env, path, builds, change):
    rvm.compile_onnx(path)
    ex = rvm.compile_onnx(path, **change)
    assert len(builds) == 2 and len(_entries()) == 2
    args = (X, *(numpy_helper.to_array(t) for t in _model().graph.initializer))
    got = rvm.VirtualMachine(ex)["main"](*args[: len(ex.get_function("main").params)])
    np.testing.assert_allclose(got, _expected(_model(), X), rtol=1e-5)


def test_a_changed_file_misses_even_with_the_same_size_and_time(env, path, builds):
    np.testing.assert_allclose(_run(rvm.compile_onnx(path)), _expected(_model(), X), rtol=1e-5)
    st = path.stat()
    onnx.save(_model(seed=1), str(path))  # same size, other weights
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size
    ex = rvm.compile_onnx(path)
    assert len(builds) == 2
    np.testing.assert_allclose(_run(ex), _expected(_model(seed=1), X), rtol=1e-5)


def test_a_copied_or_touched_file_with_the_same_bytes_hits(env, path, builds, tmp_path):
    rvm.compile_onnx(path)
    other = tmp_path / "copy.onnx"
    shutil.copy(path, other)
    path.touch()
    rvm.compile_onnx(other)
    rvm.compile_onnx(path)
    assert len(builds) == 1


def test_a_change_to_rvm_misses(env, path, builds, monkeypatch):
    rvm.compile_onnx(path)
    monkeypatch.setattr(compile_cache, "code_hash", lambda: "another rvm")
    rvm.compile_onnx(path)
    assert len(builds) == 2


def test_another_cpu_or_library_version_misses(env, path, builds, monkeypatch):
    rvm.compile_onnx(path)
    monkeypatch.setattr(compile_cache, "target_key", lambda: "rvm=0 cpu=another")
    rvm.compile_onnx(path)
    assert len(builds) == 2


def test_model_protos_and_bytes_key_on_their_bytes(env, builds):
    proto = _model()
    rvm.compile_onnx(proto)
    rvm.compile_onnx(_model())
    rvm.compile_onnx(proto.SerializeToString())
    rvm.compile_onnx(proto.SerializeToString())
    assert len(builds) == 2  # the proto's entry, the bytes' entry
    ex = rvm.compile_onnx(_model(seed=2))
    assert len(builds) == 3
    np.testing.assert_allclose(_run(ex), _expected(_model(seed=2), X), rtol=1e-5)


def test_a_changed_external_data_file_misses(env, builds, tmp_path):
    folder = tmp_path / "ext"
    folder.mkdir()
    path = folder / "model.onnx"
    onnx.save(_model(), str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    rvm.compile_onnx(path)
    rvm.compile_onnx(path)
    assert len(builds) == 1
    data = bytearray((folder / "w.bin").read_bytes())
    data[:4] = np.float32(100).tobytes()
    (folder / "w.bin").write_bytes(bytes(data))
    ex = rvm.compile_onnx(path)
    assert len(builds) == 2
    want = _model()
    w = numpy_helper.to_array(want.graph.initializer[0]).copy()
    w.reshape(-1)[0] = 100
    b = numpy_helper.to_array(want.graph.initializer[1])
    np.testing.assert_allclose(_run(ex), np.maximum(X @ w + b, 0), rtol=1e-5)
    # the same model file in another folder, beside the original data: its own weights
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(path, other / "model.onnx")
    onnx.save(
        _model(),
        str(tmp_path / "x.onnx"),
        save_as_external_data=True,
        location="w.bin",
        size_threshold=0,
    )
    shutil.copy(tmp_path / "w.bin", other / "w.bin")
    got = _run(rvm.compile_onnx(other / "model.onnx"))
    np.testing.assert_allclose(got, _expected(_model(), X), rtol=1e-5)
    assert len(builds) == 3


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["code", "manifest"])
def test_a_tampered_entry_is_refused_and_rebuilt(env, path, builds, caplog, where):
    rvm.compile_onnx(path)
    (entry,) = _entries()
    if where == "code":
        _flip(entry, 40)  # inside GLOB: a signed section
    else:
        doc = json.loads(entry.with_suffix(".json").read_text())
        doc["body"]["external"] = {}
        doc["body"]["extra"] = 1
        entry.with_suffix(".json").write_text(json.dumps(doc))
    with caplog.at_level(logging.INFO, logger="rvm.codegen"):
        ex = rvm.compile_onnx(path)
    assert len(builds) == 2
    assert "refused" in caplog.text
    np.testing.assert_allclose(_run(ex), _expected(_model(), X), rtol=1e-5)
    assert rvm.compile_onnx(path).signed_by is not None and len(builds) == 2  # rebuilt entry


def test_a_foreign_entry_is_refused(env, path, builds, tmp_path, caplog):
    """Another entry renamed into this one's place, or a file saved with the user's own
    key: genuine signatures, but not of this entry."""
    other = tmp_path / "other.onnx"
    onnx.save(_model(seed=3), str(other))
    rvm.compile_onnx(path)
    a = _entries()[0]
    rvm.compile_onnx(other)
    (b,) = [e for e in _entries() if e != a]
    shutil.copy(b, a)  # a's manifest stays: the executable's signature is what fails
    with caplog.at_level(logging.INFO, logger="rvm.codegen"):
        ex = rvm.compile_onnx(path)
    assert "refused" in caplog.text and len(builds) == 3
    np.testing.assert_allclose(_run(ex), _expected(_model(), X), rtol=1e-5)
    ex.save(str(a))  # signed with the local key, which the trust store trusts
    assert rvm.load_executable(str(a)).trusted
    rvm.compile_onnx(path)
    assert len(builds) == 4


def test_a_tampered_digest_memo_is_not_believed(env, path, builds):
    rvm.compile_onnx(path)
    (memo,) = (compile_cache._folder() / "sources").glob("*.json")
    doc = json.loads(memo.read_text())
    onnx.save(_model(seed=4), str(path))
    st = os.stat(path)
    real = os.path.realpath(path)
    doc["body"]["stamp"] = [real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    memo.write_text(json.dumps(doc))  # claims the new file has the old digest: mac fails
    ex = rvm.compile_onnx(path)
    assert len(builds) == 2
    np.testing.assert_allclose(_run(ex), _expected(_model(seed=4), X), rtol=1e-5)


def test_the_opt_outs(env, path, builds, monkeypatch):
    rvm.compile_onnx(path, cache=False)
    rvm.compile_onnx(path, cache=False)
    assert len(builds) == 2 and not _entries()
    monkeypatch.setenv("RVM_COMPILE_CACHE", "0")
    rvm.compile_onnx(path)
    rvm.compile_onnx(path)
    assert len(builds) == 4 and not _entries()
    rvm.compile_onnx(path, cache=True)
    assert len(_entries()) == 1
    monkeypatch.delenv("RVM_COMPILE_CACHE")
    rvm.compile_onnx(path, verify=True)  # debugging output a load would skip: built
    assert len(builds) == 6


def test_the_size_bound_evicts_the_least_recently_used(env, builds, tmp_path, monkeypatch):
    paths = []
    for seed in range(3):
        paths.append(tmp_path / f"m{seed}.onnx")
        onnx.save(_model(seed=seed), str(paths[-1]))
    rvm.compile_onnx(paths[0])
    size = _entries()[0].stat().st_size
    monkeypatch.setenv("RVM_COMPILE_CACHE_SIZE", str(2 * size + size // 2))
    rvm.compile_onnx(paths[1])
    os.utime(_entries()[0], (0, 0))
    rvm.compile_onnx(paths[0])  # a hit: now the most recently used
    rvm.compile_onnx(paths[2])  # evicts paths[1]'s entry
    assert len(builds) == 3 and len(_entries()) == 2
    rvm.compile_onnx(paths[0])
    rvm.compile_onnx(paths[2])
    assert len(builds) == 3
    info = compile_cache.cache_info()
    assert info["entries"] == 2 and info["limit"] == 2 * size + size // 2
    monkeypatch.setenv("RVM_COMPILE_CACHE_SIZE", "lots")
    with pytest.raises(ValueError, match="RVM_COMPILE_CACHE_SIZE must be a size in bytes"):
        rvm.compile_onnx(paths[1])


def test_a_file_changed_while_it_is_imported_is_not_cached(env, path, builds, monkeypatch):
    build = compile_cache._build

    def changing(model, imports, options):
        ex = build(model, imports, options)
        onnx.save(_model(seed=5), str(path))
        return ex

    monkeypatch.setattr(compile_cache, "_build", changing)
    rvm.compile_onnx(path)
    assert not _entries()
    monkeypatch.setattr(compile_cache, "_build", build)
    np.testing.assert_allclose(_run(rvm.compile_onnx(path)), _expected(_model(5), X), rtol=1e-5)


def test_an_unwritable_compile_cache_or_config_dir_compiles_uncached(
    env, path, builds, monkeypatch, tmp_path
):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("RVM_CONFIG_DIR", str(blocked / "config"))  # no key can be made
    np.testing.assert_allclose(_run(rvm.compile_onnx(path)), _expected(_model(), X), rtol=1e-5)
    monkeypatch.setenv("RVM_CONFIG_DIR", str(env["config"]))
    compile_cache.clear()
    compile_cache._folder().write_text("not a folder either")  # nothing can be written there
    try:
        np.testing.assert_allclose(_run(rvm.compile_onnx(path)), _expected(_model(), X), rtol=1e-5)
    finally:
        compile_cache._folder().unlink()
    assert len(builds) == 2


def test_clear_cache_deletes_the_compile_cache(env, path, tmp_path, monkeypatch):
    from numba.core import config

    from rvm.runtime.loading.cache import clear_cache

    rvm.compile_onnx(path)
    assert _entries()
    # Not this checkout's library code, which the suite's other processes load.
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba"))
    clear_cache()
    assert not compile_cache._folder().exists()


def test_bad_arguments(env, path, tmp_path):
    with pytest.raises(TypeError, match="rvm.compile does not take: opt"):
        rvm.compile_onnx(path, opt=1)
    with pytest.raises(TypeError, match="expects an onnx.ModelProto, a path or bytes, got int"):
        rvm.compile_onnx(3)
    with pytest.raises(rvm.OnnxImportError, match="cannot read the ONNX model"):
        rvm.compile_onnx(tmp_path / "missing.onnx")


def test_the_options_are_rvm_compiles():
    params = inspect.signature(rvm.compile).parameters
    assert {k: p.default for k, p in params.items() if k != "mod"} == dict(
        compile_cache.COMPILE_OPTIONS
    )
