"""A pytest plugin: each test's CPU seconds, its compile servers and subprocesses counted.

A test's CPU is this process's (user + system), its reaped children's, and its live
descendants' (read from ``/proc``: a compile server that lives on between tests, a forked
helper still running), before and after the test; wall clock under load says little. Each
process (an xdist worker, or the pytest process with ``-n 0``) writes
``$CPU_PER_TEST.<worker>`` (JSON: ``{"tests": {nodeid: [cpu_s, wall_s]}}``) at its end::

    CPU_PER_TEST=/tmp/cpu.json PYTHONPATH=scripts python -m pytest tests -p cpu_per_test

Linux only (``/proc``); a descendant re-parented away (a daemon's grandchild) is missed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

_TICK = os.sysconf("SC_CLK_TCK")
_rows: dict[str, tuple[float, float]] = {}


def _descendants(pid: int) -> Iterator[int]:
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    children = [int(c) for c in f.read().split()]
                yield from children
                stack.extend(children)
        except OSError:
            continue


def cpu_seconds() -> float:
    """This process's CPU, its reaped children's and its live descendants' (with theirs)."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    for pid in _descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / _TICK  # utime stime cutime cstime
    return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    cpu, wall = cpu_seconds(), time.perf_counter()
    yield
    _rows[item.nodeid] = (cpu_seconds() - cpu, time.perf_counter() - wall)


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("CPU_PER_TEST")
    if out and _rows:
        path = f"{out}.{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
        with open(path, "w") as f:
            json.dump({"tests": _rows}, f)
