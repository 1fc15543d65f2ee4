"""Direct float32 convolution vectorized along output channels, on weights packed in panels.

`rvm.kernels.conv`'s methods vectorize along output positions: a GEMM of the weight (channels
x taps) by the input's taps, an output row or an image a run of vector lanes. A 7 x 7 map fills
49 of 64 lanes (three vectors and one lane of a fourth); this kernel fills every lane of a
vector with output channels instead, whatever the map's size, as ONNX Runtime's NCHWc
convolutions do:

- the weight is packed in panels of output channels (`pack`): ``(groups, panels, kh, kw,
  c / groups, panel)``, each (tap, input channel) row of a panel ``panel`` contiguous output
  channels (`panel_width`: a tile's width, `NB`, at most, on this CPU, the tiles balanced; a
  panel of another width, packed on another machine, is read right too), each panel one
  contiguous stream. Constant weights are packed
  once, at build time (`rvm.transform.pack_conv_weights`, `rvm.op.conv2d_packed`);
  `rvm.kernels.conv` packs an OIHW weight at the call on large maps (`pack_into`);
- the input image is copied once into a zero-padded NHWC plane (``(hp, wp, c)``, a block of
  `rvm.kernels.blocks` kept across calls), row by row in tiles transposed in registers
  (`rvm.kernels.nhwc`; large planes by rows on the pool), so every (tap, channel) of an
  output position is one element ``taps[t] + c`` after the position's base;
- the micro-kernel (`rvm.kernels.direct_tile.micro`) computes a tile of `MR` output
  positions by up to `VECTORS` vectors of output channels, ``MR x VECTORS`` accumulators in
  registers: for each (tap, channel) it loads the weight's vectors and broadcasts each
  position's input value; the positions of a band are any `MR` output positions (a band
  runs on into the next output row), so a small map loses no lanes either;
- each panel's sweep reads the plane again: one larger than half of L2 (`PREFETCH_PLANE`)
  comes from L3, so each band first prefetches the next band's new input into L2
  (`_prefetch_band`);
- a piece that runs a whole panel brings the panel its thread runs next into L2 as its bands
  go, a slice a band, a line every few steps (`micro`'s ``soon``): on small maps a panel has
  few bands (a 7 x 7 map 7), and the first of them had waited on memory for the weights;
- a panel that, with the plane, outgrows half of L2 (resnet50's 512 -> 512 on 7 x 7: 884 KB)
  runs in depth blocks of taps (`rvm.kernels.direct_tile.tap_block`), every band over a block
  before the next, so it stays in L2 (read whole, it came from memory again for each band),
  each band's sums a block apart, finished after (`direct_tile.finish`: added, bias, ReLU);
- a whole tile goes transposed into the NCHW output, each output channel's `MR` positions
  one run: the accumulators are transposed in registers by shuffles (`nhwc.transposed`), a
  vector store a channel. A band's last, partial tile goes through a small buffer, element
  by element. The transpose is the price of the channel vectors, a few shuffles per vector
  of outputs against ``kh * kw * c / groups`` multiply-adds; with the element-by-element
  copy for every tile the method lost a third of its speed on squeezenet's 16-channel
  layers;

Pieces on rvm's pool (`rvm.kernels.parfor`): a group's panel (read again by every band, kept
in L2) by a range of bands, `PIECES_PER_THREAD` pieces a thread when the work is large (each
panel's ranges guided: smaller toward its end, `parfor.guided_range`); a
batch the threads share evenly an image a piece instead (`images_pay`), each image's NHWC plane
its own.

Where this method beats the GEMMs, from the shape, the vector width and L3, is
`rvm.kernels.convmethod.prefers`' rule, which `rvm.kernels.convmethod.channels_pay` applies
(the library at the call and the build-time pass alike). The entry point (`entry_call`,
``conv2d_packed``) checks the operands against the geometry (`agrees`) before touching memory.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import entry, epipass, nhwc, parfor, workpool
from rvm.kernels.blocks import empty, kept
from rvm.kernels.cpu import cpu
from rvm.kernels.direct_tile import MR, NB, finish, micro, tap_block
from rvm.kernels.gemmshape import LANES, LINE, VECTORS
from rvm.kernels.jitting import alive, jit
from rvm.kernels.microkernel import prefetch_l2
from rvm.kernels.reference.common import on_line

__all__ = [
    "MR",
    "NB",
    "agrees",
    "conv2d_oihw",
    "conv2d_packed",
    "conv2d_packed_fused",
    "conv2d_packed_fused_call",
    "entry_call",
    "pack",
    "pack_into",
    "panel_width",
    "unpack",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
# An NHWC plane larger than half of one core's L2 (the panel's weights take the rest) comes from
# L3 again in each panel's sweep: `_bands` prefetches each next band's new input into L2
# (`_prefetch_band`).
PREFETCH_PLANE = cpu().l2 // 2
# Pieces a thread when the work is large: the pool's threads claim them as they finish, so the
# last piece to run alone is at most an eighth of a thread's share (o = 512 in panels of 48 was
# 11 pieces for 2 threads: 6 against 5).
PIECES_PER_THREAD = 8


FIRST_RUN_TASKS = ("conv2d_direct",)
"""The library task (`rvm.kernels.parfor`) a convolution by this method runs: what its first
run builds, worth building beforehand (`rvm.kernels.parfor.prefetch`)."""


def panel_width(og: int) -> int:
    """The panel width for ``og`` output channels a group: the fewest tiles (`NB` channels
    at most), each as wide as the widest needs, in whole vectors: 64 channels on 16 lanes
    are two panels of 32, not 48 and 16 (a one-vector tile loads a broadcast for each
    multiply-add; 5 to 10 % faster on 64-channel 3 x 3 layers)."""
    vectors = max(1, -(-og // LANES))
    tiles = -(-vectors // VECTORS)
    return LANES * -(-vectors // tiles)


def pack(w: np.ndarray, groups: int, panel: int | None = None) -> np.ndarray:
    """An OIHW weight ``(o, c / groups, kh, kw)`` in panels of output channels: ``(groups,
    panels, kh, kw, c / groups, panel)``, panel ``p`` of group ``g`` holding the group's
    output channels ``p * panel`` on (the last padded with zeros), each (tap, channel) row of
    it ``panel`` contiguous output channels (`panel_width` by default)."""
    o, cg, kh, kw = w.shape
    if panel is None and groups >= 1 and o % groups == 0:
        panel = panel_width(o // groups)
    if groups < 1 or o % groups or panel is None or panel < 1:
        raise ValueError(f"pack: {o} output channels, {groups} groups, panel {panel}")
    og = o // groups
    panels = -(-og // panel)
    out = np.zeros((groups, panels * panel, cg, kh, kw), dtype=w.dtype)
    out[:, :og] = w.reshape(groups, og, cg, kh, kw)
    packed = on_line((groups, panels, kh, kw, cg, panel), w.dtype)  # an executable's constant
    packed[...] = out.reshape(groups, panels, panel, cg, kh, kw).transpose(0, 1, 4, 5, 3, 2)
    return packed


@jit(**_OPTS)
def pack_into(w, groups, out):  # type: ignore[no-untyped-def]
    """`pack` in jitted code: the OIHW weight ``w`` into ``out`` (groups, panels, kh, kw,
    c / groups, panel), zeroed past the group's channels."""
    o, cg, kh, kw = w.shape
    og, panels, panel = o // groups, out.shape[1], out.shape[5]
    for g in range(groups):
        for q in range(panels):
            for i in range(kh):
                for j in range(kw):
                    for ch in range(cg):
                        for lane in range(panel):
                            oc = q * panel + lane
                            value = w[g * og + oc, ch, i, j] if oc < og else 0.0
                            out[g, q, i, j, ch, lane] = value


