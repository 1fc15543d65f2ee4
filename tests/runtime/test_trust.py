"""The trust model of saved executables (README "Security"): an untrusted file runs no code
from it, signatures, the trust store, and the attacks of issue 25 as regression tests:

- S1: kernel source with a payload prepended (jit and numpy kernels, a numpy library);
- S2: the native section's Numba index replaced by a pickle that runs code when loaded;
- S3: a library entry in a file, meant to poison the library's cache for other models.

Each payload writes a file named ``pwned`` in the working directory if it runs; the tests
check that none does, that nothing is written to the caches, and that a legitimate
executable is unaffected.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm.errors import UntrustedExecutableError
from rvm.runtime.executable import Executable
from rvm.runtime.loading import artifact, trust
from rvm.runtime.serialize import decode, encode

PAYLOAD = "open('pwned', 'w').close()\n"
EVIL_PICKLE = (
    b"cbuiltins\nexec\n(V" + PAYLOAD.strip().encode() + b"\ntR."
)  # pickle protocol 0: exec(PAYLOAD) when unpickled

MLP = """
@module
class M:
    @func
    def main(x: T[("n", 4), "float32"], w: T[(4, 3), "float32"]):
        return op.exp(op.relu(op.matmul(x, w) + 1.0)) * 0.5
