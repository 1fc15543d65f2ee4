"""CPU per compile apart: served by the compile server against a forked helper per compile.

Run: ``python benchmarks/compile_apart.py [--compiles 10] [--ballast-mb 0]``.

With ``RVM_JIT_ISOLATE=1`` every compile of a cached function runs in another process
(`rvm.kernels.apart`): the compile server (`rvm.kernels.compile_server`), or a helper forked
for that compile (``RVM_JIT_SERVER=0``). This process compiles ``--compiles`` new functions
each way, interleaved (one served, one forked, ...), each a generated file of one cached
function (a loop of a few math calls with its own constant, run as rvm runs a jit kernel's
file: `rvm.runtime.loading.loader.exec_module_file`), in fresh caches, after Numba is
initialized here (as in a process that has compiled before; ``--cold``: not, as in a process
that only loaded cached code so far, whose forked helpers each initialize it). Each
function's result is
checked first. The CPU of a compile is this process's (user + system) plus the helper's (a
fork's, from its exit status) or the server's (what it reports for the request); the
server's start, once per process, is stated apart. ``--ballast-mb`` makes this process that
much larger first (touched pages), as a test worker or a notebook grows. Writes
``benchmarks/results/compile_apart.json``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

WORK = Path(tempfile.mkdtemp(prefix="rvm-compile-apart-"))
os.environ.update(  # before Numba is imported: fresh caches
    RVM_CACHE_DIR=str(WORK / "rvm"), NUMBA_CACHE_DIR=str(WORK / "numba"), RVM_JIT_ISOLATE="1"
)
os.environ.pop("RVM_JIT_WORKERS", None)

from common import machine_line, write_results  # noqa: E402

# isort: split
import numpy as np  # noqa: E402

from rvm.kernels import apart, numba_cache  # noqa: E402
from rvm.runtime.loading.loader import exec_module_file  # noqa: E402

SOURCE = """
import math
import numba as nb

@nb.njit("float64(float64[:])", cache=True, nogil=True)
def f(x):
    total = 0.0
    for i in range(x.shape[0]):
        total += math.tanh(x[i] * {k}) + math.exp(-abs(x[i])) * math.sqrt(abs(x[i]) + {k})
    return total
"""


def reference(x: np.ndarray, k: float) -> float:
    return float(np.sum(np.tanh(x * k) + np.exp(-np.abs(x)) * np.sqrt(np.abs(x) + k)))


def cpu() -> tuple[float, float]:
    """(this process's CPU, its reaped children's) in seconds, user + system."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def compile_one(k: int, served: bool, x: np.ndarray) -> tuple[float, float]:
    """Compile function ``k`` one way; (CPU seconds, wall seconds), its result checked."""
    os.environ["RVM_JIT_SERVER"] = "1" if served else "0"
    server = apart.server()
    path = WORK / f"f{k}.py"
    path.write_text(SOURCE.format(k=k + 1))
    before_served = apart.counts()["served"]
    server_cpu = server.cpu if server is not None else 0.0
    own, children = cpu()
    start = time.perf_counter()
    module = exec_module_file(path, f"rvm_bench_f{k}")
    wall = time.perf_counter() - start
    own2, children2 = cpu()
    used = own2 - own + children2 - children
    if served:
        assert apart.counts()["served"] == before_served + 1, "not served"
        used += server.cpu - server_cpu
    else:
        assert apart.counts()["served"] == before_served, "served, not forked"
    assert sum(module.f.stats.cache_hits.values()) == 1  # loaded here, compiled apart
    np.testing.assert_allclose(module.f(x), reference(x, k + 1), rtol=1e-9)
    return used, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiles", type=int, default=10, help="new functions each way")
    parser.add_argument("--ballast-mb", type=int, default=0, help="grow this process first")
    parser.add_argument(
        "--cold", action="store_true", help="leave Numba's compiler uninitialized here"
    )
    args = parser.parse_args()
    from rvm.jit.parallel import numba_ready

    numba_cache.install()
    if not args.cold:
        numba_ready()
    ballast = np.ones(args.ballast_mb << 20, np.uint8)  # noqa: F841 - touched: resident
    x = np.linspace(-2.0, 2.0, 1000)
    start = time.perf_counter()
    os.environ["RVM_JIT_SERVER"] = "1"
    with apart.server().reserved() as started:  # the server's start, once per process
        assert started
    start_wall = time.perf_counter() - start
    rows: dict[str, list[tuple[float, float]]] = {"served": [], "forked": []}
    for k in range(2 * args.compiles):
        way = "served" if k % 2 == 0 else "forked"
        rows[way].append(compile_one(k, way == "served", x))
    apart.stop_server()
    print(machine_line())
    print(
        f"load average {os.getloadavg()[0]:.1f}; this process {_rss_mb():.0f} MB resident; "
        f"Numba initialized here first: {not args.cold}"
    )
    print(f"{'way':<8} {'compiles':>8} {'CPU ms/compile':>15} {'wall ms/compile':>16}")
    result = {}
    for way, values in rows.items():
        cpu_ms = statistics.median(c for c, _ in values) * 1e3
        wall_ms = statistics.median(w for _, w in values) * 1e3
        print(f"{way:<8} {len(values):>8} {cpu_ms:>15.0f} {wall_ms:>16.0f}")
        result[way] = {"compiles": len(values), "cpu_ms": cpu_ms, "wall_ms": wall_ms}
    print(f"the server's start (once per process): {start_wall * 1e3:.0f} ms")
    write_results(
        "compile_apart",
        {
            "machine": machine_line(),
            "load_average": os.getloadavg()[0],
            "ballast_mb": args.ballast_mb,
            "cold": args.cold,
            "ways": result,
            "server_start_wall_ms": start_wall * 1e3,
        },
    )


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    sys.exit(main())
