"""rvm's thread pool (`rvm.kernels.workpool`): every piece runs exactly once, errors
reach the caller, a nested or busy pool runs the job in its caller, compiled code runs pieces
on it, and a forked child runs jobs (in the caller, then on new helpers)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numba as nb
import numpy as np
import pytest

import rvm
from rvm.kernels import parfor, pool_thread, poolstate, workpool
from rvm.testing.threads import run_in_threads


@pytest.fixture(params=[1, 2, 4], ids=["1-thread", "2-threads", "4-threads"])
def threads(request) -> Iterator[int]:
    """rvm's thread count for the test (more threads than cores too), set back after it."""
    before = rvm.get_num_threads()
    rvm.set_num_threads(request.param)
    yield request.param
    rvm.set_num_threads(before)


def test_the_pool_has_count_minus_one_helpers(threads) -> None:
    assert workpool.helpers() == threads - 1
    assert nb.njit(lambda: workpool.threads())() == threads
    names = [t.name for t in threading.enumerate() if t.name.startswith("rvm-pool-")]
    assert len(names) == threads - 1


def test_a_piece_knows_its_thread_the_same_at_every_job(threads) -> None:
    """`pool_thread.index`: 0 in the caller, a helper's own index in 1 .. threads - 1, the
    same for an OS thread at every job, as compiled code and Python read it."""
    where: dict[int, set[tuple[int, int]]] = {}
    lock = threading.Lock()

    def piece(i: int) -> None:
        seen = (pool_thread.current(), _thread_index())
        with lock:
            where.setdefault(threading.get_ident(), set()).add(seen)
        time.sleep(0.0005)  # each helper gets a piece now and then

    for _ in range(20):
        workpool.for_each(4 * threads, piece)
    indices = set()
    for ident, seen in where.items():
        assert len(seen) == 1
        ((python, compiled),) = seen
        assert python == compiled and 0 <= python < threads
        assert (python == 0) == (ident == threading.get_ident())
        indices.add(python)
    assert len(indices) == len(where)  # one index a thread
    assert _thread_index() == pool_thread.current() == 0


@nb.njit(nogil=True)
def _thread_index():  # type: ignore[no-untyped-def]
    return pool_thread.index()


@pytest.mark.parametrize("n", [0, 1, 2, 3, 17, 1000])
def test_every_piece_runs_exactly_once(threads, n) -> None:
    for _ in range(20):
        hits: list[int] = []
        workpool.for_each(n, hits.append)
        assert Counter(hits) == Counter(range(n))


def test_helpers_take_pieces_while_the_caller_works(threads) -> None:
    """With helpers, a job whose pieces wait for each other can only finish if pieces run
    on several threads at once."""
    if threads == 1:
        pytest.skip("no helper")
    both = threading.Barrier(2, timeout=30)
    where: set[int] = set()

    def piece(i: int) -> None:
        where.add(threading.get_ident())
        both.wait()

    workpool.for_each(2, piece)
    assert len(where) == 2


def test_measured_pieces_are_counted_and_timed_per_thread(threads) -> None:
    """`measure`: each thread's pieces and CPU time inside them, callers' first; off, none."""
    both = threading.Barrier(min(threads, 2), timeout=30)

    def piece(i: int) -> None:
        if i < 2:
            both.wait()  # with helpers, the first two pieces run on two threads
        t = time.thread_time_ns()
        while time.thread_time_ns() - t < 200_000:  # 0.2 ms of CPU
            pass

    poolstate.measure(True)
    try:
        workpool.for_each(6, piece)
        times = poolstate.piece_times()
    finally:
        poolstate.measure(False)
    assert len(times) == threads
    assert sum(n for _, n in times) == 6
    assert all(ns >= 200_000 * n for ns, n in times)
    if threads > 1:
        assert sum(n > 0 for _, n in times) >= 2
    workpool.for_each(6, piece)
    assert poolstate.piece_times() == [(0, 0)] * threads


