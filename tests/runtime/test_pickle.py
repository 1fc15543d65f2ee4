"""Pickling: an Executable pickles through its RVMX bytes; a VirtualMachine re-creates itself
(executable, exec mode, allocator kind, saved functions, stateful inputs) or refuses clearly."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

import rvm
from rvm.runtime import NaiveAllocator
from rvm.testing.programs import MLP, _mlp_args, _mlp_ref


@pytest.fixture(scope="module")
def ex():
    return rvm.compile(MLP, kernels="numpy", exec_mode="compiled")


def test_executable_pickles_through_its_saved_bytes(ex):
    data = pickle.dumps(ex)
    assert ex.to_bytes() in data  # the very bytes `save` writes
    back = pickle.loads(data)
    assert back.functions == ex.functions and back.default_exec_mode == "compiled"
    assert back.content_hash() == ex.content_hash()
    assert back.get_function("main").result == ex.get_function("main").result
    other = ex.with_exec_mode("bytecode")  # shares ex's caches, saves other bytes
    assert other.content_hash() != ex.content_hash()
    assert pickle.loads(pickle.dumps(other)).content_hash() == other.content_hash()


def test_corrupt_pickled_executable_raises_format_error(ex):
    data = bytearray(pickle.dumps(ex))
    at = bytes(data).index(b"RVMX") + 40
    data[at] ^= 0xFF
    with pytest.raises(rvm.ExecutableFormatError):
        pickle.loads(bytes(data))


def test_vm_pickles_by_recreating_itself(ex):
    args = _mlp_args(np.random.default_rng(0), 3)
    vm = rvm.VirtualMachine(ex, exec_mode="bytecode", allocator="naive")
    vm.save_function("main", "bound", *args)
    vm.set_input("main", *args)
    back = pickle.loads(pickle.dumps(vm))
    assert back.exec_mode == "bytecode" and back.allocator.name == "naive"
    np.testing.assert_allclose(back["bound"](), _mlp_ref(*args), rtol=1e-5)
    back.invoke_stateful("main")
    np.testing.assert_allclose(back.get_outputs("main"), _mlp_ref(*args), rtol=1e-5)


def test_vm_with_what_cannot_be_recreated_refuses(ex):
    vm = rvm.VirtualMachine(ex)
    vm.set_instrument(lambda *a: None)
    with pytest.raises(TypeError, match=r"set_instrument\(None\) first"):
        pickle.dumps(vm)
    vm.set_instrument(None)
    pickle.dumps(vm)

    class Counting(NaiveAllocator):
        name = "naive"

    with pytest.raises(TypeError, match="pickle vm.executable"):
        pickle.dumps(rvm.VirtualMachine(ex, allocator=Counting()))


def test_pickled_vm_runs_in_another_process(ex, tmp_path):
    args = _mlp_args(np.random.default_rng(0), 5)
    vm = rvm.VirtualMachine(ex)
    vm.save_function("main", "bound", *args)
    (tmp_path / "vm.pkl").write_bytes(pickle.dumps(vm))
    np.save(tmp_path / "expected.npy", vm["bound"]())
    script = (
        "import pickle, sys, numpy as np\n"
        f"vm = pickle.loads(open({str(tmp_path / 'vm.pkl')!r}, 'rb').read())\n"
        f"np.testing.assert_allclose(vm['bound'](), np.load({str(tmp_path / 'expected.npy')!r}),"
        " rtol=1e-6)\n"
        "print(vm.exec_mode, 'rvm.codegen' in sys.modules)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["compiled", "False"]  # no compiler in the loading process
