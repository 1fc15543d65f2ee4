"""Instrumentation, profiling and timing around the VM's packed calls.

Instead of flags in the dispatch loop, these wrap each packed function: the VM swaps its table
of callables for wrapped ones while a callback is set or a profile runs (TVM's profiler VM
overrides the call step for the same reason), so the plain loop pays nothing.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["SKIP_RUN", "ProfileReport", "BenchmarkResult", "instrumented", "profiled", "timed_runs"]


class _SkipRun:
    __slots__ = ()

    def __repr__(self) -> str:
        return "SKIP_RUN"


SKIP_RUN = _SkipRun()
"""Returned by an instrument callback before a call to skip the call."""


def instrumented(
    name: str, func: Callable[..., Any], callback: Callable[[str, tuple, bool], Any]
) -> Callable[..., Any]:
    """`func` with `callback(name, args, before)` around it (`VirtualMachine.set_instrument`)."""

    def call(*args: Any) -> Any:
        if callback(name, args, True) is SKIP_RUN:
            result = None
        else:
            result = func(*args)
        callback(name, args, False)
        return result

    return call


def _shapes(args: tuple) -> str:
    parts = []
    for a in args:
        if isinstance(a, np.ndarray):
            parts.append(f"{a.dtype}{list(a.shape)}")
        else:
            parts.append(type(a).__name__)
    return "(" + ", ".join(parts) + ")"


def profiled(name: str, func: Callable[..., Any], records: dict[str, list]) -> Callable[..., Any]:
    """`func` timed; each call adds its seconds and argument shapes to `records[name]`."""
    perf = time.perf_counter

    def call(*args: Any) -> Any:
        start = perf()
        result = func(*args)
        elapsed = perf() - start
        row = records.get(name)
        if row is None:
            row = records[name] = [0, 0.0, {}]
        row[0] += 1
        row[1] += elapsed
        sig = _shapes(args)
        row[2][sig] = row[2].get(sig, 0) + 1
        return result

    return call


class ProfileReport:
    """The time of one run split by packed function, plus the VM's own overhead.

    Attributes:
        function: The VM function that ran.
        total: Wall seconds of the whole run.
        rows: Per packed function (sorted by total time): name, calls, total, mean, share
            (of the run's time) and the distinct argument shapes.
        kernel_total: Seconds inside packed functions.
        vm_overhead: `total - kernel_total`: dispatch, allocation and entry checks.
    """

    def __init__(self, function: str, total: float, records: dict[str, list]) -> None:
        self.function = function
        self.total = total
        self.rows: list[dict[str, Any]] = []
        for name, (calls, seconds, shapes) in sorted(records.items(), key=lambda kv: -kv[1][1]):
            self.rows.append(
                {
                    "name": name,
                    "calls": calls,
                    "total": seconds,
                    "mean": seconds / calls,
                    "share": seconds / total if total > 0 else 0.0,
                    "shapes": list(shapes),
                }
            )
        self.kernel_total = sum(r["total"] for r in self.rows)
        self.vm_overhead = max(0.0, total - self.kernel_total)

    def __str__(self) -> str:
        width = max([len(r["name"]) for r in self.rows] + [20])
        head = f"{'name':<{width}}  {'calls':>6}  {'total us':>10}  {'mean us':>9}  {'share':>6}"
        lines = [f"profile of @{self.function}", head, "-" * len(head)]
        for r in self.rows:
            shapes = "; ".join(r["shapes"][:3]) + (" ..." if len(r["shapes"]) > 3 else "")
            lines.append(
                f"{r['name']:<{width}}  {r['calls']:>6}  {r['total'] * 1e6:>10.1f}  "
                f"{r['mean'] * 1e6:>9.2f}  {r['share']:>6.1%}  {shapes}"
            )
        share = self.vm_overhead / self.total if self.total > 0 else 0.0
        lines.append("-" * len(head))
        lines.append(
            f"{'VM overhead (dispatch + allocation)':<{width}}  {'':>6}  "
            f"{self.vm_overhead * 1e6:>10.1f}  {'':>9}  {share:>6.1%}"
        )
        lines.append(f"{'total':<{width}}  {'':>6}  {self.total * 1e6:>10.1f}")
        return "\n".join(lines)

    def csv(self) -> str:
        """The rows as CSV (seconds), with a `VM overhead` row and a `total` row."""
        out = ["name,calls,total_s,mean_s,share,shapes"]
        for r in self.rows:
            shapes = "; ".join(r["shapes"]).replace('"', "'")
            out.append(
                f"{r['name']},{r['calls']},{r['total']:.9f},{r['mean']:.9f},"
                f'{r["share"]:.6f},"{shapes}"'
            )
        share = self.vm_overhead / self.total if self.total > 0 else 0.0
        out.append(f"VM overhead,,{self.vm_overhead:.9f},,{share:.6f},")
        out.append(f"total,,{self.total:.9f},,1.0,")
        return "\n".join(out) + "\n"

    def json(self) -> str:
        """The report as a JSON document (seconds)."""
        return json.dumps(
            {
                "function": self.function,
                "total": self.total,
                "kernel_total": self.kernel_total,
                "vm_overhead": self.vm_overhead,
                "rows": self.rows,
            },
            indent=2,
        )

    def __repr__(self) -> str:
        return f"<ProfileReport @{self.function} {len(self.rows)} rows total={self.total:.6f}s>"


class BenchmarkResult:
    """Seconds per call, one value per repeat.

    Attributes:
        results: Seconds per call for each repeat.
        mean, median, std, min, max: Over `results`.
        number: Calls per repeat (after raising it to reach `min_repeat_ms`).
    """

    def __init__(self, results: list[float], number: int) -> None:
        self.results = tuple(results)
        self.number = number
        self.mean = statistics.fmean(results)
        self.median = statistics.median(results)
        self.std = statistics.pstdev(results) if len(results) > 1 else 0.0
        self.min = min(results)
        self.max = max(results)

    def __str__(self) -> str:
        return (
            f"mean {self.mean * 1e6:.2f} us  median {self.median * 1e6:.2f} us  "
            f"std {self.std * 1e6:.2f} us  ({len(self.results)} repeats x {self.number})"
        )

    __repr__ = __str__


def timed_runs(
    run: Callable[[], Any], number: int, repeat: int, min_repeat_ms: float
) -> BenchmarkResult:
    """Times `run` as `VirtualMachine.time_evaluator` documents."""
    if number < 1 or repeat < 1:
        raise ValueError(f"number and repeat must be >= 1, got {number} and {repeat}")
    run()  # warm up: kernels, pool
    perf = time.perf_counter
    results = []
    for _ in range(repeat):
        while True:
            start = perf()
            for _ in range(number):
                run()
            elapsed = perf() - start
            if elapsed * 1000 >= min_repeat_ms or min_repeat_ms <= 0:
                break
            grow = (min_repeat_ms / 1000) / max(elapsed, 1e-9)
            number = max(number * 2, int(number * grow * 1.1) + 1) if grow < 1e6 else number * 1000
        results.append(elapsed / number)
    return BenchmarkResult(results, number)