def test_measured_jobs_and_pieces_are_logged(threads) -> None:
    """`measure`: `piece_log` holds every piece (its function, index, thread line, CPU time),
    `job_log` every job that went to helpers (its function, pieces, the caller's, its tail
    and join within its time); both emptied by `measure` and off without it."""
    both = threading.Barrier(min(threads, 2), timeout=30)

    def piece(i: int) -> None:
        if i < 2:
            both.wait()
        t = time.thread_time_ns()
        while time.thread_time_ns() - t < 100_000:
            pass

    poolstate.measure(True)
    try:
        for _ in range(3):
            workpool.for_each(5, piece)
        pieces, jobs = poolstate.piece_log(), poolstate.job_log()
    finally:
        poolstate.measure(False)
    assert len(pieces) == 15
    assert Counter(i for _, i, _, _ in pieces) == Counter(list(range(5)) * 3)
    assert len({fn for fn, _, _, _ in pieces}) <= 3  # a callback each job
    assert all(ns >= 100_000 and 0 <= who < threads for _, _, who, ns in pieces)
    assert len(jobs) == (3 if threads > 1 else 0)  # one thread: no job goes to helpers
    for fn, n, ran, tail, join, span in jobs:
        assert fn in {f for f, _, _, _ in pieces}
        # The barrier: two threads ran the first two; with one helper, the caller one of them.
        assert n == 5 and (1 if threads == 2 else 0) <= ran <= 4
        assert 0 <= join <= tail <= span
    poolstate.measure(True)
    poolstate.measure(False)
    workpool.for_each(5, piece)
    assert poolstate.piece_log() == [] and poolstate.job_log() == []


def test_a_caller_spins_for_a_helper_piece_about_as_long_as_its_own(threads) -> None:
    """A caller whose pieces are done spins for a helper's piece about as long as one of its
    own took (a helper's is at most that far from its end), not just `SPIN_US`: its wake-up
    would delay the job's end; it sleeps (counted in `naps`) when the helper's takes far
    longer, and `join_time` counts its wait."""
    if threads != 2:
        pytest.skip("one helper: the caller runs one of the two pieces")
    main = threading.get_ident()

    def join_naps(helper_s: float) -> int:
        both = threading.Barrier(2, timeout=30)

        def piece(i: int) -> None:
            both.wait()  # the two pieces run at once, one in each thread
            time.sleep(0.02 if threading.get_ident() == main else helper_s)

        before = workpool.naps()[1]
        workpool.for_each(2, piece)
        return workpool.naps()[1] - before

    assert workpool.SPIN_US * 1e-6 < 0.001  # the helper's piece outlasts the spin alone
    # The helper's piece ends 1 ms after the caller's (of 20 ms; the margin for a loaded
    # machine's scheduling): spun for, in some try.
    assert any(join_naps(0.021) == 0 for _ in range(5))
    poolstate.measure(True)
    try:
        assert join_naps(0.3) == 1  # 280 ms after: the caller sleeps
        waited = poolstate.join_time()  # the caller's wait, asleep included
    finally:
        poolstate.measure(False)
    assert 0.25e9 <= waited < 30e9
    assert poolstate.join_time() == 0  # zeroed by `measure`


def test_spinning_threads_give_their_core_away(threads) -> None:
    """A thread spinning for pieces of its job (or for the next job) yields its core every
    `SPIN_US` / `YIELDS_PER_SPIN` (`yields` counts it): on a machine with more threads than
    cores the piece it waits for may need that core."""
    if threads != 2:
        pytest.skip("one helper: the caller runs one of the two pieces")
    main = threading.get_ident()
    both = threading.Barrier(2, timeout=30)

    def piece(i: int) -> None:
        both.wait()  # one piece in each thread
        if threading.get_ident() != main:
            time.sleep(0.3)  # the caller spins a whole `SPIN_US` for it, then sleeps

    before = workpool.yields()
    workpool.for_each(2, piece)
    assert workpool.yields() - before >= workpool.YIELDS_PER_SPIN - 1


