"""Compiled programs called from Python: keywords, one VM under two threads, custom allocators,
and constants that share their arrays; in every exec mode and with every kernel backend."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.ir import Builder, TensorType, Var
from rvm.runtime import Storage
from rvm.script import T, func, module
from rvm.testing import assert_values_close
from rvm.testing.programs import MLP, PROGRAMS


def mlp_args(n: int) -> list[np.ndarray]:
    args = list(PROGRAMS[0].args())
    args[0] = np.random.default_rng(n).standard_normal((n, 784)).astype("float32")
    return args


def mlp_ref(*args: np.ndarray) -> np.ndarray:
    return PROGRAMS[0].numpy_ref(*args)


def test_keywords_on_a_compiled_program(exec_mode, kernels, compiled):
    vm = rvm.VirtualMachine(compiled(MLP, kernels), exec_mode=exec_mode)
    x, w1, b1, w2, b2 = mlp_args(3)
    want = mlp_ref(x, w1, b1, w2, b2)
    assert_values_close(vm["main"](x, w1, b1, b2=b2, w2=w2), want, rtol=1e-4, atol=1e-5)
    assert_values_close(
        vm.invoke("main", b2=b2, w2=w2, b1=b1, w1=w1, x=x), want, rtol=1e-4, atol=1e-5
    )
    with pytest.raises(TypeError, match=r"main has no parameter 'w3' \(parameters: x, w1, b1,"):
        vm["main"](x, w1, b1, w2, w3=b2)


def test_one_vm_hammered_by_two_threads(exec_mode, kernels, compiled):
    """Each call either runs alone and is right, or is refused with the clear VMError."""
    vm = rvm.VirtualMachine(compiled(MLP, kernels), exec_mode=exec_mode)
    outcomes: dict[str, list] = {"ok": [], "busy": [], "other": []}

    def work(seed: int) -> None:
        args = mlp_args(1 + seed)
        want = mlp_ref(*args)
        for _ in range(150):
            try:
                out = vm["main"](*args)
            except rvm.VMError as err:
                key = "busy" if "already running in thread" in str(err) else "other"
                outcomes[key].append(err)
                continue
            except BaseException as err:  # noqa: BLE001 - reported by the main thread
                outcomes["other"].append(err)
                continue
            try:
                assert_values_close(out, want, rtol=1e-4, atol=1e-5)
                outcomes["ok"].append(seed)
            except AssertionError as err:
                outcomes["other"].append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not outcomes["other"], outcomes["other"][:3]
    assert len(outcomes["ok"]) + len(outcomes["busy"]) == 300 and outcomes["ok"]


class NaNAllocator:
    """Only the documented protocol: `alloc(nbytes, alignment) -> Storage`; every block is new
    and full of NaN, so a result relying on reused or zeroed memory shows."""

    def __init__(self) -> None:
        self.calls = 0

    def alloc(self, nbytes: int, alignment: int) -> Storage:
        self.calls += 1
        nbytes = int(nbytes)
        raw = np.full(nbytes + alignment, 0xFF, np.uint8)  # 0xFFFFFFFF is a float32 NaN
        start = (-raw.ctypes.data) % alignment
        return Storage(raw[start : start + nbytes], nbytes, raw)


@module
class WideRNN:
    @func
    def main(h: T[(8, 16), "float32"], w: T[(16, 16), "float32"], steps: T[(), "int64"]):
        i = rvm.const(0, "int64")
        while i < steps:
            h = op.tanh(op.matmul(h, w)) + h
            i = i + 1
        return h


def test_a_custom_allocator_with_only_alloc(exec_mode, kernels, compiled):
    allocator = NaNAllocator()
    vm = rvm.VirtualMachine(compiled(MLP, kernels), exec_mode=exec_mode, allocator=allocator)
    for n in (3, 1, 3):
        args = mlp_args(n)
        assert_values_close(vm["main"](*args), mlp_ref(*args), rtol=1e-4, atol=1e-5)
    assert allocator.calls > 0

    allocator = NaNAllocator()
    vm = rvm.VirtualMachine(compiled(WideRNN, kernels), exec_mode=exec_mode, allocator=allocator)
    rng = np.random.default_rng(0)
    h = rng.standard_normal((8, 16)).astype(np.float32)
    w = (rng.standard_normal((16, 16)) * 0.3).astype(np.float32)
    want = h
    for _ in range(5):
        want = np.tanh(want @ w) + want
    assert_values_close(vm["main"](h, w, np.int64(5)), want, rtol=1e-4, atol=1e-5)
    assert allocator.calls >= 5  # a block per iteration at least: the loop allocates
    assert "allocator=NaNAllocator" in repr(vm)


def test_constants_share_the_given_array(exec_mode, kernels):
    # An elementwise use: a product's constant weight is packed into a new array for the
    # jit's GEMM (`rvm.transform.pack_weights`), a copy by design.
    weight = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    const = rvm.const(weight)
    assert np.shares_memory(const.data, weight) and not const.data.flags.writeable
    assert weight.flags.writeable  # the caller's array is left as it was
    bb = Builder()
    x = Var("x", TensorType((4, 64), "float32"))
    with bb.function("main", [x]):
        y = bb.emit(op.relu(op.multiply(x, const)), name="y")
        bb.emit_output(y)
    ex = rvm.compile(bb.get(), kernels=kernels)
    assert any(np.shares_memory(c, weight) for c in ex.constants)  # no copy down to the pool
    vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
    xv = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    want = np.maximum(xv * weight, 0)
    assert_values_close(vm["main"](xv), want, rtol=1e-4, atol=1e-5)
    assert_values_close(vm["main"](xv), want, rtol=1e-4, atol=1e-5)  # nothing wrote into it
