"""Compiles apart (`rvm.kernels.apart`): with isolation on, what Numba compiles for its disk
cache compiles in a forked helper and this process loads it; a helper that fails leaves the
compile (and its error) to this process; `in_background` and `rvm.kernels.parfor.prefetch`
build while the process goes on; a build another process holds the lock of is waited for."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from numba.core import types
from numba.core.errors import TypingError

from rvm.kernels import apart, numba_cache

pytestmark = pytest.mark.skipif(not apart.can_fork(), reason="helpers are forks (Linux)")

HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"

MODULE = """
import numba as nb
import numpy as np

@nb.njit(cache=True)
def scale(x, k):
    return x * k

@nb.njit(cache=True)
def broken(x):
    return x.no_such_attribute

def body(a, b):
    return a * b + {tag}

add_mul = nb.cfunc("float64(float64, float64)", cache=True)(body)
"""


def _module(tmp_path: Path, monkeypatch, tag: int):
    """A new module of cached Numba functions in ``tmp_path`` (its own Numba cache there)."""
    from numba.core import config

    monkeypatch.setattr(config, "CACHE_DIR", str(tmp_path / "numba"))
    path = tmp_path / f"apart_mod_{tag}.py"
    path.write_text(MODULE.format(tag=tag))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, path.stem, module)  # Numba's cache loads name it
    spec.loader.exec_module(module)
    return module


def test_isolated_compiles_in_a_helper_and_loads_here(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RVM_JIT_ISOLATE", "1")
    monkeypatch.delenv("RVM_JIT_WORKERS", raising=False)
    numba_cache.install()
    before = apart.counts()
    mod = _module(tmp_path, monkeypatch, 1)  # its cfunc compiles at definition
    np.testing.assert_array_equal(mod.scale(np.arange(4.0), 3.0), np.arange(4.0) * 3.0)
    assert mod.scale(2, 5) == 10  # another signature: another helper
    assert sum(mod.scale.stats.cache_hits.values()) == 2  # both loaded, none compiled here
    assert not sum(mod.scale.stats.cache_misses.values())
    assert mod.add_mul.cache_hits == 1
    assert mod.add_mul.ctypes(2.0, 3.0) == 7.0
    after = apart.counts()
    assert after["apart"] - before["apart"] == 3 and after["failed"] == before["failed"]


def test_a_failing_compile_is_compiled_here_and_reports_its_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RVM_JIT_ISOLATE", "1")
    monkeypatch.delenv("RVM_JIT_WORKERS", raising=False)
    numba_cache.install()
    mod = _module(tmp_path, monkeypatch, 2)
    before = apart.counts()
    with pytest.raises(TypingError, match="no_such_attribute"):
        mod.broken(np.arange(3.0))
    assert apart.counts()["failed"] == before["failed"] + 1


def test_without_isolation_this_process_compiles(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RVM_JIT_ISOLATE", "0")
    numba_cache.install()
    before = apart.counts()
    mod = _module(tmp_path, monkeypatch, 3)
    assert mod.scale(2.0, 4.0) == 8.0
    assert sum(mod.scale.stats.cache_misses.values()) == 1  # compiled here
    assert apart.counts() == before


def test_in_background_builds_in_another_process(tmp_path: Path) -> None:
    out = tmp_path / "pids"

    def build(k: int):
        return lambda: out.with_suffix(f".{k}").write_text(str(os.getpid()))

    def fails() -> None:
        raise RuntimeError("a build that fails")

    pending = apart.in_background([build(0), fails, build(2)])
    assert pending is not None and len(pending) == 3
    assert all(p.done.wait(60) for p in pending)
    for k in (0, 2):  # the failing build did not stop the next one
        assert int(out.with_suffix(f".{k}").read_text()) != os.getpid()
    assert all(p.take() for p in pending)  # done: this process may load them


def test_this_process_takes_the_builds_no_helper_started(tmp_path: Path) -> None:
    """Helpers take the builds from the last; one that no helper has started when this
    process needs it is this process's to build (`take`), never built again by a helper;
    one a helper is building is waited for."""
    helpers = apart.background_helpers(1 + max(1, (os.cpu_count() or 1) - 1))
    go = tmp_path / "go"

    def blocker(k: int):
        def build() -> None:
            (tmp_path / f"started.{k}").write_text(str(os.getpid()))
            while not go.exists():
                time.sleep(0.01)

        return build

    def first() -> None:
        (tmp_path / "first").write_text(str(os.getpid()))

    pending = apart.in_background([first, *(blocker(k) for k in range(helpers))])
    assert pending is not None
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("started.*"))) < helpers and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(list(tmp_path.glob("started.*"))) == helpers  # each helper holds a blocker
    assert not pending[1].take()  # a helper is building it: wait
    assert pending[0].take() and pending[0].take()  # no helper started it: this process's
    go.touch()
    assert all(p.done.wait(60) for p in pending[1:])
    assert pending[0].done.wait(60)  # every helper has exited
    assert not (tmp_path / "first").exists()  # no helper built the build taken here


LINGER = """
import os, sys, time
from rvm.kernels import apart, numba_cache

def build():
    with open(sys.argv[1] + ".part", "w") as f:
        f.write(str(os.getpid()))
    os.replace(sys.argv[1] + ".part", sys.argv[1])  # never seen empty
    time.sleep(300)