def test_jobs_counts_the_jobs_that_went_to_helpers(threads) -> None:
    """`jobs`: one a job of several pieces with helpers; none run in the caller alone."""
    before = workpool.jobs()
    workpool.for_each(5, lambda i: None)
    workpool.for_each(1, lambda i: None)  # one piece: in the caller
    assert workpool.jobs() - before == (0 if threads == 1 else 1)


def test_the_first_error_reaches_the_caller(threads) -> None:
    def piece(i: int) -> None:
        if i == 5:
            raise KeyError("piece 5")

    with pytest.raises(KeyError, match="piece 5"):
        workpool.for_each(40, piece)
    hits: list[int] = []
    workpool.for_each(40, hits.append)  # the pool still works
    assert Counter(hits) == Counter(range(40))


def test_a_nested_job_runs_in_the_piece_that_started_it(threads) -> None:
    inner: list[tuple[int, int]] = []

    def outer(i: int) -> None:
        me = threading.get_ident()
        workpool.for_each(5, lambda j: inner.append((me, threading.get_ident())))

    workpool.for_each(4, outer)
    assert len(inner) == 20
    assert all(starter == runner for starter, runner in inner)


def test_a_job_finding_the_pool_busy_runs_in_its_caller(threads) -> None:
    """While one thread's job holds the pool, another thread's job runs all its pieces in
    that thread, without waiting for the first."""
    if threads == 1:
        pytest.skip("no helper")
    holding, release = threading.Event(), threading.Event()
    other: list[int] = []

    def slow(i: int) -> None:
        holding.set()
        assert release.wait(timeout=30)

    def first(_: int) -> None:
        workpool.for_each(threads, slow)

    def second(_: int) -> None:
        assert holding.wait(timeout=30)
        try:
            workpool.for_each(6, lambda j: other.append(threading.get_ident()))
            assert other == [threading.get_ident()] * 6
        finally:
            release.set()

    run_in_threads(lambda i: (first if i == 0 else second)(i), 2)


def test_jobs_from_many_threads_at_once(threads) -> None:
    def work(t: int) -> None:
        for n in range(1, 40):
            hits: list[int] = []
            workpool.for_each(n, hits.append)
            assert Counter(hits) == Counter(range(n)), (t, n)

    run_in_threads(work, 4)


def test_bad_helper_counts_raise() -> None:
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="expected a whole number >= 0 of helpers"):
            workpool.set_helpers(bad)  # type: ignore[arg-type]


# -- compiled pieces ----------------------------------------------------------------------------


def _fill_task(k, like, data):  # type: ignore[no-untyped-def]
    """Piece ``k`` adds k + 1 to element k (a `parfor` task)."""
    job = parfor.job(data)
    out = parfor.array_at(job[1], (job[2],), like)
    out[k] += k + 1


parfor.export_task("test_fill", _fill_task)
_run_fill = parfor.runner("test_fill")


@nb.njit(nogil=True)
def _fill(out):  # type: ignore[no-untyped-def]
    job = np.array((3, parfor.address(out), out.size), dtype=np.int64)
    _run_fill(out, out.size, job)


@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_compiled_tasks_run_each_piece_once(threads, n) -> None:
    parfor.require_task("test_fill", "float64")
    for _ in range(20):
        out = np.zeros(n)
        _fill(out)
        np.testing.assert_array_equal(out, np.arange(1, n + 1))


def _affine_task(k, like, data):  # type: ignore[no-untyped-def]
    """Piece ``k`` adds 1 to the element of the unit `parfor.affine_unit` gives it, and
    records its thread there."""
    job = parfor.job(data)
    units = job[2]
    out = parfor.array_at(job[1], (2 * units,), like)
    u = parfor.affine_unit(parfor.address(job) + 8 * 4, units, job[3])
    out[u] += 1
    out[units + u] = pool_thread.index()


