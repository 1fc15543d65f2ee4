"""The compile server (`rvm.kernels.compile_server`): with isolation on, a compile apart goes
to one forked server that stays, which rebuilds the function by reference and writes Numba's
cache; a server that dies is replaced (its request goes to a forked helper), it ends with its
parent, and threads compiling at once all get their code."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numba as nb
import numpy as np
import pytest
from numba.core.errors import TypingError

from rvm.kernels import apart, compile_request, numba_cache
from rvm.runtime.loading.loader import exec_module_file
from rvm.runtime.modes import native_constants

pytestmark = pytest.mark.skipif(not apart.can_fork(), reason="the server is a fork (Linux)")

MODULE = """
import numba as nb

@nb.njit("float64(float64)", cache=True)
def twice(x):
    return 2.0 * x + {tag}

@nb.njit(cache=True)
def scale(x, k):
    return x * k + {tag}

def halve(x):
    return 0.5 * x + {tag}
"""


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Isolation and the server on, Numba's cache in ``tmp_path``; the folder for modules."""
    from numba.core import config

    monkeypatch.setenv("RVM_JIT_ISOLATE", "1")
    monkeypatch.delenv("RVM_JIT_WORKERS", raising=False)
    monkeypatch.delenv("RVM_JIT_SERVER", raising=False)
    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba"))
    numba_cache.install()
    return tmp_path


def _generated(folder: Path, monkeypatch: pytest.MonkeyPatch, tag: int):
    """A generated module of cached functions, run as rvm runs its kernel files (so a server
    may run it again); ``twice`` compiles as it is defined."""
    path = folder / f"served_{tag}_{os.getpid()}.py"
    path.write_text(MODULE.format(tag=tag))
    monkeypatch.delitem(sys.modules, path.stem, raising=False)
    module = exec_module_file(path, path.stem)
    monkeypatch.setitem(sys.modules, path.stem, module)
    return module


def test_a_compile_is_served_and_loaded_here(isolated: Path, monkeypatch) -> None:
    before = apart.counts()
    mod = _generated(isolated, monkeypatch, 1)  # twice: served at its definition
    assert mod.scale(2.0, 4.0) == 9.0  # a lazy compile: served too
    after = apart.counts()
    assert after["served"] - before["served"] == 2
    assert after["apart"] - before["apart"] == 2 and after["failed"] == before["failed"]
    assert mod.twice(3.0) == 7.0
    assert sum(mod.twice.stats.cache_hits.values()) == 1  # loaded here, not compiled
    assert sum(mod.scale.stats.cache_hits.values()) == 1
    # Served by another process (the counts above), never this one; it may since have
    # retired (its own memory past `compile_server.RETIRE_BYTES`) or ended: pid 0, seen once
    # in a loaded clean-clone run of the suite after both requests were served.
    assert apart.server().pid() != os.getpid()


def test_a_callback_made_at_run_time_is_served(isolated: Path, monkeypatch) -> None:
    """A C callback made at run time from a module's plain function (as the library's tasks
    and entry points are: `rvm.kernels.parfor.require_task`) is made again by the server, with
    the same signature and options, and loaded here; one of a closure goes to a helper."""
    mod = _generated(isolated, monkeypatch, 5)
    before = apart.counts()
    made = nb.cfunc("float64(float64)", cache=True, error_model="numpy")(mod.halve)
    after = apart.counts()
    assert after["served"] - before["served"] == 1 and after["apart"] - before["apart"] == 1
    assert made._cache_hits == 1  # loaded here, not compiled
    assert made.ctypes(3.0) == 6.5
    request = compile_request.describe_cfunc(made)
    assert (request.qualname, request.made is not None) == ("halve", True)

    k = 2.0

    def closure(x):  # noqa: ANN001, ANN202 - not its module's own: never sent
        return x * k

    assert compile_request.describe_cfunc(nb.cfunc("float64(float64)")(closure)) is None


