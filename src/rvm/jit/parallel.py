"""Compiling an executable's missing jit kernels in several processes at once.

Numba compiles under the GIL and a process-wide lock, so threads cannot compile two kernels
at once; processes can, and rvm's disk cache (`rvm.runtime.loading.cache`) is what lets the
parent use their work: a kernel is a file whose object code Numba caches beside it (written to a
temporary file and renamed, so a reader never sees half of it), so a kernel a helper process
compiled is a cache hit when the parent loads it.

`precompile(records)` writes the missing kernels' files, starts helper processes and compiles
kernels itself meanwhile. On Linux a helper is a fork of the parent taken once Numba's compiler
is initialized there (`numba_ready`), so it starts compiling at once, with nothing to import;
elsewhere it is a fresh ``python -m rvm.jit.parallel CLAIMS FILE...`` (a Python start and
Numba's initialization, about a second of CPU). Each kernel is compiled by whichever process
claims it first (an exclusively created file in a fresh claims directory), and every process
takes the costliest kernel left first (`balanced`, by the records' ``cost``), so the processes
finish close together rather than one compiling the largest kernel after the others are done. The
helpers are only an accelerator: one that fails or dies leaves its kernels uncompiled, and
loading them compiles them in the parent, which reports any error as usual.

The library entry points the kernels call (`rvm.kernels.entry`; seconds of LLVM each
when Numba's cache does not have them yet, as on the first run after an install) are claimed
the same way, before any kernel: one process builds each while the others compile kernels
that call none, and a kernel that calls one is put off while another process builds it (then
loads it from the cache), rather than every process building the same entry point at once.

Helpers run when at least `MIN_MISSING` kernels are missing and the machine has more than one
CPU: ``os.cpu_count() - 1`` of them (at most `MAX_WORKERS`), or ``RVM_JIT_WORKERS`` (0 turns
them off).

With ``RVM_JIT_ISOLATE=1`` (Linux: forked helpers; ``RVM_JIT_WORKERS=0`` still turns the helpers
off) the parent compiles no kernel itself: at least one helper compiles every missing kernel,
and the parent loads their object code from the cache. A Numba compile keeps about 2 MB per
kernel in the process for good (its compiler's state, which nothing frees), a load from the
cache a tenth of that, so a long-lived process compiling many programs (a test suite, a
notebook, a server) stays small; whatever else it compiles (rvm's library, native functions,
a kernel loaded without `precompile`) compiles in a forked helper too (`rvm.kernels.apart`).

The library tasks a model's first run will take (those its products', convolutions', pools' and
lrn's shapes take: `rvm.jit.first_run`) are built in the background while its kernels compile
(`rvm.kernels.parfor.prefetch`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from rvm.kernels import apart
from rvm.kernels.apart import become_helper, can_fork, isolated, own_function_ids
from rvm.kernels.entry import require
from rvm.progress import Progress
from rvm.runtime.executable import KernelRecord
from rvm.runtime.loading.cache import has_object_code, kernel_path, write_entry

logger = logging.getLogger("rvm.jit")

MIN_MISSING = 3
MAX_WORKERS = 4
ENTRY_WAIT_S = 600.0  # at most, for another process building an entry point; then build it


_gc_lock = threading.Lock()
_gc_depth = 0


@contextlib.contextmanager
def frozen_gc() -> Iterator[None]:
    """Within: the objects that exist on entry (Numba's, rvm's, the model's) are left out of
    Python's garbage collections (`gc.freeze`), which otherwise walk them all again and again
    while Numba compiles (a tenth to a quarter of a kernel's compile time), and forked helpers
    do not copy their pages by touching them. Nested and concurrent uses unfreeze once, at the
    last exit."""
    global _gc_depth
    with _gc_lock:
        _gc_depth += 1
        gc.freeze()
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0:
                gc.unfreeze()


def workers(missing: int) -> int:
    """How many helper processes compile ``missing`` kernels (see the module docstring)."""
    if isolated() and missing:
        return max(1, _workers(missing + 1))
    return _workers(missing)


def _workers(missing: int) -> int:
    env = os.environ.get("RVM_JIT_WORKERS", "").strip()
    if env:
        try:
            wanted = max(0, int(env))
        except ValueError:
            logger.warning("RVM_JIT_WORKERS=%r is not an integer; using the default", env)
        else:
            return min(wanted, missing - 1) if missing > 1 else 0
    if missing < MIN_MISSING:
        return 0
    return max(0, min((os.cpu_count() or 1) - 1, MAX_WORKERS, missing - 1))


def claim(claims: Path, path: Path) -> bool:
    """Whether this process is the first to claim the kernel file ``path``."""
    try:
        os.close(os.open(claims / path.name, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


# The entry points each kernel file requires (its record's ``requires``), costliest first.
Needs = dict[Path, tuple[tuple[str, str], ...]]


def balanced(records: Mapping[Path, KernelRecord]) -> list[Path]:
    """The kernel files of ``records`` costliest first (their ``cost``, set by the generator;
    ties by name): taken in this order by every process, the longest compiles start first and
    the last process to finish is not long after the others."""
    return sorted(records, key=lambda p: (-records[p].cost, p.name))


def precompile(records: Sequence[KernelRecord], tasks: Iterable[tuple[str, str]] = ()) -> int:
    """Compile the jit kernels of ``records`` whose object code is not cached, with helper
    processes when it pays; returns how many helpers ran. The parent's kernels are loaded
    (`rvm.runtime.loading.loader.load_kernel`); the helpers' are cache hits for it afterwards.
    When some are missing, the library tasks their first run will take (``tasks``, (task,
    dtype) pairs first needed first: `rvm.jit.first_run.library_tasks`) are built in the
    background meanwhile (`rvm.kernels.parfor.prefetch`)."""
    from rvm.runtime.loading.loader import load_kernel

    missing: dict[Path, KernelRecord] = {}
    for rec in records:
        path = kernel_path(rec.source, rec.imports) if rec.backend == "jit" else None
        if path is not None and path not in missing and not has_object_code(path):
            missing[path] = rec
    if missing:
        if can_fork():
            numba_ready()  # once, here: the background helpers and the kernels' forks start ready
        from rvm.kernels import parfor

        parfor.prefetch(tasks)  # in the background, while the kernels compile
    n = workers(len(missing))
    if n == 0:
        return 0
    start = time.perf_counter()
    for path, rec in missing.items():
        write_entry(path, rec.source)
    order = balanced(missing)
    needs = {path: missing[path].requires for path in order}
    claims = Path(tempfile.mkdtemp(prefix="rvm-claims-"))
    forking = can_fork()
    if forking:  # Numba's compiler is ready here already (above)
        helpers: list[_Helper | None] = [_served(claims, needs)] if isolated() else []
        helpers += [_fork(claims, needs) for _ in range(n - len(helpers))]
    else:
        helpers = [_spawn(claims, needs) for _ in range(n)]

    def helping() -> bool:
        return any(h is not None and h.running() for h in helpers)

    bar = Progress("compiling kernels", len(missing))
    mine = _work(claims, needs, helping, bar) if not isolated() else []
    try:
        for path in mine:
            bar.update(sum(map(has_object_code, missing)), missing[path].name)  # all processes'
            load_kernel(missing[path])
        for helper in helpers if isolated() else ():  # then load what they compiled
            if helper is not None:
                helper.wait()
        for path in order if isolated() else ():
            bar.update(sum(map(has_object_code, missing)), missing[path].name)
            load_kernel(missing[path])  # from the cache; compiled here if a helper failed
    finally:
        bar.close()
        for helper in helpers:
            if helper is not None:
                helper.wait()
        shutil.rmtree(claims, ignore_errors=True)
    logger.info(
        "compiled %d kernels in %.3f s with %d helper processes (%s)",
        len(missing),
        time.perf_counter() - start,
        sum(h is not None for h in helpers),
        "forked" if forking else "started",
    )
    return n


def _work(
    claims: Path, needs: Needs, others: Callable[[], bool], bar: Progress | None = None
) -> Iterator[Path]:
    """This process's share of the work, in ``needs``' order (each kernel file with the entry
    points it requires): it builds each entry point
    the kernels call that it claims, then yields each kernel file it claims. A kernel calling
    an entry point another process is still building (``others()``: whether any other process
    may still be building one) is put off for the next kernel whose entry points are built;
    when none is, it waits for the first one's."""
    entries = list(dict.fromkeys(e for req in needs.values() for e in req))
    for name, dtype in entries:
        if bar is not None:
            bar.update(0, f"rvm library: {name} ({dtype})")
        if claim(claims, Path(f"entry-{name}-{dtype}")):
            try:
                require(name, dtype)
            except Exception:  # noqa: BLE001, S110 - the kernels needing it compile it and report
                pass
            finally:
                _done(claims, name, dtype).touch()
    todo = list(needs)
    while todo:
        path = next((p for p in todo if _entries_built(claims, needs[p], others)), None)
        if path is None:
            path = todo[0]
            for name, dtype in needs[path]:
                _await(_done(claims, name, dtype), others)
        todo.remove(path)
        if claim(claims, path):
            yield path


def _done(claims: Path, name: str, dtype: str) -> Path:
    """The file saying entry point ``name`` for ``dtype`` is built (or failed to be)."""
    return claims / f"entry-{name}-{dtype}.done"


def _entries_built(
    claims: Path, needed: tuple[tuple[str, str], ...], others: Callable[[], bool]
) -> bool:
    return not needed or all(_done(claims, *e).exists() for e in needed) or not others()


def _await(done: Path, others: Callable[[], bool]) -> None:
    """Wait until the file ``done`` exists, no other process may write it, or `ENTRY_WAIT_S`."""
    deadline = time.monotonic() + ENTRY_WAIT_S
    while not done.exists() and others() and time.monotonic() < deadline:
        time.sleep(0.02)


def numba_ready() -> None:
    """Initialize Numba's compiler in this process (its typing and target registries, as the
    first compile would), so forked helpers start with it ready rather than each doing it."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    with global_compiler_lock:
        cpu_target.target_context.refresh()


class _Helper:
    """A helper process: a fork (``pid``), a started one (``proc``), or the compile server
    (a ``thread`` waiting for its reply)."""

    def __init__(
        self,
        pid: int | None = None,
        proc: subprocess.Popen | None = None,
        thread: threading.Thread | None = None,
    ) -> None:
        self.pid, self.proc, self.thread, self.status = pid, proc, thread, None

    def running(self) -> bool:
        if self.thread is not None:
            return self.thread.is_alive()
        if self.proc is not None:
            return self.proc.poll() is None
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid != 0:
                self.status = status
        return self.status is None

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
        elif self.proc is not None:
            self.proc.wait()
        elif self.status is None:
            self.status = os.waitpid(self.pid, 0)[1]


def _served(claims: Path, needs: Needs) -> _Helper:
    """The compile server compiling the kernels of ``needs`` it claims, in one request
    (`rvm.kernels.compile_server`), from a thread of this process that waits for its reply;
    a helper forked from that thread instead when the server is off, busy with another
    thread's request, or fails."""

    def run() -> None:
        server = apart.server()
        with contextlib.ExitStack() as stack:
            if server is not None and stack.enter_context(server.reserved()):
                alive = functools.partial(_is_parent, os.getpid())
                if server.call(__name__, _compile_claimed.__name__, claims, needs, alive):
                    return
        helper = _fork(claims, needs)
        if helper is not None:
            helper.wait()

    thread = threading.Thread(target=run, name="rvm-compile-server", daemon=True)
    thread.start()
    return _Helper(thread=thread)


def _is_parent(pid: int) -> bool:
    """Whether process ``pid`` is this process's parent (it may still be building)."""
    return os.getppid() == pid


def _fork(claims: Path, needs: Needs) -> _Helper | None:
    """A forked helper compiling the kernels of ``needs`` it claims (None when it cannot
    start). The child never returns: it leaves with ``os._exit``, running none of the
    parent's exit handlers."""
    from numba.core.compiler_lock import global_compiler_lock

    parent = os.getpid()
    try:
        with global_compiler_lock:  # no other thread is inside Numba while it forks
            pid = os.fork()
    except OSError as err:
        logger.debug("no helper process (%s): compiling in this one", err)
        return None
    if pid != 0:
        return _Helper(pid=pid)
    code = 1
    try:
        become_helper()
        _compile_claimed(claims, needs, lambda: os.getppid() == parent)
        code = 0
    finally:
        os._exit(code)


def _compile_claimed(claims: Path, needs: Needs, others: Callable[[], bool]) -> None:
    """A helper's loop: compile each kernel file of ``needs`` it claims (errors are left
    to the parent, which compiles the kernel again and reports them)."""
    from rvm.runtime.loading.cache import seal_object_code
    from rvm.runtime.loading.loader import exec_kernel_file

    for path in _work(claims, needs, others):
        try:
            exec_kernel_file(path)
            seal_object_code(path)  # the parent loads only object code rvm sealed
        except Exception:  # noqa: BLE001, S112 - the parent compiles it again and reports
            continue


def _spawn(claims: Path, needs: Needs) -> _Helper | None:
    """A started helper process compiling the kernel files of ``needs`` (None when it cannot
    start); they and the entry points they require are its argument, as JSON."""
    import rvm

    src = str(Path(rvm.__file__).resolve().parents[1])  # this rvm, first on the path
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
    }
    work = json.dumps([[str(p), [list(e) for e in req]] for p, req in needs.items()])
    cmd = [sys.executable, "-m", "rvm.jit.parallel", str(claims), work]
    try:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError as err:
        logger.debug("no helper process (%s): compiling in this one", err)
        return None
    return _Helper(proc=proc)


def _main(argv: list[str]) -> None:
    """A started helper: compile each kernel file of ``argv[1]`` (JSON: [file, [[entry point,
    dtype], ...]] pairs) it claims in ``argv[0]`` (and the entry points they call that it
    claims first)."""
    claims = Path(argv[0])
    parent = os.getppid()
    needs = {Path(p): tuple((n, d) for n, d in req) for p, req in json.loads(argv[1])}
    own_function_ids()  # a fresh process counts from Numba's start, as the parent did
    _compile_claimed(claims, needs, lambda: os.getppid() == parent)


if __name__ == "__main__":
    _main(sys.argv[1:])
