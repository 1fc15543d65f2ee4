"""Compiling apart: Numba compiles in another process, and this process loads the object code.

A Numba compile keeps its compiler's memory in the process for good (LLVM's modules and
Numba's typing caches: about 2 MB per kernel, tens of MB for one of the library's large
functions), a load from Numba's cache about a tenth of that. A long-lived process that
compiles a lot (a test suite, a notebook, a server) grows by gigabytes. With isolation on
(`isolated`: ``RVM_JIT_ISOLATE=1`` on Linux), every compile of a function Numba caches on
disk (rvm's library functions, its tasks and entry points, jit kernels, native functions) is
done by another process, which writes the object code to Numba's cache; this process then
loads it from there. That process is, first, this process's compile server
(`rvm.kernels.compile_server`: one helper forked at the first compile apart that stays,
taking one request after another; `server`, ``RVM_JIT_SERVER=0`` turns it off), which
rebuilds the function by reference (its module imported, or a generated file run again: a
kernel's, or the native mode's with its kernels bound into it) and so spares a fork per
compile: a fork's CPU grows with the forking process (its page tables, the pages the helper
writes, its teardown), and a helper forked from a process that
only ever loaded object code initializes Numba's compiler again each time: a small cached
function took 0.09 s of CPU served against 0.13 s forked from a process whose Numba is
initialized (at 160 MB and at 1.7 GB resident alike) and 0.18 s from one whose Numba is not
(`benchmarks/compile_apart.py`, medians of 8, load 13). What the server cannot rebuild (a
function defined in another function or closing over values, a file run with a value bound
into it that it cannot describe as data, a module it imports from another file), or could not
compile for another reason than Numba's error (which a helper would meet too: that compile is
done here), or when another thread has it busy, goes to a forked helper as before: a fork
starts with everything this process has (nothing to import or initialize again) and leaves
with ``os._exit``.

`install()` puts this in place, once per process, on Numba's `Dispatcher.compile` and
`CFunc.compile`: a compile whose object code is not in the cache yet (`_cached`, read from
the cache's index through Numba's private ``_index_key`` / ``_cache_file``) goes to the
server or a helper first, when isolated, outside any other compile on this thread. Anything
neither leaves in the cache (it failed, or the function cannot be cached) is compiled here
as before, which also reports any error as Numba does; the server and the helpers are only
accelerators.

A compile of a cached function whose object code is not in the cache is done by one process
at a time (`built_once`): two processes sharing the cache that need the same function (two
test workers, a user's several processes, both with empty caches) no longer both compile it;
the second waits, under a file lock beside the function's cache (``fcntl.lockf``: released
by the system when its holder exits or is killed), for the first's build, then loads it. A
wait ends after `BUILD_WAIT` seconds (a hung builder): the waiter then compiles it itself.

`in_background(builds)` runs builds in forked helpers while this process goes on (work it
will likely need soon, such as the library tasks a model's first run takes), each build
claimed by one process: a helper, or this process when it needs the build first
(`Pending`).

`become_helper()` is what every forked helper does first (`rvm.jit.parallel`'s too): it
marks the process a helper (whose compiles stay in it), silences its output and gives it
function ids of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import gc
import hashlib
import itertools
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rvm.kernels import compile_request, compile_server

logger = logging.getLogger("rvm.jit")

_lock = threading.Lock()
_installed = False
_helper = False  # this process is a forked helper: its compiles stay in it
_state = threading.local()  # .depth: compiles this thread is inside
_counts = {"apart": 0, "failed": 0, "served": 0}
_check: Callable[[Path], bool] = lambda source: False  # noqa: E731 - set by `install`
_seal: Callable[[Path], None] = lambda source: None  # noqa: E731


def can_fork() -> bool:
    """Whether helpers are forks of this process (Linux; ``RVM_JIT_FORK=0`` turns it off)."""
    if os.environ.get("RVM_JIT_FORK", "").strip() == "0":
        return False
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def isolated() -> bool:
    """Whether this process leaves its compiles to forked helpers (``RVM_JIT_ISOLATE=1``,
    unless ``RVM_JIT_WORKERS=0`` turns the helpers off)."""
    if os.environ.get("RVM_JIT_WORKERS", "").strip() == "0":
        return False
    return os.environ.get("RVM_JIT_ISOLATE", "").strip() == "1" and can_fork()


def counts() -> dict[str, int]:
    """Compiles this process left to a helper: ``apart`` (done there, loaded here), of them
    ``served`` (by the compile server), and ``failed`` (the helper left nothing in the cache:
    compiled here)."""
    return dict(_counts)


def serving() -> bool:
    """Whether compiles apart go to the process's compile server first (`server`; on unless
    ``RVM_JIT_SERVER=0``)."""
    return os.environ.get("RVM_JIT_SERVER", "").strip() != "0"


def server() -> compile_server.Server | None:
    """This process's compile server (`rvm.kernels.compile_server`), or None when it is not
    to be used (`serving`, and helpers have none)."""
    if _helper or not serving() or not can_fork():
        return None
    return _server


def stop_server() -> None:
    """End this process's compile server, if one runs (the next compile apart starts one)."""
    _server.stop()


