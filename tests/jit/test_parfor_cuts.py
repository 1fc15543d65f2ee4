"""How `rvm.kernels.parfor` cuts a loop into pieces: equal runs (`piece_range`) and guided
ones (`guided_range`) that shrink toward the end of the claim order."""

from __future__ import annotations

import pytest

from rvm.kernels import parfor

THREADS = (1, 2, 3, 4, 8)
CUTS = [
    (pieces, total, align)
    for pieces in (1, 2, 3, 4, 6, 8, 9, 16, 32)
    for total in (1, 7, 64, 100, 169, 1000, 3025)
    for align in (1, 6, 8, 16)
]


def _runs(pieces: int, threads: int, total: int, align: int) -> list[tuple[int, int]]:
    return [parfor.guided_range(p, pieces, threads, total, align) for p in range(pieces)]


@pytest.mark.parametrize("threads", THREADS)
def test_guided_runs_cover_the_range_once_on_the_grid(threads) -> None:
    """The runs are end to end from 0 to ``total`` (each element in exactly one), each
    boundary inside on a multiple of ``align``."""
    for pieces, total, align in CUTS:
        runs = _runs(pieces, threads, total, align)
        assert runs[0][0] == 0 and runs[-1][1] == total
        for (lo, hi), (nxt, _) in zip(runs, runs[1:]):
            assert lo <= hi == nxt
            assert hi % align == 0


@pytest.mark.parametrize("threads", THREADS)
def test_guided_runs_shrink_round_by_round(threads) -> None:
    """A run is no longer than any run of an earlier round of ``threads`` claims (but for the
    grid: each boundary rounded down to a step of ``align``, under two steps); equal runs
    (`piece_range`) where the pieces make one round or the steps are too few; the last round
    about a `GUIDED_LAST`-th of the first where the steps are many."""
    for pieces, total, align in CUTS:
        _shrink_round_by_round(pieces, threads, total, align)


def _shrink_round_by_round(pieces: int, threads: int, total: int, align: int) -> None:
    runs = _runs(pieces, threads, total, align)
    sizes = [hi - lo for lo, hi in runs]
    if pieces <= threads or total // align < 2 * pieces:
        assert runs == [parfor.piece_range(p, pieces, total, align) for p in range(pieces)]
        return
    rounds = [sizes[r : r + threads] for r in range(0, pieces, threads)]
    for earlier, later in zip(rounds, rounds[1:]):
        assert max(later) < min(earlier) + 2 * align
    if total // align >= 16 * pieces and pieces % threads == 0:
        first, last = sum(rounds[0]), sum(rounds[-1])
        assert last * parfor.GUIDED_LAST == pytest.approx(first, rel=0.2)


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_guided_runs_leave_the_threads_even(threads) -> None:
    """Claimed greedily by ``threads`` threads of equal speed (each takes the next run when it
    is free), guided runs end within a last run of each other: the threads finish together."""
    pieces, total = 4 * threads, 100_000
    sizes = [hi - lo for lo, hi in _runs(pieces, threads, total, 1)]
    free = [0] * threads
    for size in sizes:
        free[free.index(min(free))] += size
    assert max(free) - min(free) <= sizes[-1]
    equal = total // pieces
    assert sizes[-1] < equal < sizes[0]
