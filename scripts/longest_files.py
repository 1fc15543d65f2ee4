"""Print tests/conftest.py's ``LONGEST_FILES`` table from a run of the suite.

The table orders xdist's work (the longest files first), so it is measured data that ages:
regenerate it after changing what the suite compiles. Run the suite as CI does, from empty
caches, keeping every test's duration, then read that output::

    RVM_CACHE_DIR=$(mktemp -d) NUMBA_CACHE_DIR=$(mktemp -d) \\
        python -m pytest tests --durations=0 > suite.txt
    python scripts/longest_files.py suite.txt [--scale 1.0] [--top 45]

Each file's weight is the sum of its tests' setup, call and teardown seconds in that run,
divided by ``--scale`` (a loaded machine's seconds over a quiet one's; only the order
matters), rounded; files under one second are left out (they go after the table's, by their
count of tests). Paste the printed lines over the table's.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

# A line of pytest's ``--durations`` report: "12.34s call     tests/x/test_y.py::test_z[a]".
LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(?:setup|call|teardown)\s+(\S+?\.py)::")


def weights(report: str, scale: float) -> dict[str, int]:
    """Each test file's summed durations in ``report`` (pytest's output), over ``scale``."""
    seconds: dict[str, float] = defaultdict(float)
    for line in report.splitlines():
        m = LINE.match(line)
        if m:
            seconds[m.group(2)] += float(m.group(1))
    rounded = {path: round(total / scale) for path, total in seconds.items()}
    return {path: w for path, w in sorted(rounded.items(), key=lambda kv: -kv[1]) if w >= 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="pytest's output with --durations=0")
    parser.add_argument("--scale", type=float, default=1.0, help="loaded seconds per quiet one")
    parser.add_argument("--top", type=int, default=45, help="at most this many files")
    args = parser.parse_args()
    table = weights(args.report.read_text(), args.scale)
    for path, weight in list(table.items())[: args.top]:
        print(f'    "{path}": {weight},')


if __name__ == "__main__":
    main()