def become_helper() -> None:
    """What a forked helper does first: its compiles stay in it, its output goes nowhere
    (the parent reports), Numba names its functions apart from the parent's, and Python's
    garbage collections leave the objects it inherited alone (walking them would copy every
    page of the parent's heap into the helper)."""
    global _helper
    _helper = True
    gc.freeze()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    own_function_ids()


def own_function_ids() -> None:
    """Give this helper process function ids of its own. Numba names each function it compiles
    by a per-process counter (its symbols are ``module.name$id``), which a fork copies: a
    helper would name its functions as the parent names its own, and the parent links both
    (the helper's from the cache), so a same-named pair would resolve to one of them. A
    helper counts from its pid times 2**24 instead (Numba's private counter; left alone if
    it has none)."""
    from numba.core import bytecode

    if isinstance(getattr(bytecode.FunctionIdentity, "_unique_ids", None), itertools.count):
        bytecode.FunctionIdentity._unique_ids = itertools.count((os.getpid() << 24) + 1)


def install(check: Callable[[Path], bool], seal: Callable[[Path], None]) -> None:
    """Route Numba's compiles of cached functions through `compile_apart` (see the module
    docstring), once per process; what it does is decided at each compile (`isolated`).
    ``check(source)`` says whether the object code of a source file is what rvm sealed,
    ``seal(source)`` seals it (`rvm.kernels.numba_cache`, which installs this)."""
    global _installed, _check, _seal
    with _lock:
        if _installed:
            return
        _installed = True
        _check, _seal = check, seal
        from numba.core import sigutils
        from numba.core.ccallback import CFunc
        from numba.core.dispatcher import Dispatcher

        dispatch_compile, cfunc_compile = Dispatcher.compile, CFunc.compile

        def compile_dispatcher(self: Any, sig: Any) -> Any:
            args, _ = sigutils.normalize_signature(sig)
            if not getattr(self, "_can_compile", False) or tuple(args) in self.overloads:
                with _compiling():
                    return dispatch_compile(self, sig)
            with built_once(self._cache, sig, self.targetctx):
                if _wanted():
                    compile_apart(
                        self._cache,
                        sig,
                        self.targetctx,
                        lambda: dispatch_compile(self, sig),
                        lambda: compile_request.describe(self.py_func, sig, self._cache),
                    )
                with _compiling():
                    return dispatch_compile(self, sig)

        def compile_cfunc(self: Any) -> Any:
            target = self._targetdescr.target_context
            with built_once(self._cache, self._sig, target):
                if _wanted():
                    compile_apart(
                        self._cache,
                        self._sig,
                        target,
                        lambda: cfunc_compile(self),
                        lambda: compile_request.describe_cfunc(self),
                    )
                with _compiling():
                    return cfunc_compile(self)

        compile_dispatcher.__wrapped__ = dispatch_compile  # type: ignore[attr-defined]
        compile_cfunc.__wrapped__ = cfunc_compile  # type: ignore[attr-defined]
        Dispatcher.compile = compile_dispatcher
        CFunc.compile = compile_cfunc


