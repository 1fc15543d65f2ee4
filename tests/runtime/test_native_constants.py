"""Big constants (a model's weights) in native code: bound at load to the executable's arrays
(`rvm.runtime.modes.native_constants`), in every exec mode, saved and loaded, kept alive by a
result that is one."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.ir import Builder, Var, const, tensor
from rvm.runtime.modes.native_codegen import MAX_CONSTANT_BYTES

RNG = np.random.default_rng(7)
W = RNG.standard_normal((64, 48)).astype("float32")  # 12 KiB
B = RNG.standard_normal(48).astype("float32")
IDS = np.arange(2000, dtype="int64")  # 16 KiB


def _module() -> rvm.IRModule:
    bb = Builder()
    x = Var("x", tensor((3, 64), "float32"))
    with bb.function("main", [x]):
        y = bb.emit(op.add(op.matmul(x, const(W)), const(B)))
        bb.emit_output(bb.emit(op.tanh(y)))
    n = Var("n", tensor((), "int64"))
    with bb.function("ids", [n]):
        bb.emit_output(bb.emit(op.add(const(IDS), n)))
    w = Var("w", tensor((64, 48), "float32"))
    with bb.function("weights", [w]):
        bb.emit_output(const(W))
    return bb.get()


def test_big_constants_run_natively_in_every_mode(exec_mode: str) -> None:
    assert W.nbytes > MAX_CONSTANT_BYTES and IDS.nbytes > MAX_CONSTANT_BYTES
    vm = rvm.VirtualMachine(rvm.compile(_module(), opt_level=0), exec_mode=exec_mode)
    x = RNG.standard_normal((3, 64)).astype("float32")
    np.testing.assert_allclose(vm["main"](x), np.tanh(x @ W + B), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(vm["ids"](np.array(5, "int64")), IDS + 5)
    np.testing.assert_array_equal(vm["weights"](W), W)
    if exec_mode == "native":
        assert vm.native_report().fallbacks == {}


def test_a_constant_result_outlives_its_executable() -> None:
    vm = rvm.VirtualMachine(rvm.compile(_module(), opt_level=0), exec_mode="native")
    out = vm["weights"](W)
    assert vm.native_report().fallbacks == {}
    del vm
    gc.collect()
    rvm.VirtualMachine(rvm.compile(_module(), opt_level=0), exec_mode="native")  # rebinding
    gc.collect()
    np.testing.assert_array_equal(out, W)
    assert not out.flags.writeable


def test_other_weights_are_other_code_and_both_stay_right() -> None:
    x = RNG.standard_normal((3, 64)).astype("float32")
    vms = []
    for scale in (1.0, -2.0):
        bb = Builder()
        v = Var("x", tensor((3, 64), "float32"))
        with bb.function("main", [v]):
            bb.emit_output(bb.emit(op.matmul(v, const(W * np.float32(scale)))))
        vms.append((scale, rvm.VirtualMachine(rvm.compile(bb.get()), exec_mode="native")))
    paths = {vm.native_report().path for _, vm in vms}
    assert len(paths) == 2
    for scale, vm in vms:
        np.testing.assert_allclose(vm["main"](x), x @ (W * scale), rtol=1e-5, atol=1e-5)


_CHILD = """
import sys
import numpy as np
import rvm
ex = rvm.load_executable(sys.argv[1])
vm = rvm.VirtualMachine(ex, exec_mode="native")
x = np.load(sys.argv[2])
np.save(sys.argv[3], vm["main"](x))
report = vm.native_report()
print(len(report.fallbacks), report.compiled, report.loaded)
"""


def test_a_saved_executable_with_big_constants_runs_natively_elsewhere(tmp_path: Path) -> None:
    ex = rvm.compile(_module(), exec_mode="native")
    path = tmp_path / "weights.rvmx"
    ex.save(path)
    x = RNG.standard_normal((3, 64)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ, RVM_CACHE_DIR=str(tmp_path / "rvm"))  # Numba's: the suite's
    env["PYTHONPATH"] = os.pathsep.join([str(Path(rvm.__file__).parents[1]), *sys.path])
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(tmp_path / "x.npy"), str(tmp_path / "y")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    fallbacks, compiled, loaded = (int(v) for v in out.stdout.split())
    assert fallbacks == 0 and compiled == 0 and loaded >= 1  # the file's native code, bound
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.tanh(x @ W + B), rtol=1e-5)


def test_a_saved_file_records_its_big_constants_digests_so_a_load_hashes_none(
    tmp_path: Path, monkeypatch
) -> None:
    from rvm.runtime import weights
    from rvm.runtime.rvmx_sections import read_digests

    ex = rvm.compile(_module(), opt_level=0)
    path = str(tmp_path / "m.rvmx")
    ex.save(path)
    loaded = rvm.load_executable(path)
    big = {i for i, c in enumerate(loaded.constants) if c.nbytes > weights.DIGESTED_BYTES}
    assert len(big) >= 2 and set(loaded.constant_digests) == big
    fresh = rvm.compile(_module(), opt_level=0)
    assert {i: weights.constant_digest(fresh, i) for i in big} == loaded.constant_digests

    class NoHashing:
        def sha256(self, *_: object) -> None:
            raise AssertionError("a constant was hashed at load")

    monkeypatch.setattr(weights, "hashlib", NoHashing())
    vm = rvm.VirtualMachine(loaded, exec_mode="native")
    monkeypatch.undo()
    x = RNG.standard_normal((3, 64)).astype("float32")
    np.testing.assert_allclose(vm["main"](x), np.tanh(x @ W + B), rtol=1e-5, atol=1e-6)
    assert vm.native_report().fallbacks == {}
    for bad in ("0=zz", f"{len(loaded.constants)}={'a' * 64}", f"0={'g' * 64}", "x"):
        with pytest.raises(rvm.ExecutableFormatError, match="a constant digest"):
            read_digests(bad, len(loaded.constants))
