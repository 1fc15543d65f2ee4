"""Which method a float convolution takes: the rules, apart from the methods themselves.

(``conv`` below is `rvm.kernels.conv`, the methods' module.)

`method` picks, for a convolution's shape, how `rvm.kernels.conv` computes it (`POINTWISE`,
`STRIDED`, `DEPTHWISE`, `CHANNELS`, `TAPS`, `IM2COL`, `WINOGRAD`); `channels_pay` and
`winograd_pays` are the rules the compiler asks too, when it packs or transforms a constant
weight at build time (`rvm.op.conv2d_packed`, `rvm.op.conv2d_winograd`); `wraps_rows`,
`taps_fill`, `columns_pay` and `panels_pay` choose how the GEMM methods lay out their
operands; `by_images` and `fuses_epilogue` how a batch is split and where the epilogue is
applied; `METHOD_TASKS` and `first_run_tasks` the library tasks each method runs (what a first
run builds).

Each rule is a compiled function (the library calls it at each convolution) whose
``py_func`` is the same rule in Python (the compiler and `rvm.jit.first_run` ask it there).
Their thresholds are read from the machine (`rvm.kernels.cpu`: vector width, L2) where they
depend on it, and each states the measurements that set it.
"""

from __future__ import annotations

from rvm.kernels import amx, bf16gemm, direct, planes, sgemm, winograd
from rvm.kernels.cpu import cpu
from rvm.kernels.gemmshape import LANES, NR, PACK_B
from rvm.kernels.jitting import jit
from rvm.kernels.segments import SHARED_TASKS
from rvm.kernels.threads import get_num_threads