"""


def _args() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    return x, w


def _expected(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.exp(np.maximum(x @ w + 1, 0)) * 0.5


@pytest.fixture(scope="module")
def models() -> dict[str, Executable]:
    mod = rvm.script.parse(MLP)
    return {k: rvm.compile(mod, kernels=k) for k in ("jit", "numpy")}


@pytest.fixture(autouse=True)
def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RVM_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)


def _reencode(data: bytes, kernel_source=None, library=None, native=None, sign=None) -> bytes:
    """``data`` decoded, changed, encoded again (consistent checksums), signed with ``sign``."""
    args = decode(data)
    args.pop("signature", None)
    saved = args.pop("native", None)
    if kernel_source is not None:
        kernels = args["kernels"].items()
        args["kernels"] = {n: replace(r, source=kernel_source(r)) for n, r in kernels}
    if library is not None:
        args["libraries"] = {n: library(s) for n, s in args["libraries"].items()}
    ex = Executable(**args)
    return encode(ex, native(saved) if native else saved, sign)


def _refused(ex: Executable) -> None:
    for mode in ("bytecode", "compiled", "native"):
        with pytest.raises(UntrustedExecutableError, match=r"rvm.trust.add_key|trusted=True"):
            rvm.VirtualMachine(ex, exec_mode=mode)
    assert not Path("pwned").exists()


# -- signatures and the trust store -------------------------------------------------------------


def test_a_saved_file_is_signed_with_the_local_key_and_loads_trusted(models, tmp_path):
    models["jit"].save("m.rvmx")
    ex = rvm.load_executable("m.rvmx")
    assert ex.trusted
    np.testing.assert_allclose(rvm.VirtualMachine(ex)["main"](*_args()), _expected(*_args()), 1e-5)
    assert (tmp_path / "config" / "local.key").stat().st_mode & 0o777 == 0o600
    again = pickle.loads(pickle.dumps(models["numpy"]))
    assert again.trusted and again.content_hash() == models["numpy"].content_hash()


def test_keys_passed_in_or_in_the_store_or_trusted_true(models):
    key = trust.new_key()
    models["numpy"].save("k.rvmx", sign=key)
    assert not rvm.load_executable("k.rvmx").trusted
    _refused(rvm.load_executable("k.rvmx"))
    assert rvm.load_executable("k.rvmx", keys=[key]).trusted
    assert rvm.load_executable("k.rvmx", keys=[key.hex()]).trusted
    models["numpy"].save("u.rvmx", sign=False)
    assert rvm.load_executable("u.rvmx", trusted=True).trusted
    ident = rvm.trust.add_key(key)
    assert ident == trust.key_id(key) and ident in trust.trusted_keys()
    assert rvm.load_executable("k.rvmx").trusted
    assert trust.remove_key(ident) and not rvm.load_executable("k.rvmx").trusted
    with pytest.raises(ValueError, match="at least 16 bytes"):
        models["numpy"].save("x.rvmx", sign=b"short")


def test_a_file_changed_after_signing_is_untrusted_and_says_so(models):
    data = bytearray(models["numpy"].to_bytes())
    _flip_in_section(data, b"CONS")
    ex = Executable.from_bytes(bytes(data))
    assert not ex.trusted
    with pytest.raises(UntrustedExecutableError, match="changed after it was signed"):
        rvm.VirtualMachine(ex)


def _flip_in_section(data: bytearray, tag: bytes) -> None:
    import zlib

    pos = data.index(tag)
    length = int.from_bytes(data[pos + 4 : pos + 12], "little")
    data[pos + 16 + length - 1] ^= 0x01
    crc = zlib.crc32(bytes(data[pos + 16 : pos + 16 + length]))
    data[pos + 12 : pos + 16] = crc.to_bytes(4, "little")


def test_an_executable_without_code_runs_untrusted():
    from rvm.runtime.builder import ExecBuilder
    from rvm.runtime.bytecode import Opcode as O

    b = ExecBuilder()
    f = b.function("main", ("x",))
    f.emit(O.RET, 0)
    ex = Executable.from_bytes(b.build().to_bytes(sign=False))
    assert not ex.trusted and rvm.VirtualMachine(ex)["main"](np.float32(3)) == 3


# -- S1: kernel source and libraries with a payload -------------------------------------------


@pytest.mark.parametrize("kernels", ["jit", "numpy"])
def test_s1_kernel_source_payload_never_runs(models, kernels):
    data = models[kernels].to_bytes()
    evil = _reencode(data, kernel_source=lambda r: PAYLOAD + r.source)
    Path("evil.rvmx").write_bytes(evil)
    ex = rvm.load_executable("evil.rvmx")
    assert not ex.trusted and "main" in ex.as_text()
    _refused(ex)
    other_key = trust.new_key()
    _refused(
        Executable.from_bytes(
            _reencode(data, kernel_source=lambda r: PAYLOAD + r.source, sign=other_key)
        )
    )


def test_s1_library_payload_never_runs():
    """Numpy kernels now import their library by name; a file saved before embeds its source
    (`test_reference_kernels`), and a payload put there never runs either."""
    old = Path(__file__).with_name("data") / "release_1443fe2_numpy.rvmx"
    evil = _reencode(old.read_bytes(), library=lambda s: PAYLOAD + s)
    ex = Executable.from_bytes(evil)
    assert ex.libraries["ref"].startswith(PAYLOAD)
    _refused(ex)


# -- S2: a pickle in the native section --------------------------------------------------------


def _poisoned_native(native: artifact.NativeCode) -> artifact.NativeCode:
    groups = []
    for g in native.groups:
        files = tuple((n, EVIL_PICKLE if n.endswith((".nbi", ".nbc")) else d) for n, d in g.files)
        groups.append(replace(g, files=files))
    return replace(native, groups=tuple(groups))


def test_s2_native_pickle_payload_never_runs_nor_is_written(models, tmp_path, monkeypatch):
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path / "cache"))
    evil = _reencode(models["jit"].to_bytes(), native=_poisoned_native)
    assert decode(evil)["native"].groups
    ex = Executable.from_bytes(evil)
    _refused(ex)
    assert not (tmp_path / "cache").exists()  # nothing installed from an untrusted file

    class Smuggled:  # what a pickle of the file's bytes would do
        def __reduce__(self):
            return Executable.from_bytes, (evil,)

    _refused(pickle.loads(pickle.dumps(Smuggled())))
    assert not (tmp_path / "cache").exists()


# -- S3: a library entry in a file, meant for every other model ----------------------------------


def _library_files() -> dict[str, bytes]:
    from rvm.kernels import numba_cache

    folder = numba_cache.object_code_dir(Path(numba_cache.__file__))
    if not folder.is_dir():
        return {}
    return {f.name: f.read_bytes() for f in folder.iterdir() if f.suffix in (".nbi", ".nbc")}


LEGIT = textwrap.dedent(
    """
    import sys, numpy as np, rvm
    ex = rvm.load_executable(sys.argv[1])
    x, w = np.load(sys.argv[2]), np.load(sys.argv[3])
    np.save(sys.argv[4], rvm.VirtualMachine(ex)["main"](x, w))
    """
)


def test_s3_a_trusted_files_library_entries_never_reach_other_models(models, tmp_path):
    """Even a *trusted* file's library entries are never written (the library is built
    locally), and its kernels' object code lives in entries only it uses."""
    legit = models["jit"]
    rvm.VirtualMachine(legit)["main"](*_args())  # the library is built and cached here
    before = _library_files()
    data = legit.to_bytes()
    native = decode(data)["native"]
    assert {g.kind for g in native.groups} >= {"kernel", "module"}
    evil = _reencode(data, native=_poisoned_native, sign=trust.local_key())
    ex = Executable.from_bytes(evil)  # trusted: signed with this user's own key
    assert ex.trusted
    _library_unchanged(before)
    # another process runs the legitimate file: the evil entries are not what it loads
    legit.save("legit.rvmx")
    x, w = _args()
    np.save("x.npy", x)
    np.save("w.npy", w)
    run = subprocess.run(
        [sys.executable, "-c", LEGIT, "legit.rvmx", "x.npy", "w.npy", "out.npy"],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    np.testing.assert_allclose(np.load("out.npy"), _expected(x, w), rtol=1e-5)
    assert not Path("pwned").exists()
    _library_unchanged(before)


def _library_unchanged(before: dict[str, bytes]) -> None:
    """No library object code was replaced, no file is a payload. Other processes sharing the
    cache (pytest-xdist's workers) may add object code, and so rewrite an index (``.nbi``)."""
    after = _library_files()
    code = {k: v for k, v in before.items() if k.endswith(".nbc")}
    assert {k: after.get(k) for k in code} == code
    assert all(k in after for k in before)
    assert EVIL_PICKLE not in after.values()


def test_a_tampered_kernel_cache_entry_is_rebuilt_never_loaded(models, tmp_path, monkeypatch):
    from rvm.kernels.numba_cache import object_code_dir
    from rvm.runtime.loading import cache, loader

    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path / "cache"))
    rec = next(r for r in models["jit"].kernels.values() if r.backend == "jit")
    loader.load_kernel(rec)
    path = cache.kernel_path(rec.source, rec.imports)
    assert cache.check_object_code(path)
    index = next(object_code_dir(path).glob(f"{path.stem}.*.nbi"))
    index.write_bytes(EVIL_PICKLE)
    assert not cache.check_object_code(path)
    loader._modules.pop(str(path), None)
    loader.load_kernel(rec)  # dropped and compiled again, never unpickled
    assert not Path("pwned").exists() and cache.check_object_code(path)


