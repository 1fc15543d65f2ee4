"""What the runtime derives from an executable (`rvm.runtime.derived`): computed once per
executable, shared by its VMs, owned by the module that builds it; the executable is data."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import rvm
from rvm.runtime import Executable, VirtualMachine
from rvm.runtime.derived import Derived
from rvm.runtime.modes.decode import decode_executable
from rvm.testing.programs import MLP

SQUARE = """
@module
class Square:
    @func
    def main(x: T[(4,), "float32"]):
        return op.multiply(x, x)
"""


def test_the_executable_holds_no_cache_and_its_vms_share_what_is_derived():
    ex = rvm.compile(MLP, kernels="numpy")
    assert not hasattr(Executable, "cached")
    assert decode_executable(ex) is decode_executable(ex)
    x = np.ones((2, 784), np.float32)
    args = (x, *(np.full(s, 0.01, np.float32) for s in ((784, 128), (128,), (128, 10), (10,))))
    first, second = VirtualMachine(ex), VirtualMachine(ex, exec_mode="compiled")
    np.testing.assert_allclose(first["main"](*args), second["main"](*args), rtol=1e-6)
    other = ex.with_exec_mode("native")  # a copy, saved with another default mode
    assert other.content_hash() != ex.content_hash()
    assert other.with_exec_mode(ex.default_exec_mode).content_hash() == ex.content_hash()


def test_a_derived_value_is_built_once_under_threads():
    ex = rvm.compile(rvm.script.parse(SQUARE), kernels="numpy")
    built: list[int] = []
    derived: Derived[int] = Derived("a slow value")

    def factory() -> int:
        time.sleep(0.05)
        built.append(1)
        return 42

    got: list[int] = []
    threads = [
        threading.Thread(target=lambda: got.append(derived.get(ex, factory))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [42] * 8 and built == [1]
    assert derived.get(ex, lambda: 0, "other key") == 0  # a key is its own value
    assert repr(derived) == "Derived('a slow value')"


def test_saving_a_native_executable_makes_no_vm(tmp_path, monkeypatch):
    ex = rvm.compile(rvm.script.parse(SQUARE), kernels="jit", exec_mode="native")

    def no_vm(*args: object, **kwargs: object) -> None:
        raise AssertionError("saving made a VirtualMachine")

    with monkeypatch.context() as m:
        m.setattr(VirtualMachine, "__init__", no_vm)
        ex.save(tmp_path / "square.rvmx")
    back = rvm.load_executable(tmp_path / "square.rvmx")
    assert back.native_code() is not None
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(back(x), x * x)
    with pytest.raises(AssertionError, match="saving made a VirtualMachine"):
        no_vm()