__all__ = [
    "CHANNELS",
    "DEPTHWISE",
    "BUILT_DEPTH",
    "IM2COL",
    "IMAGES_TASK",
    "METHOD_TASKS",
    "PACK_MIN_POSITIONS",
    "PANEL_TASKS",
    "POINTWISE",
    "STRIDED",
    "TAPS",
    "TAPS_IN_PLACE",
    "TAPS_MIN_WIDTH",
    "TRANSFORMED",
    "TRANSFORMED_BF16",
    "WINOGRAD",
    "WINOGRAD_BF16_CHANNELS",
    "WINOGRAD_BF16_OUTPUTS",
    "WINOGRAD_MEAN_CHANNELS",
    "WINOGRAD_MIN_CHANNELS",
    "WINOGRAD_MIN_TILES",
    "WINOGRAD_SMALL_MAP",
    "WINOGRAD_SMALL_MEAN",
    "by_images",
    "channels_pay",
    "columns_pay",
    "first_run_tasks",
    "float32_method",
    "fuses_epilogue",
    "method",
    "panels_pay",
    "pays_once_built",
    "prefers",
    "taps_fill",
    "winograd_bf16_pays",
    "winograd_floors",
    "winograd_pays",
    "wraps_rows",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_L3 = cpu().l3


# Float32 convolutions with output rows at least this wide read their taps in place
# (`conv._taps_gemm`, where that reads best: `TAPS_IN_PLACE`); narrower ones use im2col. Each output
# row is a run of tiles whose last one is masked: at width 7 only 7 of 16 lanes work, where
# im2col's GEMM runs over all rows at once.
TAPS_MIN_WIDTH = 12
TAPS_IN_PLACE = not sgemm.PACK_B
"""Whether float32 convolutions read their taps in place (`conv._taps_gemm`) at all. Where a tile's
row of B is one cache line (AVX2: `sgemm.PACK_B`), ``KC`` taps in place are ``KC`` lines on as
many pages that the hardware does not prefetch, while im2col's column matrix reaches the GEMM
as packed panels: on a Zen 3 core (AVX2, 512 KB L2) im2col ran every taps layer of resnet50 and
inception_v2 1.2 to 1.9 times as fast (medians; 3 x 3 on 14 x 14 to 28 x 28, 64 to 256 channels; one
thread), their 7 x 7 stems 1.02 to 1.1 times. Where a tile's row is several lines (AVX-512's
three) they read in place until session 54, where B is packed on every CPU (`sgemm.PACK_B`:
on an Intel Emerald Rapids core a vector loaded from a tap's unaligned start spans two
lines); not measured layer by layer there, squeezenet and resnet50 as a whole ran faster."""


@jit(**_OPTS, inline="always")
def panels_pay(ow):  # type: ignore[no-untyped-def]
    """Whether a float32 im2col convolution with output rows of ``ow`` copies its taps
    straight into the GEMM's panels (`rvm.kernels.im2col.im2col_panels`): where the GEMM packs B
    (`sgemm.PACK_B`), on rows wider than a panel (`sgemm.NR` columns), whose panels then
    mostly lie within a row and move a vector a row of B; a panel across rows moves its pieces
    in masked vectors (`sgemm._pack`; a float at a time when the figures below were taken).
    On a Zen 3 core (one thread, bias and ReLU in the store) the panels took 0.84-0.89 of the
    column matrix's time on 112 x 112 (the 7 x 7 stem), 0.90-0.95 on 111 x 111, 0.85-0.90 on
    56 x 56 and 0.90-0.95 on 28 x 28, but 1.03-1.05 on 14 x 14 (every panel across two rows)."""
    return sgemm.PACK_B and ow > sgemm.NR


@jit(**_OPTS)
def wraps_rows(oh, ow, wq):  # type: ignore[no-untyped-def]
    """Whether `conv._taps_gemm` runs its ``oh`` output rows as one run of the phases' rows (``wq``
    positions apart, ``wq - ow`` of them between two output rows computed and not stored:
    `rvm.kernels.sgemm.sgemm_segments`) rather than a run per row, whose last vector leaves
    lanes idle: when that takes fewer vectors (55 x 55: 196 against 220, 100 GFLOP/s on a
    Zen 4 core against 95; 27 x 27: 49 against 54; 13 x 13: 13 either way)."""
    by_rows, wrapped = _taps_vectors(oh, ow, wq)
    return wrapped < by_rows


@jit(**_OPTS)
def _taps_vectors(oh, ow, wq):  # type: ignore[no-untyped-def]
    """The vectors of positions `conv._taps_gemm` takes a row of its product: a run per output row,
    and one run wrapping around the phases' rows, ``wq`` apart (`wraps_rows`)."""
    lanes = sgemm.LANES
    return oh * -(-ow // lanes), -(-((oh - 1) * wq + ow) // lanes)


@jit(**_OPTS)
def taps_fill(oh, ow, wq):  # type: ignore[no-untyped-def]
    """Whether `conv._taps_gemm` reads its taps in place (by rows or wrapped: `wraps_rows`) rather
    than copying them into a column matrix first, whose rows run the map's positions end to
    end: the former takes at most an eighth more vectors. 13 x 13 maps take 13 against 11 (on
    a Zen 4 core the copy ran squeezenet's 48- and 64-deep 3 x 3 layers 1.1 to 1.15 times as
    fast), 14 x 14 14 against 13 (the same speed either way), 27 x 27 49 against 46."""
    by_rows, wrapped = _taps_vectors(oh, ow, wq)
    return 8 * min(by_rows, wrapped) <= 9 * -(-(oh * ow) // sgemm.LANES)


@jit(**_OPTS)
def columns_pay(og, k, oh, ow, wq):  # type: ignore[no-untyped-def]
    """Whether `conv._taps_gemm` copies its ``k`` taps into a column matrix (``og`` output channels
    a group, ``oh`` x ``ow`` positions, phases' rows ``wq`` apart): where reading them in place
    takes over an eighth more vectors (`taps_fill`), the matrix stays in L2 while the GEMM's
    bands walk it (`sgemm.BLOCK_BYTES`), and the copy weighs little against the products, from
    12 vectors of output channels (its cost against theirs falls with the channels and grows
    with the vector width). On a Zen 4 core squeezenet's 13 x 13 layers, 192 and 256 channels,
    ran 1.08 and 1.14 times as fast this way; inception_v1's 48 and 64 took 1.1 and 1.04 times
    as long, alexnet's 26 x 26 5 x 5 one (128 channels a group, a 3.2 MB matrix) 1.05."""
    if og < 12 * sgemm.LANES or 4 * k * oh * ow > sgemm.BLOCK_BYTES:
        return False
    return not taps_fill(oh, ow, wq)


POINTWISE, STRIDED, DEPTHWISE, CHANNELS, TAPS, IM2COL, WINOGRAD = range(7)
"""The methods `method` picks; the library tasks each runs are `METHOD_TASKS`'."""
TRANSFORMED, TRANSFORMED_BF16 = 7, 8
"""A job's method (``job[21]``) of Winograd's on a weight transformed at build time
(`conv._winograd_entry`): float32 ``U``, or ``U`` in bf16 pairs
(`rvm.kernels.winograd.transform_bf16`)."""

METHOD_TASKS = (
    ("conv2d_pointwise", "gemm_segments", *sgemm.TASKS, *SHARED_TASKS),
    ("conv2d_strided", "conv2d_subsample", "gemm_segments", *sgemm.TASKS, *SHARED_TASKS),
    ("conv2d_depthwise", "conv2d"),
    ("conv2d_channels", *direct.FIRST_RUN_TASKS),
    ("conv2d_taps", *planes.TASKS, "gemm_segments", *sgemm.TASKS),
    ("conv2d_im2col", *planes.TASKS, "gemm", *sgemm.TASKS),
    winograd.FIRST_RUN_TASKS,
)
"""The library tasks (`rvm.kernels.parfor`) a convolution by each method runs on float32, the
method's own first (`first_run_tasks`); im2col into the GEMM's panels (`panels_pay`) runs
`PANEL_TASKS`."""
PANEL_TASKS = ("conv2d_im2col_panels", *planes.TASKS, "gemm_segments", *sgemm.TASKS)
IMAGES_TASK = "conv2d_images"
"""The library task that runs a batch split an image a piece (`by_images`), each image by
its method's."""


@jit(**_OPTS)
def method(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow, ih, iw, unpadded, f32):  # type: ignore[no-untyped-def]  # noqa: E501
    """How `conv.conv2d` computes a convolution of this shape (`POINTWISE`...; ``unpadded``: no
    padding; ``f32``: float32 operands): 1x1 unpadded convolutions are GEMMs on the operands
    (`conv._pointwise`, `conv._strided_pointwise` on the subsampled input); one input channel
    per group runs direct loops (`rvm.kernels.depthwise`); float32 3x3 ones at stride 1 where
    Winograd's fewer multiplies pay run `rvm.kernels.winograd` (`winograd_pays`); float32 ones
    where vectors of output channels pay the direct method (`channels_pay`), those with rows
    of `TAPS_MIN_WIDTH` or more and some depth read their taps in place (`conv._taps_gemm`)
    where that reads best (`TAPS_IN_PLACE`); the rest im2col (`rvm.kernels.im2col`)."""
    cg = c // groups
    if kh == 1 and kw == 1 and unpadded:
        return POINTWISE if sh == 1 and sw == 1 else STRIDED
    if cg == 1:
        return DEPTHWISE
    if f32 and winograd_pays(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow):
        return WINOGRAD
    if f32 and channels_pay(c, o, groups, kh, kw, sh, sw, oh, ow, ih, iw, False):
        return CHANNELS
    if TAPS_IN_PLACE and f32 and ow >= TAPS_MIN_WIDTH and cg * kh * kw > 0:
        return TAPS
    return IM2COL


def float32_method(
    c: int, o: int, groups: int, kh: int, kw: int, sh: int, sw: int, oh: int, ow: int,
    ih: int, iw: int, unpadded: bool, dh: int = 1, dw: int = 1,
) -> int:  # fmt: skip
    """`method` of a float32 convolution of this shape, in Python."""
    return method.py_func(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow, ih, iw, unpadded, True)


def first_run_tasks(
    c: int, o: int, groups: int, kh: int, kw: int, sh: int, sw: int, oh: int, ow: int,
    ih: int, iw: int, unpadded: bool, dh: int = 1, dw: int = 1, n: int = 1,
) -> tuple[str, ...]:  # fmt: skip
    """The library tasks a float32 convolution of this shape runs (`method`, `METHOD_TASKS`):
    what its first run builds, worth building beforehand (`rvm.kernels.parfor.prefetch`). The
    GEMM's paths by the rows its products take: Winograd's (`winograd.first_run_tasks`), and
    where B packs (the 1x1 methods' one run, im2col's panels: `sgemm.packs`) by its output
    channels a group, its epilogue not known (`sgemm.gemm_tasks`): past a band of them
    the packed path alone (every light CNN listed the in-place one too, and none ran it). A
    batch of ``n`` images split an image a piece (`by_images`, on this process's threads)
    runs `IMAGES_TASK` first."""
    how = float32_method(c, o, groups, kh, kw, sh, sw, oh, ow, ih, iw, unpadded, dh, dw)
    if how == WINOGRAD:
        return winograd.first_run_tasks(o)
    panels = how == IM2COL and panels_pay.py_func(ow)
    tasks = PANEL_TASKS if panels else METHOD_TASKS[how]
    if panels or how == POINTWISE or how == STRIDED:
        paths = sgemm.gemm_tasks(o // groups, None)
        tasks = tuple(t for t in tasks if t not in sgemm.TASKS or t in paths)
    work = n * o * oh * ow * (c // groups) * kh * kw
    if by_images.py_func(how, n, work, get_num_threads()):
        return (IMAGES_TASK, *tasks)
    return tasks


@jit(**_OPTS, inline="always")
def fuses_epilogue(how, k, epilogue):  # type: ignore[no-untyped-def]
    """Whether a float32 convolution by method ``how`` (a depth of ``k`` a group) applies its
    ``epilogue`` (`sgemm.sgemm_segments`') with the convolution: in its GEMM's store
    (`sgemm.fuses`) for the 1x1 ones (one GEMM of the whole batch on the input's rows;
    strided: on the subsampled input) and im2col's (a GEMM a block of output rows, on the
    column matrix, or into panels), where the GEMM can, a batch split by images too
    (`by_images`: each image's job takes its image's residual; until session 56 such a batch
    left it to a pass over the whole output, squeezenet's stem's 25 MB at batch 8); in the
    direct method's
    tiles (`rvm.kernels.direct.conv2d_packed_fused`) a bias a channel and a ReLU, not a
    residual (the pass adds it before the ReLU); in Winograd's output transform
    (`rvm.kernels.winograd`) all of it."""
    if how == WINOGRAD:
        return True
    if how == CHANNELS:
        return epilogue[3] == 0 and (epilogue[0] == 0 or epilogue[1] == 1)
    gemm = how == POINTWISE or how == STRIDED or how == IM2COL
    # One run of B's rows, or (im2col into panels) runs end to end in C: the same to `fuses`.
    return gemm and sgemm.fuses(1, 1, 1, 0, k)


@jit(**_OPTS)
def by_images(how, n, work, threads):  # type: ignore[no-untyped-def]
    """Whether a batch of ``n`` images (``work`` multiply-adds in all) by method ``how`` runs
    an image a piece on the pool, each image's method in one thread
    (`rvm.kernels.direct.images_pay`, the one rule). The 1x1 convolutions run one GEMM over
    the batch already (`conv._pointwise`), depthwise ones split their planes over the batch
    (`rvm.kernels.depthwise`) and the direct method and Winograd's split their batch themselves
    (the weight packed or transformed once)."""
    if how == POINTWISE or how == DEPTHWISE or how == CHANNELS or how == WINOGRAD:
        return False
    return direct.images_pay(n, work, threads)


@jit(**_OPTS)
def channels_pay(c, o, groups, kh, kw, sh, sw, oh, ow, ih, iw, packed):  # type: ignore[no-untyped-def]
    """Whether a float32 convolution of this shape runs the direct method vectorized along
    output channels (`rvm.kernels.direct`) rather than this module's GEMMs: the one rule,
    `prefers`, given the positions this module's GEMM would vectorize
    (an output row of `TAPS_MIN_WIDTH` or more, else the map; the whole map for a 1x1
    convolution, a GEMM on the map as it is: `conv._pointwise`). With the weight ``packed``
    at build time (`rvm.op.conv2d_packed`) any map size; else the weight is packed at each
    call, only on maps large enough that the copy costs little
    (`PACK_MIN_POSITIONS`)."""
    if not packed and oh * ow < PACK_MIN_POSITIONS:
        return False
    run = ow if ow >= TAPS_MIN_WIDTH and kh * kw > 1 else oh * ow
    return prefers(c, o, groups, kh, kw, sh, sw, oh, ow, ih, iw, run)


@jit(**_OPTS)
def winograd_pays(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow):  # type: ignore[no-untyped-def]
    """Whether a float32 convolution of this shape runs Winograd's F(2x2, 3x3)
    (`rvm.kernels.winograd`) rather than the GEMMs or the direct method: 3x3, stride 1,
    dilation 1, no groups, on maps of `WINOGRAD_MIN_TILES` tiles (2 x 2 output positions) or
    more, from `WINOGRAD_MIN_CHANNELS` vectors of the GEMM's (`rvm.kernels.sgemm.LANES`)
    input and output channels each and `WINOGRAD_MEAN_CHANNELS` vectors of their harmonic
    mean (`winograd_floors`: measured per vector width); on a map small enough that an
    image's transformed input and products at one of the 16 positions take at most half of
    one core's L2 (`WINOGRAD_SMALL_MAP`: every GEMM's operands stay there, and the
    image is one block, `rvm.kernels.winograd.block_rows`), from `WINOGRAD_SMALL_MEAN`
    vectors of the harmonic mean.

    The transforms move each input value a few times (``o`` multiply-adds each in the GEMMs)
    and each output value a few times (``c`` each), where the GEMMs go a vector at a time:
    their share of the time is about ``1 / c + 1 / o``, so the channels' floor is on the
    harmonic mean ``2 c o / (c + o)``, in vectors. A constant weight is transformed at build
    time (`rvm.op.conv2d_winograd`), and a small map's phases are cut apart for the pool's
    threads (`rvm.kernels.winograd.cut`). The measurements that set the floors are
    `winograd_floors`'."""
    if groups != 1 or kh != 3 or kw != 3 or sh != 1 or sw != 1 or dh != 1 or dw != 1:
        return False
    tiles = ((oh + 1) // 2) * ((ow + 1) // 2)
    floor = WINOGRAD_MIN_CHANNELS * sgemm.LANES
    if tiles < WINOGRAD_MIN_TILES or c < floor or o < floor:
        return False
    small = (c + o) * tiles <= WINOGRAD_SMALL_MAP
    mean = WINOGRAD_SMALL_MEAN if small else WINOGRAD_MEAN_CHANNELS
    return 2 * c * o >= mean * sgemm.LANES * (c + o)


def winograd_bf16_pays(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow):  # type: ignore[no-untyped-def]  # noqa: E501
    """Whether a convolution of this shape that ``precision="bf16"`` computes in bf16 runs
    Winograd's F(2x2, 3x3) with bf16 products (`rvm.kernels.winograd.conv2d_transformed_bf16`)
    rather than the direct bf16 convolution (`rvm.kernels.bf16conv`): where the CPU has bf16
    dot products (`rvm.kernels.bf16gemm.DPBF16`), Winograd's pays in float32
    (`winograd_pays`) and the GEMMs are deep and tall enough for the pair micro-kernel:
    `WINOGRAD_BF16_CHANNELS` input channels and `WINOGRAD_BF16_OUTPUTS` output channels or
    more, on maps of any size.

    Measured on a Zen 4 (AVX512-BF16, two threads, a layer alone in a model + ReLU, native
    mode, interleaved medians, its input float32 both ways), Winograd's time over the direct
    bf16 convolution's: from 64 channels on 28 x 28 maps and larger 0.61-0.93 (vgg19's and
    resnet50's, inception's 64 -> 96 and 96 -> 128, densenet121's 128 -> 32 on 56 x 56 0.75),
    from 96 input channels on 13 x 13 and 14 x 14 maps 0.62-0.78 (alexnet's, resnet50's 256,
    inception's); but 1.12-3.6 under 64 channels (squeezenet's 16 -> 64 on 55 x 55 1.28, 32
    -> 128 on 27 x 27 2.2, inception's 24 -> 64 on 14 x 14 3.6: the pair micro-kernel's 8 to
    24 steps a tile against the direct convolution's 9 taps' worth), 64 -> 256 on 13 x 13 1.58
    (49 tiles), densenet121's 128 -> 32 on 28 x 28 and 14 x 14 1.27 and 1.23. Once Winograd's
    input transform wrote its pairs itself, `benchmarks/bf16_winograd.py` (every such layer of
    the light CNNs, `results/z4_s70_bf16_winograd.json`) read 0.56-0.80 on vgg19's, resnet50's,
    alexnet's, zfnet512's and inception's layers from 28 x 28 (vgg19's 64 -> 64 on 224 x 224
    0.79), 0.65-0.97 on inception_v2's 14 x 14 ones; near the line (0.76-1.27 between runs)
    inception_v1's 96 -> 208, 112 -> 224 and 128 -> 256 on 13 x 13, and 64 -> 256 on 13 x 13
    (0.89 there, 1.58 before, the direct one kept). densenet121's 128 -> 32 on 56 x 56 read
    0.73-0.75 alone but 1.00 in the model (built both ways, taken in turns): its neighbours
    then write and read float32, not the direct convolution's pair planes. Session 86, after
    the turned kernels' gains (`rvm.kernels.bf16turned`), on maps under 196 tiles: alone
    (`results/z4_s86_bf16_winograd.json`) Winograd's took 0.90-1.40 of the direct one's time
    from 64 to 192 input channels (inception_v2's 14 x 14 layers, inception_v1's 13 x 13
    ones; 192 -> 256 0.86), and 0.78-0.83 from 256 (alexnet's, resnet50's, zfnet512's); in
    the models, each built both ways and taken in turns (two threads), the direct one took
    0.80-0.97 of Winograd's on inception_v2's layers of 96 to 192 channels (it writes the
    next convolution's pair plane) and 0.81-0.95 on inception_v1's, but 1.01-1.15 on
    resnet50's 256 -> 256 and 1.07-1.28 on zfnet512's and vgg19's: the floor of input
    channels on small maps is 256 (inception_v2 0.946-0.951 of its bf16 time, inception_v1
    0.98-1.01). Session 90's transforms (`rvm.kernels.winotiles`: 0.4-0.6 of the bf16 input
    transform's time and 0.6-0.8 of the output's on 28 x 28 and 14 x 14 maps) lifted that
    floor: Winograd's on small maps from 64 channels, the models built both ways and taken in
    turns, took inception_v2 to 0.951-0.957 of its time (from 64, 96 or 128 input channels)
    and inception_v1 to 0.965-0.987; squeezenet's 64 -> 256 on 13 x 13 tied (1.001). Then
    densenet121's 128 -> 32 (its growth layers: 32 output channels), calm, on 56 x 56 maps
    0.916-0.933, from 28 x 28 0.887-0.892, from 14 x 14 0.885; but in a slow spell of the host
    (all three maps) 1.113: Winograd's transformed input and products, through L3, lose more
    there than the direct convolution. Taken on every map, the calm figure."""
    if not bf16gemm.DPBF16 or amx.AMX:  # AMX: the direct convolution's tiles (module doc)
        return False
    if not winograd_pays(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow):
        return False
    return c >= WINOGRAD_BF16_CHANNELS and o >= WINOGRAD_BF16_OUTPUTS


WINOGRAD_BF16_CHANNELS, WINOGRAD_BF16_OUTPUTS = 64, 32
"""`winograd_bf16_pays`' floors of input channels (the GEMMs' depth: under 64, 32 pairs, the
pair micro-kernel's steps a tile cost more than the direct convolution's taps) and of
output channels (the GEMMs' rows), measured where bf16 dot products run (AVX-512: 16
lanes)."""


WINOGRAD_MIN_TILES = 32
"""The tiles of a map from which `winograd_pays` (between 7 x 7 maps' 16, where it won or lost
by the layer, and 12 x 12 maps' 36, where it won): a measured floor, not one derived from the
machine (session 43 had 256 while the weight was transformed at each call and a small map's
pieces each transformed their input again). On a Zen 4 core 7 x 7 maps won from 160
channels at one thread (1.17-1.35) but 128 -> 32 lost (0.49); two threads' cut phases not
measured there (the machine too loaded)."""


def winograd_floors(vector_bits: int) -> tuple[int, float, float]:
    """(`WINOGRAD_MIN_CHANNELS`, `WINOGRAD_MEAN_CHANNELS`, `WINOGRAD_SMALL_MEAN`) for vectors
    of ``vector_bits``, in vectors: measured per vector width (`benchmarks/conv_methods.py`,
    one thread, thread CPU; the faster of the direct method and the GEMMs over Winograd's time
    on a weight transformed beforehand, every 3x3 stride-1 layer of the light models), as the
    transforms' share against the GEMMs' is not the same count of vectors on both.

    - 256 bits: 8 and 10 (64 channels each and a mean of 80; the mean 8 since session 96,
      below), on a Zen 3 core (AVX2; session 44, one and two threads, loaded): from 12 x 12
      maps (36 tiles) with the mean from 96 channels 1.04-1.78, but 160 -> 320 on 13 x 13
      0.97; at a mean of 77 (64 -> 96, 48 -> 192) 0.68-1.26, of 64 (64 -> 64) 0.79-1.34; 7 x 7
      maps 0.76-1.52, 6 x 6 0.49-0.76.
    - 512 bits: 2 and 3 (32 channels each and a mean of 48), on a Zen 4 core (AVX-512 run as
      two 256-bit halves; session 45, loaded): from 36 tiles 1.06-1.78 from 32 channels each
      and a mean of 51 -- squeezenet's 32 -> 128 on 27 x 27 1.21-1.23, 48 -> 192 and 64 -> 256
      on 13 x 13 1.08-1.25; inception_v2's 28 x 28 layers 1.34-1.53, its 14 x 14 ones 1.06-1.44;
      resnet50's 64 -> 64 on 56 x 56 1.10, 128 -> 128 on 28 x 28 1.67; vgg19's 64 on 224 x 224
      1.22, 128 on 112 x 112 1.49; densenet121's 128 -> 32 on 56 x 56 1.34, 28 x 28 1.39, 14 x
      14 0.97; inception_v1's 1.17-1.61 -- but 16 -> 64 on 55 x 55 (one vector of input
      channels, a mean of 26) 0.56-0.66 and 3 -> 64 0.26. The floors of 8 and 10 vectors (128
      and 160 channels) had left all of these to the slower methods. Not measured on a core
      that runs 512 bits at once (Zen 5, Intel's), nor a Zen 3 re-measured at these floors.
    - Small maps (`WINOGRAD_SMALL_MAP`), 256 bits: a mean of 8 vectors, the channels' floor
      (session 46, Zen 3, load 8-10, thread CPU, alternated): 64 -> 96 and 64 -> 64 on 28 x 28
      (inception_v2's) took 0.72-0.80 and 0.77-0.85 of the packed direct method's time at one
      thread, 0.82 and 0.91 of its CPU in pieces at two (their phases cut apart); 64 -> 96 on
      14 x 14 a tie (0.97 at one thread, 1.05 in pieces at two, 0.89 of its best wall); but
      64 -> 64 on 56 x 56, where a position's operands take all of L2, 1.11 (the mean's floor
      stays). 512 bits: the mean's floor (3), not measured.
    - 512 bits, session 65 (Zen 4, a layer alone in a model, bias and ReLU, native mode, the
      GEMMs' method or the direct one against Winograd's on its weight transformed at build
      time, interleaved medians in one process): 1 vector each, a mean of 1.5 (16 channels,
      24). From 16 channels Winograd's was as fast or faster everywhere but on 16 -> 16:
      squeezenet's 16 -> 64 on 55 x 55 1.01 at one thread (thread CPU) and 1.08 at two (wall;
      0.73-0.98 of the time in blocks of rows, `rvm.kernels.winograd.cut`, hot and cold,
      alternated processes; the model 2.5% faster at two threads), 16 -> 48 1.05 and 1.07, 16
      -> 128 on 28 x 28 1.05 and 1.10, 24 -> 64 1.18 and 1.15, 32 -> 32 1.07 and 1.18, 32 -> 64
      on 14 x 14 1.29 and 1.38, 16 -> 256 1.13 and 1.17, 256 -> 16 1.04 and 1.07, 512 -> 16 on
      14 x 14 1.22 and 1.45; a mean under 1.5 vectors lost or tied: 16 -> 16 on 14 x 14 0.86
      and 0.57, on 28 x 28 0.99 and 0.93, 16 -> 32 on 55 x 55 1.42 at one thread but 0.99 at
      two. Session 45's 0.56-0.66 on 16 -> 64 came before the output transform was vectorized
      and small maps' phases were cut apart.
    - 256 bits, session 96 (Zen 3, `conv_methods.py` at one thread, thread CPU, and at two,
      wall): a mean of 8 vectors on large maps too. 64 -> 64 on 56 x 56 (resnet50's) 1.21 and
      1.16, on 224 x 224 (vgg19's) 1.15 and 1.10, where session 44 (before the vectorized
      transforms) had read 0.79-1.34 at that mean; resnet50 whole, built both ways and taken
      in turns at two threads, 0.986 of its time (a noisy hour). Left as they were: 32 -> 128
      on 27 x 27 (four vectors of input channels, a small map) 1.10-1.27 and 1.08; the small
      maps' 48 -> 192 on 13 x 13, 1.03 at one thread but 0.89 at two, and 64 -> 256, 1.34 but
      0.94 (kept); 128 -> 32 (densenet121's) 0.70-0.95 and 0.66-1.00; 16 -> 64 0.76-0.82.
    """
    return (1, 1.5, 1.5) if vector_bits >= 512 else (8, 8, 8)


WINOGRAD_MIN_CHANNELS, WINOGRAD_MEAN_CHANNELS, WINOGRAD_SMALL_MEAN = winograd_floors(
    cpu().vector_bits
)
"""The input and output channels, in vectors, from which `winograd_pays`, each; their
harmonic mean, in vectors; and that mean on small maps (`WINOGRAD_SMALL_MAP`;
`winograd_floors`)."""
WINOGRAD_SMALL_MAP = winograd.L2_FLOATS // 2
"""The most floats of input and output channels times tiles (an image's transformed input and
products at one of the 16 positions) of a map `winograd_pays` takes from `WINOGRAD_SMALL_MEAN`
vectors of the channels' harmonic mean: half of one core's L2."""


@jit(**_OPTS)
def prefers(c, o, groups, kh, kw, sh, sw, oh, ow, ih, iw, gemm_run):  # type: ignore[no-untyped-def]
    """Whether the direct method beats the GEMMs of `rvm.kernels.conv` on a float32
    convolution of this shape on this CPU, the GEMM's vectors running over ``gemm_run``
    output positions (an output row, or the whole map).

    Measured on AVX-512 (each layer of the 9 light CNNs, one thread, `benchmarks/
    conv_methods.py`): the channel vectors pay deep enough (``kh * kw * c / groups >= 36 *
    LANES``: the transposed store is small against the multiply-adds) and in whole vectors
    of a group's output channels, and

    - on maps of `PACK_MIN_POSITIONS` or more at stride 1 without groups, with many output
      channels (``o >= 8 * LANES``: whole tiles) or an input plane larger than a quarter of
      the last level cache (the GEMM streams it again for every band of output channels; the
      direct method reads it once): vgg19's layers, the inception stems; on maps twice that size
      from two vectors of output channels (``o >= 2 * LANES``: resnet50's 64 and
      densenet121's 32 at 56 x 56, 1.12 to 1.18 times as fast as the GEMM since the input's
      NHWC copy goes by vectors; 1.03 to 1.12 on AVX2; at 32 x 32 the GEMM was 4 % faster);
    - on smaller maps, deeper still (``>= 48 * LANES``), from two vectors of a group's
      output channels (``o / groups >= 2 * LANES``): vgg19's 28 x 28 and 14 x 14 layers, resnet50's
      256 x 14 x 14, the inceptions' 27 x 27, 14 x 14 and 13 x 13 branches (1.05 to 1.2 times
      as fast as the GEMM; ~230 GFLOP/s on a core against ~195 at 28 x 28 and 512 channels;
      on AVX2 1.15 to 1.2 times too); densenet121's 128 to 32 channels at 28 x 28 and 14 x
      14, and 96 or 128 to 64 at 28 x 28, 1.10 to 1.17 times as fast on Zen 4 (after the
      tile's transposed store went by in-lane shuffles, `rvm.kernels.nhwc.transposed`).
      Squeezenet's shallower expansions stay GEMMs on AVX-512 (not on AVX2, where its last
      two, 48 and 64 channels deep, run 1.2 times as fast this way). With groups, the GEMM
      runs group by group on a group's channels and the rule holds alike: alexnet's 5 x 5
      layer in two groups of 48 to 128 channels at 26 x 26 ran 1.67 times as fast this way
      on a Zen 3 (AVX2; not measured on AVX-512, where it was a GEMM before);
    - on smaller maps where the GEMM leaves a fifth of its lanes idle or more (7 x 7 maps: 49
      of 64 lanes; 6 x 6; rows of 12) and the channels fill theirs.

    Both rules for smaller maps hold at any stride (measured at 2), where the GEMM's taps are
    strided runs and the direct method's are not (it reads each position's channels,
    contiguous, at any stride): resnet50's three 3 x 3 stride-2 layers (128 x 56 x 56 to 512
    x 14 x 14) ran 1.05 to 1.24 times as fast this way, the inceptions' and zfnet's
    reductions 1.08 to 1.43 (on AVX2, resnet50's 1.07 to 1.31).
    The last rule holds for 1x1 convolutions too, from ``32 * LANES`` deep (the multiply-adds
    a tile's store and a position's copy weigh against: resnet50's 512 to 2048 channels on
    7 x 7 ran 1.22 times as fast this way on Zen 4, 1.17 at batch 8; 480, 512 and 544 to 128
    1.05), with ``o >= 8 * LANES`` (the NHWC copy of the input is the same for fewer output
    channels: 832 to 48 or 32 took 1.1 to 1.25 times as long): resnet50's 2048 to 512
    channels and the inceptions' 832 to 128...384 on 7 x 7 maps ran 1.1 to 1.2 times as fast
    this way (before the
    input's NHWC copy went by vectors on rows narrower than one and a band of 4 positions or
    fewer took half a tile's work, they took 1.05 to 2 times as long); on maps whose
    positions fill the GEMM's vectors (14 x 14: 196 of 208 lanes) the GEMM was 1.1 times as
    fast. Shallow convolutions (squeezenet's first expansions, the 3-channel stems, strided
    or not), ragged channel counts and other 1x1 convolutions run faster as GEMMs. A wider
    rule (rows of 13, 27 and 55 at any stride, from ``16 * LANES`` deep) gave
    vgg19 and alexnet more but cost the first run seconds of building the packed entry point
    (issue 24's goals), so it is not taken.

    Where the GEMM packs B (`rvm.kernels.sgemm.PACK_B`: every CPU since session 54; the
    floors below were measured where a tile's row of B is one cache line, AVX2's two vectors
    of 8), the GEMMs lose what the floors above weigh: their taps, read in place, are one
    line a row on as many pages (the reason a plain GEMM packs B there), and a plain
    GEMM copies its B at each call as the direct method copies its input. Measured on a Zen 3
    (AVX2, one thread, `benchmarks/conv_methods.py`), the taps GEMMs ran at 33-54 GFLOP/s
    against the direct method's 60-90 on every 3 x 3 and 5 x 5 layer from `BUILT_DEPTH`
    vectors deep but those on 56 x 56 maps (rows of whole tiles, a tie): squeezenet's 16 to 64
    channels at 55 x 55 1.59 times as fast this way, inception_v1's 5 x 5 branches 1.8 to 2.1,
    resnet50's stride-2 layers 1.8, densenet121's 128 to 32 2.2 to 2.35. So there the floor
    on large maps is `BUILT_DEPTH` vectors (the 3-channel stems stay GEMMs), on smaller ones
    36 (squeezenet's 32 to 128 channels at 27 x 27 1.92 times as fast), the shallower ones
    left to `pays_once_built` (a model that builds nothing else of the method keeps them
    GEMMs, as the small-map floor is there for). A 1x1 convolution runs
    this way on maps of four of the GEMM's tiles of positions or fewer (``4 * NR``: 7 x 7 and 6 x
    6, where its rows of B are few) from four vectors of output channels: densenet121's and the
    inceptions' 512 to 1024 channels on 7 x 7 and 6 x 6 maps to 32...2048, 1.07 to 1.51 times
    as fast; on 13 x 13 and 14 x 14 maps the two were within 0.85-1.27 of each other
    (squeezenet's 384 and 512 to 64 and 1000 channels, inception_v2's 576, faster as GEMMs),
    and from 28 x 28 the GEMM was mostly faster (0.82-0.93; 1.02-1.17 on 4 of 13).
    """
    depth = (c // groups) * kh * kw
    floor, small = (BUILT_DEPTH, 36) if PACK_B else (36, 48)
    if depth < (32 if kh * kw == 1 else floor) * LANES or (o // groups) % LANES:
        return False
    if oh * ow >= PACK_MIN_POSITIONS:
        if kh * kw == 1 or sh != 1 or sw != 1:
            return False
        plane = 4 * c * (ih + kh) * (iw + kw)
        large = o >= 8 * LANES or 4 * plane > _L3
        return groups == 1 and (large or o >= 2 * LANES and oh * ow >= 2 * PACK_MIN_POSITIONS)
    if o // groups >= 2 * LANES and depth >= small * LANES and kh * kw > 1:
        return True
    if kh * kw == 1 and PACK_B:
        return o >= 4 * LANES and gemm_run <= 4 * NR
    if kh * kw == 1 and o < 8 * LANES:
        return False  # the input's NHWC copy outweighs the lanes gained
    vectors = (gemm_run + LANES - 1) // LANES
    return 5 * gemm_run < 4 * vectors * LANES


def pays_once_built(c, o, groups, kh, kw, sh, sw, oh, ow):  # type: ignore[no-untyped-def]
    """Whether a float32 convolution of this shape on a small map takes the direct method in
    a model that builds the method anyway (some other convolution of it `prefers` it): a
    wider rule than `prefers`'s, whose depth floors keep the models that need none of it (such
    as squeezenet, the quick start's) from building the method at their first run.

    Measured on AVX-512 (`benchmarks/conv_methods.py`, one thread), the direct method beat the
    GEMMs on every 3 x 3 and 5 x 5 layer at stride 1 on maps under `PACK_MIN_POSITIONS` from
    `BUILT_DEPTH` vectors deep: inception_v2's 64 to 64 and 96 channels at 28 x 28 and 14 x
    14, 1.06 to 1.17 times as fast; inception_v1's 5 x 5 branches at 27 x 27 and 13 x 13, 1.15
    to 1.2 (squeezenet's 32 to 64 channels deep at 27 x 27 and 13 x 13, 1.11 to 1.21, where
    the rule does not apply). Without groups, in whole vectors of output channels, from two."""
    if groups != 1 or kh * kw == 1 or sh != 1 or sw != 1 or oh * ow >= PACK_MIN_POSITIONS:
        return False
    return o >= 2 * LANES and o % LANES == 0 and c * kh * kw >= BUILT_DEPTH * LANES


BUILT_DEPTH = 16
"""The depth (input channels times taps) in vectors from which `pays_once_built` holds."""


# Positions from which packing the weight at each call costs little against the convolution
# (one copy of the weight against positions x weight multiply-adds), and from which a map is
# large for `prefers`: with fewer, the method runs on weights packed at build time only.
PACK_MIN_POSITIONS = 1024
