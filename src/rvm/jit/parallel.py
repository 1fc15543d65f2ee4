"""Compiling an executable's missing jit kernels in several processes at once.

Numba compiles under the GIL and a process-wide lock, so threads cannot compile two kernels
at once; processes can, and rvm's disk cache (`rvm.runtime.native.cache`) is what lets the
parent use their work: a kernel is a file whose object code Numba caches beside it, so a
kernel a helper process compiled is a cache hit when the parent loads it.


`precompile(records)` writes the missing kernels' files, starts helper processes
(``python -m rvm.jit.parallel CLAIMS FILE...``) and compiles kernels itself meanwhile. Each
kernel is compiled by whichever process claims it first (an exclusively created file in a
fresh claims directory): the parent takes the list from the front, the helpers from the back.
The helpers are only an accelerator: one that fails or dies leaves its kernels uncompiled,
and loading them compiles them in the parent, which reports any error as usual.

The library entry points the kernels call (`rvm.runtime.native.entry`; seconds of LLVM each
when Numba's cache does not have them yet, as on the first run after an install) are claimed
the same way, before any kernel: one process builds each while the others compile kernels
that call none, and a kernel that calls one waits until its builder is done (then loads it
from the cache), rather than every process building the same entry point at once.

Helpers run when at least `MIN_MISSING` kernels are missing and the machine has more than one
CPU: ``os.cpu_count() - 1`` of them (at most `MAX_WORKERS`), or ``RVM_JIT_WORKERS`` (0 turns
them off). A helper costs a Python start and Numba's initialization (about a second of CPU).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from rvm.runtime.executable import KernelRecord
from rvm.runtime.native.cache import has_object_code, kernel_path, write_entry
from rvm.runtime.native.entry import require, required_by

logger = logging.getLogger("rvm.jit")

MIN_MISSING = 3
MAX_WORKERS = 4
ENTRY_WAIT_S = 600.0  # at most, for another process building an entry point; then build it


def workers(missing: int) -> int:
    """How many helper processes compile ``missing`` kernels (see the module docstring)."""
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


def precompile(records: Sequence[KernelRecord]) -> int:
    """Compile the jit kernels of ``records`` whose object code is not cached, with helper
    processes when it pays; returns how many helpers ran. The parent's kernels are loaded
    (`rvm.runtime.native.loader.load_kernel`); the helpers' are cache hits for it afterwards."""
    from rvm.runtime.native.loader import load_kernel

    missing: dict[Path, KernelRecord] = {}
    for rec in records:
        path = kernel_path(rec.source) if rec.backend == "jit" else None
        if path is not None and path not in missing and not has_object_code(path):
            missing[path] = rec
    n = workers(len(missing))
    if n == 0:
        return 0
    start = time.perf_counter()
    for path, rec in missing.items():
        write_entry(path, rec.source)
    claims = Path(tempfile.mkdtemp(prefix="rvm-claims-"))
    procs = [_spawn(claims, list(reversed(missing))) for _ in range(n)]

    def helping() -> bool:
        return any(p is not None and p.poll() is None for p in procs)

    try:
        sources = {path: rec.source for path, rec in missing.items()}
        for path in _work(claims, sources, helping):
            load_kernel(missing[path])
    finally:
        for proc in procs:
            if proc is not None:
                proc.wait()
        shutil.rmtree(claims, ignore_errors=True)
    logger.info(
        "compiled %d kernels in %.3f s with %d helper processes",
        len(missing),
        time.perf_counter() - start,
        sum(p is not None for p in procs),
    )
    return n


def _work(claims: Path, sources: dict[Path, str], others: Callable[[], bool]) -> Iterator[Path]:
    """This process's share of the work, in ``sources``' order: it builds each entry point
    the kernels call that it claims, then yields each kernel file it claims once the entry
    points it calls are built (by whichever process claimed them; ``others()``: whether any
    other process may still be building one). Kernels calling no entry point come first."""
    entries = list(dict.fromkeys(e for src in sources.values() for e in required_by(src)))
    for name, dtype in entries:
        if claim(claims, Path(f"entry-{name}-{dtype}")):
            try:
                require(name, dtype)
            except Exception:  # noqa: BLE001, S110 - the kernels needing it compile it and report
                pass
            finally:
                (claims / f"entry-{name}-{dtype}.done").touch()
    for path in sorted(sources, key=lambda p: bool(required_by(sources[p]))):
        if claim(claims, path):
            for name, dtype in required_by(sources[path]):
                _await(claims / f"entry-{name}-{dtype}.done", others)
            yield path


def _await(done: Path, others: Callable[[], bool]) -> None:
    """Wait until the file ``done`` exists, no other process may write it, or `ENTRY_WAIT_S`."""
    deadline = time.monotonic() + ENTRY_WAIT_S
    while not done.exists() and others() and time.monotonic() < deadline:
        time.sleep(0.02)


def _spawn(claims: Path, paths: list[Path]) -> subprocess.Popen | None:
    """A helper process compiling ``paths`` (None when it cannot start)."""
    import rvm

    src = str(Path(rvm.__file__).resolve().parents[1])  # this rvm, first on the path
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, "-m", "rvm.jit.parallel", str(claims), *map(str, paths)]
    try:
        return subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError as err:
        logger.debug("no helper process (%s): compiling in this one", err)
        return None


def _main(argv: list[str]) -> None:
    """A helper: compile each kernel file of ``argv[1:]`` it claims in ``argv[0]`` (and the
    entry points they call that it claims first)."""
    from rvm.runtime.native.loader import exec_kernel_file

    claims = Path(argv[0])
    parent = os.getppid()
    sources = {}
    for name in argv[1:]:
        try:
            sources[Path(name)] = Path(name).read_text()
        except OSError:
            continue
    for path in _work(claims, sources, lambda: os.getppid() == parent):
        try:
            exec_kernel_file(path)
        except Exception:  # noqa: BLE001, S112 - the parent compiles it again and reports
            continue


if __name__ == "__main__":
    _main(sys.argv[1:])
