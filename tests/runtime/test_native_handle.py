"""The native mode's handle as C code (`native_handle`), on Python stand-ins for the entry, the
checked call and the result check, over a real guard's words: each path, the guard claimed and
given back, and no reference leaked."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from rvm.kernels.guard import OFF, OWNER
from rvm.runtime.modes import native_handle as nh


class Log:
    """Stand-ins recording their calls."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.word = np.zeros(2, np.int64)  # a guard's words: owner, off

    def run(self, *args):  # type: ignore[no-untyped-def]
        self.calls.append(("run", int(self.word[OWNER]), args))  # who held the guard in it
        what = args[0] if args and isinstance(args[0], str) else None
        if what == "fail":
            raise ValueError("inside")
        if what == "interrupt":
            raise KeyboardInterrupt
        if what == "again":
            return self.handle(*args[1:])  # a reentrant call: runs, the guard not claimed
        return ("ran", *args)

    def compiled(self, *args):  # type: ignore[no-untyped-def]
        self.calls.append(("compiled", int(self.word[OWNER]), len(args)))
        if args and isinstance(args[-1], np.ndarray) and args[-1].size == 0:
            raise ValueError("inside")
        return "compiled"

    def slow(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.calls.append(("slow", args, kwargs))
        return "slow"


def _handle(log: Log, check=None, types=None):  # type: ignore[no-untyped-def]
    state: list = [None] * 7
    state[nh.RUN], state[nh.WORD], state[nh.KEEP] = log.run, log.word.ctypes.data, log.word
    state[nh.SLOW], state[nh.CHECK], state[nh.TYPES] = log.slow, check, 0
    if types is not None:  # a stand-in for the entry's compiled function
        spec = nh.argument_types(types)
        assert spec is not None  # this NumPy's arrays read as the handle reads them
        state[nh.KEEP], state[nh.TYPES] = (log.word, spec), spec.ctypes.data
        state[nh.COMPILED] = log.compiled
    log.handle = nh.handle(state)
    return log.handle


def test_a_positional_call_runs_the_entry_on_its_arguments_under_the_guard() -> None:
    log = Log()
    h = _handle(log)
    me = threading.get_ident()
    assert h(1, 2) == ("ran", 1, 2) and h() == ("ran",)
    assert log.calls == [("run", me, (1, 2)), ("run", me, ())]
    assert log.word[OWNER] == 0  # given back


def test_a_reentrant_call_runs_under_the_guard_its_thread_holds() -> None:
    log = Log()
    h = _handle(log)
    me = threading.get_ident()
    assert h("again", 7) == ("ran", 7)
    assert log.calls == [("run", me, ("again", 7)), ("run", me, (7,))]
    assert log.word[OWNER] == 0  # given back once, by the call that took it


def test_another_threads_guard_or_native_code_off_goes_to_the_checked_call() -> None:
    log = Log()
    h = _handle(log)
    log.word[OWNER] = threading.get_ident() + 1  # held by another thread
    assert h(1) == "slow"
    assert log.word[OWNER] == threading.get_ident() + 1  # untouched
    log.word[OWNER], log.word[OFF] = 0, 1
    assert h(2) == "slow"
    assert log.calls == [("slow", (1,), {}), ("slow", (2,), {})] and log.word[OWNER] == 0


def test_arguments_of_the_entrys_types_go_to_its_compiled_function_others_to_dispatch() -> None:
    """Arrays of the entry's dtype (NumPy's own dtype object), rank and flags (C contiguous,
    aligned, writeable) call the compiled function under the guard; any other value the
    dispatcher (which types it, and refuses what the entry does not take)."""
    log = Log()
    h = _handle(log, types=[("float32", 2), ("int64", 0)])
    me = threading.get_ident()
    a, k = np.zeros((2, 3), np.float32), np.array(4)
    assert h(a, k) == "compiled" and log.calls == [("compiled", me, 2)]
    readonly = a.copy()
    readonly.flags.writeable = False
    others = [
        (a.astype(np.float64), k),  # another dtype
        (a.T, k),  # not C contiguous
        (a[:, ::2], k),
        (readonly, k),
        (a.reshape(-1), k),  # another rank
        (a, 4),  # not an array
        (a.view(np.matrix), k),  # a subclass
        (a.astype(">f4"), k),  # another byte order: another dtype object
        (a,),  # another count
        (a, k, k),
    ]
    for args in others:
        log.calls.clear()
        assert h(*args) == ("ran", *args)
        assert log.calls == [("run", me, args)] and log.word[OWNER] == 0
    log.calls.clear()
    assert h(np.ones((5, 1), np.float32), np.zeros((), np.int64)) == "compiled"
    assert log.calls == [("compiled", me, 2)] and log.word[OWNER] == 0


def test_a_failure_in_the_compiled_function_goes_to_the_checked_call() -> None:
    log = Log()
    h = _handle(log, types=[("int64", 1)])
    empty = np.zeros(0, np.int64)
    assert h(empty) == "slow" and log.word[OWNER] == 0
    assert [c[0] for c in log.calls] == ["compiled", "slow"]


def test_keywords_go_to_the_checked_call() -> None:
    log = Log()
    assert _handle(log)(1, y=2) == "slow"
    assert log.calls == [("slow", (1,), {"y": 2})]


def test_a_failure_gives_back_then_reruns_checked_and_interrupts_propagate() -> None:
    log = Log()
    h = _handle(log)
    assert h("fail", 3) == "slow"
    assert log.calls[1:] == [("slow", ("fail", 3), {})] and log.word[OWNER] == 0
    with pytest.raises(KeyboardInterrupt):
        h("interrupt")
    assert log.calls[-1][0] == "run" and log.word[OWNER] == 0


def test_the_result_check_sees_result_and_arguments_and_its_error_is_raised() -> None:
    seen: list = []

    def check(result, args):  # type: ignore[no-untyped-def]
        seen.append((result, args))
        if len(seen) > 1:
            raise ValueError("the check says no")

    h = _handle(Log(), check)
    assert h(5) == ("ran", 5) and seen == [(("ran", 5), (5,))]
    with pytest.raises(ValueError, match="the check says no"):
        h(6)


def test_no_reference_leaks_on_any_path() -> None:
    value, word = object(), np.zeros(2, np.int64)

    def run(*args):  # type: ignore[no-untyped-def]
        if len(args) > 1:
            raise ValueError
        return args

    made = []
    for check in (None, lambda r, a: None):
        state: list = [run, word.ctypes.data, word, lambda *a, **k: a, check, None, 0]
        made.append(nh.handle(state))
    before = sys.getrefcount(value)
    for h in made:
        for _ in range(1000):
            h(value)
            h(value, value)
            h(value, k=value)
    assert sys.getrefcount(value) == before


def test_the_state_is_a_list_of_seven_its_word_and_types_addresses() -> None:
    with pytest.raises(ValueError, match="list of 7"):
        nh.handle([print, 0, print, print])
    with pytest.raises(ValueError, match="address"):
        nh.handle([print, "word", print, print, None, None, 0])
    with pytest.raises(ValueError, match="types' address"):
        nh.handle([print, 1, print, print, None, print, 0])
