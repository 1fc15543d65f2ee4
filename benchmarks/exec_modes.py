"""Benchmark of the exec modes: `rvm.interpret`, the bytecode loop and the compiled mode.

Run: ``PYTHONPATH=src python benchmarks/exec_modes.py [--quick] [--kernels numpy,jit]
[--native-only] [--large] [--data-types] [--name NAME]``.
Prints a table and writes ``benchmarks/results/exec_modes.json`` (``exec_modes_large.json``,
``exec_modes_native.json``... by the section run; ``--name``). Every time is a median of
repeats (the machine is shared and noisy); every ratio compares timings of the same run.

Programs:

- ``chain100``: 100 x ``h = tanh(matmul(h, w))`` on a 1x8 input, as parsed rvm script.
  matmul is a fusion anchor taking the tanh epilogue, so each step is one kernel plus its
  allocation and kill instructions: straight-line, dispatch-bound code.
- ``rnn100``: a ``while`` loop of 100 RNN-cell steps (``tanh(matmul(h, w))`` on 1x16 and the
  counter): compare, branch, kernels and a self tail call per iteration.
- ``fib20``: ``fib(20)`` by non-tail recursion (21 891 calls).
- ``mlp1``: the MLP 784-128-10 at batch 1 (kernel-bound).

Figures per program, kernel backend and mode: ``call_us`` (median of ``time_evaluator``),
``instructions``: the bytecode instructions the program executes (counted exactly by a
bytecode VM whose decoded code tuples count every fetch; a tail call counts once), the same
count for both modes, ``kernel_us`` (the same kernel calls, recorded with
``set_instrument`` and replayed from a plain Python loop; the VM's builtins are not kernels),
and ``overhead_ns_per_instr`` = ``(call - kernels) / instructions``: what the VM itself costs
per instruction (dispatch, register moves, allocation, shape checks, calls). For the compiled
mode this is per *bytecode* instruction: it folds some away (constant loads inlined, shape
instructions written as int compares), so it is the cost of the program's work spread over the
bytecode it replaces, not a cost per statement it runs. Counts changed with executable format
1.2, whose facts are instructions (the MLP's `main` runs 18 instead of 35).

Goals: compiled <= 0.6x bytecode on chain100 and rnn100; bytecode <= 0.5x interpret on
chain100, rnn100 and fib20; compiled VM overhead <= 150 ns per instruction.

The native section (`native_programs.py`: the MLP 784-128-10 at batch 1, 50 tiny unfused
elementwise ops on a (4,) tensor, 100 steps of an H=32 RNN cell) times, interleaved in one
process after checking every output against `rvm.interpret`: rvm's compiled and native modes
(``vm["main"](...)``, entry checks included), a hand-written whole-function Numba function of
the same computation, ONNX Runtime (one thread, as OpenBLAS here) on the same program as an
ONNX model (the RNN as a ``Loop``), and rvm's native mode on that model imported with
`rvm.from_onnx`, and beside them the call of an empty Numba function of the first argument
(``numba_empty``: the floor of Numba's dispatcher, what any call from Python into Numba costs,
the native mode's entry included). Goals (issue 27), native over whole-function Numba: the MLP
and the RNN ahead (<= 1.0), tiny ops <= 1.1, and native faster than ONNX Runtime on each.

The large-work section (`native_programs.large_programs`; alone with ``--large``) times the
compiled and native modes, interleaved, on kernel-bound work: the 16M-element float32 chains
and the MLP at batch 1, 8 and 256, in wall time and in the process's CPU time (what a loaded
machine distorts least). Goal: native <= 1.05x compiled. Every section's header
names the machine (`common.machine`). The cold build (the programs' kernels
and native functions compiled with empty caches, in a child process) is reported too.

The data-type section (`native_programs.adt_programs`; alone with ``--data-types``) times the
compiled and native modes, interleaved, on programs of non-recursive data type values (built,
matched in a loop, returned to Python) and of closures passed to a loop, outputs checked
against each other and the native mode's report checked for fallbacks (but those a program
names: ``HigherOrder.make`` returns a closure to Python, a VM object).

The result-check section (also alone with ``--result-checks``) times the native programs in
each mode on a default VM (results checked against the recorded type where the code does not
prove it: these programs are all proved, so ``default`` should cost nothing), on one checking
every result at run time (``forced``, the cost where a check runs) and on one with no checks,
interleaved.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
from typing import Any

# One BLAS thread (before numpy loads): the kernels here are tiny, and a BLAS pool on a shared
# machine only adds noise. Set OPENBLAS_NUM_THREADS yourself to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# isort: split
from common import (
    chain_module,
    count_instructions,
    interleaved_medians,
    kernel_calls,
    machine,
    machine_line,
    median_time,
    replay,
    text_table,
    write_results,
)

# isort: split
import json
import subprocess
import sys
import tempfile
import time

import numpy as np
from native_programs import adt_programs, large_programs, numba_identity
from native_programs import programs as native_programs

import rvm
from rvm.testing import assert_values_close
from rvm.testing.programs import MLP, Recursion

MODES = ("bytecode", "compiled", "native")
GOAL_COMPILED_OVER_BYTECODE = 0.6
GOAL_BYTECODE_OVER_INTERP = 0.5
GOAL_OVERHEAD_NS = 150.0
GOAL_NATIVE_OVER_NUMBA = {"mlp": 1.0, "tiny50": 1.1, "rnn100": 1.0}
GOAL_NATIVE_OVER_COMPILED = 1.05  # on large work (`large_rows`)

RNN_TEXT = """
@module
class RNN:
    @func
    def main(h: T[(1, 16), "float32"], w: T[(16, 16), "float32"], steps: T[(), "int64"]):
        i = rvm.const(0, "int64")
        while i < steps:
            h = op.tanh(op.matmul(h, w))
            i = i + 1
        return h
