"""The native mode's handle as C code (`native_handle`), on Python stand-ins for the entry, the
guard's give-back, the checked call and the result check: each path, and no reference leaked."""

from __future__ import annotations

import sys

import pytest

from rvm.runtime.modes import native_handle as nh


class Log:
    """Stand-ins recording their calls."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def run(self, word, *args):  # type: ignore[no-untyped-def]
        self.calls.append(("run", word, args))
        if args and args[0] == "fail":
            raise ValueError("inside")
        if args and args[0] == "interrupt":
            raise KeyboardInterrupt
        return ("ran", *args)

    def failed(self) -> None:
        self.calls.append(("failed",))

    def slow(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.calls.append(("slow", args, kwargs))
        return "slow"


def _handle(log: Log, check=None):  # type: ignore[no-untyped-def]
    state: list = [None] * 5
    state[nh.RUN], state[nh.WORD], state[nh.FAILED] = log.run, "word", log.failed
    state[nh.SLOW], state[nh.CHECK] = log.slow, check
    return nh.handle(state)


def test_a_positional_call_runs_the_entry_on_the_word_and_its_arguments() -> None:
    log = Log()
    h = _handle(log)
    assert h(1, 2) == ("ran", 1, 2) and h() == ("ran",)
    assert log.calls == [("run", "word", (1, 2)), ("run", "word", ())]


def test_keywords_go_to_the_checked_call() -> None:
    log = Log()
    assert _handle(log)(1, y=2) == "slow"
    assert log.calls == [("slow", (1,), {"y": 2})]


def test_a_failure_gives_back_then_reruns_checked_and_interrupts_propagate() -> None:
    log = Log()
    h = _handle(log)
    assert h("fail", 3) == "slow"
    assert log.calls[1:] == [("failed",), ("slow", ("fail", 3), {})]
    with pytest.raises(KeyboardInterrupt):
        h("interrupt")
    assert log.calls[-1][0] == "run"


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
    value = object()

    def run(word, *args):  # type: ignore[no-untyped-def]
        if len(args) > 1:
            raise ValueError
        return args

    state: list = [run, value, lambda: None, lambda *a, **k: a, lambda r, a: None]
    h = nh.handle(state)
    before = sys.getrefcount(value)
    for _ in range(1000):
        h(value)
        h(value, value)
        h(value, k=value)
    assert sys.getrefcount(value) == before


def test_the_state_is_a_list_of_five() -> None:
    with pytest.raises(ValueError, match="list of 5"):
        nh.handle([print, 0, print, print])