def _wanted() -> bool:
    """Whether a compile starting now goes to a helper first: isolated, not a helper, and not
    inside another compile on this thread (that one's helper compiles what it calls)."""
    return not _helper and getattr(_state, "depth", 0) == 0 and isolated()


@contextlib.contextmanager
def _compiling() -> Iterator[None]:
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def compile_apart(
    cache: Any,
    sig: Any,
    target: Any,
    compile_here: Callable[[], Any],
    request: Callable[[], compile_request.Request | None] = lambda: None,
) -> bool:
    """Have ``sig`` compiled into Numba's ``cache`` by another process, unless the cache has it
    already (or it is not a disk cache): by the compile server (``request()``: what it
    compiles, `rvm.kernels.compile_server`), else by running ``compile_here`` (a compile of
    ``sig`` that saves to the cache) in a forked helper; True if either left it in the cache
    (this process's compile then loads it)."""
    if _cached(cache, sig, target) is not False:
        return False
    start = time.perf_counter()
    served = _served(cache, sig, target, request)
    if served:
        _counts["apart"] += 1
        _counts["served"] += 1
        logger.debug("%s: compiled by the compile server (%.3f s)", _name(cache), _since(start))
        return True
    if served is None:  # Numba's error there: a helper's compile would fail alike
        _counts["failed"] += 1
        logger.debug("%s: the compile server failed to compile it: compiled here", _name(cache))
        return False
    from numba.core.compiler_lock import global_compiler_lock

    try:
        with global_compiler_lock:  # no other thread is inside Numba while it forks
            pid = os.fork()
    except OSError as err:
        logger.debug("no helper process (%s): compiling in this one", err)
        return False
    if pid == 0:
        code = 1
        try:
            become_helper()
            compile_here()
            _seal(_source(cache))  # what this process's compile wrote, sealed
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    done = os.waitstatus_to_exitcode(status) == 0 and _cached(cache, sig, target) is True
    _counts["apart" if done else "failed"] += 1
    how = "by a helper" if done else "here, its helper left nothing in the cache"
    logger.debug("%s: compiled %s (%.3f s)", _name(cache), how, _since(start))
    return done


def _served(
    cache: Any, sig: Any, target: Any, request: Callable[[], compile_request.Request | None]
) -> bool | None:
    """Whether the compile server compiled ``sig`` into ``cache`` (False: it could not, is
    busy with another thread's request, or is off; None: Numba raised its error compiling it
    there)."""
    handle = server()
    if handle is None:
        return False
    wanted = request()
    if wanted is None:
        return False
    with handle.reserved() as mine:
        if not mine:
            return False
        done = handle.compile(wanted)
        if not done:
            return done
    return _cached(cache, sig, target) is True


def _name(cache: Any) -> str:
    return getattr(getattr(cache, "_py_func", None), "__qualname__", "?")


def _since(start: float) -> float:
    return time.perf_counter() - start


def _cached(cache: Any, sig: Any, target: Any) -> bool | None:
    """Whether Numba's ``cache`` holds object code of ``sig`` for ``target`` (a target
    context), read from its index; None when it is no disk cache, this Numba's cache differs
    (its private ``_index_key`` / ``_cache_file``), or its object code is not what rvm sealed
    (`install`'s ``check``: the index is a pickle, read only once
    its seal is checked; Numba's own path then drops it, or loads it, as without helpers)."""
    try:
        if not getattr(cache, "_enabled", False):
            return None
        if not Path(cache._cache_file._index_path).exists():
            return False
        if not _check(_source(cache)):
            return None  # unsealed or changed: never unpickled here (Numba's own path checks)
        key = cache._index_key(sig, target.codegen())
        return key in cache._cache_file._load_index()
    except Exception as err:  # noqa: BLE001 - unknown: compiled here, as without isolation
        logger.debug("cache index unreadable (%s: %s): compiled here", type(err).__name__, err)
        return None


# How long a compile waits for another process's build of the same function (`built_once`)
# before compiling it itself: a bound for a builder that hangs (one that exits or is killed
# releases its lock at once), far above a build's seconds.
BUILD_WAIT = 300.0
BUILD_LOCK = "build"  # the suffix of a build's lock file, beside the function's cache index
_held: set[str] = set()  # the build locks this process holds
os.register_at_fork(after_in_child=_held.clear)


