"""A one-line progress bar on stderr for long loops (kernel builds)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

__all__ = ["with_progress"]

T = TypeVar("T")


def with_progress(items: Sequence[T], label: Callable[[T], str], show: bool) -> Iterator[T]:
    """``items`` one by one; with ``show``, a ``compiling kernels [###---] k/n label`` bar on
    stderr before each item and a finished bar (and newline) after the last."""

    def draw(done: int, text: str, end: str = "") -> None:
        filled = 30 * done // max(len(items), 1)
        bar = "#" * filled + "-" * (30 - filled)
        sys.stderr.write(f"\rcompiling kernels [{bar}] {done}/{len(items)} {text[:40]:<40}{end}")
        sys.stderr.flush()

    for k, item in enumerate(items):
        if show:
            draw(k, label(item))
        yield item
    if show and items:
        draw(len(items), "done", "\n")