def test_a_dead_server_is_replaced_and_its_compile_done_anyway(isolated, monkeypatch) -> None:
    server = apart.server()
    _generated(isolated, monkeypatch, 2)
    dead = server.pid()
    os.kill(dead, signal.SIGKILL)
    before = apart.counts()
    mod = _generated(isolated, monkeypatch, 3)  # the request finds it dead: a forked helper
    assert mod.twice(1.0) == 5.0
    assert sum(mod.twice.stats.cache_hits.values()) == 1
    assert mod.scale(1.0, 2.0) == 5.0  # the next request starts another server
    after = apart.counts()
    assert after["apart"] - before["apart"] == 2 and after["failed"] == before["failed"]
    assert after["served"] - before["served"] == 1
    assert server.pid() not in (0, dead)


BOUND = """
import numba as nb
from rvm.runtime.modes.native_constants import bound

@nb.njit(cache=True)
def use(x):
    return twice(x) + table.sum() + bound({slot!r}, (3,), nb.float64).sum()

@nb.njit(cache=True)
def broken(x):
    return x.no_such_attribute
"""


def _bound_module(folder: Path, monkeypatch, tag: int, namespace: dict):
    """A generated module run with ``namespace`` bound as its globals (as the native mode runs
    its file), reading a native constant's slot its process bound."""
    slot = f"rvm_test_slot_{tag}_{os.getpid()}"
    path = folder / f"bound_{tag}_{os.getpid()}.py"
    path.write_text(BOUND.format(slot=slot))
    monkeypatch.delitem(sys.modules, path.stem, raising=False)
    release = native_constants.bind(slot, np.array([1.0, 2.0, 3.0]))
    module = exec_module_file(path, path.stem, dict(namespace))
    monkeypatch.setitem(sys.modules, path.stem, module)
    return module, release


def test_a_file_run_with_values_bound_into_it_is_served(isolated, monkeypatch, caplog) -> None:
    """A file run with a kernel and an array bound into it (the native mode's) is run again by
    the server with the same values, rebuilt from data (the kernel by reference: its own file
    run again, the array pickled), the native constant's slot made there as its read is
    typed; its code equals what a forked helper builds. A value that cannot be described (a
    closure) sends it to a forked helper, as does a dead server."""
    kernel = _generated(isolated, monkeypatch, 40)
    table = np.arange(4.0)
    expected = 2.0 * 1.5 + 40 + 6.0 + 6.0
    served = []
    for tag in (42, 41):  # the text forked (the server off), then the same text served
        if tag == 41:
            monkeypatch.delenv("RVM_JIT_SERVER")
        else:
            monkeypatch.setenv("RVM_JIT_SERVER", "0")
        before = apart.counts()
        mod, release = _bound_module(
            isolated, monkeypatch, tag, {"twice": kernel.twice, "table": table}
        )
        assert mod.use(1.5) == expected
        release()
        after = apart.counts()
        assert after["apart"] - before["apart"] == 1 and after["failed"] == before["failed"]
        served.append(after["served"] - before["served"])
        assert sum(mod.use.stats.cache_hits.values()) == 1  # loaded here, not compiled
    assert served == [0, 1]
    caplog.set_level(logging.DEBUG, logger="rvm.jit")
    with pytest.raises(TypingError, match="no_such_attribute"):
        mod.broken(1.5)  # Numba's error in a helper too: no helper forked, compiled here
    assert "helper" not in caplog.text and "failed to compile it: compiled here" in caplog.text
    before = apart.counts()
    closure = lambda x: x  # noqa: E731 - not describable as data
    mod, release = _bound_module(
        isolated, monkeypatch, 43, {"twice": kernel.twice, "table": table, "f": closure}
    )
    assert mod.use(1.5) == expected
    release()
    os.kill(apart.server().pid(), signal.SIGKILL)
    mod, release = _bound_module(isolated, monkeypatch, 44, {"twice": kernel.twice, "table": table})
    assert mod.use(1.5) == expected  # its server found dead: a forked helper
    release()
    after = apart.counts()
    assert after["apart"] - before["apart"] == 2 and after["failed"] == before["failed"]
    assert after["served"] == before["served"]