@contextlib.contextmanager
def built_once(cache: Any, sig: Any, target: Any) -> Iterator[None]:
    """Within: this process builds ``sig`` of the function Numba's ``cache`` caches (a
    compile, or a load once another process has built it), no other process sharing the
    cache building it at the same time. When another holds its build lock
    (`build_lock_path`), this one waits until that one lets it go (it exits or is killed: the
    system releases its lock) or the cache has the build, at most `BUILD_WAIT` seconds, then
    goes on (a load, or its own compile).

    Nothing is locked for a cache not on disk or that has the build already, nor when the
    lock's folder is not writable. A lock held by this process (another thread's compile:
    Numba orders them) or by its parent (a helper or compile server compiling what its
    parent holds the lock of, and waits for) is not waited for."""
    path = build_lock_path(cache, sig)
    if path is None or path in _held or _cached(cache, sig, target) is not False:
        yield
        return
    try:
        import fcntl

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except (ImportError, OSError):
        yield
        return
    mine = False
    try:
        mine = _wait_for_lock(fd, fcntl, cache, sig, target)
        if mine:
            _held.add(path)
            with contextlib.suppress(OSError):  # who holds it, for its helpers and the log
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        if mine:
            _held.discard(path)
        os.close(fd)  # releases the lock


def build_lock_path(cache: Any, sig: Any) -> str | None:
    """The lock file of the build of ``sig`` by Numba's ``cache`` (beside its index: one per
    function and signature), or None when it is no disk cache (or this Numba's differs)."""
    from numba.core import sigutils

    try:
        if not getattr(cache, "_enabled", False):
            return None
        index = str(cache._cache_file._index_path)
        args, _ = sigutils.normalize_signature(sig)
    except Exception:  # noqa: BLE001 - not a cache this knows: unlocked
        return None
    digest = hashlib.sha256(str(tuple(args)).encode()).hexdigest()[:16]
    return f"{index.removesuffix('.nbi')}.{digest}.{BUILD_LOCK}"


def _wait_for_lock(fd: int, fcntl: Any, cache: Any, sig: Any, target: Any) -> bool:
    """Take the lock on ``fd`` (True), or go on without it (False): its holder is this
    process's parent, the cache has the build, `BUILD_WAIT` seconds passed, or the file
    system has no locks."""
    start = time.perf_counter()
    pause = 0.01
    holder = 0
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EACCES, errno.EAGAIN):  # not held by another process
                logger.debug("%s: no build lock (%s)", _name(cache), err)
                return False
        else:
            if holder:
                _built_by(cache, holder, start)
            return True
        if not holder:
            holder = _holder(fd)  # 0 until the holder wrote it
            if holder == os.getppid():
                return False  # the parent waits for this process's compile
            if holder:
                logger.debug("%s: waiting for process %d's build", _name(cache), holder)
        elif _cached(cache, sig, target) is True:
            _built_by(cache, holder, start)
            return False
        if _since(start) > BUILD_WAIT:
            logger.info(
                "%s: process %d has been building it for %.0f s: built here too",
                _name(cache),
                holder,
                _since(start),
            )
            return False
        time.sleep(pause)
        pause = min(2 * pause, 0.2)


def _built_by(cache: Any, holder: int, start: float) -> None:
    logger.debug("%s: built by process %s (waited %.3f s)", _name(cache), holder, _since(start))


def _holder(fd: int) -> int:
    """The pid the holder of the build lock ``fd`` wrote in it (0: none yet)."""
    try:
        return int(os.pread(fd, 32, 0) or b"0")
    except (OSError, ValueError):
        return 0


class Pending:
    """A build `in_background` handed to its helpers: whichever process claims it first
    builds it (a helper, or this process when it needs the build before any helper started
    it: `take`)."""

    def __init__(self, claims: Path, k: int) -> None:
        self.done = threading.Event()  # set once a helper built it (or gave up), or all exited
        self._claim = claims / str(k)
        self._mine = False

    def take(self) -> bool:
        """Whether this process may build it now: done, taken here before, or claimed here
        now (no helper started it); False: a helper is building it (wait for `done`)."""
        if self.done.is_set() or self._mine:
            return True
        self._mine = _claimed(self._claim) is not False
        return self._mine or self.done.is_set()


