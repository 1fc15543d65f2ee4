"""Progress of long work: an updating line on a terminal, a widget or an updating line in a
notebook, one INFO log line elsewhere; nothing drawn when stderr is not a terminal, and
nothing for work quicker than DELAY_S."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from rvm import progress
from rvm.progress import Progress, with_progress

SRC = str(Path(__file__).resolve().parents[2] / "src")


class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def _tty(monkeypatch) -> _TTY:
    """stderr is a terminal, and work draws at once (no delay). Called in the test itself:
    pytest's capture sets sys.stderr again between a fixture's setup and the test."""
    stream = _TTY()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    return stream


def test_a_terminal_gets_one_updating_line(monkeypatch, caplog):
    tty = _tty(monkeypatch)
    with caplog.at_level(logging.INFO, logger="rvm.progress"):
        assert list(with_progress(["a", "b", "c"], str, True, title="compiling kernels")) == [
            "a",
            "b",
            "c",
        ]
    text = tty.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")  # one line, redrawn with \r
    assert "\rcompiling kernels [" in text and "1/3 b" in text and "3/3 done" in text
    assert not caplog.records  # drawn: no log line besides


def test_elsewhere_nothing_is_drawn_and_one_info_line_is_logged(monkeypatch, caplog):
    stream = io.StringIO()  # not a terminal
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    with caplog.at_level(logging.INFO, logger="rvm.progress"):
        list(with_progress(list(range(5)), str, True, title="compiling kernels"))
    assert stream.getvalue() == ""
    assert [r.getMessage()[:22] for r in caplog.records] == ["compiling kernels: 5 i"]


def test_show_false_and_quick_work_draw_nothing(monkeypatch):
    tty = _tty(monkeypatch)
    list(with_progress([1, 2], str, False))
    assert tty.getvalue() == ""
    monkeypatch.setattr(progress, "DELAY_S", 5.0)
    list(with_progress([1, 2], str, True))  # done long before 5 s
    assert tty.getvalue() == ""


def test_a_long_single_step_draws_after_the_delay(monkeypatch):
    tty = _tty(monkeypatch)
    monkeypatch.setattr(progress, "DELAY_S", 0.05)
    with Progress("building rvm's library: conv2d (float32)"):
        # The timer draws while the step runs: the step lasts until it has (a fixed sleep
        # could end before a loaded machine ran the timer's thread, and close() cancels it).
        deadline = time.monotonic() + 60
        while not tty.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    text = tty.getvalue()
    assert text.startswith("\rbuilding rvm's library: conv2d (float32) ...") and text.endswith("\n")


def _notebook(monkeypatch, widgets: bool) -> list:
    """A fake Jupyter kernel (and ipywidgets if ``widgets``); returns what was displayed."""
    shown: list = []

    class ZMQInteractiveShell:
        pass

    class Handle:
        def update(self, obj):
            shown.append(("update", obj))

    def display(obj, display_id=False):
        shown.append(("display", obj))
        return Handle() if display_id else None

    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: ZMQInteractiveShell()
    ipython_display = types.ModuleType("IPython.display")
    ipython_display.display = display
    ipython.display = ipython_display
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", ipython_display)
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    if widgets:
        w = types.ModuleType("ipywidgets")

        class Widget:
            def __init__(self, *children, **kw):
                self.children, self.value, self.max, self.bar_style = children, 0, 0, ""
                self.__dict__.update(kw)

        w.IntProgress, w.Label, w.HBox = Widget, Widget, Widget
        monkeypatch.setitem(sys.modules, "ipywidgets", w)
    else:
        monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import fails
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    return shown


def test_a_notebook_gets_a_widget(monkeypatch):
    shown = _notebook(monkeypatch, widgets=True)
    list(with_progress(["a", "b"], str, True))
    (kind, box), *_ = shown
    bar, label = box.children[0]
    assert kind == "display" and bar.value == bar.max == 2 and bar.bar_style == "success"
    assert label.value == "2/2 done"


def test_a_notebook_without_ipywidgets_gets_an_updating_line(monkeypatch):
    shown = _notebook(monkeypatch, widgets=False)
    list(with_progress(["a", "b"], str, True))
    assert shown[0][0] == "display" and all(kind == "update" for kind, _ in shown[1:])
    assert "2/2 done" in shown[-1][1]


def test_the_cli_draws_nothing_into_a_redirected_stderr(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Relu", ["e"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y])
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx"
    )
    with open(tmp_path / "log", "w") as log:
        run = subprocess.run(
            [sys.executable, "-m", "rvm", "compile", "m.onnx", "-o", "m.rvmx"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")},
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            timeout=600,
        )
    assert run.returncode == 0
    assert (tmp_path / "log").read_text() == ""
