"""A compile server: one forked helper that compiles, one request after another, what
`rvm.kernels.apart` would otherwise fork a helper for each time.

A fork costs CPU that grows with the forking process (its page tables copied, the pages the
helper's compile writes copied again, all of it torn down at the helper's exit), and a helper
forked from a process that only ever loaded object code initializes Numba's compiler again
(`benchmarks/compile_apart.py`). The server is forked once (`Server`, at the first request)
and stays; each request names what to compile by reference, never by object
(`rvm.kernels.compile_request`), so the server rebuilds it as its own:

- a function (`Request`): its module's name and file, its qualified name and first line, and
  the signature. The server imports the module the usual way (it must come from the same
  file), or, for a file rvm generated and ran (a jit kernel's file; the native mode's, its
  kernels bound as globals before it ran: `replayable`), runs that file again as the same
  module (its text checked against the hash the parent ran), the same values bound first,
  rebuilt from data (`binding`: a module-level object by its module and qualified name, that
  module run again or imported in turn; an array or a scalar pickled); importing or running
  a module compiles its eagerly compiled functions, and the function itself is compiled for
  the signature if it is not yet. A C callback made at run time from a module's plain
  function (the library's tasks and entry points: `rvm.kernels.parfor`, `rvm.kernels.entry`)
  is made again there from that function, its signature, options and locals sent with the
  request (`describe_cfunc`), rather than a helper forked from the parent for each (a
  fork's system time, and Numba's overloads they share, np.empty, min, max..., typed again).
  Before each compile of a function of a file run with values bound into it, the server
  checks the file's object code is what rvm sealed (``check``, as the native mode's guard
  checks before each load in the parent), else leaves it to the parent. A function that is
  not a module's own (defined in another function, closing over values), or of a file with a
  bound value that is neither, is never sent.
- a call (`call`): a module-level function of an importable module with arguments that
  pickle, run there (`rvm.jit.parallel` sends a model's missing kernels as one call).

The server writes what it compiles into Numba's disk cache, as a forked helper does, and the
parent loads it from there after checking the cache has it (`rvm.kernels.apart`). Anything
the server cannot rebuild or compile is left to the parent's usual way (a forked helper, or
its own compile, which reports errors as Numba does): the server is an accelerator, never
needed for a right answer. It follows the parent's Numba cache folder (``config.CACHE_DIR``,
sent with each request) but not other changes the parent made after the fork (a module's
global reassigned at run time): as Numba's own cache, which keys a function by its bytecode
and closure and reuses it whatever its globals were when it compiled.

Lifetime: the server reads requests from a socket whose other end only the parent holds
open for long, so it exits at the parent's exit (end of file), and, forked from the main
thread, is killed when the parent dies (``PR_SET_PDEATHSIG``). At a normal exit the parent
ends its server (kills one a daemon thread is using) and reaps it (`Server.stop_at_exit`), so
its CPU counts as the parent's child's (``time``, ``getrusage``) rather than an orphan's nobody
counts. A server that dies (a crash in LLVM) is replaced at the next request (after
`MAX_DEATHS` deaths the process forks helpers as before); one whose compiles have grown it
past `RETIRE_BYTES` of its own memory retires after its reply (a Numba compile keeps its
memory for good) and the next request forks a fresh one. One request at a time: a thread
finding the server busy forks a helper as before, so threads still compile side by side.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import pickle
import resource
import signal
import socket
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from rvm.kernels.compile_request import Binding, Replay, Request, attribute

logger = logging.getLogger("rvm.jit")

MAX_DEATHS = 3  # servers that died (not retired) after which a process starts no more
RETIRE_BYTES = 768 << 20  # a server's own memory (private pages) past which it retires


class Server:
    """A process's handle on its compile server: ``prepare`` is what the forked server runs
    first (`rvm.kernels.apart.become_helper`), ``seal(source)`` what it runs after each
    compile of a function of file ``source`` (rvm's seal of its object code), ``check(source)``
    whether the object code of ``source`` is what rvm sealed (checked before each compile of a
    file run with values bound into it, as the parent's guard checks before each load)."""

    def __init__(
        self,
        prepare: Callable[[], None],
        seal: Callable[[Path], None],
        check: Callable[[Path], bool],
    ) -> None:
        self._prepare, self._seal, self._check = prepare, seal, check
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._pid = 0
        os.register_at_fork(after_in_child=self._forget)
        self.deaths = 0
        self.served = 0  # requests its servers did
        self.cpu = 0.0  # the CPU seconds its servers reported for their requests
        self.failed = False  # whether the last request's compile raised Numba's error there

    def pid(self) -> int:
        """The running server's process id (0: none)."""
        return self._pid if self._sock is not None else 0

    def _forget(self) -> None:
        """In a fork of this process: the server is the parent's (this copy of its socket
        closed, so the server still sees end of file when the parent exits); a request
        here starts a server of its own."""
        self._lock = threading.Lock()  # another thread may have held it at the fork
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock, self._pid, self.deaths = None, 0, 0

    @contextlib.contextmanager
    def reserved(self) -> Iterator[bool]:
        """Within: whether this thread has the server to itself (False: another thread is
        using it, or none can start); the server is started here when needed."""
        if not self._lock.acquire(blocking=False):
            yield False
            return
        try:
            yield self._ensure()
        finally:
            self._lock.release()

    def compile(self, request: Request) -> bool | None:
        """Send ``request``; True if the server says it compiled it (the caller checks the
        cache), None if Numba failed to compile it there (an error a forked helper's compile
        would meet too), else False. Call within `reserved`."""
        ok = self._ask(("compile", request))
        return None if ok is None and self.failed else ok is True

    def call(self, module: str, function: str, *args: Any) -> bool:
        """Run ``module.function(*args)`` in the server; True if it returned. Call within
        `reserved`."""
        from numba.core import config

        return self._ask(("call", module, function, args, config.CACHE_DIR or None)) is True

    def _ask(self, message: tuple) -> object:
        self.failed = False
        try:
            data = pickle.dumps(message)
        except Exception:  # noqa: BLE001 - not sendable
            return None
        assert self._sock is not None
        try:
            _send(self._sock, data)
            reply = _receive(self._sock)
        except OSError:
            reply = None
        except BaseException:  # an interrupt: its reply would answer the next request
            self._stop(kill=True)
            raise
        if reply is None:  # it died (a crash, a kill): the next request starts another
            logger.debug("the compile server %d ended: its request goes the usual way", self._pid)
            self.deaths += 1
            self._stop()
            return None
        ok, retire, why, cpu = pickle.loads(reply)  # noqa: S301 - our own child's reply
        self.failed = ok is None
        logger.debug("compile server: %s in %.3f s of CPU %s", message[0], cpu, why)
        self.served += ok is True
        self.cpu += cpu
        if retire:
            self._stop()
        return ok

    def _ensure(self) -> bool:
        if self._sock is not None:
            return True
        if self.deaths >= MAX_DEATHS:
            return False
        started = _start(self._prepare, self._seal, self._check)
        if started is None:
            return False
        self._sock, self._pid = started
        return True

    def _stop(self, kill: bool = False) -> None:
        sock, pid = self._sock, self._pid
        self._sock, self._pid = None, 0
        if sock is not None:
            sock.close()  # end of file: a live server exits
        if pid and kill:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if pid:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def stop(self) -> None:
        """End the server (it exits at end of file); the next request starts another."""
        with self._lock:
            self._stop()

    def stop_at_exit(self) -> None:
        """At this process's exit: `stop` the server, or, if a thread is using it (a daemon
        thread's request, which nobody will read), kill it; reaped either way, so its CPU
        counts as this process's child's, as ``time`` and ``getrusage`` see it (one left to
        exit by itself is reparented and its CPU counted nowhere). The using thread meets end
        of file and takes the server for dead."""
        if self._lock.acquire(blocking=False):
            try:
                self._stop()
            finally:
                self._lock.release()
            return
        pid = self._pid
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _start(
    prepare: Callable[[], None], seal: Callable[[Path], None], check: Callable[[Path], bool]
) -> tuple[socket.socket, int] | None:
    """Fork a server; (the parent's end of its socket, its pid), or None."""
    from numba.core.compiler_lock import global_compiler_lock

    try:
        parent_end, child_end = socket.socketpair()
    except OSError:
        return None
    main = threading.current_thread() is threading.main_thread()
    try:
        with global_compiler_lock:  # no other thread is inside Numba while it forks
            pid = os.fork()
    except OSError as err:
        logger.debug("no compile server (%s)", err)
        parent_end.close()
        child_end.close()
        return None
    if pid == 0:
        code = 1
        try:
            parent_end.close()
            prepare()
            if main:
                _die_with_parent()
            _serve(child_end, seal, check)
            code = 0
        finally:
            os._exit(code)
    child_end.close()
    parent_end.set_inheritable(False)
    logger.debug("compile server %d started", pid)
    return parent_end, pid


def _die_with_parent() -> None:
    """Have the kernel kill this process when its parent's thread that forked it ends."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before that
            os._exit(0)


_cache_dir: str | None = None  # in a server: Numba's cache folder when it was forked


def _serve(
    sock: socket.socket, seal: Callable[[Path], None], check: Callable[[Path], bool]
) -> None:
    """The server's loop: each request answered with (done, retire, why not, CPU seconds)
    until end of file; done is None when Numba raised its error compiling it."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the parent's stdin stays the parent's
    _forget_partial_modules()
    global _cache_dir
    from numba.core import config

    _cache_dir = config.CACHE_DIR or None  # the parent's when it forked this server
    base = _own_bytes()
    while (data := _receive(sock)) is not None:
        why, start = "", _cpu()
        try:
            message = pickle.loads(data)  # noqa: S301 - our parent's request
            ok = _handle(message, seal, check)
        except BaseException as err:  # noqa: BLE001 - the parent goes its usual way
            ok, why = False, f"{type(err).__name__}: {err}"[:500]
        retire = _own_bytes() - base > RETIRE_BYTES
        _send(sock, pickle.dumps((ok, retire, why, _cpu() - start)))
        if retire:
            return


def _handle(
    message: tuple, seal: Callable[[Path], None], check: Callable[[Path], bool]
) -> bool | None:
    if message[0] == "call":
        _, module, function, args, cache_dir = message
        if cache_dir != _cache_dir:  # the functions this server imported cache elsewhere
            return False
        from numba.core import config

        config.CACHE_DIR = cache_dir or ""  # a compile request may have moved it
        getattr(importlib.import_module(module), function)(*args)
        return True
    return _compile(message[1], seal, check)


def _compile(
    request: Request, seal: Callable[[Path], None], check: Callable[[Path], bool]
) -> bool | None:
    """Compile ``request`` here (see the module docstring); False when this process cannot
    rebuild it as the parent has it, None when it rebuilt it and Numba raised its error
    compiling it (typing, lowering: the parent's compile meets it too)."""
    from numba.core import config, sigutils
    from numba.core.ccallback import CFunc
    from numba.core.dispatcher import Dispatcher
    from numba.core.errors import NumbaError

    config.CACHE_DIR = request.cache_dir or ""  # as the parent has it now
    if request.replay is not None and request.replay[2] and not check(Path(request.file)):
        return False  # unsealed object code: the parent drops it (its guard) and compiles
    module = _module(request.module, request.file, request.replay, request.cache_dir)
    if module is None:
        return False
    found = attribute(module, request.qualname)
    if request.made is not None and inspect.isfunction(found):
        found = _made(found, request.made, request.cache_dir)
    if not isinstance(found, (Dispatcher, CFunc)):
        return False
    code = found._pyfunc.__code__ if isinstance(found, CFunc) else found.py_func.__code__
    if (code.co_filename, code.co_firstlineno) != (request.file, request.line):
        return False
    if str(found._cache._cache_path) != request.cache_path:
        return False  # the parent's cache folder moved since this process started
    try:
        if isinstance(found, Dispatcher):
            sig = pickle.loads(request.signature)  # noqa: S301 - our parent's request
            if tuple(sigutils.normalize_signature(sig)[0]) not in found.overloads:
                found.compile(sig)
        elif found._wrapper_address is None:
            found.compile()
    except NumbaError:
        return None
    seal(Path(request.file))
    return True


# In a server: the C callbacks it made from plain functions (`describe_cfunc`), by (function,
# its signature, options and locals pickled, Numba's cache folder).
_callbacks: dict[tuple[Any, bytes, str | None], Any] = {}


def _made(function: Any, made: bytes, cache_dir: str | None) -> Any:
    """The C callback of ``function`` that ``made`` describes (`describe_cfunc`), made once
    per cache folder, caching on disk as the parent's does; not compiled yet."""
    key = (function, made, cache_dir)
    if key not in _callbacks:
        from numba.core import sigutils
        from numba.core.ccallback import CFunc

        sig, options, locals_ = pickle.loads(made)  # noqa: S301 - our parent's request
        args = sigutils.normalize_signature(sig)
        callback = CFunc(function, args, locals=locals_, options=options)
        callback.enable_caching()
        _callbacks[key] = callback
    return _callbacks[key]


def _module(
    name: str, file: str, replay: Replay | None, cache_dir: str | None
) -> ModuleType | None:
    """Module ``name`` (of ``file``), imported or run here as the parent has it (None: it
    cannot be): a generated file (``replay``) is run here once per cache (the parent's copy
    may be half run), its bound values rebuilt first (`binding`)."""
    if replay is not None:
        key = (*replay, cache_dir)
        if key not in _replayed:
            namespace = {}
            for global_name, bound in replay[2]:
                value = _rebuilt(bound, cache_dir)
                if value is None:
                    return None  # not remembered: a later request may rebuild it
                namespace[global_name] = value
            _replayed[key] = _replay(name, replay[0], replay[1], namespace)
        return _replayed[key]
    module = sys.modules.get(name)
    if module is not None:
        same = getattr(module, "__file__", None) == file
        return module if same else None
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not _same_file(spec.origin, file):
        return None
    return importlib.import_module(name)


def _rebuilt(bound: Binding, cache_dir: str | None) -> Any:
    """The value a `binding` describes, rebuilt here (None: it cannot be)."""
    if bound[0] == "data":
        return pickle.loads(bound[1])  # noqa: S301 - our parent's request
    _, name, qualname, replay, file = bound
    module = _module(name, file, replay, cache_dir)
    return None if module is None else attribute(module, qualname)


# In a server: the generated files it ran, by (file, sha256, bindings, Numba's cache folder).
_replayed: dict[tuple, ModuleType | None] = {}


def _replay(
    name: str, path: str, digest: str, namespace: dict[str, Any] | None = None
) -> ModuleType | None:
    """Run the generated file ``path`` as module ``name``, ``namespace`` bound as its globals
    first, if its text is what the parent ran."""
    text = Path(path).read_bytes()
    if hashlib.sha256(text).hexdigest() != digest:
        return None
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        return None
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(namespace or {})
    sys.modules[name] = module
    try:
        exec(compile(text, path, "exec", dont_inherit=True), module.__dict__)  # noqa: S102
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _forget_partial_modules() -> None:
    """Drop the modules the parent was still importing when it forked this server (their
    import goes on in the parent, not here): a request for one imports it afresh."""
    for name, module in list(sys.modules.items()):
        if getattr(getattr(module, "__spec__", None), "_initializing", False):
            del sys.modules[name]


def _cpu() -> float:
    """The CPU time this process has used (user and system)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _own_bytes() -> int:
    """This process's private memory (pages it wrote since the fork, and its own), or 0."""
    try:
        text = Path("/proc/self/smaps_rollup").read_text()
    except OSError:
        return 0
    total = 0
    for line in text.splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            total += int(line.split()[1]) << 10
    return total


def _send(sock: socket.socket, data: bytes) -> None:
    sock.sendall(struct.pack("<Q", len(data)) + data)


def _receive(sock: socket.socket) -> bytes | None:
    """The next message, or None at end of file."""
    head = _exactly(sock, 8)
    if head is None:
        return None
    return _exactly(sock, struct.unpack("<Q", head)[0])


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        try:
            chunk = sock.recv(min(left, 1 << 20))
        except InterruptedError:
            continue
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
