"""Jit kernels whose output loop runs in pieces on the pool (`rvm.jit.split`,
`rvm.kernels.loopsplit`): which kernels get the form, and that its results are the serial
loop's bits, in every exec mode, from a saved executable too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm import script
from rvm.kernels import parfor, workpool
from rvm.testing.threads import run_in_threads

TEXT = """
@module
class Split:
    @func
    def gelu(x: T[("n",), "float32"]):
        t = x * 0.75 + 0.1
        return x + t * op.sigmoid(t * 1.702)

    @func
    def rows(x: T[(512, 640), "float32"], b: T[(640,), "float32"]):
        return op.tanh(x + b) * 2.0

    @func
    def row_means(x: T[(700, 400), "float32"]):
        return op.mean(op.exp(x * 0.1), axis=-1)

    @func
    def quantize(x: T[(1, 3, 224, 224), "float32"]):
        return op.cast(op.clip(op.round(x / 0.04) + 128.0, 0.0, 255.0), "uint8")

    @func
    def small(x: T[(64,), "float32"]):
        return x * 2.0 + 1.0
"""


def _arguments(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, ...]]:
    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype("float32") * 3

    return {
        "gelu": (f32(1 << 18),),
        "rows": (f32(512, 640), f32(640)),
        "row_means": (f32(700, 400),),
        "quantize": (f32(1, 3, 224, 224),),
        "small": (f32(64),),
    }


def _numpy(name: str, *args: np.ndarray) -> np.ndarray:
    if name == "gelu":
        (x,) = args
        t = x * np.float32(0.75) + np.float32(0.1)
        return x + t / (1 + np.exp(-t * np.float32(1.702)))
    if name == "rows":
        return np.tanh(args[0] + args[1]) * 2
    if name == "row_means":
        return np.exp(args[0] * np.float32(0.1)).mean(axis=-1)
    if name == "quantize":
        return np.clip(np.round(args[0] / np.float32(0.04)) + 128, 0, 255).astype("uint8")
    return args[0] * 2 + 1


@pytest.fixture(scope="module")
def executable() -> rvm.Executable:
    return rvm.compile(script.parse(TEXT), progress=False)


def test_large_loops_get_the_split_form_and_small_ones_do_not(executable) -> None:
    split = {k.name: "_split_piece" in k.source for k in executable.kernels.values()}
    assert sum(split.values()) == len(split) - 1, split  # all but small's (64 elements)
    small = [k for k in executable.kernels.values() if "_split_piece" not in k.source]
    assert len(small) == 1 and small[0].meta["ops"] == "multiply,add"
    for k in executable.kernels.values():
        if "_split_piece" in k.source:  # the slot named by the source's hash, in place
            assert "rvm_piece_@" not in k.source and "rvm_piece_" in k.source
            assert "rvm.kernels.loopsplit" in k.imports


@pytest.mark.parametrize("name", ["gelu", "rows", "row_means", "quantize", "small"])
def test_pieces_give_the_serial_loops_bits_in_every_mode(executable, exec_mode, name) -> None:
    vm = rvm.VirtualMachine(executable, exec_mode=exec_mode)
    args = _arguments(np.random.default_rng(7))[name]
    jobs = workpool.jobs()
    got = vm[name](*args)
    ran_jobs = workpool.jobs() > jobs
    parfor.enable(False)
    try:
        serial = vm[name](*args)
    finally:
        parfor.enable(True)
    assert got.dtype == serial.dtype and np.array_equal(got, serial)
    want = _numpy(name, *args)
    if want.dtype == np.uint8:  # a rounding tie may land apart by one
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    else:
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    if workpool.helpers() > 0 and name != "small":
        assert ran_jobs  # the loop went to the pool


def test_a_symbolic_size_splits_when_large_and_runs_alone_when_small(executable) -> None:
    vm = rvm.VirtualMachine(executable)
    rng = np.random.default_rng(3)
    for n in (5, 100, 1 << 17, (1 << 18) + 7):
        x = rng.standard_normal(n).astype("float32")
        jobs = workpool.jobs()
        got = vm["gelu"](x)
        assert np.array_equal(got, _numpy_serial(vm, x))
        if workpool.helpers() > 0:
            assert (workpool.jobs() > jobs) == (2 * n >= parfor.MIN_WORK)


def _numpy_serial(vm: rvm.VirtualMachine, x: np.ndarray) -> np.ndarray:
    parfor.enable(False)
    try:
        return vm["gelu"](x)
    finally:
        parfor.enable(True)


def test_vms_in_several_threads_each_get_their_own_results(executable) -> None:
    # one VM a thread, all at once: a job finding the pool busy runs its pieces in its caller
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal((1 << 18) + 16 * i).astype("float32") for i in range(4)]
    want = [_numpy_serial(rvm.VirtualMachine(executable), x) for x in xs]

    def work(i: int) -> None:
        vm = rvm.VirtualMachine(executable, exec_mode="native")
        for _ in range(20):
            assert np.array_equal(vm["gelu"](xs[i]), want[i])

    run_in_threads(work, len(xs))


def test_a_bad_operand_is_refused_before_any_piece_runs(executable) -> None:
    vm = rvm.VirtualMachine(executable)
    with pytest.raises(ValueError, match="640"):
        vm["rows"](np.zeros((512, 640), "float32"), np.zeros(639, "float32"))


_CHILD = """
import sys
import numpy as np, rvm
from rvm.kernels import workpool
vm = rvm.VirtualMachine(rvm.load_executable(sys.argv[1]), exec_mode="native")
x = np.load(sys.argv[2])
jobs = workpool.jobs()
out = vm["gelu"](x)
print(int(np.array_equal(out, np.load(sys.argv[3]))), int(workpool.jobs() > jobs))
"""


def test_a_saved_executable_runs_its_pieces_in_another_process(executable, tmp_path) -> None:
    path, xs, want = tmp_path / "split.rvmx", tmp_path / "x.npy", tmp_path / "want.npy"
    x = np.random.default_rng(5).standard_normal(1 << 18).astype("float32")
    executable.save(path)
    np.save(xs, x)
    np.save(want, rvm.VirtualMachine(executable)["gelu"](x))
    env = dict(os.environ, RVM_CACHE_DIR=str(tmp_path / "cache"), RVM_NUM_THREADS="2")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(rvm.__file__).parents[1]), *sys.path])
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(xs), str(want)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    equal, pooled = out.stdout.split()
    assert equal == "1"
    assert pooled == ("1" if os.cpu_count() and os.cpu_count() > 1 else pooled)
