"""The VM's thread guard where native entries claim it themselves (`native_guard`): calls
from several threads, failures inside native code, reentry, and native code turned off; every
test runs in every exec mode, which must behave alike."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import rvm
from rvm.errors import ShapeError, VMError
from rvm.runtime import VirtualMachine
from rvm.testing.programs import RNN  # main(h (1, 16), w (16, 16), steps): a loop of steps

MODES = ("bytecode", "compiled", "native")


def _args(steps: int) -> tuple:
    rng = np.random.default_rng(0)
    h = rng.standard_normal((1, 16)).astype("float32")
    w = (rng.standard_normal((16, 16)) * 0.2).astype("float32")
    return h, w, np.array(steps, "int64")


@pytest.fixture(scope="module")
def executable() -> rvm.Executable:
    return rvm.compile(RNN)


def _free(vm: VirtualMachine) -> bool:
    return not vm.context.guard.held and vm.context.guard.owner is None


@pytest.mark.parametrize("mode", MODES)
def test_threads_calling_one_vm_each_run_or_get_the_busy_error(executable, mode) -> None:
    """Calls from four threads at once on one VM: each call runs (the right result) or raises
    the busy error naming another of the threads (the holder's ident as Python knows it, in
    the native mode written by native code); nothing else, and the guard is free after."""
    vm = VirtualMachine(executable, exec_mode=mode)
    args = _args(400)
    want = vm["main"](*args)
    names = [f"caller-{i}" for i in range(4)]
    outcomes: dict[str, list] = {name: [] for name in names}
    start = threading.Barrier(len(names))

    def work() -> None:
        me = threading.current_thread().name
        start.wait(30)
        for _ in range(30):
            try:
                out = vm["main"](*args)
            except VMError as e:
                outcomes[me].append(str(e))
            except BaseException as e:  # noqa: BLE001 - reported below
                outcomes[me].append(e)
            else:
                outcomes[me].append(np.array_equal(out, want))

    threads = [threading.Thread(target=work, name=name) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for me, seen in outcomes.items():
        assert len(seen) == 30
        for outcome in seen:
            if isinstance(outcome, str):
                others = [n for n in names if n != me]
                assert any(
                    outcome.startswith(
                        f"this VirtualMachine is already running in thread '{n}' "
                        f"(called from thread '{me}')"
                    )  # fmt: skip
                    for n in others
                ), outcome
            else:
                assert outcome is True, outcome
    assert any(o is True for seen in outcomes.values() for o in seen)
    assert _free(vm)
    np.testing.assert_array_equal(vm["main"](*args), want)


@pytest.mark.parametrize("mode", MODES)
def test_a_failure_inside_a_call_gives_the_guard_back(executable, mode) -> None:
    """A call that fails after its entry took the guard (an argument of the right dtype and
    rank but the wrong shape: the native entry's own dims check fails, then the checked call
    reports it) leaves the guard free: another thread's call then runs."""
    vm = VirtualMachine(executable, exec_mode=mode)
    args = _args(3)
    want = vm["main"](*args)
    bad = np.zeros((1, 17), "float32")
    for _ in range(3):
        with pytest.raises(ShapeError, match="main"):
            vm["main"](bad, *args[1:])
        assert _free(vm)
    out: list = []
    worker = threading.Thread(target=lambda: out.append(vm["main"](*args)))
    worker.start()
    worker.join()
    np.testing.assert_array_equal(out[0], want)
    assert _free(vm)


@pytest.mark.parametrize("mode", MODES)
def test_a_reentrant_failure_keeps_the_outer_holders_guard(executable, mode) -> None:
    """While this thread holds the guard (as the VM's checked entry does around a call that
    calls back into the VM), a call that fails inside leaves the guard held by this thread,
    and one that succeeds runs reentrant; the guard is free once the holder gives it back."""
    vm = VirtualMachine(executable, exec_mode=mode)
    args = _args(3)
    want = vm["main"](*args)
    guard = vm.context.guard
    assert guard.enter() is True
    try:
        with pytest.raises(ShapeError):
            vm["main"](np.zeros((1, 17), "float32"), *args[1:])
        assert guard.held and guard.owner == threading.get_ident()
        np.testing.assert_array_equal(vm["main"](*args), want)
        assert guard.held and guard.owner == threading.get_ident()
        assert guard.enter() is False  # reentrant: the outer take gives it back
    finally:
        guard.leave()
    assert _free(vm)


@pytest.mark.parametrize("mode", MODES)
def test_instrumented_calls_run_under_the_guard_and_native_resumes(executable, mode) -> None:
    """While instrumented every call runs where the instrument sees its kernels (native code
    turned off for the VM: its entries refuse), under the same guard; cleared, calls run as
    before with the guard free between them."""
    vm = VirtualMachine(executable, exec_mode=mode)
    args = _args(4)
    want = vm["main"](*args)
    seen: list = []
    vm.set_instrument(lambda name, a, before: seen.append(name) if before else None)
    np.testing.assert_array_equal(vm["main"](*args), want)
    assert len(seen) >= 4 and _free(vm)
    vm.set_instrument(None)
    count = len(seen)
    np.testing.assert_array_equal(vm["main"](*args), want)
    assert len(seen) == count and _free(vm)


def test_a_native_call_runs_no_python_of_rvm_between_handle_and_entry(executable) -> None:
    """The native handle is C code (`native_handle`): from the handle to the entry's native
    code no Python function of rvm runs (Numba's own boxing may); a call the entry does not
    run goes to rvm's checked call."""
    from pathlib import Path

    package = str(Path(rvm.__file__).parent)
    vm = VirtualMachine(executable, exec_mode="native")
    main, args = vm["main"], _args(3)
    want = main(*args)
    called: list[str] = []

    def record(frame, event, arg) -> None:  # type: ignore[no-untyped-def]
        if event == "call":
            called.append(frame.f_code.co_filename)

    sys.setprofile(record)
    try:
        out = main(*args)
    finally:
        sys.setprofile(None)
    np.testing.assert_array_equal(out, want)
    assert called and not [f for f in called if f.startswith(package)], called
    sys.setprofile(record)
    try:
        out = main(*args[:2], steps=args[2])  # by keyword: the checked call
    finally:
        sys.setprofile(None)
    np.testing.assert_array_equal(out, want)
    assert [f for f in called if f.startswith(package)]


def test_a_python_without_the_handles_c_api_runs_native_by_the_checked_call(
    executable, monkeypatch
) -> None:
    """Where a C API function the handle calls is not exported (``PyObject_Vectorcall`` was an
    inline function of the headers only in older CPythons), `vm[name]` is the checked call, and the
    function still runs natively and right."""
    from rvm.runtime.modes import native_handle as nh

    monkeypatch.setattr(nh, "_made", [])
    monkeypatch.setattr(nh, "_API", {**nh._API, "PyRvm_NotExported": ("v", "")})
    with pytest.raises(nh.Unavailable, match="PyRvm_NotExported"):
        nh.handle([None, 1, None, None, None, None, 0])  # a word: its address never read here
    vm = VirtualMachine(executable, exec_mode="native")
    args = _args(3)
    want = VirtualMachine(executable, exec_mode="bytecode")["main"](*args)
    np.testing.assert_allclose(vm["main"](*args), want, rtol=1e-5)
    assert dict(vm.native_report().functions)["main"] is None and _free(vm)