def _claimed(path: Path) -> bool | None:
    """Whether this process is the first to claim ``path`` (None: its folder is gone)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:
        return None
    return True


def background_helpers(builds: int) -> int:
    """How many helpers `in_background` starts for ``builds`` builds: one per CPU but this
    process's (which takes its share as it needs them: `Pending.take`), at least one."""
    return max(1, min(builds, (os.cpu_count() or 1) - 1))


def in_background(builds: Sequence[Callable[[], object]]) -> list[Pending] | None:
    """Run ``builds`` (each compiling into Numba's cache) in forked helpers while this process
    goes on (`background_helpers` of them); None when no helper can start (not on Linux), else
    one `Pending` per build. ``builds`` come in the order this process will need them: each
    helper claims the last one no process has claimed yet, so this process, taking the first
    ones as it needs them (`Pending.take`), meets the helpers in the middle rather than
    waiting for a build a helper has not reached. A build a helper took is done once its
    event is set (built, failed, or every helper has exited: whoever waits then loads or
    compiles it as usual). Helpers still running when this process exits are ended."""
    if not can_fork() or _helper or not builds:
        return None
    from numba.core.compiler_lock import global_compiler_lock

    claims = Path(tempfile.mkdtemp(prefix="rvm-builds-"))
    pending = [Pending(claims, k) for k in range(len(builds))]
    read, write = os.pipe()
    pids = []
    for _ in range(background_helpers(len(builds))):
        try:
            with global_compiler_lock:  # no other thread is inside Numba while it forks
                pid = os.fork()
        except OSError as err:
            logger.debug("no background helper (%s)", err)
            break
        if pid == 0:
            try:
                os.close(read)
                become_helper()
                _build_claimed(builds, claims, write)
            finally:
                os._exit(0)
        pids.append(pid)
    os.close(write)
    if not pids:
        os.close(read)
        shutil.rmtree(claims, ignore_errors=True)
        return None
    _background.update(pids)
    _claim_folders.add(claims)

    def watch() -> None:  # sets each build's event as its helper reports it, then reaps them
        with os.fdopen(read, "rb", buffering=0) as pipe:
            while (k := _read_index(pipe)) is not None:
                pending[k].done.set()
        for p in pending:
            p.done.set()
        for pid in pids:
            os.waitpid(pid, 0)
            _background.discard(pid)
        shutil.rmtree(claims, ignore_errors=True)
        _claim_folders.discard(claims)

    threading.Thread(target=watch, name="rvm-background-build", daemon=True).start()
    return pending


def _build_claimed(builds: Sequence[Callable[[], object]], claims: Path, report: int) -> None:
    """A background helper's loop: each build it claims, last first, then its index reported
    (two bytes: one write, never split on a pipe)."""
    for k in reversed(range(len(builds))):
        if _claimed(claims / str(k)):
            with contextlib.suppress(Exception):  # whoever needs it compiles it, reports
                builds[k]()
            os.write(report, k.to_bytes(2, "little"))


def _read_index(pipe: Any) -> int | None:
    """The next build index a helper reported, None once every helper has closed the pipe."""
    data = b""
    while len(data) < 2:
        more = pipe.read(2 - len(data))
        if not more:
            return None
        data += more
    return int.from_bytes(data, "little")


_server = compile_server.Server(
    become_helper, lambda source: _seal(source), lambda source: _check(source)
)

_background: set[int] = set()  # helpers of `in_background` still running
_claim_folders: set[Path] = set()  # their claims, removed once they have all exited


@atexit.register
def _stop_background() -> None:
    """End the background helpers still running when this process exits (their work was
    not needed; a process's helpers do not outlive it), and the compile server if it is
    idle, else killed (`compile_server.Server.stop_at_exit`), reaped either way."""
    _server.stop_at_exit()
    for pid in list(_background):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    for folder in list(_claim_folders):
        shutil.rmtree(folder, ignore_errors=True)


def _source(cache: Any) -> Path:
    """The source file of the function Numba's ``cache`` caches."""
    return Path(cache._py_func.__code__.co_filename)
