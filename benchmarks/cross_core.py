"""What a cache line written by the other core costs: the price of a two-thread cut whose
pieces read what another thread's pieces wrote.

Run: ``python benchmarks/cross_core.py [--sizes 256,1024,4096] [--rounds 200]``.

Two threads pinned to CPUs 0 and 1 (Linux), handing a buffer over through atomic counters
(`rvm.kernels.workpool.add_at`, spinning: no sleep between). In each round CPU 0 writes the
buffer, then it is read (a float a cache line, 64 bytes) by

- ``own``: CPU 0 itself, just after writing it (its own caches);
- ``other``: CPU 1, as a piece reads what the other thread's piece wrote; CPU 0's next write
  then takes the lines back (a kernel's scratch and the memory plan's storage are written
  again at the next call): the round trip of an operand two threads exchange;
- ``memory``: CPU 0, a buffer of the same size last touched 4 times the last-level cache
  ago (the next of a ring of them), nothing written.

Each read's time is a round's time less the same round without the read (the write, the
handover: timed alone), in nanoseconds a line, medians of five blocks of ``--rounds``
rounds. Where ``other`` costs as much as ``memory`` or more, the two cores share no cache
level worth the name: an operand written by the other thread (a kernel's input, half of it
written by the other thread's pieces; a cut's phases that exchange their operands) streams
at memory's rate or slower. Writes ``benchmarks/results/cross_core.json`` (``--name``).
"""

from __future__ import annotations

import argparse
import os
import threading
import time

from common import machine, machine_line, write_results

# isort: split
import numpy as np
from numba import njit

from rvm.kernels import workpool
from rvm.kernels.cpu import cpu

LINE_FLOATS = 16  # a 64-byte line
CASES = ("own", "other", "memory")


@njit(nogil=True, cache=True)
def _write(b, value):  # type: ignore[no-untyped-def]
    for i in range(b.size):
        b[i] = value


@njit(nogil=True, cache=True)
def _read(b):  # type: ignore[no-untyped-def]
    s = np.float32(0.0)
    for i in range(0, b.size, LINE_FLOATS):
        s += b[i]
    return s


@njit(nogil=True, cache=True)
def _wait(at, value):  # type: ignore[no-untyped-def]
    """Spins until the counter at ``at`` reaches ``value`` (an atomic add of 0 reads it)."""
    while workpool.add_at(at, 0) < value:
        pass


@njit(nogil=True, cache=True)
def _writer(b, ring, flags, rounds, read, hand):  # type: ignore[no-untyped-def]
    """CPU 0's rounds: write ``b``, then read it (``read``), or hand it over and wait until
    it is read (``hand``); with a ``ring`` (a multiple of ``b``'s size), read its next slice
    instead, nothing written."""
    s = np.float32(0.0)
    at = flags.ctypes.data
    slices = ring.size // b.size
    for r in range(rounds):
        if slices > 0:
            if read:
                k = r % slices
                s += _read(ring[k * b.size : (k + 1) * b.size])
            continue
        _write(b, np.float32(r))
        if read:
            s += _read(b)
        if hand:
            workpool.add_at(at, 1)
            _wait(at + 64, r + 1)
    return s


@njit(nogil=True, cache=True)
def _reader(b, flags, rounds, read):  # type: ignore[no-untyped-def]
    """CPU 1's rounds: wait for ``b``, read it (``read``), say so."""
    s = np.float32(0.0)
    at = flags.ctypes.data
    for r in range(rounds):
        _wait(at, r + 1)
        if read:
            s += _read(b)
        workpool.add_at(at + 64, 1)
    return s


def _round_ns(b: np.ndarray, ring: np.ndarray, rounds: int, case: str, read: bool) -> float:
    """Wall nanoseconds of one round of ``case``, with or without its read."""
    flags = np.zeros(32, np.int64)  # two counters a line apart
    hand = case == "other"
    ring = ring if case == "memory" else ring[:0]
    took: list[int] = []

    def writer() -> None:
        os.sched_setaffinity(0, {0})
        t0 = time.perf_counter_ns()
        _writer(b, ring, flags, rounds, read and not hand, hand)
        took.append(time.perf_counter_ns() - t0)

    def reader() -> None:
        os.sched_setaffinity(0, {1})
        _reader(b, flags, rounds, read)

    threads = [threading.Thread(target=writer)]
    if hand:
        threads.append(threading.Thread(target=reader))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return took[0] / rounds


def measure(kb: int, rounds: int, ring: np.ndarray) -> dict[str, float]:
    """Nanoseconds a line of each case's read of a ``kb`` KB buffer (medians of 5 blocks)."""
    b = np.zeros(kb * 256, np.float32)
    out = {}
    for case in CASES:
        blocks = [_round_ns(b, ring, rounds, case, True) - _round_ns(b, ring, rounds, case, False)
                  for _ in range(5)]  # fmt: skip
        out[case] = float(np.median(blocks)) / (b.size // LINE_FLOATS)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="64,256,1024,4096", help="buffer sizes in KB")
    parser.add_argument("--rounds", type=int, default=200, help="rounds a block")
    parser.add_argument("--name", default="cross_core", help="results file name, no suffix")
    args = parser.parse_args()
    if os.cpu_count() is None or os.cpu_count() < 2 or not hasattr(os, "sched_setaffinity"):
        raise SystemExit("needs two CPUs and Linux's sched_setaffinity")
    print(machine_line())
    ring = np.ones(max(4 * cpu().l3, 1 << 24) // 4, np.float32)  # past the caches
    small = np.zeros(1024, np.float32)
    for case in CASES:  # compile, and the threads' first rounds
        _round_ns(small, ring[: 4 * small.size], 2, case, True)
    rows = {}
    print(f"{'KB':>6} " + " ".join(f"{c:>8}" for c in CASES) + "   ns a 64-byte line read")
    for kb in (int(s) for s in args.sizes.split(",")):
        rows[kb] = measure(kb, args.rounds, ring)
        print(f"{kb:6d} " + " ".join(f"{rows[kb][c]:8.2f}" for c in CASES), flush=True)
    print(f"load {os.getloadavg()[0]:.2f}")
    write_results(args.name, {"machine": machine(), "rounds": args.rounds, "ns_a_line": rows})


if __name__ == "__main__":
    main()
