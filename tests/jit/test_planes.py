"""A channel split into its padded stride phases (`rvm.kernels.planes.padded_phases`) against
NumPy: every row and column stride (2: both column phases in one pass), padding on either
side, odd and even widths, planes clipped by the windows' reach, the padding left as found;
and channels filled whole, padding written, on the pool when large (`planes.fill_phases`)."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm.kernels import parfor, planes, workpool

FILL = -7.0  # what the caller left in the phases: the padding value

# (ih, iw, kernel, sh, sw, pt, pl, pb, pr)
CASES = [
    (224, 224, 3, 2, 2, 0, 0, 0, 0),  # squeezenet's stem: the last row and column unread
    (10, 9, 3, 2, 2, 1, 1, 1, 1),
    (11, 12, 3, 2, 2, 0, 1, 0, 1),  # an odd column first
    (7, 7, 7, 2, 2, 3, 3, 3, 3),  # the 7x7 stems' padding
    (9, 10, 3, 3, 2, 1, 0, 1, 0),
    (5, 4, 5, 2, 2, 2, 2, 2, 2),  # more padding than input on a side
    (6, 3, 2, 2, 2, 0, 2, 0, 1),  # three columns: one pair and one left over
    (8, 2, 3, 2, 2, 1, 1, 1, 1),  # two columns
    (8, 1, 3, 2, 2, 1, 1, 1, 1),  # one column: a phase at a time
    (9, 11, 3, 1, 1, 1, 1, 1, 1),
    (13, 17, 3, 2, 3, 1, 2, 1, 0),
    (12, 15, 5, 3, 2, 2, 1, 2, 2),  # a column stride of 2 under a row stride of 3
]


def _reference(x, sh, sw, pt, pl, hp, wp, hq, wq):
    """The phases by NumPy: the padded plane's rows a, a + sh... and columns b, b + sw...,
    clipped to (hp, wp), FILL where no input element lands."""
    ih, iw = x.shape
    plane = np.full((hq * sh + sh, wq * sw + sw), FILL, np.float32)
    for h in range(ih):
        for w in range(iw):
            if 0 <= h + pt < hp and 0 <= w + pl < wp:
                plane[h + pt, w + pl] = x[h, w]
    want = np.full((sh, sw, hq, wq), FILL, np.float32)
    for a in range(sh):
        for b in range(sw):
            part = plane[a::sh, b::sw][:hq, :wq]
            want[a, b, : part.shape[0], : part.shape[1]] = part
    return want.reshape(-1)


@pytest.mark.parametrize("case", CASES)
def test_padded_phases_match_numpy(case) -> None:
    ih, iw, k, sh, sw, pt, pl, pb, pr = case
    oh, ow = (ih + pt + pb - k) // sh + 1, (iw + pl + pr - k) // sw + 1
    hp, wp, hq, wq = planes.phase_shape(oh, ow, k, k, sh, sw, 1, 1)
    x = np.random.default_rng(0).standard_normal((2, ih, iw)).astype(np.float32)
    got = np.full(sh * sw * hq * wq, FILL, np.float32)
    # the second channel of the flat input: its offset read right
    planes.padded_phases(x.reshape(-1), ih * iw, ih, iw, got, sh, sw, hq, wq, hp, wp, pt, pl)
    want = _reference(x[1], sh, sw, pt, pl, hp, wp, hq, wq)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_fill_phases_writes_every_element(case, threads) -> None:
    """`planes.fill_phases` writes the phases whole: the input's elements, and zeros where
    none lands (the padding, the slack), whatever the memory held; three channels read from
    an offset in the flat input, one after another."""
    ih, iw, k, sh, sw, pt, pl, pb, pr = case
    oh, ow = (ih + pt + pb - k) // sh + 1, (iw + pl + pr - k) // sw + 1
    hp, wp, hq, wq = planes.phase_shape(oh, ow, k, k, sh, sw, 1, 1)
    x = np.random.default_rng(1).standard_normal((4, ih, iw)).astype(np.float32)
    got = np.full(3 * sh * sw * hq * wq, np.nan, np.float32)
    before = rvm.get_num_threads()
    rvm.set_num_threads(threads)
    try:
        planes.fill_phases(x.reshape(-1), got, ih * iw, 3, ih, iw, sh, sw, hq, wq, hp, wp, pt, pl)
    finally:
        rvm.set_num_threads(before)
    want = [_reference(x[c], sh, sw, pt, pl, hp, wp, hq, wq) for c in (1, 2, 3)]
    np.testing.assert_array_equal(
        got, np.where(np.concatenate(want) == FILL, 0, np.concatenate(want))
    )


@pytest.mark.parametrize("case", CASES)
def test_any_row_range_of_a_fill_writes_its_rows_whole(case) -> None:
    """The pool's pieces of a fill (`planes._fill_rows`: a row range, zeros written, the
    decoding `padded_phases` runs too) cut anywhere, a cut inside a row phase or a channel
    included: every element written once, as the whole fill."""
    ih, iw, k, sh, sw, pt, pl, pb, pr = case
    oh, ow = (ih + pt + pb - k) // sh + 1, (iw + pl + pr - k) // sw + 1
    hp, wp, hq, wq = planes.phase_shape(oh, ow, k, k, sh, sw, 1, 1)
    x = np.random.default_rng(3).standard_normal((3, ih, iw)).astype(np.float32)
    want = np.concatenate([_reference(x[c], sh, sw, pt, pl, hp, wp, hq, wq) for c in (1, 2)])
    rows = 2 * sh * hq
    for cut in sorted({1, hq // 2, hq, rows // 2 + 1, rows - 1}):
        got = np.full(want.size, np.nan, np.float32)
        job = planes.fill_job(x.reshape(-1), got, ih * iw, 2, ih, iw, sh, sw, hq, wq, hp, wp, pt,
                              pl, 2)  # fmt: skip
        planes._fill_rows(x.reshape(-1), got, job, 0, cut)
        planes._fill_rows(x.reshape(-1), got, job, cut, rows)
        np.testing.assert_array_equal(got, np.where(want == FILL, 0, want))


def test_a_large_fill_runs_on_the_pool() -> None:
    """A fill of `parfor.MIN_WORK` elements or more goes to the pool as one job (squeezenet's
    stem: 3 channels of 224 x 224 with AVX2's lanes), a small one runs in the caller; both
    right."""
    before = rvm.get_num_threads()
    rvm.set_num_threads(2)
    try:
        # large: 3 channels' 4 phases of MIN_WORK elements or more on any CPU (the lanes')
        large = 2 * int(np.ceil(np.sqrt(parfor.MIN_WORK / 12))) + 4
        for ih, jobs in ((large, 1), (8, 0)):
            oh = (ih - 3) // 2 + 1
            hp, wp, hq, wq = planes.phase_shape(oh, oh, 3, 3, 2, 2, 1, 1)
            assert (3 * 4 * hq * wq >= parfor.MIN_WORK) == (jobs == 1)
            x = np.random.default_rng(2).standard_normal((3, ih, ih)).astype(np.float32)
            got = np.full(3 * 4 * hq * wq, np.nan, np.float32)
            start = workpool.jobs()
            planes.fill_phases(x.reshape(-1), got, 0, 3, ih, ih, 2, 2, hq, wq, hp, wp, 0, 0)
            assert workpool.jobs() - start == jobs
            want = np.concatenate([_reference(c, 2, 2, 0, 0, hp, wp, hq, wq) for c in x])
            np.testing.assert_array_equal(got, np.where(want == FILL, 0, want))
    finally:
        rvm.set_num_threads(before)


def test_fill_phases_refuses_a_channel_outside_its_array() -> None:
    hp, wp, hq, wq = planes.phase_shape(3, 3, 3, 3, 1, 1, 1, 1)
    x = np.zeros(2 * 25, np.float32)
    flat = np.zeros(2 * hq * wq, np.float32)
    with pytest.raises(IndexError):
        planes.fill_phases(x, flat, 25, 2, 5, 5, 1, 1, hq, wq, hp, wp, 0, 0)
    with pytest.raises(IndexError):
        planes.fill_phases(x, flat[:-1], 0, 2, 5, 5, 1, 1, hq, wq, hp, wp, 0, 0)
