"""The pool's helpers pinned to CPUs (`rvm.kernels.workpool.helper_cpus`): one CPU each, the
caller's free, when the threads are as many as the process's CPUs; none otherwise, nor with
``RVM_PIN_HELPERS=0``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import rvm
from rvm.kernels import workpool

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity"), reason="no thread affinity on this OS"
)
ALLOWED = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def _helper_cpus() -> list[set[int]]:
    threads = sorted(
        (t for t in threading.enumerate() if t.name.startswith("rvm-pool-")), key=lambda t: t.name
    )
    return [os.sched_getaffinity(t.native_id) for t in threads]


@pytest.fixture
def restore(monkeypatch):
    """Pinning on whatever the environment says (``RVM_PIN_HELPERS``), the pool restarted
    from one thread (a count already set keeps its helpers); after, the environment's and the
    count as they were, the helpers restarted under them."""
    monkeypatch.setenv(workpool.PIN_ENV_VAR, "1")
    before = rvm.get_num_threads()
    rvm.set_num_threads(1)
    yield
    monkeypatch.undo()  # the environment's own setting again, for the helpers started next
    rvm.set_num_threads(1)
    rvm.set_num_threads(before)


def test_helpers_take_one_cpu_each_past_the_first_when_every_cpu_is_used(restore) -> None:
    if len(ALLOWED) < 2:
        pytest.skip("one CPU: no helpers")
    rvm.set_num_threads(len(ALLOWED))
    assert workpool.helper_cpus(len(ALLOWED) - 1) == ALLOWED[1:]
    assert _helper_cpus() == [{c} for c in ALLOWED[1:]]
    assert os.sched_getaffinity(0) == set(ALLOWED)  # the caller's own: untouched


def test_more_or_fewer_threads_than_cpus_leave_helpers_to_the_scheduler(restore) -> None:
    rvm.set_num_threads(len(ALLOWED) + 2)  # more: helpers share CPUs as the scheduler likes
    assert workpool.helper_cpus(len(ALLOWED) + 1) is None
    assert all(cpus == set(ALLOWED) for cpus in _helper_cpus())
    if len(ALLOWED) >= 3:  # fewer: pinned ones kept from before are unpinned
        rvm.set_num_threads(len(ALLOWED))
        rvm.set_num_threads(2)
        assert _helper_cpus() == [set(ALLOWED)]
    rvm.set_num_threads(1)
    assert _helper_cpus() == [] and workpool.helper_cpus(0) is None


def test_a_helper_pinned_still_runs_its_pieces(restore) -> None:
    rvm.set_num_threads(len(ALLOWED))
    seen: set[int] = set()
    lock = threading.Lock()

    def piece(i: int) -> None:
        with lock:
            seen.add(threading.get_native_id())

    for _ in range(200):
        workpool.for_each(64, piece)
    assert len(seen) == len(ALLOWED)  # the caller and every helper took pieces


_CHILD = """
import os, threading, rvm
from rvm.kernels import workpool
rvm.set_num_threads(len(os.sched_getaffinity(0)))
pins = [os.sched_getaffinity(t.native_id) for t in threading.enumerate()
        if t.name.startswith("rvm-pool-")]
print(all(p == os.sched_getaffinity(0) for p in pins), len(pins))
"""


def test_rvm_pin_helpers_0_turns_pinning_off() -> None:
    env = dict(os.environ, RVM_PIN_HELPERS="0")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(rvm.__file__).parents[1]), *sys.path])
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
    )
    unpinned, count = out.stdout.split()
    assert unpinned == "True" and int(count) == len(ALLOWED) - 1
