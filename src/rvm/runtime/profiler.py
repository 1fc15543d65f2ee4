"""Instrumentation, profiling and timing around the VM's packed calls.

Instead of flags in the dispatch loop, these wrap each packed function: the VM swaps its table
of callables for wrapped ones while a callback is set or a profile runs (TVM's profiler VM
overrides the call step for the same reason), so the plain loop pays nothing.

A profile (`profile_runs`) runs the function `warmup` times untimed, then `repeat` times with
each kernel call timed by a wrapper that only reads the clock and adds, then once more to
record argument shapes. Its report takes medians over the timed runs; the VM overhead is the
median of (run time - kernel time) per run, nothing subtracted. The VM's builtins are left
unwrapped: they are VM work (as `benchmarks/exec_modes.py` counts them), and unwrapped they
keep the compiled mode's inline shape code, so the profiled run is the plain run's code.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from rvm import _html
from rvm.runtime.builtins import NAMESPACE

__all__ = [
    "SKIP_RUN",
    "ProfileReport",
    "BenchmarkResult",
    "instrumented",
    "profile_runs",
    "timed_runs",
]


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


Run = tuple[int, dict[str, tuple[int, int]]]
"""One timed run: its wall nanoseconds, and per timed packed function (calls, nanoseconds)."""


def _timed(
    index: int, func: Callable[..., Any], ns: list[int], calls: list[int]
) -> Callable[..., Any]:
    """`func` adding its nanoseconds to `ns[index]` and one to `calls[index]` on each call.

    Nothing else happens per call (shapes are recorded in a separate run), so what the wrapper
    costs beyond the timed interval -- a Python call, two clock reads, two additions -- is the
    only profiler cost that lands in the VM-overhead line.
    """
    clock = time.perf_counter_ns

    def call(*args: Any) -> Any:
        start = clock()
        result = func(*args)
        ns[index] += clock() - start
        calls[index] += 1
        return result

    return call


def _arg_key(a: Any) -> tuple | str:
    return (a.dtype, a.shape) if isinstance(a, np.ndarray) else type(a).__name__


def _format_shapes(key: tuple) -> str:
    parts = [k if isinstance(k, str) else f"{k[0]}{list(k[1])}" for k in key]
    return "(" + ", ".join(parts) + ")"


def profile_runs(
    function: str,
    names: Sequence[str],
    packed: Sequence[Callable[..., Any]],
    install: Callable[[list[Callable[..., Any]]], None],
    run: Callable[[], Any],
    warmup: int = 1,
    repeat: int = 10,
    precisions: Mapping[str, str] | None = None,
) -> ProfileReport:
    """Profiles `run` as `VirtualMachine.profile` documents.

    Args:
        function: The VM function's name, for the report.
        names: The packed functions' names, by index.
        packed: The packed functions, by index.
        install: Makes the VM call through a table of packed functions.
        run: One call of the function (with the installed table).
        warmup: Untimed runs first (code generation, pools, caches).
        repeat: Timed runs; the report gives medians over them.
        precisions: What each kernel computes its products in (``"fp32"``, ``"bf16"``...),
            by name, from its record's facts; the report shows it per row.

    Raises:
        ValueError: `repeat` < 1 or `warmup` < 0.
    """
    if repeat < 1 or warmup < 0:
        raise ValueError(f"profile needs repeat >= 1 and warmup >= 0, got {repeat} and {warmup}")
    # The VM's builtins stay unwrapped (see the module docstring).
    timed = [i for i, n in enumerate(names) if not n.startswith(NAMESPACE)]
    ns, calls = [0] * len(packed), [0] * len(packed)
    install(_replace(packed, {i: _timed(i, packed[i], ns, calls) for i in timed}))
    for _ in range(warmup):
        run()
    clock = time.perf_counter_ns
    runs: list[Run] = []
    for _ in range(repeat):
        ns[:] = calls[:] = [0] * len(packed)  # in place: the wrappers hold these lists
        start = clock()
        run()
        elapsed = clock() - start
        runs.append((elapsed, {names[i]: (calls[i], ns[i]) for i in timed if calls[i]}))
    shapes: dict[str, dict[tuple, None]] = {}  # per function its distinct shapes, in order

    def record(name: str, args: tuple, before: bool) -> None:
        if before:
            shapes.setdefault(name, {})[tuple(map(_arg_key, args))] = None

    install(_replace(packed, {i: instrumented(names[i], packed[i], record) for i in timed}))
    run()  # untimed: the argument shapes of one run
    return ProfileReport(function, runs, shapes, warmup, precisions)


def _replace(
    packed: Sequence[Callable[..., Any]], wrapped: Mapping[int, Callable[..., Any]]
) -> list[Callable[..., Any]]:
    """A copy of the table `packed` with the functions at the indices of `wrapped` replaced."""
    return [wrapped.get(i, f) for i, f in enumerate(packed)]


class ProfileReport:
    """Where the time of a VM function goes: per kernel, and the VM's own overhead.

    Every figure is a median over the timed runs (the machine may be noisy; medians of the
    parts need not add up exactly to the median of the whole).

    Attributes:
        function: The VM function that ran.
        warmup: Untimed runs before the timed ones.
        repeat: Timed runs.
        runs: The raw records of the timed runs: per run its wall nanoseconds and, per timed
            packed function it called, (calls, nanoseconds).
        run_times: Wall seconds of each timed run.
        total: Median seconds of a run.
        rows: Per timed packed function (the kernels and any registered functions; not the
            VM's `vm.builtin.*` functions), sorted by time: name, calls (per run), total
            (median seconds per run), mean (seconds per call), share (of `total`) and the
            distinct argument shapes, and precision: what a kernel computes its products in
            (``"fp32"``, ``"bf16"``...; "" for a function that is not a kernel).
        kernel_total: Median over runs of the seconds inside those packed functions.
        vm_overhead: Median over runs of (run time - time inside them): dispatch, allocation,
            the VM's builtins (shape checks) and the profiler's own per-call bookkeeping.
    """

    def __init__(
        self,
        function: str,
        runs: Sequence[Run],
        shapes: Mapping[str, Iterable[tuple]] | None = None,
        warmup: int = 0,
        precisions: Mapping[str, str] | None = None,
    ) -> None:
        if not runs:
            raise ValueError("a profile needs at least one timed run")
        shapes = shapes or {}
        precisions = precisions or {}
        self.function = function
        self.warmup = warmup
        self.repeat = len(runs)
        self.runs = list(runs)
        self.run_times = tuple(r[0] / 1e9 for r in runs)
        self.total = statistics.median(self.run_times)
        self.rows: list[dict[str, Any]] = []
        for name in {n: None for _, per in runs for n in per}:
            seconds = statistics.median(per.get(name, (0, 0))[1] / 1e9 for _, per in runs)
            ncalls = statistics.median_low(per.get(name, (0, 0))[0] for _, per in runs)
            self.rows.append(
                {
                    "name": name,
                    "calls": ncalls,
                    "total": seconds,
                    "mean": seconds / ncalls if ncalls else 0.0,
                    "share": seconds / self.total if self.total > 0 else 0.0,
                    "shapes": [_format_shapes(k) for k in shapes.get(name, ())],
                    "precision": precisions.get(name, ""),
                }
            )
        self.rows.sort(key=lambda r: -r["total"])
        inside = [sum(ns for _, ns in per.values()) for _, per in runs]
        self.kernel_total = statistics.median(inside) / 1e9
        # Each kernel interval lies inside its run's interval: the difference is never negative.
        self.vm_overhead = statistics.median((wall - k) / 1e9 for (wall, _), k in zip(runs, inside))

    @property
    def vm_share(self) -> float:
        """`vm_overhead` as a share of `total`."""
        return self.vm_overhead / self.total if self.total > 0 else 0.0

    def _title(self) -> str:
        return (
            f"profile of @{self.function} (median of {self.repeat} timed runs, "
            f"{self.warmup} warmup)"
        )

    def __str__(self) -> str:
        width = max([len(r["name"]) for r in self.rows] + [len(_OVERHEAD)])
        head = (
            f"{'name':<{width}}  {'calls':>6}  {'total us':>10}  {'mean us':>9}  {'share':>6}  "
            f"{'prec':<4}"
        )
        lines = [self._title(), head, "-" * len(head)]
        for r in self.rows:
            shapes = "; ".join(r["shapes"][:3]) + (" ..." if len(r["shapes"]) > 3 else "")
            lines.append(
                f"{r['name']:<{width}}  {r['calls']:>6}  {r['total'] * 1e6:>10.1f}  "
                f"{r['mean'] * 1e6:>9.2f}  {r['share']:>6.1%}  {r['precision']:<4}  {shapes}"
            )
        lines.append("-" * len(head))
        lines.append(
            f"{_OVERHEAD:<{width}}  {'':>6}  {self.vm_overhead * 1e6:>10.1f}  {'':>9}  "
            f"{self.vm_share:>6.1%}"
        )
        lines.append(f"{'total':<{width}}  {'':>6}  {self.total * 1e6:>10.1f}")
        return "\n".join(lines)

    def csv(self) -> str:
        """The rows as CSV (seconds per run, medians), then `VM overhead` and `total` rows."""
        out = ["name,calls_per_run,total_s,mean_s,share,precision,shapes"]
        for r in self.rows:
            shapes = "; ".join(r["shapes"]).replace('"', "'")
            out.append(
                f"{r['name']},{r['calls']},{r['total']:.9f},{r['mean']:.9f},"
                f'{r["share"]:.6f},{r["precision"]},"{shapes}"'
            )
        out.append(f"VM overhead,,{self.vm_overhead:.9f},,{self.vm_share:.6f},,")
        out.append(f"total,,{self.total:.9f},,1.0,,")
        return "\n".join(out) + "\n"

    def json(self) -> str:
        """The report as a JSON document (seconds)."""
        return json.dumps(
            {
                "function": self.function,
                "warmup": self.warmup,
                "repeat": self.repeat,
                "total": self.total,
                "kernel_total": self.kernel_total,
                "vm_overhead": self.vm_overhead,
                "run_times": list(self.run_times),
                "rows": self.rows,
            },
            indent=2,
        )

    def _repr_html_(self) -> str:
        """A table with a bar per row for its share of the run, for notebooks."""
        rows = [
            (
                r["name"],
                r["calls"],
                f"{r['total'] * 1e6:.1f}",
                f"{r['mean'] * 1e6:.2f}",
                _html.bar(r["share"]),
                r["precision"],
                "; ".join(r["shapes"]),
            )
            for r in self.rows
        ]
        foot = [
            (
                _OVERHEAD,
                "",
                f"{self.vm_overhead * 1e6:.1f}",
                "",
                _html.bar(self.vm_share, "#e45756"),
                "",
                "",
            ),
            ("total", "", f"{self.total * 1e6:.1f}", "", "", "", ""),
        ]
        head = ("name", "calls/run", "total µs", "mean µs", "share", "precision", "argument shapes")
        table = _html.table(head, rows, numeric=(1, 2, 3), foot=foot)
        return _html.box(self._title(), table)

    def __repr__(self) -> str:
        return (
            f"<ProfileReport @{self.function} {len(self.rows)} rows repeat={self.repeat} "
            f"total={self.total:.6f}s vm_overhead={self.vm_overhead:.6f}s>"
        )


_OVERHEAD = "VM overhead (dispatch, allocation, builtins)"


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

    def __repr__(self) -> str:
        return (
            f"<BenchmarkResult mean={self.mean * 1e6:.2f}us median={self.median * 1e6:.2f}us "
            f"std={self.std * 1e6:.2f}us repeat={len(self.results)} number={self.number}>"
        )

    def _repr_html_(self) -> str:
        """Mean, median, std, min and max per call, and repeats x number, for notebooks."""
        stats = ("mean", "median", "std", "min", "max")
        values = [f"{getattr(self, k) * 1e6:.2f}" for k in stats]
        repeats = f"{len(self.results)} x {self.number}"
        table = _html.table(
            (*(f"{k} µs" for k in stats), "repeats x number"),
            [(*values, repeats)],
            numeric=range(len(stats) + 1),
        )
        return _html.box("time per call", table)


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