apart.in_background([build])
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
"""


def test_background_helpers_end_with_their_process(tmp_path: Path) -> None:
    out = tmp_path / "pid"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    subprocess.run([sys.executable, "-c", LINGER, str(out)], env=env, check=True, timeout=120)
    deadline = time.monotonic() + 60  # a loaded machine may run the ending helper late
    while time.monotonic() < deadline:  # gone, or a zombie no one has reaped yet
        try:
            state = Path(f"/proc/{int(out.read_text())}/stat").read_text().rsplit(")", 1)[1]
        except FileNotFoundError:
            return
        if state.split()[0] in ("Z", "X"):
            return
        time.sleep(0.01)
    raise AssertionError("the background helper outlived its process")


PREFETCH = """
import json, sys
from rvm.kernels import blas, parfor
started = parfor.prefetch([("gemv", "float64"), ("no_such_task", "float64")])
parfor._prefetched["gemv", "float64"].done.wait(600)  # a helper took it, and built it
parfor.require_task("gemv", "float64")
cfunc = parfor._compiled["gemv", "float64"]
print(json.dumps({"started": started, "hits": cfunc.cache_hits,
                  "tasks": parfor.required_tasks()}))
"""


def test_prefetched_tasks_are_loaded_not_built(tmp_path: Path) -> None:
    """A task built in the background is waited for, then loaded from the cache (a fresh
    process, fresh caches: the helper compiled it)."""
    env = {
        **os.environ,
        "RVM_CACHE_DIR": str(tmp_path / "rvm"),
        "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
        "RVM_JIT_ISOLATE": "0",
        "PYTHONPATH": str(SRC),
    }
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PREFETCH)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"started": 1, "hits": 1, "tasks": [["gemv", "float64"]]}


def _lock_holder(mod, sig, then=lambda: None) -> tuple[int, int]:
    """Fork a process that takes the build lock of ``mod.scale`` for ``sig`` (`built_once`),
    waits for a byte on the pipe returned, runs ``then`` and exits; (its pid, the pipe)."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(go_w)  # end of file once the test closes its end
            with apart.built_once(mod.scale._cache, sig, mod.scale.targetctx):
                os.write(ready_w, b"1")
                os.read(go_r, 1)
                then()
            code = 0
        finally:
            os._exit(code)
    os.read(ready_r, 1)  # it holds the lock
    for fd in (ready_r, ready_w, go_r):
        os.close(fd)
    return pid, go_w


class _Lines(logging.Handler):
    def __init__(self, wanted: str) -> None:
        super().__init__(logging.DEBUG)
        self.wanted, self.seen, self.lines = wanted, threading.Event(), []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if self.wanted in self.lines[-1]:
            self.seen.set()


@pytest.fixture
def jit_lines():
    """The ``rvm.jit`` logger's lines, at debug level, while the test runs."""
    logger = logging.getLogger("rvm.jit")
    handler = _Lines("waiting for process")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_a_build_another_process_holds_is_waited_for_then_loaded(
    tmp_path, monkeypatch, jit_lines
) -> None:
    """Two processes needing one function with empty caches compile it once: the second
    waits for the first's build (its lock), then loads it from the cache."""
    monkeypatch.setenv("RVM_JIT_ISOLATE", "0")  # this process compiles what it does not load
    numba_cache.install()
    mod = _module(tmp_path, monkeypatch, 4)
    pid, go = _lock_holder(mod, (types.float64, types.float64), lambda: mod.scale(1.0, 2.0))

    def release() -> None:  # once this process waits for it, the holder compiles and exits
        jit_lines.seen.wait(120)
        os.write(go, b"1")

    threading.Thread(target=release, daemon=True).start()
    assert mod.scale(2.0, 3.0) == 6.0
    _, status = os.waitpid(pid, 0)
    os.close(go)
    assert os.waitstatus_to_exitcode(status) == 0
    assert f"scale: waiting for process {pid}'s build" in jit_lines.lines
    assert sum(mod.scale.stats.cache_hits.values()) == 1  # loaded what the holder compiled
    assert not sum(mod.scale.stats.cache_misses.values())


@pytest.mark.parametrize("holder", ["killed", "hung"])
def test_a_killed_or_hung_builder_blocks_no_one(tmp_path, monkeypatch, jit_lines, holder) -> None:
    """A builder that is killed releases its lock at once (the system's); one that hangs is
    waited for `BUILD_WAIT` seconds at most: either way this process compiles it."""
    monkeypatch.setenv("RVM_JIT_ISOLATE", "0")
    monkeypatch.setattr(apart, "BUILD_WAIT", 0.3 if holder == "hung" else 600.0)
    numba_cache.install()
    mod = _module(tmp_path, monkeypatch, 5)
    pid, go = _lock_holder(mod, (types.float64, types.float64))
    if holder == "killed":
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert mod.scale(2.0, 3.0) == 6.0
    assert sum(mod.scale.stats.cache_misses.values()) == 1  # compiled here
    timed_out = any("built here too" in line for line in jit_lines.lines)
    assert timed_out == (holder == "hung")
    os.close(go)  # the hung holder reads end of file, exits
    if holder == "hung":
        os.waitpid(pid, 0)