parfor.export_task("test_affine", _affine_task)
_run_affine = parfor.runner("test_affine")


@nb.njit(nogil=True)
def _affine(out, units):  # type: ignore[no-untyped-def]
    threads = parfor.threads()
    job = np.zeros(4 + threads, dtype=np.int64)
    job[0], job[1], job[2], job[3] = job.size, parfor.address(out), units, threads
    _run_affine(out, units, job)


@pytest.mark.parametrize("units", [1, 2, 5, 64])
def test_affine_units_run_once_each_mostly_on_their_thread(threads, units) -> None:
    """Each unit once; a unit goes to thread ``unit % threads`` unless that thread was late."""
    parfor.require_task("test_affine", "float64")
    on_own = 0
    for _ in range(20):
        out = np.zeros(2 * units)
        _affine(out, units)
        np.testing.assert_array_equal(out[:units], np.ones(units))
        on_own += int(np.sum(out[units:] == np.arange(units) % threads))
        assert np.all(out[units:] < threads)
    if threads == 1:
        assert on_own == 20 * units


parfor.export_task("test_fill_lazy", _fill_task)
_run_fill_lazy = parfor.runner("test_fill_lazy")


@nb.njit(nogil=True)
def _fill_lazy(out):  # type: ignore[no-untyped-def]
    job = np.array((3, parfor.address(out), out.size), dtype=np.int64)
    _run_fill_lazy(out, out.size, job)


def test_a_task_is_built_at_its_first_run_once_for_every_thread() -> None:
    """Code calling a task compiles without it; the task is built when a run first finds its
    slot empty (several threads at once: built once, each run complete)."""
    before = rvm.get_num_threads()
    rvm.set_num_threads(2)
    try:
        out = np.zeros(3, dtype=np.float32)
        _fill_lazy.compile((nb.typeof(out),))
        assert ("test_fill_lazy", "float32") not in parfor.required_tasks()

        def work(_: int) -> None:
            for n in (1, 5, 64):
                got = np.zeros(n, dtype=np.float32)
                _fill_lazy(got)
                np.testing.assert_array_equal(got, np.arange(1, n + 1, dtype=np.float32))

        run_in_threads(work, 4)
        assert ("test_fill_lazy", "float32") in parfor.required_tasks()
        assert ("test_fill_lazy", "float64") not in parfor.required_tasks()
    finally:
        rvm.set_num_threads(before)


FORKED = """
import multiprocessing as mp
from collections import Counter
import rvm
from rvm.kernels import workpool

def run(n):
    hits = []
    workpool.for_each(n, hits.append)
    assert Counter(hits) == Counter(range(n))
    before = workpool.helpers()
    rvm.kernels.threads.apply_environment()  # what the child's first VM does
    workpool.for_each(n, hits.append)
    assert Counter(hits) == Counter(list(range(n)) * 2)
    return before, workpool.helpers(), len(hits)

if __name__ == "__main__":
    rvm.set_num_threads(3)
    workpool.for_each(10, lambda i: None)  # the parent's helpers run
    with mp.get_context("fork").Pool(1) as workers:
        print(workers.apply(run, (50,)))
"""


