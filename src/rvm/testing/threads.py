"""Running a test's work in several threads at once, failures reported in the caller."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_in_threads(work: Callable[[int], object], n: int) -> None:
    """Calls ``work(i)`` for i in 0..n-1, each in its own thread, all at once, and waits for
    them; re-raises the first exception any thread raised (an assertion in a thread would
    otherwise only be printed)."""
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as err:  # noqa: BLE001 - re-raised by the calling thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