def test_clear_cache_removes_everything_rvm_wrote(models, tmp_path, monkeypatch):
    from numba.core import config

    from rvm.kernels import numba_cache

    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba"))  # not this checkout's
    ex = Executable.from_bytes(models["jit"].to_bytes())
    rvm.VirtualMachine(ex, exec_mode="native")["main"](*_args())
    library = numba_cache.object_code_dir(Path(numba_cache.__file__))
    library.mkdir(parents=True, exist_ok=True)
    (library / "mathlib.exp32-10.py311.nbi").write_bytes(b"library code")
    (tmp_path / "cache" / "mine.txt").write_text("not rvm's")
    assert any((tmp_path / "cache").rglob("*.py")) and any((tmp_path / "numba").rglob("*.nbi"))
    rvm.jit.clear_cache()
    left = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert left == [tmp_path / "cache" / "mine.txt"]  # a file of the user's stays
    assert not [p for p in (tmp_path / "numba").rglob("*") if p.is_file()]
    rvm.VirtualMachine(ex)["main"](*_args())  # loaded kernels keep working


# -- inspection never runs code nor writes a cache ------------------------------------------------

INSPECT = textwrap.dedent(
    """
    import sys, rvm
    ex = rvm.load_executable(sys.argv[1])
    assert not ex.trusted
    text = ex.as_text()
    assert "main" in text
    print("ok")
    """
)