def _run_script(script: Path, text: str, timeout: float) -> subprocess.CompletedProcess:
    """Runs ``text`` as the Python file ``script`` in a new process with this checkout's rvm
    (a hang fails by the ``timeout``, in that process, not the suite's)."""
    script.write_text(text)
    src = str(Path(rvm.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_a_forked_child_resets_the_pool_then_restarts_it(tmp_path) -> None:
    done = _run_script(tmp_path / "forked.py", FORKED, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(0, 2, 100)"


HOLDING_THE_GIL = """
import ctypes, threading
import numba as nb
import rvm
from rvm.kernels import workpool

ran = []

def piece(i, _null, _data):  # Python: a helper running it needs the GIL
    ran.append((i, threading.get_ident()))
    sum(range(2000))  # long enough for the caller to finish its share first

callback = workpool.PIECE(piece)
address = ctypes.cast(callback, ctypes.c_void_p).value

@nb.njit  # without nogil: holds the GIL while it runs, and so while it waits for its pieces
def caller(fn, n):
    workpool.run(fn, n, 0)

rvm.set_num_threads(2)
for job in range(100):
    caller(address, 8)
assert sorted(i for i, _ in ran) == sorted(list(range(8)) * 100)
print("ok")
"""


def test_a_caller_holding_the_gil_lets_helpers_take_it(tmp_path) -> None:
    """A compiled caller that holds the GIL (``@njit`` without ``nogil``) runs a job whose
    pieces need the GIL (here Python pieces; in the library, a task resolved on a first run):
    the caller lets go of it for the job, so a helper's piece never waits on a caller that
    waits for it. A deadlock fails by the timeout (a separate process)."""
    done = _run_script(tmp_path / "holding.py", HOLDING_THE_GIL, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ok"]


def _until(test, seconds: float = 10.0) -> bool:
    """Whether ``test()`` holds within ``seconds`` (polled)."""
    end = time.monotonic() + seconds
    while not test():
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


def _asleep(threads: int) -> bool:
    """Whether every helper counts itself asleep (`SLEEPING`). A helper woken by a broadcast
    still counts until it takes the mutex back, then spins: holding now, it may not hold by
    the time the next job is published (4 threads on 2 cores: a woken helper waits for a
    core)."""
    return poolstate.state[poolstate.SLEEPING * poolstate.LINE] == threads - 1


def _nudges() -> int:
    """How many times `wake` found helpers asleep and woke them (the pool's `NUDGE`)."""
    return int(poolstate.state[poolstate.NUDGE * poolstate.LINE])


def _found_asleep(threads: int, act) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``act()``, run once the helpers count themselves asleep, found them asleep
    (it says so), within a few tries. A try that finds none asleep (all still leaving an
    earlier wake-up, see `_asleep`) leaves no wake-up pending: the helpers then really sleep
    before the next try's wait ends, and only ``act`` can wake them."""
    for _ in range(5):
        assert _until(lambda: _asleep(threads))
        if act():
            return True
    return False


def _counted(act, count):  # type: ignore[no-untyped-def]
    """``act`` saying whether it raised ``count()``."""

    def counted() -> bool:
        before = count()
        act()
        return count() > before

    return counted


def test_wake_lets_sleeping_helpers_spin_then_sleep_again(threads) -> None:
    """`wake` (a VM call's first step) gets sleeping helpers up, they sleep again after the
    spin (no core burnt between calls), jobs after it run every piece, and a job that found
    helpers asleep is counted in `wakes`."""
    if threads == 1:
        pytest.skip("no helper")
    job = lambda: workpool.for_each(threads, lambda i: None)  # noqa: E731
    for _ in range(3):
        assert _found_asleep(threads, _counted(job, workpool.wakes))
        assert _found_asleep(threads, _counted(workpool.wake, _nudges))
        assert _until(lambda: _asleep(threads))  # back to sleep after the spin
        hits: list[int] = []
        workpool.for_each(17, hits.append)
        assert Counter(hits) == Counter(range(17))


def test_a_call_wakes_sleeping_helpers_while_its_function_runs_jobs(threads) -> None:
    """`workpool.call` (how a VM call from Python runs): it wakes helpers asleep as it begins
    while the function's last call that found them asleep ran a job (and at first); after
    one that ran none, they stay asleep until a call runs a job again (its job wakes them)."""
    if threads == 1:
        pytest.skip("no helper")
    # Whether a call woke them is read from the pool's wake-up requests (`_nudges`), not from
    # how many sleep after it (see `_asleep`: what made this test flaky).
    ran = [False, True]

    def first_call() -> bool:
        ran[1], before = True, _nudges()  # as at first
        assert workpool.call(ran, 1, lambda: 7, ()) == 7
        return _nudges() == before + 1 and ran == [False, False]  # woke them; ran no job

    assert _found_asleep(threads, first_call)
    assert _until(lambda: _asleep(threads))  # after their spin
    before = _nudges()
    workpool.call(ran, 1, lambda: None, ())  # left them asleep
    assert _nudges() == before and ran == [False, False]

    def job_call() -> bool:
        ran[1], before = False, workpool.wakes()
        workpool.call(ran, 1, workpool.for_each, (threads, lambda i: None))
        return workpool.wakes() > before and ran == [False, True]  # its job woke them

    assert _found_asleep(threads, job_call)


def test_a_vm_call_goes_through_the_pool_first(monkeypatch) -> None:
    """Each call from Python, in every exec mode, runs through the pool's `call` (which wakes
    sleeping helpers when that helps); the native fast path does the same natively, in its
    entry (`call_begin` / `call_end`: see the next test), and a native call that leaves the
    fast path runs through `call` as the other modes' do."""
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    ex = rvm.compile(rvm.script.parse(_RELU))
    for mode in ("bytecode", "compiled", "native"):
        vm = rvm.VirtualMachine(ex, exec_mode=mode)
        assert vm.context.pool_call is workpool.call
        seen: list[int] = []

        def through(ran, i, fn, args):  # type: ignore[no-untyped-def]
            seen.append(i)  # noqa: B023 - set before vm["main"] binds it
            return fn(*args)

        vm.context.pool_call = through
        np.testing.assert_array_equal(vm["main"](x), np.maximum(x, 0))
        assert seen == ([] if mode == "native" else [0]), mode
        np.testing.assert_array_equal(vm["main"](x=x), np.maximum(x, 0))
        assert seen == ([0] if mode == "native" else [0, 0]), mode  # by name: the checked path


def test_a_native_entry_wakes_sleeping_helpers_while_its_function_runs_jobs(threads) -> None:
    """The native entry's own `call_begin` / `call_end` (what `call` does, natively): a call
    wakes helpers asleep as it begins at first and while the function's last call that found
    them asleep ran a job; after one that ran none, they stay asleep."""
    if threads == 1:
        pytest.skip("no helper")
    asleep = lambda: poolstate.state[poolstate.SLEEPING * poolstate.LINE] == threads - 1  # noqa: E731
    nudges = lambda: int(poolstate.state[poolstate.NUDGE * poolstate.LINE])  # noqa: E731
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    vm = rvm.VirtualMachine(rvm.compile(rvm.script.parse(_RELU)), exec_mode="native")
    relu = vm["main"]
    relu(x)  # compiled now; its flag says whether this call ran a job: it ran none
    assert not vm.native_report().fallbacks
    for _ in range(3):
        assert _until(asleep)
        before = nudges()
        np.testing.assert_array_equal(relu(x), np.maximum(x, 0))
        assert nudges() == before  # left them asleep
    big = rvm.compile(rvm.script.parse(_PRODUCT))
    vm2 = rvm.VirtualMachine(big, exec_mode="native")
    a = np.ones((256, 512), np.float32)
    b = np.ones((512, 256), np.float32)
    np.testing.assert_array_equal(vm2["main"](a, b), np.full((256, 256), 512, np.float32))
    assert _until(asleep)
    before = nudges()
    vm2["main"](a, b)  # its last call ran a job: this one wakes them first
    assert nudges() > before


_PRODUCT = """
@module
class Product:
    @func
    def main(a: T[(256, 512), "float32"], b: T[(512, 256), "float32"]):
        return op.matmul(a, b)
"""


_RELU = """
@module
class Relu:
    @func
    def main(x: T[(2, 3), "float32"]):
        return op.relu(x)
"""
