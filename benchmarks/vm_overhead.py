"""Benchmark of the VM's dispatch cost: nanoseconds per executed bytecode instruction.

Run: ``PYTHONPATH=src python benchmarks/vm_overhead.py [--quick] [--cprofile]``. Prints a table
and writes ``benchmarks/results/vm_overhead.json``. Every time is the median of repeats (the
machine is shared); ratios compare timings taken in the same run.

Programs (all dispatch-bound: the kernels are tiny, so the VM's own work dominates):

- ``chain200``: 200 x ``h = tanh(matmul(h, w))`` on a 1x8 input, generated as rvm script text
  and parsed. matmul is a fusion anchor and tanh its epilogue, so each step is one kernel
  (``fused_matmul_tanh``) plus its allocation and kill instructions; straight-line code.
- ``rnn_loop1000``: a ``while`` loop of 1000 RNN-cell steps (``tanh(matmul(h, w))`` on 1x4 and
  the counter update): compare, branch, three kernels and a tail call per iteration.
- ``counter_loop1000``: a ``while`` loop of 1000 iterations that only counts (``i = i + 1``).

How instructions are counted (exactly, on the executed path): a counting run replaces the VM's
decoded code tuples (``vm.context.functions``, built once by ``rvm.runtime.modes.decode``) with a
tuple subclass whose ``__getitem__`` counts; the loop fetches every instruction with ``code[pc]``,
so the counter sees each executed instruction once (a tail call, decoded to the internal
TAIL_INVOKE, counts as one; its following RET is never fetched). The counting VM is used only for
counting, never for timing. The count is cross-checked against the static form: for the chain it
must equal ``len(ex.functions[0].instructions)`` (straight-line code); for the loops the script
counts ``steps`` and ``steps + 1`` iterations, and the difference is the per-iteration count, which
can be read off ``ex.as_text()`` (printed with ``--text``).

Timing: the VM call (arguments bound with ``vm.save_function``, so no entry checks), the
same kernels replayed directly, and ``rvm.interpret`` take turns inside each of the repeats, so
load from other processes hits them alike; each is timed with wall time and with thread CPU
time (``time.thread_time``, which leaves out time the thread was not scheduled: the robust
figure on a shared machine, and the one the goals are judged on; kernels run in this thread,
with one BLAS thread). Figures per program, kernel backend ("numpy", "jit") and exec mode:

- ``t_eval``: ``vm.time_evaluator("main", ...)(*args).median`` (wall, entry checks included).
- ``call_us``: median time of one call; ``ns_per_instr``: ``call_us / instructions``, kernels
  included.
- ``kernels_direct_us``: the very same kernel calls (same callables, copies of the argument
  arrays, recorded with ``vm.set_instrument``; the VM's builtins are VM work, not kernels)
  replayed from a plain Python ``for`` loop: what any Python driver of these kernels would pay.
- ``overhead_ns_per_instr``: ``(call - kernels_direct) / instructions``: the bytecode loop's own
  cost (dispatch, register moves, allocation, branches, tail calls) per executed instruction.
- ``profile_overhead_ns_per_instr``: the "VM overhead" line of ``vm.profile`` divided by the
  instructions. The profiler's wrappers do bookkeeping outside their timed region (argument
  shape strings: ``str(dtype)`` costs ~5 us on NumPy 2), which lands on that line, so it
  overstates the overhead several times; shown for comparison only.
- ``interp_us`` and ``interp_over_vm``: ``rvm.interpret`` on the same program and arguments.

Goals: VM overhead <= 400 ns per instruction; the VM >= 5x faster than ``rvm.interpret`` on
these dispatch-bound programs.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

# One BLAS thread (before numpy loads): the kernels here are tiny, and a BLAS pool on a shared
# machine only adds noise. Set OPENBLAS_NUM_THREADS yourself to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# isort: split
from common import chain_module, count_instructions, kernel_calls, replay, write_results

# isort: split
import numpy as np

import rvm
from rvm import op
from rvm.ir import IRModule
from rvm.script import T, func, module

GOAL_NS_PER_INSTR = 400.0
GOAL_INTERP_RATIO = 5.0


# -- programs -----------------------------------------------------------------------------------


@module
class RNNCell:
    @func
    def main(h: T[(1, 4), "float32"], w: T[(4, 4), "float32"], steps: T[(), "int64"]):
        i = rvm.const(0, "int64")
        while i < steps:
            h = op.tanh(op.matmul(h, w))
            i = i + 1
        return h


@module
class Counter:
    @func
    def main(n: T[(), "int64"]):
        i = rvm.const(0, "int64")
        while i < n:
            i = i + 1
        return i


def _i64(v: int) -> np.ndarray:
    return np.array(v, dtype="int64")


def programs(steps: int, iters: int) -> list[dict[str, Any]]:
    """Each program: name, module, args, and args for one more loop iteration (or None)."""
    rng = np.random.default_rng(0)
    h8 = rng.standard_normal((1, 8)).astype("float32")
    w8 = (rng.standard_normal((8, 8)) * 0.3).astype("float32")
    h4 = rng.standard_normal((1, 4)).astype("float32")
    w4 = (rng.standard_normal((4, 4)) * 0.3).astype("float32")
    return [
        {"name": f"chain{steps}", "mod": chain_module(steps), "args": (h8, w8), "plus1": None},
        {
            "name": f"rnn_loop{iters}",
            "mod": RNNCell,
            "args": (h4, w4, _i64(iters)),
            "plus1": (h4, w4, _i64(iters + 1)),
        },
        {
            "name": f"counter_loop{iters}",
            "mod": Counter,
            "args": (_i64(iters),),
            "plus1": (_i64(iters + 1),),
        },
    ]


# -- measuring ----------------------------------------------------------------------------------


def interleaved(
    runs: dict[str, tuple[Callable[[], object], int]], repeat: int
) -> dict[str, dict[str, float]]:
    """Median seconds per call of each ``(fn, number)``, wall and thread CPU time.

    The runs take turns inside every repeat, so a burst of load from other processes hits all
    of them alike and differences between them (VM minus kernels) stay meaningful. Thread CPU
    time (``time.thread_time``) leaves out the time this thread was not scheduled.
    """
    samples: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in runs}
    for fn, _ in runs.values():
        fn()  # warm up: kernels, pool
    perf, cpu = time.perf_counter, time.thread_time
    for _ in range(repeat):
        for key, (fn, number) in runs.items():
            w0, c0 = perf(), cpu()
            for _ in range(number):
                fn()
            c1, w1 = cpu(), perf()
            samples[key]["wall"].append((w1 - w0) / number)
            samples[key]["cpu"].append((c1 - c0) / number)
    return {k: {clock: statistics.median(v) for clock, v in d.items()} for k, d in samples.items()}


def make_vm(ex: rvm.Executable, mode: str) -> rvm.VirtualMachine:
    return rvm.VirtualMachine(ex, exec_mode=mode)  # any failure stops the run: never "n/a"


def measure(
    vm: rvm.VirtualMachine, mod: IRModule, args: tuple, repeat: int, number: int
) -> dict[str, Any]:
    """One row's figures for ``vm`` (see the module docstring), in seconds."""
    evaluator = vm.time_evaluator("main", number=number, repeat=repeat)(*args)
    # Copies: holding the VM's own tensors would keep its pooled blocks busy in the timed runs.
    calls = kernel_calls(vm, "main", args, copy=True)
    vm.save_function("main", "main_bound", *args)  # no entry checks in the timed calls
    times = interleaved(
        {
            "vm": (vm["main_bound"], number),
            "kernels": (replay(calls), number),
            "interp": (lambda: rvm.interpret(mod, "main", *args), max(1, number // 10)),
        },
        repeat,
    )
    prof = sorted(vm.profile("main", *args).vm_overhead for _ in range(3))
    return {
        "calls": len(calls),
        "time_evaluator": evaluator.median,
        "times": times,
        "profile_overhead": prof[1],
    }


def bench_program(
    prog: dict[str, Any], kernels: str, repeat: int, number: int
) -> list[dict[str, Any]]:
    mod, args = prog["mod"], prog["args"]
    ex = rvm.compile(mod, kernels=kernels)
    instrs = count_instructions(ex, "main", args)
    per_iter = None
    if prog["plus1"] is None:
        static = len(ex.functions[ex.function_index("main")].instructions)
        assert instrs == static, (instrs, static)
    else:
        per_iter = count_instructions(ex, "main", prog["plus1"]) - instrs
    ref = rvm.interpret(mod, "main", *args)
    rows = []
    for mode in ("bytecode", "compiled"):
        vm = make_vm(ex, mode)
        row: dict[str, Any] = {
            "program": prog["name"],
            "kernels": kernels,
            "exec_mode": mode,
            "instructions": instrs,
            "instructions_per_iteration": per_iter,
        }
        rows.append(row)
        np.testing.assert_allclose(vm["main"](*args), ref, rtol=1e-5, atol=1e-6)
        m = measure(vm, mod, args, repeat, number)
        t = m["times"]
        row.update(
            {
                "kernel_calls": m["calls"],
                "time_evaluator_us": m["time_evaluator"] * 1e6,
                "profile_overhead_ns_per_instr": m["profile_overhead"] / instrs * 1e9,
            }
        )
        for clock in ("cpu", "wall"):
            vm_s, kern_s, interp_s = t["vm"][clock], t["kernels"][clock], t["interp"][clock]
            row[clock] = {
                "call_us": vm_s * 1e6,
                "ns_per_instr": vm_s / instrs * 1e9,
                "kernels_direct_us": kern_s * 1e6,
                "overhead_us": (vm_s - kern_s) * 1e6,
                "overhead_ns_per_instr": (vm_s - kern_s) / instrs * 1e9,
                "interp_us": interp_s * 1e6,
                "interp_over_vm": interp_s / vm_s,
            }
    return rows


def cprofile_top(prog: dict[str, Any], kernels: str, calls: int, top: int = 12) -> str:
    """cProfile of ``calls`` VM calls: where the time goes (tottime, top entries)."""
    vm = rvm.VirtualMachine(rvm.compile(prog["mod"], kernels=kernels))
    fn = vm["main"]
    fn(*prog["args"])
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn(*prog["args"])
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


# -- report -------------------------------------------------------------------------------------


def table(rows: list[dict[str, Any]], clock: str) -> str:
    head = (
        f"{'program':<17} {'kernels':<6} {'mode':<8} {'instrs':>6} {'calls':>5} "
        f"{'t_eval us':>9} {'call us':>9} {'ns/instr':>8} {'kern us':>8} {'ovh ns/i':>8} "
        f"{'prof ns/i':>9} {'interp us':>9} {'interp/vm':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        name = f"{r['program']:<17} {r['kernels']:<6} {r['exec_mode']:<8} {r['instructions']:>6}"
        c = r[clock]
        lines.append(
            f"{name} {r['kernel_calls']:>5} {r['time_evaluator_us']:>9.1f} {c['call_us']:>9.1f} "
            f"{c['ns_per_instr']:>8.0f} {c['kernels_direct_us']:>8.1f} "
            f"{c['overhead_ns_per_instr']:>8.0f} {r['profile_overhead_ns_per_instr']:>9.0f} "
            f"{c['interp_us']:>9.1f} {c['interp_over_vm']:>9.1f}"
        )
    return "\n".join(lines)


def goals(rows: list[dict[str, Any]], clock: str) -> list[str]:
    out = []
    for r in rows:
        key = f"{r['program']} / {r['kernels']} / {r['exec_mode']}"
        ovh, ratio = r[clock]["overhead_ns_per_instr"], r[clock]["interp_over_vm"]
        out.append(
            f"{key:<36} overhead {ovh:5.0f} ns/instr "
            f"[{'ok' if ovh <= GOAL_NS_PER_INSTR else 'MISSED'}]  "
            f"interp/vm {ratio:5.1f}x [{'ok' if ratio >= GOAL_INTERP_RATIO else 'MISSED'}]"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, shorter programs")
    parser.add_argument("--cprofile", action="store_true", help="print cProfile top entries")
    parser.add_argument("--text", action="store_true", help="print each program's bytecode")
    opts = parser.parse_args()
    steps, iters = (50, 200) if opts.quick else (200, 1000)
    repeat = 5 if opts.quick else 9
    progs = programs(steps, iters)

    rows: list[dict[str, Any]] = []
    for prog in progs:
        for kernels in ("numpy", "jit"):
            number = 20 if prog["name"].startswith("chain") else 3
            rows += bench_program(prog, kernels, repeat, number)
            if opts.text and kernels == "jit":
                print(rvm.compile(prog["mod"], kernels=kernels).as_text())

    print(
        f"rvm VM overhead (python {platform.python_version()}, numpy {np.__version__}); "
        f"medians of {repeat} interleaved repeats"
    )
    for clock, what in (
        ("cpu", "thread CPU time (robust on a shared machine)"),
        ("wall", "wall time"),
    ):
        print(
            f"\n{what}; t_eval = vm.time_evaluator median (wall), "
            "prof = vm.profile's VM-overhead line"
        )
        print(table(rows, clock))
    print(
        f"\ngoals (thread CPU time): overhead <= {GOAL_NS_PER_INSTR:.0f} ns/instr, "
        f"interp/vm >= {GOAL_INTERP_RATIO:.0f}x"
    )
    for line in goals(rows, "cpu"):
        print("  " + line)
    for prog in progs:
        first = next(r for r in rows if r["program"] == prog["name"])
        if first["instructions_per_iteration"]:
            print(
                f"  {prog['name']}: {first['instructions']} instructions executed, "
                f"{first['instructions_per_iteration']} per iteration"
            )

    if opts.cprofile:
        for prog in progs:
            print(f"\ncProfile: {prog['name']} (jit kernels), 20 calls")
            print(cprofile_top(prog, "jit", 20))

    write_results(
        "vm_overhead",
        {
            "repeat": repeat,
            "goals": {
                "overhead_ns_per_instr_max": GOAL_NS_PER_INSTR,
                "interp_over_vm_min": GOAL_INTERP_RATIO,
            },
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