def test_inspect_and_as_text_of_a_poisoned_file_run_nothing_and_write_nothing(models, tmp_path):
    evil = _reencode(
        models["jit"].to_bytes(),
        kernel_source=lambda r: PAYLOAD + r.source,
        native=_poisoned_native,
    )
    Path("evil.rvmx").write_bytes(evil)
    cache = tmp_path / "empty_cache"
    cache.mkdir()
    cache.chmod(0o555)
    env = {**os.environ, "RVM_CACHE_DIR": str(cache / "rvm"), "NUMBA_CACHE_DIR": str(cache)}
    runs = [
        [sys.executable, "-c", INSPECT, "evil.rvmx"],
        [sys.executable, "-m", "rvm", "inspect", "evil.rvmx"],
    ]
    for argv in runs:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        assert run.returncode == 0, run.stderr[-2000:]
    assert not Path("pwned").exists()
    assert list(cache.iterdir()) == []


def test_an_untrusted_file_is_never_laundered_into_a_trusted_one(models):
    evil = _reencode(models["jit"].to_bytes(), kernel_source=lambda r: PAYLOAD + r.source)
    ex = Executable.from_bytes(evil)
    ex.save("again.rvmx")  # re-saved: unsigned, no native code collected (nothing built)
    again = rvm.load_executable("again.rvmx")
    assert not again.trusted and "native" not in decode(Path("again.rvmx").read_bytes())
    assert not pickle.loads(pickle.dumps(ex)).trusted
    with pytest.raises(UntrustedExecutableError, match="does not trust"):
        ex.save("signed.rvmx", sign=trust.new_key())
    name = next(iter(ex.kernels))
    with pytest.raises(UntrustedExecutableError):
        ex.kernel_llvm(name)
    assert PAYLOAD in ex.kernel_source(name)  # reading the source is fine
    _refused(again)


def test_the_rvm_command_refuses_an_untrusted_file_and_runs_it_when_told(models):
    key = trust.new_key()
    models["numpy"].save("k.rvmx", sign=key)
    base = [sys.executable, "-m", "rvm", "run", "k.rvmx", "--dim", "n=2"]
    for extra, code, said in (
        ([], 1, "rvm: error: UntrustedExecutableError: this executable was loaded from a file"),
        (["--key", key.hex()], 0, "output: shape (2, 3) float32"),
        (["--trusted"], 0, "output: shape (2, 3) float32"),
    ):
        run = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=300)
        assert run.returncode == code and said in run.stdout + run.stderr, run.stderr[-2000:]


TAMPER_NATIVE = textwrap.dedent(
    """
    import importlib._bootstrap_external as bx, importlib.util, os, sys
    from pathlib import Path
    import numpy as np, rvm
    from rvm.kernels.numba_cache import object_code_dir
    ex = rvm.load_executable(sys.argv[1])
    vm = rvm.VirtualMachine(ex, exec_mode="native")
    vm["main"](np.load(sys.argv[2]), np.load(sys.argv[3]))
    path = Path(vm.native_report().path)
    folder = object_code_dir(path)
    assert any(folder.glob(path.stem + ".*.nbi")) and any(folder.glob(path.stem + ".*.nbc"))
    payload = sys.argv[4]
    for f in folder.glob(path.stem + ".*.nb[ic]"):  # the object code: pickles that run it
        f.write_bytes(bytes.fromhex(sys.argv[5]))
    # Python's bytecode cache of the source, matching its time and size: trusted by Python
    st = path.stat()
    code = compile(payload, str(path), "exec")
    pyc = importlib.util.cache_from_source(str(path))
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    Path(pyc).write_bytes(bx._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))
    print(path)
    """
)


