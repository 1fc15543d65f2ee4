"""The shape of rvm's float32 GEMM on this CPU (`rvm.kernels.sgemm`): its micro-tile (`LANES`,
`MR`, `VECTORS`, `NR`), its blocking (`KC`, `COLUMN_BYTES`, `IN_PLACE_ROWS`) and which of its
paths apply (`PACK_B`, `PLAIN_STORES`, `FUSED_EPILOGUE`), each from the CPU's vector width and
cache sizes read at run time (`rvm.kernels.cpu`).

Plain values, apart from the GEMM's code: a kernel that only needs the vector width imports
this module, not the GEMM's library (whose source would then be part of its cache key)."""

from __future__ import annotations

from rvm.kernels.cpu import Cpu, cpu

__all__ = [
    "AHEAD",
    "BLOCK_BYTES",
    "COLUMN_BYTES",
    "FMA",
    "FUSED_EPILOGUE",
    "HALF",
    "IN_PLACE_ROWS",
    "KC",
    "L1_SPAN",
    "L1_WAYS",
    "LANES",
    "LINE",
    "MR",
    "NO_EPILOGUE",
    "NR",
    "PACK_B",
    "PACK_FLOATS",
    "PANEL_AHEAD",
    "PLAIN_STORES",
    "VECTORS",
    "block_bytes",
    "column_bytes",
    "depth_block",
    "in_place_rows",
    "panel_ahead",
    "panel_width",
]


def _shape(c: Cpu) -> tuple[int, int, int, bool]:
    """(lanes, rows, vectors, fma): the micro-tile for the target's vector registers --
    MR x (vectors x lanes) accumulators with room left for B's vectors and A's broadcast."""
    if c.vector_bits == 512:
        return 16, 8, 3, True  # 24 accumulators of 32 zmm registers
    if c.vector_bits == 256:
        return 8, 6, 2, c.fma  # 12 of 16 ymm registers
    return 4, 6, 2, c.fma  # 12 of 16 xmm registers


