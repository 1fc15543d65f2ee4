"""End to end: every sample program compiled and run on the VM matches the interpreter and
NumPy, in every exec mode and with every kernel backend."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm.testing import assert_values_close
from rvm.testing.programs import PROGRAMS

_EXECUTABLES: dict[tuple[str, str], rvm.Executable] = {}


def executable(program, kernels: str) -> rvm.Executable:
    key = (program.name, kernels)
    if key not in _EXECUTABLES:
        _EXECUTABLES[key] = rvm.compile(program.mod, kernels=kernels)
    return _EXECUTABLES[key]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_program_matches_interpreter_and_numpy(program, exec_mode, kernels):
    args = program.args()
    vm = rvm.VirtualMachine(executable(program, kernels), exec_mode=exec_mode)
    out = vm[program.fname](*args)
    if program.numpy_ref is not None:
        assert_values_close(out, program.numpy_ref(*args), rtol=1e-4, atol=1e-5)
    if "slow_interp" not in program.tags:
        assert_values_close(
            out, rvm.interpret(program.mod, program.fname, *args), rtol=1e-4, atol=1e-5
        )


def test_symbolic_batch_sizes_share_one_executable(exec_mode, kernels):
    program = PROGRAMS[0]
    vm = rvm.VirtualMachine(executable(program, kernels), exec_mode=exec_mode)
    for n in (1, 2, 5, 0):
        rng = np.random.default_rng(n)
        args = list(program.args())
        args[0] = rng.standard_normal((n, 784)).astype("float32")
        out = vm["main"](*args)
        assert out.shape == (n, 10)
        assert_values_close(out, program.numpy_ref(*args), rtol=1e-4, atol=1e-5)


def test_deep_non_tail_recursion(exec_mode, kernels):
    from rvm.testing.programs import Lists

    vm = rvm.VirtualMachine(rvm.compile(Lists, kernels=kernels), exec_mode=exec_mode)
    n = 10_000
    expected = np.full(2, n * (n + 1) / 2, "float32")
    np.testing.assert_allclose(vm["main"](np.int64(n)), expected, rtol=1e-4)  # tail calls
    np.testing.assert_allclose(vm["main_nt"](np.int64(n)), expected, rtol=1e-4)  # 10 000 frames


def test_save_load_round_trip(tmp_path, exec_mode, kernels):
    program = PROGRAMS[0]
    path = tmp_path / "mlp.rvmx"
    executable(program, kernels).save(str(path))
    loaded = rvm.load_executable(str(path))
    args = program.args()
    out = rvm.VirtualMachine(loaded, exec_mode=exec_mode)["main"](*args)
    assert_values_close(out, program.numpy_ref(*args), rtol=1e-4, atol=1e-5)
    assert loaded.as_text() == executable(program, kernels).as_text()
