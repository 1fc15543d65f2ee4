"""Progress of long work (building rvm's library, compiling kernels and native functions).

One `Progress` per task, drawn where the user looks, once the task has run `DELAY_S` (so quick
work draws nothing):

- on a terminal (stderr is a TTY): one updating line on stderr,
  ``compiling kernels [#####-----] 3/12 fused_conv2d_add``, ended by a newline;
- in a Jupyter notebook: an ``ipywidgets`` progress bar when ipywidgets is installed, else an
  updating line of text (IPython's ``display(..., display_id=True)``);
- anywhere else (stderr redirected to a file or a pipe, a service): nothing is drawn, and the
  finished task logs one INFO line on the ``rvm.progress`` logger
  (``compiling kernels: 12 in 41.3 s``).

``show=False`` draws nothing anywhere (the INFO line is still logged).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["DELAY_S", "Progress", "with_progress"]

T = TypeVar("T")
DELAY_S = 0.5
"""Work that finishes sooner draws nothing."""
_WIDTH = 30
logger = logging.getLogger("rvm.progress")


class Progress:
    """The progress of one task of ``total`` steps (0: a task of unknown length).

    Use as a context manager; `update` sets the steps done and what is being done.
    """

    def __init__(self, title: str, total: int = 0, show: bool = True) -> None:
        self.title = title
        self.total = total
        self.done = 0
        self.label = ""
        self._start = time.perf_counter()
        self._lock = threading.Lock()
        self._closed = False
        self._view: _View | None = None
        self._medium = _medium() if show else "log"
        self._timer: threading.Timer | None = None
        if self._medium != "log":
            self._timer = threading.Timer(DELAY_S, self._draw)
            self._timer.daemon = True
            self._timer.start()

    def update(self, done: int, label: str = "") -> None:
        """``done`` steps are done; ``label`` is what the next one is."""
        self.done, self.label = done, label
        if self._view is not None or (
            self._medium != "log" and time.perf_counter() - self._start >= DELAY_S
        ):
            self._draw()

    def close(self) -> None:
        """The task is over: a drawn bar is completed (a terminal's line ended), else the
        INFO line is logged."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            seconds = time.perf_counter() - self._start
            if self._view is not None:
                self._view.show(self.total or self.done, self.total, "done", True)
            else:
                count = f"{self.total} " if self.total else ""
                logger.info("%s: %sin %.1f s", self.title, count, seconds)

    def _draw(self) -> None:
        with self._lock:
            if self._closed:
                return
            if self._view is None:
                self._view = _make_view(self._medium, self.title)
            self._view.show(self.done, self.total, self.label, False)

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def with_progress(
    items: Sequence[T], label: Callable[[T], str], show: bool, title: str = "compiling kernels"
) -> Iterator[T]:
    """``items`` one by one, with a `Progress` of them (``label(item)`` for the current one)."""
    with Progress(title, len(items), show) as bar:
        for k, item in enumerate(items):
            bar.update(k, label(item))
            yield item


def _medium() -> str:
    """Where progress is drawn: "notebook", "terminal" or "log" (nowhere)."""
    shell = sys.modules.get("IPython")
    if shell is not None and "ipykernel" in sys.modules:
        ip = shell.get_ipython() if hasattr(shell, "get_ipython") else None
        if ip is not None and type(ip).__name__ == "ZMQInteractiveShell":
            return "notebook"
    stream = sys.stderr
    try:
        return "terminal" if stream is not None and stream.isatty() else "log"
    except (AttributeError, ValueError):  # a replaced or closed stderr
        return "log"


class _View:
    """A drawn bar: ``show(done, total, label, final)``."""

    def show(self, done: int, total: int, label: str, final: bool) -> None:
        raise NotImplementedError


def _text(title: str, done: int, total: int, label: str) -> str:
    if not total:
        return f"{title} ... {label[:40]}"
    filled = _WIDTH * min(done, total) // total
    return f"{title} [{'#' * filled}{'-' * (_WIDTH - filled)}] {done}/{total} {label[:40]:<40}"


class _Terminal(_View):
    def __init__(self, title: str) -> None:
        self.title = title
        self.last = ""

    def show(self, done: int, total: int, label: str, final: bool) -> None:
        line = _text(self.title, done, total, label)
        if line == self.last and not final:
            return
        self.last = line
        sys.stderr.write("\r" + line + ("\n" if final else ""))
        sys.stderr.flush()


class _Widget(_View):
    def __init__(self, title: str, widgets: Any, display: Callable[..., Any]) -> None:
        self.title = title
        self.bar = widgets.IntProgress(min=0, max=1, description=title[:20])
        self.text = widgets.Label()
        display(widgets.HBox([self.bar, self.text]))

    def show(self, done: int, total: int, label: str, final: bool) -> None:
        self.bar.max = max(total, 1)
        self.bar.value = min(done, self.bar.max) if total else int(final)
        self.text.value = f"{done}/{total} {label}" if total else label
        if final:
            self.bar.bar_style = "success"


class _Line(_View):
    def __init__(self, title: str, display: Callable[..., Any]) -> None:
        self.title = title
        self.handle = display(_text(title, 0, 0, ""), display_id=True)

    def show(self, done: int, total: int, label: str, final: bool) -> None:
        self.handle.update(_text(self.title, done, total, label))


def _make_view(medium: str, title: str) -> _View:
    if medium == "terminal":
        return _Terminal(title)
    from IPython.display import display

    try:
        import ipywidgets
    except ImportError:
        return _Line(title, display)
    return _Widget(title, ipywidgets, display)