def test_a_tampered_native_mode_cache_entry_is_rebuilt_never_run(models, tmp_path, monkeypatch):
    """The native exec mode's file in rvm's cache (its source, Python's bytecode cache of it,
    and Numba's object code of its functions) tampered by another process: a new process
    running a legitimate model runs none of it, gets correct results, and rebuilds it."""
    from numba.core import config

    from rvm.runtime.loading import cache

    env = dict(os.environ, RVM_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_DIR", None)
    monkeypatch.setattr(config, "CACHE_DIR", "")  # as in those processes: beside the file
    models["jit"].save("legit.rvmx")
    x, w = _args()
    np.save("x.npy", x)
    np.save("w.npy", w)

    def run(*argv: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", *argv], capture_output=True, text=True, timeout=600, env=env
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout + done.stderr

    tamper = [TAMPER_NATIVE, "legit.rvmx", "x.npy", "w.npy", PAYLOAD, EVIL_PICKLE.hex()]
    legit = LEGIT.replace("rvm.VirtualMachine(ex)", "rvm.VirtualMachine(ex, exec_mode='native')")
    legit = "import logging; logging.basicConfig(level=logging.INFO)\n" + legit
    # its object code and Python's bytecode cache (matching the source's time and size)
    path = Path(run(*tamper).strip().splitlines()[-1])
    source = path.read_text()
    assert not Path("pwned").exists()
    log = run(legit, "legit.rvmx", "x.npy", "w.npy", "out.npy")
    np.testing.assert_allclose(np.load("out.npy"), _expected(x, w), rtol=1e-5)
    assert not Path("pwned").exists()
    assert log.count("not what rvm sealed") == 1
    assert cache.has_object_code(path) and cache.check_object_code(path)  # rebuilt, sealed
    # its source too, keeping its length and time, with the object code and bytecode cache
    run(*tamper)
    stat = path.stat()
    path.write_text(PAYLOAD + source[len(PAYLOAD) :])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    run(legit, "legit.rvmx", "x.npy", "w.npy", "out.npy")
    np.testing.assert_allclose(np.load("out.npy"), _expected(x, w), rtol=1e-5)
    assert not Path("pwned").exists() and path.read_text() == source
    assert cache.has_object_code(path) and cache.check_object_code(path)


def test_a_tampered_library_cache_entry_is_rebuilt_never_run(models, tmp_path):
    """Numba's object code of rvm's kernel library (here under ``NUMBA_CACHE_DIR``) tampered
    by another process: a new process running a legitimate model unpickles none of it, gets
    correct results, and rebuilds it, sealed."""
    from rvm.kernels import numba_cache

    env = dict(os.environ, RVM_CACHE_DIR=str(tmp_path / "cache"))
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba")
    models["jit"].save("legit.rvmx")
    x, w = _args()
    np.save("x.npy", x)
    np.save("w.npy", w)
    legit = "import logging; logging.basicConfig(level=logging.INFO)\n" + LEGIT

    def run() -> str:
        done = subprocess.run(
            [sys.executable, "-c", legit, "legit.rvmx", "x.npy", "w.npy", "out.npy"],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        np.testing.assert_allclose(np.load("out.npy"), _expected(x, w), rtol=1e-5)
        return done.stderr

    run()
    indexes = list((tmp_path / "numba").rglob("*.nbi"))
    library = {f for f in indexes if f.name.split(".")[0] in ("blas", "sgemm", "workpool")}
    assert library
    for f in library:
        f.write_bytes(EVIL_PICKLE)
    log = run()
    assert not Path("pwned").exists()
    assert "rvm library module" in log and "not what rvm sealed" in log
    for f in library:
        module = Path(numba_cache.__file__).with_name(f.name.split(".")[0] + ".py")
        folder = f.parent
        assert not f.exists() or f.read_bytes() != EVIL_PICKLE  # dropped, or rebuilt
        seal = folder / f"{module.stem}.{numba_cache.SEAL}"
        assert seal.exists() or not any(folder.glob(f"{module.stem}.*.nbi"))
