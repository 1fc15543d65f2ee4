"""How rvm's packed GEMM (`rvm.kernels.sgemm`) blocks a product's columns and weighs its
cuts across threads: how many of C's columns a block of B's rows takes (`column_step`, from
the cache sizes `gemmshape` reads), the floats a cut moves (`moved`, which
`rvm.kernels.blas.packed_cut` minimizes), and whether a band's rows of A crowd L1d's sets
(`crowded`, and the stride that does not: `uncrowded`). Sizes only: no memory is touched
here."""

from __future__ import annotations

from rvm.kernels.gemmshape import BLOCK_BYTES, COLUMN_BYTES, KC, L1_SPAN, L1_WAYS, LINE, NR
from rvm.kernels.jitting import jit

__all__ = ["column_step", "crowded", "moved", "one_block", "uncrowded"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS, inline="always")
def one_block(k):  # type: ignore[no-untyped-def]
    """The most columns of a product of depth ``k`` that `column_step` keeps in one block:
    their ``min(KC, k)`` rows of B fill `BLOCK_BYTES` (half of one core's L2) at most, in
    whole tiles."""
    return BLOCK_BYTES // (4 * min(KC, k)) // NR * NR


@jit(**_OPTS, inline="always")
def column_step(k, width):  # type: ignore[no-untyped-def]
    """C's columns a block of B's rows takes in a product of depth ``k`` over ``width``
    columns (`sgemm.sgemm_segments`), in whole tiles; every band of A walks the block, so A is read
    once a block. All of them where they fit one block (`one_block`: A then read once, a few
    tiles of C a band), else as many as fill `COLUMN_BYTES` (a quarter of L2: see
    `gemmshape.column_bytes`). A deep product on a small map reads a weight larger than L2
    once a block: squeezenet's conv10 (512 -> 1000 on 13 x 13, 169 columns) took blocks of 64
    columns on a Zen 3 (512 KB L2), its 2 MB weight read three times a piece."""
    whole = -(-width // NR) * NR
    if whole <= one_block(k):
        return max(NR, whole)
    return max(NR, COLUMN_BYTES // (4 * min(KC, k)) // NR * NR)


@jit(**_OPTS)
def moved(m, n, k, m_parts, n_parts):  # type: ignore[no-untyped-def]
    """The floats a product ``C[m, n] = A[m, k] @ B[k, n]`` whose B is packed (`sgemm.packs`) moves
    beside its multiply-adds when cut into ``m_parts`` bands of C's rows by ``n_parts`` runs
    of its columns, one call a piece: each piece packs its columns of B (`sgemm._pack`: a read and a
    write of each float, the packed panels then read by every band in any cut) and reads its
    rows of A once a block of its columns (`column_step`; A is not packed). Bands pack all of
    B again each; column runs read all of A again each: the cut of a split product is the
    one that moves the least (`rvm.kernels.blas.packed_cut`)."""
    cols = -(-n // n_parts)  # a piece's columns, at most
    return 2 * m_parts * k * n + n_parts * -(-cols // column_step(k, cols)) * m * k


@jit(**_OPTS)
def crowded(lda, rows):  # type: ignore[no-untyped-def]
    """Whether a band of ``rows`` rows of A ``lda`` floats apart crowds L1d's sets: more than
    half of L1d's ways (`gemmshape.L1_WAYS`) would hold lines of the band's rows at once. The
    micro-kernel reads the rows side by side, each row's line at the same offset from its
    start, so rows a multiple of `gemmshape.L1_SPAN` (4 KB) apart read lines of the same set,
    which the hardware prefetches into the same sets too, beside B's panels streaming past.
    BERT's feed-forward output (A 128 x 3072, its 6 rows a band 12 KB apart) took 1.11-1.27
    times as long in the packed product on a Zen 3 core (8 ways) as with its rows 16, 64 or
    256 floats further apart (1 to 16 lines: 2 rows at most a set), 1.03 at 512 (3 a set),
    and as long at 1024 and 2048 (all 6 in one set again)."""
    lines = L1_SPAN // (4 * LINE)
    most = 0
    for r in range(rows):
        at, count = r * lda // LINE % lines, 0
        for q in range(rows):
            if q * lda // LINE % lines == at:
                count += 1
        most = max(most, count)
    return most > L1_WAYS // 2


@jit(**_OPTS)
def uncrowded(depth, rows):  # type: ignore[no-untyped-def]
    """The least row stride, in whole lines of at least ``depth`` floats, at which a band of
    ``rows`` rows does not crowd L1d's sets (`crowded`)."""
    stride = -(-depth // LINE) * LINE
    for _ in range(L1_SPAN // (4 * LINE)):
        if not crowded(stride, rows):
            return stride
        stride += LINE
    return stride