def test_two_threads_compiling_at_once(isolated: Path, monkeypatch) -> None:
    mods = [_generated(isolated, monkeypatch, 10 + k) for k in range(2)]
    start, results, errors = threading.Barrier(2), {}, []

    def compile_in(k: int) -> None:
        try:
            start.wait(10)
            results[k] = mods[k].scale(np.arange(3.0), 2.0)  # one served, one maybe forked
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    before = apart.counts()
    threads = [threading.Thread(target=compile_in, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)  # a loaded machine compiles slowly; a missing result fails below
    assert not errors
    for k in range(2):
        np.testing.assert_array_equal(results[k], np.arange(3.0) * 2.0 + 10 + k)
        assert sum(mods[k].scale.stats.cache_hits.values()) == 1  # both compiled apart
    assert apart.counts()["apart"] - before["apart"] == 2


def test_the_server_ends_with_its_process(isolated: Path, monkeypatch) -> None:
    """A process that started a server and exits takes it along (end of file on its
    socket; killed with it)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child with its own server
        code = 1
        try:
            os.close(read)
            _generated(isolated, monkeypatch, 20)
            os.write(write, str(apart.server().pid()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        served_by = int(pipe.read() or 0)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert served_by > 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # gone, or a zombie nobody has reaped yet
        try:
            stat = Path(f"/proc/{served_by}/stat").read_text().rsplit(")", 1)[1]
        except FileNotFoundError:
            return
        if stat.split()[0] in ("Z", "X"):
            return
        time.sleep(0.01)
    raise AssertionError("the compile server outlived its process")


def test_an_idle_server_is_reaped_at_exit(isolated: Path, monkeypatch) -> None:
    """At exit (`apart`'s atexit handler) an idle server is ended and reaped by its process,
    so its CPU counts as that process's child's (``time``, ``getrusage``), not as an
    orphan's."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child with its own server, running the atexit handler itself
        code = 1
        try:
            os.close(read)
            _generated(isolated, monkeypatch, 30)
            served_by = apart.server().pid()
            apart._stop_background()
            gone = served_by > 0 and not Path(f"/proc/{served_by}").exists()
            os.write(write, b"reaped" if gone else b"running")
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = pipe.read()
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert said == "reaped"


def test_a_busy_server_is_killed_and_reaped_at_exit(isolated: Path, monkeypatch) -> None:
    """At exit, a server a (daemon) thread is still using is killed and reaped all the same:
    its CPU counts as the process's child's."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child whose server another thread holds, running the atexit handler
        code = 1
        try:
            os.close(read)
            _generated(isolated, monkeypatch, 31)
            server = apart.server()
            served_by = server.pid()
            assert server._lock.acquire(blocking=False)  # as a thread mid-request holds it
            apart._stop_background()
            gone = served_by > 0 and not Path(f"/proc/{served_by}").exists()
            os.write(write, b"reaped" if gone else b"running")
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = pipe.read()
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert said == "reaped"


def test_off_compiles_in_a_forked_helper(isolated: Path, monkeypatch) -> None:
    monkeypatch.setenv("RVM_JIT_SERVER", "0")
    assert apart.server() is None
    before = apart.counts()
    mod = _generated(isolated, monkeypatch, 30)
    assert mod.twice(0.5) == 31.0
    after = apart.counts()
    assert after["apart"] - before["apart"] == 1 and after["served"] == before["served"]


def test_only_plain_values_travel_as_data() -> None:
    # An array or dtype holding Python objects never goes as data: its pickle would rebuild
    # those objects by their own code in the server (the value goes the forked way instead).
    assert compile_request.binding(np.zeros(3, np.float32))[0] == "data"
    assert compile_request.binding(np.array([1, None], dtype=object)) is None
    assert compile_request.binding(np.dtype([("a", "O")])) is None
