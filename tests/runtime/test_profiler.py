"""`VirtualMachine.profile` and `ProfileReport`: warmup and timed runs, medians, the VM's
overhead, and the text, CSV and JSON forms."""

from __future__ import annotations

import json

import numpy as np
import pytest
import rt_helpers as h

import rvm.runtime.modes.compiled as compiled_mod
from rvm.runtime import ProfileReport, VirtualMachine, register_func

COUNTED = "test.profiler.double<&>"
_calls = [0]


def _double(a: np.ndarray) -> np.ndarray:
    _calls[0] += 1
    return a * 2


register_func(COUNTED, _double, override=True)


def x4() -> np.ndarray:
    return np.linspace(-1, 1, 4, dtype=np.float32)


def test_timed_runs_are_repeat_and_warmup_runs_are_not_recorded(exec_mode):
    vm = VirtualMachine(h.packed_then_exp(COUNTED), exec_mode=exec_mode)
    _calls[0] = 0
    report = vm.profile("main", x4(), warmup=2, repeat=3)
    assert _calls[0] == 2 + 3 + 1  # warmup, timed, and the one run that records shapes
    assert report.repeat == 3 and report.warmup == 2
    assert len(report.runs) == len(report.run_times) == 3
    for wall_ns, per in report.runs:
        assert set(per) == {COUNTED, "exp<&>"}
        assert all(calls == 1 and 0 < ns < wall_ns for calls, ns in per.values())
    rows = {r["name"]: r for r in report.rows}
    assert rows[COUNTED]["calls"] == rows["exp<&>"]["calls"] == 1
    assert rows["exp<&>"]["shapes"] == ["(float32[4], float32[4])"]
    np.testing.assert_allclose(vm["main"](x4()), np.exp(2 * x4()), rtol=1e-6)  # unwrapped again


def test_calls_per_run_match_the_instrumented_count(exec_mode):
    vm = VirtualMachine(h.counting_loop(), exec_mode=exec_mode)
    args = (np.int64(0), np.int64(7), np.float32(0))
    seen: list[str] = []
    vm.set_instrument(lambda name, a, before: seen.append(name) if before else None)
    vm["loop"](*args)
    vm.set_instrument(None)
    report = vm.profile("loop", *args, repeat=4)
    assert (
        [(r["name"], r["calls"]) for r in report.rows]
        == [("add_ret", len(seen))]
        == [("add_ret", 14)]
    )
    row = report.rows[0]
    assert row["total"] > 0 and 0 < row["share"] <= 1 and report.vm_overhead >= 0
    assert row["mean"] == pytest.approx(row["total"] / 14)


def test_builtins_are_vm_work_and_keep_the_compiled_code(exec_mode, monkeypatch):
    vm = VirtualMachine(h.symbolic_program(), exec_mode=exec_mode)
    if exec_mode == "native":  # its compiled-mode fallback is made at its first use
        assert vm._mode.compiled is vm._mode.compiled
    generated: list[int] = []
    real = compiled_mod.generate_source
    monkeypatch.setattr(compiled_mod, "generate_source", lambda *a: generated.append(1) or real(*a))
    x = np.ones((3, 4), np.float32)
    report = vm.profile("main", x, y=x, warmup=0, repeat=2)
    # Only the kernel is timed: the shape builtins stay unwrapped, so the compiled mode runs the
    # code it generated when the VM was made (with the builtins inline), not code made now.
    assert [r["name"] for r in report.rows] == ["exp"]
    assert generated == []
    assert report.total > report.kernel_total > 0 and report.vm_overhead > 0


def test_repeat_and_warmup_are_checked():
    vm = VirtualMachine(h.straight_line())
    x = x4()
    with pytest.raises(ValueError, match=r"repeat >= 1 and warmup >= 0, got 0 and 1"):
        vm.profile("main", x, x, repeat=0)
    with pytest.raises(ValueError, match=r"got 10 and -1"):
        vm.profile("main", x, x, warmup=-1)
    with pytest.raises(TypeError, match=r"main takes 2 arguments \(x, y\), got 1"):
        vm.profile("main", x)


def synthetic() -> ProfileReport:
    """Three runs of 1000, 1200, 1100 ns: kernel a 500/600/550 ns in 2 calls, b 200/300/250."""
    runs = [
        (1000, {"a": (2, 500), "b<i>": (1, 200)}),
        (1200, {"a": (2, 600), "b<i>": (1, 300)}),
        (1100, {"a": (2, 550), "b<i>": (1, 250)}),
    ]
    shapes = {"a": {((np.dtype("float32"), (2, 3)), "int"): 2}}
    return ProfileReport("main", runs, shapes, warmup=1)


def test_report_takes_medians_over_runs():
    r = synthetic()
    assert r.repeat == 3 and r.run_times == (1e-6, 1.2e-6, 1.1e-6)
    assert r.total == pytest.approx(1.1e-6)
    assert r.kernel_total == pytest.approx(0.8e-6)
    assert r.vm_overhead == pytest.approx(0.3e-6)  # median of 300, 300, 300 ns
    a, b = r.rows
    assert (a["name"], a["calls"], b["name"], b["calls"]) == ("a", 2, "b<i>", 1)
    assert a["total"] == pytest.approx(550e-9) and a["mean"] == pytest.approx(275e-9)
    assert a["share"] == pytest.approx(0.5) and b["share"] == pytest.approx(250 / 1100)
    assert a["shapes"] == ["(float32[2, 3], int)"] and b["shapes"] == []


def test_report_text_csv_and_json():
    r = synthetic()
    text = str(r)
    assert text.splitlines()[0] == "profile of @main (median of 3 timed runs, 1 warmup)"
    assert "VM overhead (dispatch, allocation, builtins)" in text and "50.0%" in text
    csv = r.csv().splitlines()
    assert csv[0] == "name,calls_per_run,total_s,mean_s,share,precision,shapes"
    assert csv[1] == 'a,2,0.000000550,0.000000275,0.500000,,"(float32[2, 3], int)"'
    assert csv[-2:] == ["VM overhead,,0.000000300,,0.272727,,", "total,,0.000001100,,1.0,,"]
    doc = json.loads(r.json())
    assert (doc["function"], doc["repeat"], doc["warmup"]) == ("main", 3, 1)
    assert doc["run_times"] == [1e-6, 1.2e-6, 1.1e-6] and len(doc["rows"]) == 2
    assert "\n" not in repr(r) and repr(r).startswith("<ProfileReport @main 2 rows repeat=3")