_panel_width = jit(**_OPTS)(panel_width)


@jit(**_OPTS)
def conv2d_oihw(x, w, out, sh, sw, dh, dw, pt, pl, bias, act):  # type: ignore[no-untyped-def]
    """`conv2d_packed_fused` of an OIHW weight ``w``, packed here, at the call (where that
    copy is small against the work: `rvm.kernels.convmethod.channels_pay`)."""
    o, cg, kh, kw = w.shape
    groups = x.shape[1] // cg
    panel = _panel_width(o // groups)
    panels = (o // groups + panel - 1) // panel
    packed = np.empty((groups, panels, kh, kw, cg, panel), dtype=w.dtype)
    pack_into(w, groups, packed)
    conv2d_packed_fused(x, packed, out, sh, sw, dh, dw, pt, pl, bias, act)


def unpack(w: np.ndarray, channels: int) -> np.ndarray:
    """A packed weight (`pack`) back as OIHW, of ``channels`` output channels."""
    groups, panels, kh, kw, cg, panel = w.shape
    og = channels // groups
    full = w.transpose(0, 1, 5, 4, 2, 3).reshape(groups, panels * panel, cg, kh, kw)
    return np.ascontiguousarray(full[:, :og].reshape(channels, cg, kh, kw))


@jit(**_OPTS, inline="always")
def _bands(job, piece, bases, tmp, of, like):  # type: ignore[no-untyped-def]
    """Piece ``piece`` of an image's job (`_JOB_FIELDS`): one group's panel of output
    channels by a range of bands of `MR` positions. Inlined in the task (its micro-kernels
    built once, not again in a library of their own: 6.8 -> 5.9 CPU-s); `finish` is not
    (inlined, the 64-channel layers ran 3-5 % slower)."""
    xh, w, c, o, groups = job[1], job[2], job[4], job[5], job[6]
    taps = parfor.address(job) + 8 * _JOB_FIELDS
    ntaps, ow, p_all, wp, sh, sw = job[7], job[8], job[9], job[10], job[11], job[12]
    panels, chunks, n_, nb = job[13], job[14], job[15], job[16]
    bias, act = job[_JOB_BIAS], job[_JOB_BIAS + 1]
    cg, og = c // groups, o // groups
    whole = job[_JOB_WHOLE]  # the first panels of all (groups * panels) run whole
    if piece < whole:
        unit, chunk, chunks = piece, 0, 1
    else:
        unit, chunk = whole + (piece - whole) // chunks, (piece - whole) % chunks
    g, panel = unit // panels, unit % panels
    j0 = panel * nb
    width = min(nb, og - j0)
    bands = (p_all + MR - 1) // MR
    # Guided (`parfor.guided_range`): the last bands claimed the smallest, the threads end
    # together; on the band grid, so the same sums at every thread count.
    b_lo, b_hi = parfor.guided_range(chunk, chunks, job[_JOB_THREADS], bands, 1)
    at_b = w + 4 * (g * panels + panel) * ntaps * cg * nb
    pb, pt_, of_at = parfor.address(bases), parfor.address(tmp), parfor.address(of)
    out_at = (n_ * o + g * og + j0) * p_all
    far = 4 * job[23] * wp * c > PREFETCH_PLANE
    # A whole panel's bands bring the panel this thread runs next into L2, a slice a band
    # (`micro`'s ``soon``): the next panel's first band then reads it from L2, not memory. On
    # small maps (a 7 x 7 map is 7 bands) that band's wait for memory was a third of the
    # time: resnet50's 512-channel layers at 7 x 7, weights not in cache (Sapphire Rapids,
    # one thread), 81-88 GFLOP/s against 120-125 with them in cache; 92-125 with this.
    size = ntaps * cg * nb
    after = unit + job[_JOB_AHEAD]
    later = (piece < whole or chunks == 1) and after < groups * panels
    next_at = w + 4 * after * size if later else 0
    next_lines = (4 * size + 63) // 64
    # Depth blocks of taps where the panel and the plane outgrow half of L2 (`tap_block`): the
    # bands run over each block in turn, their sums kept in ``sums`` and finished after.
    tb = tap_block(ntaps, cg, nb, job[23] * wp * c) if width <= NB else ntaps
    blocks = (ntaps + tb - 1) // tb
    sums = np.empty((b_hi - b_lo) * blocks * MR * NB if blocks > 1 else 0, np.float32)
    biases = parfor.array_at(bias + 4 * (g * og + j0), (width,), like) if bias else sums[:0]
    for t0 in range(0, ntaps, tb):
        steps = min(tb, ntaps - t0) * cg
        # The band's first position's row and column, stepped along (no division a position:
        # 12 a band were a twentieth of a 64-channel 3 x 3 layer's time on a Zen 3).
        y0, x0 = b_lo * MR // ow, b_lo * MR % ow
        for band in range(b_lo, b_hi):
            p0 = band * MR
            rows = min(MR, p_all - p0)
            y, x = y0, x0
            for i in range(rows):
                bases[i] = (y * sh * wp + x * sw) * c + g * cg
                x += 1
                if x == ow:
                    x, y = 0, y + 1
            y0, x0 = y, x
            if far and band + 1 < b_hi:
                _prefetch_band(xh + 4 * (g * cg + job[_JOB_FIELDS + ntaps - 1]), y, x,
                               min(MR, p_all - p0 - MR), ow, sh, sw, wp, c, cg)  # fmt: skip
            soon, lines = 0, 0
            if next_at and t0 + tb >= ntaps:
                first = band * next_lines // bands
                soon = next_at + 64 * first
                lines = min((band + 1) * next_lines // bands - first, ntaps * cg)
            for j in range(0, width, NB):  # a panel wider than a tile (packed on another CPU)
                part = min(NB, width - j)
                vectors = (part + LANES - 1) // LANES
                last = part - (vectors - 1) * LANES
                at_bias = bias + 4 * (g * og + j0 + j) if bias else 0
                if rows == MR and blocks == 1:  # a whole tile: transposed into the output
                    at_c = of_at + 4 * (out_at + j * p_all + p0)
                    micro(ntaps * cg, cg, xh, pb, taps, at_b + 4 * j, nb, at_c, rows, vectors,
                          last, p_all, at_bias, act, soon, lines)  # fmt: skip
                    continue
                # else its sums, a partial tile's or a depth block's, `NB` apart, finished after
                at_t = pt_
                if blocks > 1:
                    at_t = parfor.address(sums) + 4 * ((band - b_lo) * blocks + t0 // tb) * MR * NB
                micro(steps, cg, xh, pb, taps + 8 * t0, at_b + 4 * (t0 * cg * nb + j), nb, at_t,
                      rows, vectors, last, 0, 0, 0, soon if rows == MR else 0, lines)  # fmt: skip
                if blocks == 1:
                    finish(tmp, 1, biases[j:], act, of, out_at + j * p_all, p_all, p0, rows, part)
    if blocks > 1:
        for band in range(b_lo, b_hi):
            p0 = band * MR
            finish(sums[(band - b_lo) * blocks * MR * NB :], blocks, biases, act, of, out_at,
                    p_all, p0, min(MR, p_all - p0), width)  # fmt: skip


@jit(**_OPTS, inline="always")
def _prefetch_band(at, y, x, rows, ow, sh, sw, wp, c, cg):  # type: ignore[no-untyped-def]
    """Into L2, a cache line at a time, the ``cg`` channels each of the ``rows`` positions
    of the band from output row ``y``, column ``x`` reads at its last tap (``at``: the
    plane's address at that tap and the group's first channel): the bottom-right tap's
    columns are the ones a sweep along the rows has not read yet. One thread on a plane
    larger than L2: vgg19's 64 to 256 channels on 224 x 224 to 56 x 56 maps 1.5-4 % faster on
    Zen 4 (one prefetch per tap, or into L1, was slower)."""
    for _ in range(rows):
        base = at + 4 * (y * sh * wp + x * sw) * c
        for ch in range(0, cg, LINE):
            prefetch_l2(base + 4 * ch)
        prefetch_l2(base + 4 * (cg - 1))
        x += 1
        if x == ow:
            x, y = 0, y + 1


# An image's job (int64): its length, the NHWC plane's and the weight's addresses, the
# pieces of the NHWC copy's rows that come first (`_image`; 0: none, bands of outputs only),
# c, o, groups, taps, ow, oh * ow, wp, sh, sw, panels a group, chunks a panel, the image, the
# panel's width, the output's address and its size, the input's address, n, ih, iw, hp, pt, pl,
# the bias's address (o values; 0: none), the activation (1: ReLU; 0: none), the copy's
# pieces done (`_task`), the threads a panel's bands are claimed by (`_bands`' guided cut) and
# the panels run whole before those cut in chunks (`_split`), how many panels on is the one
# a thread runs after a whole panel (`_bands`' prefetch: the pool's threads take whole panels in
# turn); then each tap's offset in the plane (`micro`'s ``taps``).
_JOB_FIELDS = 32
_JOB_AHEAD = 31
_JOB_WHOLE = 30
_JOB_BIAS = 26
_JOB_COPIED = 28
_JOB_THREADS = 29


# A whole call from an entry point (`_entry`, `_fused_entry`; phase -2): its length, x's, the
# weight's and the output's addresses, the phase, the status back (0 done, 1 the shapes
# disagree), then the entry point's dims (12) and parameters (10), then the bias's address
# (o values; 0: none) and the activation (`conv2d_packed_fused`'s).
_CALL_FIELDS = 30


def _task(piece, like, data):  # type: ignore[no-untyped-def]
    """A pool task: piece ``piece`` of an image's job (its first ``job[3]`` the NHWC copy's,
    then its bands, each waiting for the copy to be done), (phase -1) image ``piece`` of a
    batch split by images (`images_pay`), or (phase -2) a whole call of the entry point."""
    job = parfor.job(data)
    copies = job[3]
    if copies == -2:
        _whole_call(job, like)
        return
    if copies < 0:
        _one_image(piece, job, like)
        return
    counter = parfor.address(job) + 8 * _JOB_COPIED
    if piece < copies:
        _copy_rows(piece, job, like)
        workpool.add_at(counter, 1)
        return
    workpool.wait_until(counter, copies)  # the copy's pieces before this one: claimed, done soon
    of = parfor.array_at(job[17], (job[18],), like)
    bases = np.empty(MR, dtype=np.int64)
    tmp = np.empty(MR * NB, dtype=of.dtype)
    _bands(job, piece - copies, bases, tmp, of, like)


@jit(**_OPTS, inline="always")
def _copy_rows(piece, job, like):  # type: ignore[no-untyped-def]
    """Piece ``piece`` of ``job[3]`` of the NHWC copy of the job's image: a range of rows."""
    x = parfor.array_at(job[19], (job[20], job[4], job[21], job[22]), like)
    hp, wp = job[23], job[10]
    xh = parfor.array_at(job[1], (hp * wp * job[4],), like)
    y0, y1 = piece * hp // job[3], (piece + 1) * hp // job[3]
    nhwc.rows(x, job[15], xh, hp, wp, job[24], job[25], y0, y1)


@jit(**_OPTS, inline="always")
def _whole_call(job, like):  # type: ignore[no-untyped-def]
    """`conv2d_packed` on the operands of an entry point's call (`_CALL_FIELDS`), the weight
    viewed 4-d (groups * panels, kh, kw, c / groups * panel), if they agree with the
    geometry (`agrees`); the status into ``job[5]``."""
    d, p = job[6:18], job[18:28]
    groups, nb_ = p[0], p[9]
    job[5] = 1
    if groups <= 0 or nb_ <= 0 or d[4] % groups or d[7] % nb_:
        return
    x = parfor.array_at(job[1], (d[0], d[1], d[2], d[3]), like)
    w = parfor.array_at(job[2], (groups, d[4] // groups, d[5], d[6], d[7] // nb_, nb_), like)
    out = parfor.array_at(job[4], (d[8], d[9], d[10], d[11]), like)
    if not agrees(x, w, out, groups, p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]):
        return
    job[5] = 0
    bias = parfor.array_at(job[28], (out.shape[1] if job[28] else 0,), like)
    conv2d_packed_fused(x, w, out, p[1], p[2], p[3], p[4], p[5], p[6], bias, job[29])


@jit(**_OPTS, inline="always")
def _one_image(n_, job, like):  # type: ignore[no-untyped-def]
    """Image ``n_`` of the job's batch in this thread: its NHWC plane in a block of its own,
    then every panel of it, one band range a panel (a thread's image, not split)."""
    x = parfor.array_at(job[19], (job[20], job[4], job[21], job[22]), like)
    own = job.copy()
    xh = empty(job[23] * job[10] * job[4], x.dtype)
    own[1], own[14] = parfor.address(xh), 1
    _image(x, n_, xh, own, job[23], job[24], job[25], job[6] * job[13], False)


@jit(**_OPTS)
def images_pay(n, work, threads):  # type: ignore[no-untyped-def]
    """Whether a batch of ``n`` images (``work`` multiply-adds in all) runs an image a piece
    on the pool, each image in one thread, rather than image after image with each image's
    work split (the rule of this method and `rvm.kernels.conv`'s). Split within, a batch
    pays a join per image, and an image too small to split runs on one core; by images the
    threads join once and each image has a core. For a batch the threads share evenly (``n``
    a multiple of the threads, or 4 images a thread or more, so the last image alone costs
    little) and as large as one image whose work this method would split."""
    if threads < 2 or n < threads:
        return False
    return (n % threads == 0 or n >= 4 * threads) and work >= 4 * parfor.MIN_WORK


parfor.export_task("conv2d_direct", _task)
_run = parfor.runner("conv2d_direct")
_call = parfor.caller("conv2d_direct")


@jit(**_OPTS)
def conv2d_packed(x, w, out, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    """``out`` = the convolution of ``x`` (n, c, ih, iw) by the packed weight ``w`` (`pack`:
    (groups, panels, kh, kw, c / groups, panel)), float32, C-contiguous; ``pt``, ``pl`` the
    top and left padding (the output's size gives the rest). The caller checks the shapes
    against the geometry."""
    conv2d_packed_fused(x, w, out, sh, sw, dh, dw, pt, pl, np.empty(0, dtype=out.dtype), 0)


@jit(**_OPTS)
def conv2d_packed_fused(x, w, out, sh, sw, dh, dw, pt, pl, bias, act):  # type: ignore[no-untyped-def]  # noqa: E501
    """`conv2d_packed`, then ``out = act(out + bias)`` (``bias``: o values, or empty for none;
    ``act`` 1 for a ReLU, 0 for none), applied to each tile's accumulators in registers
    before it is stored (`rvm.kernels.direct_tile.micro`): no pass over the output after the
    convolution (`rvm.kernels.epipass`'s, the same arithmetic), which on squeezenet's 3 x 3
    expansions (64 to 256 channels, 55 x 55 to 13 x 13) took 4-20 us a layer on a Zen 3
    core against the layer's 350-700."""
    n, c = x.shape[0], x.shape[1]
    groups, kh, kw, nb = w.shape[0], w.shape[2], w.shape[3], w.shape[5]
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    p_all = oh * ow
    if n * o * p_all == 0:
        return
    if c == 0:  # no input channels: sums of nothing, then the epilogue
        out[...] = 0
        if bias.size or act:
            epipass.epilogue_rows(out, bias, act, np.empty(0, dtype=out.dtype))
        return
    hp, wp = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    panels = w.shape[1]
    bands = (p_all + MR - 1) // MR
    threads = parfor.threads()
    work = p_all * o * kh * kw * (c // groups)
    chunks, whole = 1, 0
    if threads > 1 and work >= 4 * parfor.MIN_WORK:  # pieces enough to even out the threads
        chunks, whole = _split(groups * panels, bands, threads)
    pieces = whole + (groups * panels - whole) * chunks
    images = images_pay(n, n * work, threads)  # each image's plane its own (`_one_image`)
    # a kept block at any size (`blocks.kept`): from malloc, a plane under `blocks.MIN_BYTES`
    # could be mapped or faulted in afresh at every call
    xh = kept(0 if images else hp * wp * c, x.dtype)
    head = np.array((_JOB_FIELDS + kh * kw, parfor.address(xh), parfor.address(w), 0, c, o,
                     groups, kh * kw, ow, p_all, wp, sh, sw, panels, chunks, 0, nb,
                     parfor.address(out), out.size, parfor.address(x), n, x.shape[2],
                     x.shape[3], hp, pt, pl, parfor.address(bias) if bias.size else 0, act, 0,
                     threads),
                    dtype=np.int64)  # fmt: skip
    job = np.empty(_JOB_FIELDS + kh * kw, dtype=np.int64)
    for i in range(_JOB_WHOLE):  # element by element: a tuple into a slice was 2 s to build
        job[i] = head[i]
    job[_JOB_WHOLE] = whole  # (a tuple of 31 is built through a list, which Numba refuses)
    job[_JOB_AHEAD] = 1  # pieces in this thread, in order (`_image` on the pool: its threads)
    for i in range(kh):
        for j in range(kw):
            job[_JOB_FIELDS + i * kw + j] = (i * dh * wp + j * dw) * c
    if images:
        job[3] = -1  # image k a piece (`_one_image`)
        _run(x, n, job)
        return
    for n_ in range(n):
        _image(x, n_, xh, job, hp, pt, pl, pieces, threads > 1 and work >= 4 * parfor.MIN_WORK)


@jit(**_OPTS)
def _split(units, bands, threads):  # type: ignore[no-untyped-def]
    """(chunks, whole): how a split image's ``units`` panels (groups x panels) of ``bands``
    bands each go to ``threads`` threads: the first ``whole`` panels a piece each, the rest
    each cut in ``chunks`` runs of bands. A piece reads its panel whole, its weights from L3
    or memory once, then from L2 for each of its bands; cut in chunks, a panel is read once a
    chunk. Where a panel's bands are many (`PIECES_PER_THREAD` a thread or more), every panel
    is cut, into enough pieces to even out the threads (at least `PIECES_PER_THREAD` a
    thread): its reads weigh little against its bands. Where they are few (small maps: 7 x 7
    has 7 bands) a chunk's few bands each re-read a panel the other chunks read too, and the
    threads together read the weight as many times as there are chunks: so the panels go
    whole, as many a thread, and only the last ``units % threads`` are cut, ``threads`` chunks
    each, the weight read about once. On an Intel Emerald Rapids (two threads), resnet50's
    512-channel layers on 7 x 7 maps (11 panels of 48 channels, cut in 2 chunks each) had
    gained 1.46-1.52 times from the second thread where ONNX Runtime gained 1.87-1.95; this
    way they take 0.79-0.87 of that time (3x3, its stride-2 one from 14 x 14, 2048 -> 512
    1x1), inception_v2's 192 -> 224 3x3 0.80 (5 panels), 832 -> 384 1x1 0.87-0.92 (8), cold
    weights, same process, interleaved."""
    chunks = min(bands, max(1, -(-PIECES_PER_THREAD * threads // units)))
    if chunks == 1 or bands >= PIECES_PER_THREAD * threads or units < threads:
        return chunks, 0
    return min(bands, threads), units - units % threads


@jit(**_OPTS)
def _image(x, n_, xh, job, hp, pt, pl, pieces, split):  # type: ignore[no-untyped-def]
    """Image ``n_``: its NHWC plane into ``xh`` (which the job's pieces read: the caller
    holds it), then the job's pieces, on the pool when ``split``. The plane's rows are
    copied in the task (`_copy_rows`: the entry point holds no copy of the vector tiles'
    code, 5 of its 7 CPU-s to build); when the pieces go to the pool, the copy does too, by
    rows (memory bound: each thread's share of the bandwidth; in one thread it was a
    twentieth of vgg19's convolutions, the other idle). The helpers that take the pieces
    next take half the copy first, whatever its size: those of `MIN_WORK` elements or fewer
    (resnet50's 3 x 3 inputs, 25 to 200 thousand elements, 20 to 60 us of copy on one core)
    were copied by the caller alone while the other core waited for the pieces.

    The copy's pieces and the bands are one job, the copy's first (`_task`): a band waits for
    the copy's pieces claimed before it, where two jobs paid a join between them (the caller
    spinning for the helper's half of the copy, then sleeping when it was late, and a second
    job to publish); a helper late to the job leaves the caller to copy it all and go on."""
    job[15] = n_
    job[_JOB_COPIED] = 0
    threads = parfor.threads()
    nhwc.padding(x, xh, hp, job[10], pt, pl)
    if split and pieces > 1:
        copies = threads if threads > 1 and hp >= 2 * threads else 1
        job[3] = copies
        job[_JOB_AHEAD] = threads  # the pool's threads claim whole panels in turn
        _run(x, copies + pieces, job)
    else:
        job[3] = 1
        for piece in range(1 + pieces):
            _call(x, piece, job)


# -- the compiled entry point (see `rvm.kernels.entry`) ------------------------------------


@jit(**_OPTS)
def _out_size(size, kern, stride, dil, lo, hi):  # type: ignore[no-untyped-def]
    span = size + lo + hi - dil * (kern - 1) - 1
    return -1 if span < 0 else span // stride + 1


@jit(**_OPTS)
def agrees(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):  # type: ignore[no-untyped-def]
    """Whether the operands agree with the geometry (the kernel relies on it): ``w`` the
    packed weight (groups, panels, kh, kw, c / groups, panel)."""
    if min(groups, sh, sw, dh, dw) <= 0 or min(pt, pl, pb, pr) < 0 or w.shape[5] <= 0:
        return False
    o = out.shape[1]
    kh, kw = w.shape[2], w.shape[3]
    og = o // groups
    return (
        w.shape[0] == groups
        and o % groups == 0
        and w.shape[1] == (og + w.shape[5] - 1) // w.shape[5]
        and x.shape[1] == w.shape[4] * groups
        and out.shape[0] == x.shape[0]
        and out.shape[2] == _out_size(x.shape[2], kh, sh, dh, pt, pb)
        and out.shape[3] == _out_size(x.shape[3], kw, sw, dw, pl, pr)
    )


@jit(**_OPTS, inline="always")
def _call_whole(a, b, c, dims, params, bias, act):  # type: ignore[no-untyped-def]
    """`conv2d_packed_fused` on x (a), the packed weight viewed 4-d (b) and out (c), the
    bias at address ``bias`` (0: none): 0 done, 1 the shapes disagree. The call runs in the
    method's task (`_whole_call`, in this thread): an entry point holds none of its code
    (2.5 CPU-s to build, the task's own building most of it again)."""
    x = nb.carray(a, 1)
    job = np.empty(_CALL_FIELDS, dtype=np.int64)
    job[0], job[3], job[5] = _CALL_FIELDS, -2, 1
    job[1], job[2], job[4] = parfor.address(x), parfor.address(nb.carray(b, 1)), \
        parfor.address(nb.carray(c, 1))  # fmt: skip
    for i in range(12):
        job[6 + i] = dims[i]
    for i in range(10):
        job[18 + i] = params[i]
    job[28], job[29] = bias, act
    _call(x, 0, job)
    return job[5]


def _entry(a, b, c, dims, params):  # type: ignore[no-untyped-def]
    """`conv2d_packed` on x (a), the packed weight viewed 4-d (b: groups * panels, kh, kw,
    c / groups * panel) and out (c): 0 done, 1 the shapes disagree."""
    return _call_whole(a, b, c, nb.carray(dims, 12), nb.carray(params, 10), 0, 0)


def _fused_entry(a, b, c, bias, res, dims, params):  # type: ignore[no-untyped-def]
    """`_entry`'s convolution and its epilogue (`rvm.kernels.epipass`: the bias viewed (1, c
    or 1, 1, 1), the residual of out's shape; ``params``: the convolution's ten, then the
    activation, whether there is a bias, whether a residual; an array absent is passed as
    out, unread): the bias and the activation in the tiles' registers
    (`conv2d_packed_fused`), a bias of one value for all channels spread over them first;
    with a residual, all three by the pass after the convolution (which adds the residual
    before the ReLU): 0 done, 1 the shapes disagree."""
    d, p = nb.carray(dims, 20), nb.carray(params, 13)
    out = nb.carray(c, (d[8], d[9], d[10], d[11]))
    act = p[10]
    ok, biases, added = epipass.operands(out, bias, d[12:16], res, d[16:20], act, p[11], p[12])
    if not ok:
        return 1
    if added.size:
        if _call_whole(a, b, c, d[:12], p[:10], 0, 0):
            return 1
        epipass.epilogue_rows(out, biases, act, added)
        return 0
    spread = biases
    if biases.size == 1 and out.shape[1] > 1:
        spread = np.full(out.shape[1], biases[0], dtype=biases.dtype)
    done = _call_whole(a, b, c, d[:12], p[:10], parfor.address(spread) if spread.size else 0, act)
    alive(spread)  # reached by address in the call's task
    return done


entry.export("conv2d_packed", _entry)
entry.export("conv2d_packed_fused", _fused_entry)
# What kernels call (`rvm.kernels.entry.caller`): ``entry_call(arrays, params)``, 0 done.
entry_call = entry.caller("conv2d_packed", 10)
conv2d_packed_fused_call = entry.caller("conv2d_packed_fused", 13)
"""A float32 direct convolution and its epilogue (`_fused_entry`):
``conv2d_packed_fused_call((x, w, out, bias, res), (groups, sh, sw, dh, dw, pt, pl, pb, pr,
panel, act, with bias, with residual))``."""
