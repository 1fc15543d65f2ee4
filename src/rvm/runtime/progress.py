"""A one-line progress bar on stderr for long loops (kernel builds, `rvm bench`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

__all__ = ["with_progress"]

T = TypeVar("T")


def with_progress(
    items: Sequence[T], label: Callable[[T], str], show: bool, title: str = "compiling kernels"
) -> Iterator[T]:
    """``items`` one by one; with ``show``, a ``compiling kernels [###---] k/n label`` bar
    (`title` first) on stderr before each item and a finished bar (and newline) after the
    last."""

    drawn: list[tuple[int, str]] = []

    def draw(done: int, text: str, end: str = "") -> None:
        filled = 30 * done // max(len(items), 1)
        if not end and drawn and drawn[-1] == (filled, text):
            return  # the same bar: many fast items redraw it some 30 times, not once each
        drawn.append((filled, text))
        bar = "#" * filled + "-" * (30 - filled)
        sys.stderr.write(f"\r{title} [{bar}] {done}/{len(items)} {text[:40]:<40}{end}")
        sys.stderr.flush()

    for k, item in enumerate(items):
        if show:
            draw(k, label(item))
        yield item
    if show and items:
        draw(len(items), "done", "\n")
