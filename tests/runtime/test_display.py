"""Notebook display (`_repr_html_`) and one-line reprs of the executable, the VM, the profile
report and the benchmark result."""

from __future__ import annotations

import re

import numpy as np
import pytest
import rt_helpers as h

from rvm.runtime import BenchmarkResult, ProfileReport, VirtualMachine, register_func

GLOBAL = "test.display.double"
register_func(GLOBAL, lambda a: a * 2, override=True)


def x4() -> np.ndarray:
    return np.linspace(-1, 1, 4, dtype=np.float32)


def widths(parser) -> list[float]:
    """The `width: N%` of every bar drawn in the parsed HTML."""
    out = []
    for _, attrs in parser.tags:
        m = re.search(r"(?<![-\w])width: ([\d.]+)%", attrs.get("style") or "")
        if m:
            out.append(float(m.group(1)))
    return out


def _rows(parser) -> list[list[str]]:
    """The text of each table row (cells in order)."""
    rows: list[list[str]] = []
    cells: list[str] = []
    cell = None
    for kind, value in parser.stream:
        if kind == "start" and value == "tr":
            cells = []
        elif kind == "start" and value in ("td", "th"):
            cell = ""
        elif kind == "data" and cell is not None:
            cell += value
        elif kind == "end" and value in ("td", "th"):
            cells.append(cell)
            cell = None
        elif kind == "end" and value == "tr":
            rows.append(cells)
    return rows


def test_executable_html_summary_and_collapsed_bytecode(parse_html):
    ex = h.packed_then_exp(GLOBAL)
    markup = ex._repr_html_()
    parser = parse_html(markup)
    text = "".join(parser.text)
    for piece in ("@main", "exp<&>", GLOBAL, "default exec mode", "bytecode", "numpy"):
        assert piece in text, piece
    assert "exp&lt;&amp;&gt;" in markup and "exp<&>" not in markup
    tags = [t for t, _ in parser.tags]
    assert tags.count("details") == 2 and tags.count("summary") == 2
    # the bytecode is the disassembly, whole, inside the second <details>
    assert ex.as_text() in text
    assert "\n" not in repr(ex)


def test_executable_html_counts(parse_html):
    ex = h.symbolic_program()
    rows = _rows(parse_html(ex._repr_html_()))
    assert ["instructions", "6"] in rows and ["kernels backend", "numpy"] in rows
    assert ["@main", "2", "x, y", str(ex.functions[0].register_file_size), "6"] in rows
    assert ["constants", f"3 ({sum(c.nbytes for c in ex.constants)} B)"] in rows


def test_vm_html_shows_mode_allocator_and_signatures(parse_html, exec_mode):
    vm = VirtualMachine(h.symbolic_program(), exec_mode=exec_mode, allocator="naive")
    vm.save_function("main", "bound", np.ones((2, 4), np.float32), np.ones((2, 4), np.float32))
    text = "".join(parse_html(vm._repr_html_()).text)
    assert exec_mode in text and "naive" in text
    assert "@main(x: Tensor((n, 4), float32), y: Tensor((n, 4), float32))" in text
    assert "@bound" in text
    assert "\n" not in repr(vm)


def test_profile_html_bars_and_rows(parse_html):
    runs = [(1000, {"a": (2, 500), "b<i>": (1, 200)})] * 3
    report = ProfileReport("main", runs, {}, warmup=1)
    markup = report._repr_html_()
    parser = parse_html(markup)
    text = "".join(parser.text)
    for piece in ("a", "b<i>", "VM overhead", "total", "calls/run", "median of 3 timed runs"):
        assert piece in text, piece
    assert "b&lt;i&gt;" in markup
    # one bar per kernel and one for the VM overhead: 50%, 20%, 30%, which add up to the run
    assert widths(parser) == [50.0, 20.0, 30.0]
    numbers = [a["style"] for t, a in parser.tags if t == "td"][1:4]
    assert all("text-align: right" in s for s in numbers)
    assert "\n" not in repr(report)


def test_profile_html_of_a_real_run(parse_html, exec_mode):
    vm = VirtualMachine(h.packed_then_exp(GLOBAL), exec_mode=exec_mode)
    report = vm.profile("main", x4(), repeat=3)
    parser = parse_html(report._repr_html_())
    text = "".join(parser.text)
    assert GLOBAL in text and "exp<&>" in text
    bars = widths(parser)
    assert len(bars) == 3 and all(0 <= w <= 100 for w in bars)


def test_benchmark_result_html_and_repr(parse_html):
    res = BenchmarkResult([1e-6, 3e-6, 2e-6], number=100)
    rows = _rows(parse_html(res._repr_html_()))
    assert rows == [
        ["mean µs", "median µs", "std µs", "min µs", "max µs", "repeats x number"],
        ["2.00", "2.00", "0.82", "1.00", "3.00", "3 x 100"],
    ]
    assert repr(res) == (
        "<BenchmarkResult mean=2.00us median=2.00us std=0.82us repeat=3 number=100>"
    )
    assert str(res).startswith("mean 2.00 us  median 2.00 us")


@pytest.mark.parametrize("obj", ["ex", "vm"])
def test_reprs_stay_one_line(obj):
    ex = h.symbolic_program()
    value = ex if obj == "ex" else VirtualMachine(ex)
    assert "\n" not in repr(value) and repr(value).startswith("<")