def depth_block(c: Cpu, rows: int) -> int:
    """`KC`: the depth block. A band's ``rows`` x ``KC`` floats of A are read again for every
    tile across C, so they take half of L1d (the other half streams B's rows): the power of two
    that fits, 128 to 1024 (512 with a 48 KB L1d and 8 rows; 256 and 128 were no faster
    there)."""
    fit = max(1, c.l1d // 2 // (4 * rows))
    return min(1024, max(128, 1 << (fit.bit_length() - 1)))


def block_bytes(c: Cpu) -> int:
    """`BLOCK_BYTES`: a block of data that a kernel reads again while it stays in one core's
    L2, half of it (the direct method's packed weights, a column matrix the GEMM's bands walk,
    B of a one-row product; the GEMM's own column block is `column_bytes`)."""
    return max(64 << 10, c.l2 // 2)


def column_bytes(c: Cpu) -> int:
    """`COLUMN_BYTES`: B's rows for a block of C's columns of the GEMM at most
    (`gemmcut.column_step`), a quarter of one core's L2. Every band of A walks the block, which
    stays in L2 while as many bytes again stream through it on their way in (B's own rows, read
    by the first band in place or by the pack), with C's rows and A's depth block. At half of
    L2 (2 MB, Emerald Rapids, one thread, a copy of the packed path in one process, bias and
    ReLU, interleaved) the 1x1 convolutions' GEMMs took 1.05-1.15 times as long on 56 x 56 and
    28 x 28 maps (256 -> 64, 64 -> 256, 192 -> 128, 512 -> 128), 1.1-1.5 on squeezenet's 64 ->
    16 at 55 x 55, the same on 14 x 14 and 7 x 7 (one block either way); an eighth lost on 1024
    -> 512 at 14 x 14 (A read again every block)."""
    return max(64 << 10, c.l2 // 4)


def in_place_rows(c: Cpu, depth: int, block: int, rows: int) -> int:
    """`IN_PLACE_ROWS`: the rows of A whose depth block (``depth`` = `KC` floats a row) fits in
    the part of L2 that B's block (``block`` = `BLOCK_BYTES`) leaves, at least one band
    (``rows`` = `MR`). While the whole of A's depth block stays in L2 beside B's, every band
    computes from L2 and the first band's strided reads of B (prefetched, a stream a row)
    overlap its multiply-adds; with more rows A is read from L3 as well, and the pass before
    the bands, one stream at about ``memcpy``'s rate, cost less. Counted at the full depth
    block whatever the product's depth: 256 rows of depth 64 lost too."""
    return max(rows, (c.l2 - block) // (4 * depth))


LANES, MR, VECTORS, FMA = _shape(cpu())
NR = LANES * VECTORS  # a tile's columns at most
PLAIN_STORES = not cpu().mask_registers
"""Whether a tile whose vectors are all whole stores them (and reads C, adding) without
masks. Where masks are vector registers (AVX2's ``vmaskmovps``), a masked store costs several
plain ones: on a Zen 3 core, 1x1 convolutions' GEMMs of depth 16 to 64 took 0.79-0.90 of MLAS's
time with plain stores against 1.05-1.33 masked. AVX-512's masks are registers of their own:
its tiles store under them as before."""
HALF = LANES // 2 if LANES >= 8 else 0  # a tail tile's lanes on half vectors (`microkernel`)


def panel_width() -> int:
    """The panel width this CPU's GEMM reads best: its micro-tile's columns (`NR`). Packed
    weights (`rvm.kernels.packed`) take it; a pass asks it here, where importing loads no
    library code."""
    return NR


KC = depth_block(cpu(), MR)
PACK_B = True
"""Whether a plain GEMM (one run of B's rows, no table) copies B's blocks into panels of `NR`
columns first (`sgemm._packed_blocks`), on every CPU. Read in place, a tile's ``KC`` rows of B
are ``KC`` short runs ``ldb`` floats apart: where a run is one cache line (AVX2's 16 floats)
they are as many lines on as many pages, which the hardware does not prefetch; where it is
three (AVX-512's 48 floats), a run that does not start on a line loads each vector across two
lines, and rows 4 KB apart fall in one set of L1d. On a Zen 3 core (AVX2, 32 KB L1d, 512 KB
L2) the GEMMs of resnet50's and squeezenet's 1x1 convolutions went from 31-49 GFLOP/s (0.52-0.81
of ONNX Runtime's MLAS, which packs B too) to 44-80 (0.75-1.28 of MLAS), packed panels read by
`microkernel.micro_panel`. On an Intel Emerald Rapids core (AVX-512 at full width, 48 KB L1d,
2 MB L2; one thread, operands in cache, session 54) packed panels ran 150-155 GFLOP/s whatever
B's alignment and stride, in place 108-132 (1000 x 169 x 512, 256 x 1536 x 512, 128 x 784 x
256 with B a float off a line) and 81-86 on rows 4 KB apart (96 x 1024 x 576); squeezenet took
0.90 of its time (two threads, quiet, back to back). AVX-512 had read B in place on the Zen 4
and Zen 5 without a measurement against packing."""
BLOCK_BYTES = block_bytes(cpu())
COLUMN_BYTES = column_bytes(cpu())
PACK_FLOATS = max(KC * NR, COLUMN_BYTES // 4, BLOCK_BYTES // 4)
"""The floats of `sgemm._packed_blocks`' panels, the most a block of B takes (``min(KC, k)`` rows by
its columns, `COLUMN_BYTES`, `BLOCK_BYTES` or one panel: `sgemm.column_step`): one size, so that its
scratch is a block kept across calls (`rvm.kernels.blocks.kept`). From ``malloc`` at each call (256
KB here), it was mapped fresh or taken from a trimmed heap in some processes and its pages faulted
in again at every call: on a Zen 3 core with ``MALLOC_MMAP_THRESHOLD_=65536`` (fresh pages each
call) 1x1 convolutions' GEMMs took 1.3-1.8 times as long (512 to 128 channels on 14 x 14 326 -> 485
µs, squeezenet's 64 to 16 at 55 x 55 147 -> 270), as in one process of `benchmarks/conv_methods.py`
where densenet121's 14 x 14 GEMMs ran at 43-49 GFLOP/s against 78-82 in others."""
IN_PLACE_ROWS = in_place_rows(cpu(), KC, BLOCK_BYTES, MR)
"""The most rows of C for which `sgemm._packed_blocks` packs B in its first band
(`sgemm.packs_in_place`): that band's tiles read whole panels of B where they are
(`microkernel.micro_panel` in place, each step prefetching its row of B `AHEAD` tiles on, as
tiles on plain rows do) and store each row's vectors into the panel as they go, which the other
bands then read; with one band (``m <= MR``) nothing is stored. B is read once, by the tiles,
where a pass before the bands read it and wrote the panels: a copy at about ``memcpy``'s rate
(64 rows of 3025 floats: 27-37 µs, the same bytes copied by NumPy 29 µs), 16-29% of the time of
a 1x1 convolution with 16 to 64 output channels (squeezenet's squeezes, 3 to 11 bands), 2-9% of
one with 256 to 1024. Whole panels of B's rows by their stride only (`sgemm._in_place`): the
others are packed before their tile; B's rows through a table (a convolution's taps) are packed
before the bands. Same process, one thread, thread CPU, two runs of 40-60 alternated calls on a
Zen 3 core: 64->6 at 55 x 55 0.61-0.70 of the time, 64->16 0.89-0.91, 128->16 0.90-0.93,
resnet50's 256 ->64 and 256->128 at 56 x 56 0.87-0.97, 512->128 at 28 x 28 0.95-0.99, 13 x 13
maps 0.97-1.03; from 224 rows it lost 1-6% (576->224 at 14 x 14, 64->256 at 56 x 56, 1024->512
at 14 x 14, 512->1000 at 13 x 13): the gain goes as the pack's share, two floats moved a column
of B against ``m`` multiply-adds, while the in-place band's own slowing does not. The
break-even is the machine's (`in_place_rows`): 128 there (512 KB of L2, B's block 256 KB, `KC`
512); a 1 MB L2 gives 256."""
FUSED_EPILOGUE = PACK_B
"""Whether `sgemm.sgemm_segments` applies a convolution's epilogue (a per-row bias, a residual,
a ReLU: ``epilogue``) in registers as it stores each tile of its last depth block, so that C is
written once and not read again by a pass over it (`rvm.kernels.epipass`): on one plain run of
B (no table), where B is packed (`PACK_B`), its tiles' store (`microkernel.micro_panel`).
Elsewhere the caller runs the pass (`sgemm.fuses`)."""
NO_EPILOGUE = (0, 0, 0, 0)
"""`sgemm.sgemm_segments`' ``epilogue`` when there is none: (bias, bias step, act, residual)."""

LINE = max(1, cpu().line // 4)  # floats of a cache line: what one prefetch brings
L1_SPAN = max(4 * LINE, cpu().l1d_span)  # bytes after which L1d's sets repeat
L1_WAYS = max(1, cpu().l1d // L1_SPAN)  # lines a set of L1d holds
AHEAD = 2
"""How many tiles ahead along C a tile of `MR` rows prefetches B's rows (plain rows, not a
convolution's taps through a table), each step its own row, into L2. A wide B that comes from
memory (a 1x1 convolution's input at batch 8, squeezenet's 64-128 rows of 3025 positions) is
read in as many streams as it has rows, too many for the hardware's prefetcher: squeezenet's
squeeze layers at 55 x 55 on a cold input took 79-146 against 168-317 µs an image on a Zen 4
core (one tile ahead: 159-299; four: 92-165)."""


def panel_ahead(c: Cpu, width: int) -> int:
    """`PANEL_AHEAD`: how many steps ahead a tile on a packed panel (rows of ``width`` = `NR`
    floats) prefetches the panel's row into L1d, each step its own, a hint a line: the rows
    a sixteenth of L1d on (3 KB, 16 steps, with a 48 KB L1d and rows of 48 floats). The
    hardware brought a panel's rows from L2 late: bands of 8 rows over 4 to 21 panels of 256
    to 512 rows (Emerald Rapids, one thread, in one process) ran at 0.41-0.63 of the core's
    peak without it, 0.53-0.73 with it, the same on a panel in L1; 24 steps did as well, 4, 8
    and 32 less. Past a tile's last row it brings the next panel's first (they follow)."""
    return max(1, c.l1d // 16 // (4 * width))


PANEL_AHEAD = panel_ahead(cpu(), NR)