"""


def _fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def programs() -> list[dict[str, Any]]:
    """name, module, function, args, and whether the interpreter is timed."""
    rng = np.random.default_rng(0)

    def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype("float32")

    return [
        {
            "name": "chain100",
            "mod": chain_module(100),
            "fname": "main",
            "args": (f32(1, 8), f32(8, 8, scale=0.3)),
        },
        {
            "name": "rnn100",
            "mod": rvm.script.parse(RNN_TEXT),
            "fname": "main",
            "args": (f32(1, 16), f32(16, 16, scale=0.3), np.array(100, "int64")),
        },
        {
            "name": "fib20",
            "mod": Recursion,
            "fname": "fib",
            "args": (np.array(20, "int64"),),
            "expected": np.array(_fib(20), "int64"),
        },
        {
            "name": "mlp1",
            "mod": MLP,
            "fname": "main",
            "args": (
                f32(1, 784),
                f32(784, 128, scale=0.05),
                f32(128),
                f32(128, 10, scale=0.1),
                f32(10),
            ),
        },
    ]


# -- measuring ----------------------------------------------------------------------------


def kernel_time(vm: rvm.VirtualMachine, fname: str, args: tuple, repeat: int) -> tuple[int, float]:
    """The number of kernel calls of one run, and their time replayed from a Python loop
    (the VM's builtins are VM work, not kernels: see `common.kernel_calls`)."""
    calls = kernel_calls(vm, fname, args)
    return len(calls), median_time(replay(calls), repeat)


def bench(prog: dict[str, Any], kernels: str, repeat: int, interp_s: float) -> list[dict[str, Any]]:
    ex = rvm.compile(prog["mod"], kernels=kernels)
    fname, args = prog["fname"], prog["args"]
    instrs = count_instructions(ex, fname, args)
    # fib20 is checked against Python's own fib (the interpreter takes half a second on it).
    ref = prog["expected"] if "expected" in prog else rvm.interpret(prog["mod"], fname, *args)
    rows = []
    for mode in MODES:
        vm = rvm.VirtualMachine(ex, exec_mode=mode)
        out = vm[fname](*args)
        rvm.testing.assert_values_close(out, ref, rtol=1e-4, atol=1e-5)
        number = 1 if prog["name"] == "fib20" else 20
        call = vm.time_evaluator(fname, number=number, repeat=repeat)(*args).median
        ncalls, kern = kernel_time(vm, fname, args, repeat)
        rows.append(
            {
                "program": prog["name"],
                "kernels": kernels,
                "exec_mode": mode,
                "instructions": instrs,
                "kernel_calls": ncalls,
                "call_us": call * 1e6,
                "kernel_us": kern * 1e6,
                "overhead_ns_per_instr": (call - kern) / instrs * 1e9,
                "interp_us": interp_s * 1e6,
            }
        )
    byte, comp = rows[0], rows[1]
    for r in rows:
        r["over_bytecode"] = r["call_us"] / byte["call_us"]
        r["over_interp"] = r["call_us"] / (interp_s * 1e6)
    comp["speedup_vs_bytecode"] = byte["call_us"] / comp["call_us"]
    return rows


# -- report -------------------------------------------------------------------------------


def table(rows: list[dict[str, Any]]) -> str:
    return text_table(
        rows,
        [
            ("program", "program", "<9"),
            ("kern", "kernels", "<5"),
            ("mode", "exec_mode", "<8"),
            ("instrs", "instructions", ">7"),
            ("calls", "kernel_calls", ">6"),
            ("call us", "call_us", ">10.1f"),
            ("kern us", "kernel_us", ">9.1f"),
            ("ovh ns/i", "overhead_ns_per_instr", ">8.0f"),
            ("interp us", "interp_us", ">10.1f"),
            ("/bytecode", "over_bytecode", ">9.2f"),
            ("/interp", "over_interp", ">8.3f"),
        ],
    )


def goals(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        key = f"{r['program']}/{r['kernels']}/{r['exec_mode']}"
        if r["exec_mode"] == "compiled":
            if r["program"] in ("chain100", "rnn100"):
                ok = r["over_bytecode"] <= GOAL_COMPILED_OVER_BYTECODE
                out.append(
                    f"{key}: compiled/bytecode {r['over_bytecode']:.2f} "
                    f"(goal <= {GOAL_COMPILED_OVER_BYTECODE}) {'ok' if ok else 'MISSED'}"
                )
            ok = r["overhead_ns_per_instr"] <= GOAL_OVERHEAD_NS
            out.append(
                f"{key}: overhead {r['overhead_ns_per_instr']:.0f} ns/instr "
                f"(goal <= {GOAL_OVERHEAD_NS:.0f}) {'ok' if ok else 'MISSED'}"
            )
        elif r["exec_mode"] == "bytecode" and r["program"] != "mlp1":
            ok = r["over_interp"] <= GOAL_BYTECODE_OVER_INTERP
            out.append(
                f"{key}: bytecode/interpret {r['over_interp']:.3f} "
                f"(goal <= {GOAL_BYTECODE_OVER_INTERP}) {'ok' if ok else 'MISSED'}"
            )
    return out


# -- the native section ---------------------------------------------------------------------


def _ort_session(model: Any) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def native_rows(repeat: int) -> list[dict[str, Any]]:
    """Per program of `native_programs`: the interleaved medians and their ratios."""
    rows = []
    for prog in native_programs():
        name, args = prog["name"], prog["args"]
        ex = rvm.compile(prog["mod"], opt_level=prog["opt_level"])
        compiled = rvm.VirtualMachine(ex, exec_mode="compiled")["main"]
        vm = rvm.VirtualMachine(ex, exec_mode="native")
        native = vm["main"]
        model = prog["onnx"]()
        session = _ort_session(model)
        feed = {i.name: a for i, a in zip(session.get_inputs(), args)}
        imported = rvm.compile(rvm.from_onnx(model), opt_level=prog["opt_level"])
        vm_onnx = rvm.VirtualMachine(imported, exec_mode="native")
        native_onnx = vm_onnx["main"]
        numba_fn = prog["numba"]
        ref = rvm.interpret(prog["mod"], "main", *args)
        close = {"rtol": 1e-4, "atol": 1e-5}
        assert_values_close(compiled(*args), ref, **close)
        assert_values_close(native(*args), ref, **close)
        assert_values_close(native_onnx(*args), ref, **close)
        assert_values_close(numba_fn(*args), ref, rtol=1e-3, atol=1e-4)
        assert_values_close(session.run(None, feed)[0], ref, rtol=1e-3, atol=1e-4)
        for which, report in (("rvm script", vm), ("onnx import", vm_onnx)):
            fallbacks = report.native_report().fallbacks
            if fallbacks:
                raise AssertionError(f"{name} ({which}) is not all native: {fallbacks}")
        times = interleaved_medians(
            {
                "compiled": functools.partial(compiled, *args),
                "native": functools.partial(native, *args),
                "numba": functools.partial(numba_fn, *args),
                "numba_empty": functools.partial(numba_identity, args[0]),
                "ort": functools.partial(session.run, None, feed),
                "native_onnx": functools.partial(native_onnx, *args),
            },
            repeat=repeat,
        )
        row = {"program": name, **{f"{k}_us": v * 1e6 for k, v in times.items()}}
        row["native_over_numba"] = times["native"] / times["numba"]
        row["native_over_ort"] = times["native"] / times["ort"]
        rows.append(row)
    return rows


def native_table(rows: list[dict[str, Any]]) -> str:
    cols = ["compiled", "native", "numba", "numba_empty", "ort", "native_onnx"]
    return text_table(
        rows,
        [("program", "program", "<8")]
        + [(f"{c} us", f"{c}_us", ">14.2f") for c in cols]
        + [
            ("native/numba", "native_over_numba", ">13.2f"),
            ("native/ort", "native_over_ort", ">11.2f"),
        ],
    )


def native_goals(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        goal = GOAL_NATIVE_OVER_NUMBA[r["program"]]
        ok = r["native_over_numba"] <= goal and r["native_over_ort"] < 1
        out.append(
            f"{r['program']}/native: {r['native_over_numba']:.2f}x whole-function Numba (goal "
            f"<= {goal}), {r['native_over_ort']:.2f}x ONNX Runtime on 1 thread (goal < 1) "
            f"{'ok' if ok else 'MISSED'}"
        )
    return out


def large_rows(repeat: int) -> list[dict[str, Any]]:
    """Per program of `native_programs.large_programs` (kernel-bound work): the compiled and
    native modes' interleaved medians, outputs checked against each other and the native
    mode's report checked for fallbacks. Beside the wall times, the process's CPU time per
    call (its pool's threads' too), interleaved apart: on a loaded machine (load 15 on 2
    cores, the Zen 4 of session 45) a call's wall time was 10 times its CPU time and the
    wall ratio of one run swung 0.89-1.16 between rounds, while the CPU ratio still says
    whether native code does more work."""
    rows = []
    for prog in large_programs():
        ex = rvm.compile(prog["mod"])
        calls = {}
        for mode in ("compiled", "native"):
            vm = rvm.VirtualMachine(ex, exec_mode=mode)
            calls[mode] = functools.partial(vm[prog["fname"]], *prog["args"])
            if mode == "native" and vm.native_report().fallbacks:
                raise AssertionError(f"{prog['name']}: {vm.native_report().fallbacks}")
        assert_values_close(calls["native"](), calls["compiled"](), rtol=1e-5, atol=1e-6)
        times = interleaved_medians(calls, repeat=repeat)
        cpu = interleaved_medians(calls, repeat=repeat, clock=time.process_time)
        row = {"program": prog["name"], **{f"{k}_ms": v * 1e3 for k, v in times.items()}}
        row.update({f"{k}_cpu_ms": v * 1e3 for k, v in cpu.items()})
        row["native_over_compiled"] = times["native"] / times["compiled"]
        row["native_over_compiled_cpu"] = cpu["native"] / cpu["compiled"]
        rows.append(row)
    return rows


def adt_rows(repeat: int) -> list[dict[str, Any]]:
    """Per program of `native_programs.adt_programs`: the compiled and native modes'
    interleaved medians (us per call), outputs checked against each other and the native
    mode's report checked for fallbacks."""
    rows = []
    for prog in adt_programs():
        ex = rvm.compile(prog["mod"])
        calls, outs = {}, {}
        for mode in ("compiled", "native"):
            vm = rvm.VirtualMachine(ex, exec_mode=mode)
            calls[mode] = functools.partial(vm[prog["fname"]], *prog["args"])
            outs[mode] = calls[mode]()
            if mode == "native" and set(vm.native_report().fallbacks) - set(
                prog.get("fallbacks", ())
            ):
                raise AssertionError(f"{prog['name']}: {vm.native_report().fallbacks}")
        assert repr(outs["native"]) == repr(outs["compiled"]), prog["name"]
        times = interleaved_medians(calls, repeat=repeat)
        row = {"program": prog["name"], **{f"{k}_us": v * 1e6 for k, v in times.items()}}
        row["native_over_compiled"] = times["native"] / times["compiled"]
        rows.append(row)
    return rows


def adt_table(rows: list[dict[str, Any]]) -> str:
    return text_table(
        rows,
        [
            ("program", "program", "<12"),
            ("compiled us", "compiled_us", ">12.2f"),
            ("native us", "native_us", ">10.2f"),
            ("native/compiled", "native_over_compiled", ">16.3f"),
        ],
    )


def large_table(rows: list[dict[str, Any]]) -> str:
    ok = {True: "ok", False: "MISSED"}
    marked = [
        {
            **r,
            "goal": f" (goal <= {GOAL_NATIVE_OVER_COMPILED}) "
            f"{ok[r['native_over_compiled'] <= GOAL_NATIVE_OVER_COMPILED]}",
        }
        for r in rows
    ]
    columns = [
        ("program", "program", "<9"),
        ("compiled ms", "compiled_ms", ">12.3f"),
        ("native ms", "native_ms", ">10.3f"),
        ("native/compiled", "native_over_compiled", ">16.2f"),
        ("cpu ms cm", "compiled_cpu_ms", ">10.3f"),
        ("nt", "native_cpu_ms", ">8.3f"),
        ("nt/cm", "native_over_compiled_cpu", ">6.2f"),
        ("", "goal", ""),
    ]
    cpu = "(cpu ms: the process's CPU time per call, its pool's threads' included)"
    return text_table(marked, columns).rstrip() + "\n" + cpu


def result_check_rows(repeat: int) -> list[dict[str, Any]]:
    """What checking a call's result against its recorded type costs (`rvm.runtime.calling`):
    per native program and exec mode, ``vm["main"](...)`` on a default VM (whose checks are
    none where the code proves the result type), on one that checks every result at run time
    (`forced`) and on one whose checks are off, interleaved."""
    from rvm.runtime.calling import result_check

    rows = []
    for prog in native_programs():
        ex = rvm.compile(prog["mod"], opt_level=prog["opt_level"])
        fns = {}
        for mode in ("bytecode", "compiled", "native"):
            variants = {
                "default": None,
                "forced": [result_check(f) for f in ex.functions],
                "off": [None] * len(ex.functions),
            }
            for which, checks in variants.items():
                vm = rvm.VirtualMachine(ex, exec_mode=mode)
                if checks is not None:
                    vm._results = checks  # before its handles are made (a benchmark's knob)
                fns[f"{mode}/{which}"] = functools.partial(vm["main"], *prog["args"])
        # Twice, in opposite orders: the position in a turn biases a median by more than
        # these checks cost (the first VM's call after another's pays for the cold caches).
        forward = interleaved_medians(fns, repeat=repeat)
        backward = interleaved_medians(dict(reversed(list(fns.items()))), repeat=repeat)
        times = {k: (forward[k] + backward[k]) / 2 for k in fns}
        for mode in ("bytecode", "compiled", "native"):
            off = times[f"{mode}/off"]
            row = {"program": prog["name"], "mode": mode, "off_us": off * 1e6}
            for which in ("default", "forced"):
                row[f"{which}_us"] = times[f"{mode}/{which}"] * 1e6
                row[f"{which}_cost_ns"] = (times[f"{mode}/{which}"] - off) * 1e9
            rows.append(row)
    return rows


def result_check_table(rows: list[dict[str, Any]]) -> str:
    return text_table(
        rows,
        [
            ("program", "program", "<8"),
            ("mode", "mode", "<9"),
            ("off us", "off_us", ">8.2f"),
            ("default us", "default_us", ">11.2f"),
            ("cost ns", "default_cost_ns", ">8.0f"),
            ("forced us", "forced_us", ">10.2f"),
            ("cost ns", "forced_cost_ns", ">8.0f"),
        ],
    )


def cold_build() -> dict[str, dict[str, float]]:
    """Seconds to build each native program from empty caches (a child process): its kernels
    (`rvm.compile`) and its native functions (the first native call)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, RVM_CACHE_DIR=f"{tmp}/rvm", NUMBA_CACHE_DIR=f"{tmp}/numba")
        out = subprocess.run(
            [sys.executable, __file__, "--cold-child"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cold_child() -> None:
    builds = {}
    rvm.VirtualMachine(rvm.compile(chain_module(1)), exec_mode="native")["main"](
        np.ones((1, 8), "float32"), np.ones((8, 8), "float32")
    )  # Numba's own start-up (and the native helpers), not counted
    for prog in native_programs():
        start = time.perf_counter()
        ex = rvm.compile(prog["mod"], opt_level=prog["opt_level"])
        kernels = time.perf_counter() - start
        vm = rvm.VirtualMachine(ex, exec_mode="native")
        start = time.perf_counter()
        vm["main"](*prog["args"])
        native = time.perf_counter() - start
        builds[prog["name"]] = {"kernels_s": kernels, "native_s": native}
    print(json.dumps(builds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--kernels", default="numpy,jit", help="kernel backends to run")
    parser.add_argument("--native-only", action="store_true", help="only the native section")
    parser.add_argument(
        "--result-checks", action="store_true", help="only the cost of the result checks"
    )
    parser.add_argument("--large", action="store_true", help="only the large-work section")
    parser.add_argument("--data-types", action="store_true", help="only the data-type section")
    parser.add_argument(
        "--name",
        default=None,
        help="results file name, no suffix (default: exec_modes, exec_modes_large, "
        "exec_modes_native or exec_modes_result_checks, by the section run)",
    )
    parser.add_argument("--cold-child", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.cold_child:
        _cold_child()
        return
    print(machine_line())
    repeat = 5 if opts.quick else 11
    if opts.data_types:
        adts = adt_rows(31 if opts.quick else 201)
        print(f"data types (load {os.getloadavg()[0]:.1f}), medians interleaved, us per call")
        print(adt_table(adts))
        write_results(opts.name or "exec_modes_adts", {"machine": machine(), "adts": adts})
        return
    large = large_rows(5 if opts.quick else 15)
    print(f"large work (load {os.getloadavg()[0]:.1f}), medians interleaved, ms per call")
    print(large_table(large))
    print()
    if opts.large:
        write_results(opts.name or "exec_modes_large", {"machine": machine(), "large": large})
        return
    checks = result_check_rows(31 if opts.quick else 101)
    print(f"result checks (load {os.getloadavg()[0]:.1f}), medians interleaved, us per call")
    print(result_check_table(checks))
    print()
    if opts.result_checks:
        write_results(opts.name or "exec_modes_result_checks", {"result_checks": checks})
        return
    native = native_rows(31 if opts.quick else 101)
    cold = cold_build()
    print(
        f"native section (load {os.getloadavg()[0]:.1f}), medians interleaved, us per call; "
        "ONNX Runtime and OpenBLAS on one thread"
    )
    print(native_table(native))
    for line in native_goals(native):
        print("  " + line)
    for name, build in cold.items():
        print(
            f"  cold build {name}: kernels {build['kernels_s']:.2f} s, "
            f"native functions {build['native_s']:.2f} s"
        )
    print()
    if opts.native_only:
        write_results(
            opts.name or "exec_modes_native",
            {"machine": machine(), "native": native, "large": large, "cold_build": cold},
        )
        return
    backends = [k for k in opts.kernels.split(",") if k]
    rows: list[dict[str, Any]] = []
    for prog in programs():
        run = lambda p=prog: rvm.interpret(p["mod"], p["fname"], *p["args"])  # noqa: E731
        interp_s = median_time(run, max(3, repeat // 2))
        for kernels in backends:
            try:
                rows += bench(prog, kernels, repeat, interp_s)
            except ImportError as e:  # no jit backend in this environment
                print(f"{prog['name']}/{kernels}: skipped ({e})")
    print(
        f"rvm exec modes (python {platform.python_version()}, numpy {np.__version__}, "
        f"medians of {repeat})"
    )
    print(table(rows))
    print()
    for line in goals(rows):
        print("  " + line)
    write_results(
        opts.name or "exec_modes",
        {
            "machine": machine(),
            "repeat": repeat,
            "large": large,
            "goals": {
                "compiled_over_bytecode_max": GOAL_COMPILED_OVER_BYTECODE,
                "bytecode_over_interp_max": GOAL_BYTECODE_OVER_INTERP,
                "compiled_overhead_ns_per_instr_max": GOAL_OVERHEAD_NS,
            },
            "rows": rows,
            "native": native,
            "native_goals": GOAL_NATIVE_OVER_NUMBA,
            "cold_build": cold,
            "result_checks": checks,
        },
    )


if __name__ == "__main__":
    main()
