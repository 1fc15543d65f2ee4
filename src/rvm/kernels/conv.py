"""Float convolution for jit kernels, compiled once and called by every convolution kernel.

A convolution kernel checks its operands' shapes, calls `conv2d` (or `conv2d_dot`) with the
attributes, and runs its epilogue (bias, activation) over the output, or, for float32, hands a
bias, residual and ReLU to the library with the convolution (``conv2d_fused``: its GEMM applies
them as it stores where it can, `fuses_epilogue`, else `rvm.kernels.epipass`'s pass); the
convolution itself lives here, so it is compiled once per operand type and cached with this
module's Numba cache, not compiled again into every kernel (it was most of a CNN's compile
time):

- `conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr)`: NumPy's BLAS
  (`rvm.kernels.blas.gemm_split`: every GEMM is cut into pieces that run at once on
  the BLAS's threads, one thread each), the method chosen by shape (`method`). 1x1
  unpadded convolutions are one GEMM per (image, group), on the operands themselves at
  stride 1, on the input subsampled once otherwise. Depthwise ones (one input channel per
  group) are direct loops, three taps per pass. Others split the zero-padded input of each
  (image, group) into its stride phases once (`rvm.kernels.planes.fill_phases`: every element
  written, padding included, on the pool by rows when large), so each tap of
  each output row is a unit-stride run, copy those runs into a column matrix (im2col) and
  multiply it by the weight, one GEMM per block of output rows; where the GEMM packs B
  (`sgemm.packs`) and output rows are wider than its panels (`panels_pay`), with no column
  matrix: each piece of one GEMM on the pool copies its rows' taps from the phases straight
  into the panels (`rvm.kernels.im2col`). (Stride-1 convolutions used
  to run one GEMM per kernel row on shifted windows of the padded input, with no column
  matrix: its shallower GEMMs and its weight transpose made it slower than this im2col.)
  Float32 convolutions where vectors of output channels pay (`rvm.kernels.convmethod.prefers`:
  deep, in whole vectors of output channels, on rows that leave the GEMM's lanes idle or at
  stride 1 with many output channels or an input plane larger than a quarter of L3, as
  vgg19's and the inception stems' are) on maps of `rvm.kernels.convmethod.PACK_MIN_POSITIONS`
  or more run the direct method instead (`rvm.kernels.direct.conv2d_oihw`), their weight
  packed at the call. Float32 3x3 convolutions at stride 1 and dilation 1 without groups,
  deep enough on maps of enough tiles (`winograd_pays`), run Winograd's F(2x2, 3x3) before
  either (`rvm.kernels.winograd`: 2.25 times fewer multiply-adds, the weight transformed at
  the call, the epilogue applied in its output transform).
- ``conv2d_winograd`` (entry point, `_winograd_entry`): Winograd's on a weight transformed at
  build time (`rvm.op.conv2d_winograd`), with its epilogue.
- `conv2d_dot(...)`: the same im2col with ``np.dot``, where NumPy's BLAS is not reachable.

Which method a shape takes, and the rules behind that choice (`method`, `winograd_pays`,
`channels_pay`, `panels_pay`, `by_images`, `fuses_epilogue`...), are
`rvm.kernels.convmethod`'s: the compiler asks them too, without this module's methods.

Each method is a task of its own (`rvm.kernels.parfor.caller`), built when a convolution
first takes it: the entry point itself is only the checks and the choice, seconds less to
build, and a model builds the methods its shapes take (a CNN without depthwise convolutions
never builds that one), each once, not nested in the others' code. A batch the pool's threads
share evenly runs an image a piece (`by_images`): each image's method in one thread, one join
for the batch instead of one per image (and per GEMM block), small images a core each, its
epilogue in each image's GEMM as at one image (each image's job takes its image's residual).

Operands are C-contiguous: ``x`` (n, c, ih, iw), ``w`` (o, c / groups, kh, kw), ``out`` (n, o,
oh, ow); ``pt``, ``pl``, ``pb``, ``pr`` are the top, left, bottom and right padding. Both
entry points check that channels, groups, batch and output size agree with the geometry before
touching memory, and raise ValueError when they do not (the kernels check the same earlier,
with messages in the model's terms; this check is what keeps the library itself safe).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba.core import types as nt
from numba.extending import overload

from rvm.kernels import direct, entry, epipass, parfor, sgemm, winograd
from rvm.kernels.blas import gemm_split as gemm
from rvm.kernels.blocks import empty
from rvm.kernels.convmethod import (
    CHANNELS,
    DEPTHWISE,
    IMAGES_TASK,
    POINTWISE,
    STRIDED,
    TAPS,
    TRANSFORMED,
    TRANSFORMED_BF16,
    WINOGRAD,
    by_images,
    columns_pay,
    fuses_epilogue,
    method,
    wraps_rows,
)
from rvm.kernels.depthwise import depthwise
from rvm.kernels.im2col import (
    conv2d_dot_unchecked,
    conv2d_im2col,
    im2col_panels,
    im2col_rows,
    takes_panels,
    tap_table,
)
from rvm.kernels.jitting import jit
from rvm.kernels.planes import U, fill_phases, phase_shape, tap_starts
from rvm.kernels.segments import gemm_segments

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS)
def _out_size(size, kern, stride, dil, lo, hi):  # type: ignore[no-untyped-def]
    """The output size along one spatial axis (-1 when the kernel is larger than the input)."""
    span = size + lo + hi - dil * (kern - 1) - 1
    return -1 if span < 0 else span // stride + 1


@jit(**_OPTS)
def _check(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):  # type: ignore[no-untyped-def]
    """Whether the operands' channels, groups, batch and output size agree with the geometry
    (the loops rely on it)."""
    if min(groups, sh, sw, dh, dw) <= 0:
        return False
    kh, kw = w.shape[2], w.shape[3]
    return (
        x.shape[1] == w.shape[1] * groups
        and w.shape[0] % groups == 0
        and out.shape[0] == x.shape[0]
        and out.shape[1] == w.shape[0]
        and out.shape[2] == _out_size(x.shape[2], kh, sh, dh, pt, pb)
        and out.shape[3] == _out_size(x.shape[3], kw, sw, dw, pl, pr)
    )


@jit(**_OPTS)
def _taps_gemm(x, w, out, groups, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    """The convolution as a GEMM that reads its taps in place: the input of each (image,
    group) is split into its zero-padded stride phases once, and B's row (channel, tap) is
    that tap's run in them (a table of where each starts), one segment per output row
    (`rvm.kernels.segments.gemm_segments`). No column matrix is built, but on maps whose rows
    leave many of the GEMM's lanes idle (`columns_pay`): there the taps are copied into one, its
    rows the map's positions end to end, and the same GEMM multiplies it."""
    n, c, ih, iw = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = out.shape[2], out.shape[3]
    if n * o * oh * ow == 0:
        return
    K, P, og = cg * kh * kw, oh * ow, o // groups
    hp, wp, hq, wq = phase_shape(oh, ow, kh, kw, sh, sw, dh, dw)
    size = sh * sw * hq * wq
    ph = np.empty(max(cg * size, 1), dtype=x.dtype)  # every element written by `fill_phases`
    starts = tap_starts(sh, sw, hq, wq, kh, kw, dh, dw)
    table = tap_table(cg, size, starts)
    xf, wf, of = x.reshape(x.size), w.reshape(w.size), out.reshape(out.size)
    # The map a run per output row, or one run wrapping around its rows (`wraps_rows`), or its
    # taps copied into a column matrix first where that pays (`columns_pay`).
    columns = columns_pay(og, K, oh, ow, wq)
    col = np.empty((K, P) if columns else (0, 0), dtype=x.dtype)
    b, ldb, rows = ph, 0, table
    if columns:  # B's rows the column matrix's, P apart (one GEMM call either way)
        b, ldb, rows = col.reshape(col.size), P, np.empty(0, dtype=np.int64)
        runs, run, step, wrap = 1, P, 0, 0
    elif wraps_rows(oh, ow, wq):
        runs, run, step, wrap = 1, (oh - 1) * wq + ow, 0, wq
    else:
        runs, run, step, wrap = oh, ow, wq, 0
    for n_ in range(n):
        for g_ in range(groups):
            fill_phases(xf, ph, (n_ * c + g_ * cg) * ih * iw, cg, ih, iw, sh, sw, hq, wq, hp, wp,
                        pt, pl)  # fmt: skip
            if columns:
                im2col_rows(ph, size, starts, col, cg, wq, ow, 0, oh)
            at_out = (n_ * o + g_ * og) * P
            gemm_segments(wf, g_ * og * K, K, b, ldb, rows, of, at_out, P, og, K, runs, run, step,
                          ow, 1, 1, 0, 0, 0, wrap, ow, sgemm.NO_EPILOGUE)  # fmt: skip


def _pointwise(x, w, out, groups, epilogue):  # type: ignore[no-untyped-def]
    """A 1x1, stride-1, unpadded convolution: for float32 one batched GEMM
    (`_pointwise_batched`, which applies the ``epilogue``), else one GEMM per (image, group)
    straight from the input to the output, (og, cg) weight rows times the group's (cg, h * w)
    input rows (``epilogue`` `sgemm.NO_EPILOGUE`). Jitted code only."""
    raise NotImplementedError("_pointwise is for jitted code")


@overload(_pointwise, jit_options=_OPTS)
def _pointwise_impl(x, w, out, groups, epilogue):  # type: ignore[no-untyped-def]
    if isinstance(x, nt.Array) and x.dtype == nt.float32:
        return lambda x, w, out, groups, epilogue: _pointwise_batched(x, w, out, groups, epilogue)

    def by_blas(x, w, out, groups, epilogue):  # type: ignore[no-untyped-def]
        n, c, ih, iw = x.shape
        o, cg = w.shape[0], w.shape[1]
        og, P = o // groups, ih * iw
        for n_ in range(n):
            for g_ in range(groups):
                at_x, at_out = (n_ * c + g_ * cg) * P, (n_ * o + g_ * og) * P
                gemm(w, g_ * og * cg, cg, x, at_x, P, out, at_out, P, og, P, cg, 0.0)

    return by_blas


@jit(**_OPTS)
def _pointwise_batched(x, w, out, groups, epilogue):  # type: ignore[no-untyped-def]
    """`_pointwise` for float32 as one batched GEMM over the (image, group) pairs, whose
    pieces the pool takes pair by pair when each product is small (shufflenet's groups), the
    ``epilogue`` (`gemm_segments`': the residual of ``out``'s layout) applied as it stores."""
    n, _, ih, iw = x.shape
    o, cg = w.shape[0], w.shape[1]
    og, P = o // groups, ih * iw
    none = np.empty(0, dtype=np.int64)
    wf, xf, of = w.reshape(w.size), x.reshape(x.size), out.reshape(out.size)
    gemm_segments(wf, 0, cg, xf, P, none, of, 0, P, og, cg, 1, P, 0, 0, n * groups, groups,
                  og * cg, cg * P, og * P, 0, 0, epilogue)  # fmt: skip


@jit(**_OPTS)
def _strided_pointwise(x, w, out, groups, sh, sw, epilogue):  # type: ignore[no-untyped-def]
    """A 1x1 unpadded convolution with strides: the input subsampled once (every sh-th row,
    every sw-th column; `_subsample`), then one GEMM per (image, group) as `_pointwise` (and
    its ``epilogue``)."""
    n, c = x.shape[0], x.shape[1]
    oh, ow = out.shape[2], out.shape[3]
    xs = empty((n, c, oh, ow), x.dtype)  # a kept block: from malloc, its pages faulted anew
    _subsample(x, xs, sh, sw)
    _pointwise(xs, w, out, groups, epilogue)


@jit(**_OPTS)
def _subsample(x, xs, sh, sw):  # type: ignore[no-untyped-def]
    """``xs`` = every sh-th row and sw-th column of ``x``'s planes (``xs``' shape), on the
    pool by ranges of planes when large (`parfor.chunks`). In the caller alone it was serial
    work while the other cores waited for the GEMM: resnet50's 256 channels of 56 x 56 to 28
    x 28, a third of the GEMM's time on one Zen 3 core (its pages faulted anew as well, the
    array from malloc)."""
    planes = x.shape[0] * x.shape[1]
    size = planes * xs.shape[2] * xs.shape[3]
    pieces = parfor.chunks(2 * size, planes)  # each element read and written
    job = np.empty(_SUBSAMPLE_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3] = _SUBSAMPLE_JOB, parfor.address(x), parfor.address(xs), planes
    job[4], job[5], job[6], job[7] = x.shape[2], x.shape[3], xs.shape[2], xs.shape[3]
    job[8], job[9], job[10] = sh, sw, pieces
    if pieces > 1:
        _run_subsample(x, pieces, job)
    else:
        _subsample_planes(x.reshape(x.size), xs.reshape(xs.size), job, 0, planes)


# A subsample's job (int64): its length, x's and xs' addresses, the planes, ih, iw, oh, ow, sh,
# sw, the pieces.
_SUBSAMPLE_JOB = 11


@jit(**_OPTS)
def _subsample_planes(xf, sf, job, p0, p1):  # type: ignore[no-untyped-def]
    """Planes [p0, p1) of `_subsample`'s job."""
    ih, iw, oh, ow, sh, sw = job[4], job[5], job[6], job[7], job[8], job[9]
    for plane in range(p0, p1):
        for p_ in range(oh):
            src, dst = U((plane * ih + p_ * sh) * iw), U((plane * oh + p_) * ow)
            if sw == 1:
                for q_ in range(U(ow)):
                    sf[dst + q_] = xf[src + q_]
            else:
                step = U(sw)
                for q_ in range(U(ow)):
                    sf[dst + q_] = xf[src + q_ * step]


def _subsample_task(piece, like, data):  # type: ignore[no-untyped-def]
    """Piece ``piece`` of `_subsample`'s job: an equal range of its planes."""
    job = parfor.job(data)
    planes = job[3]
    xf = parfor.array_at(job[1], (planes * job[4] * job[5],), like)
    sf = parfor.array_at(job[2], (planes * job[6] * job[7],), like)
    p0, p1 = parfor.piece_range(piece, job[10], planes, 1)
    _subsample_planes(xf, sf, job, p0, p1)


parfor.export_task("conv2d_subsample", _subsample_task)
_run_subsample = parfor.runner("conv2d_subsample")


# -- the methods, each a task built when first run (`rvm.kernels.parfor.caller`) ----------

# A method's job (int64): its length (26), x, w, out, the dims of x (4), of w (4), of out's
# plane (2), groups, sh, sw, dh, dw, pt, pl, the method (`method`; read by `_images_task`),
# the epilogue the GEMM applies (`sgemm.sgemm_segments`; all 0: none).
_JOB = 26
_EPILOGUE = 22


@jit(**_OPTS, inline="always")
def _job(x, w_at, out, cg, kh, kw, groups, sh, sw, dh, dw, pt, pl, how, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
    """The job (`_JOB` fields) of method ``how`` on ``x`` and ``out`` (4-d) by the weight at
    ``w_at`` (``out.shape[1]`` x ``cg`` x ``kh`` x ``kw`` as the methods view it; a transformed
    one, `TRANSFORMED`, is read by `_winograd_task` in its own layout), with ``epilogue``
    (`sgemm.sgemm_segments`'; `sgemm.NO_EPILOGUE`: none)."""
    n, c, ih, iw = x.shape
    o, oh, ow = out.shape[1], out.shape[2], out.shape[3]
    bias, step, act, res = epilogue
    return np.array((_JOB, parfor.address(x), w_at, parfor.address(out), n, c, ih, iw,
                     o, cg, kh, kw, oh, ow, groups, sh, sw, dh, dw, pt, pl, how,
                     bias, step, act, res), dtype=np.int64)  # fmt: skip


@jit(**_OPTS, inline="always")
def _epilogue_of(biases, act, added):  # type: ignore[no-untyped-def]
    """The epilogue `sgemm.sgemm_segments` takes, (bias, its step, act, residual), from
    `epipass.operands`' bias (empty: none; one value: its step 0) and residual (empty: none)."""
    at_bias = parfor.address(biases) if biases.size else 0
    at_res = parfor.address(added) if added.size else 0
    return at_bias, 1 if biases.size > 1 else 0, act, at_res


@jit(**_OPTS, inline="always")
def _epilogue(job):  # type: ignore[no-untyped-def]
    """The epilogue of a method's job, as `sgemm.sgemm_segments` takes it."""
    at = _EPILOGUE
    return job[at], job[at + 1], job[at + 2], job[at + 3]


@jit(**_OPTS)
def _operands(data, like):  # type: ignore[no-untyped-def]
    """A method's arrays and its job, from a task's ``data``."""
    job = parfor.job(data)
    x = parfor.array_at(job[1], (job[4], job[5], job[6], job[7]), like)
    w = parfor.array_at(job[2], (job[8], job[9], job[10], job[11]), like)
    out = parfor.array_at(job[3], (job[4], job[8], job[12], job[13]), like)
    return x, w, out, job


def _pointwise_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    _pointwise(x, w, out, job[14], _epilogue(job))


def _strided_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    _strided_pointwise(x, w, out, job[14], job[15], job[16], _epilogue(job))


def _depthwise_method_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    depthwise(x, w, out, job[15], job[16], job[17], job[18], job[19], job[20])


def _taps_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    _taps_gemm(x, w, out, job[14], job[15], job[16], job[17], job[18], job[19], job[20])


def _channels_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    bias = parfor.array_at(job[_EPILOGUE], (out.shape[1] if job[_EPILOGUE] else 0,), like)
    direct.conv2d_oihw(x, w, out, job[15], job[16], job[17], job[18], job[19], job[20], bias,
                       job[_EPILOGUE + 2])  # fmt: skip


def _im2col_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    conv2d_im2col(x, w, out, job[14], job[15], job[16], job[17], job[18], job[19], job[20],
                  _epilogue(job))  # fmt: skip


def _panels_task(k, like, data):  # type: ignore[no-untyped-def]
    x, w, out, job = _operands(data, like)
    im2col_panels(x, w, out, job[14], job[15], job[16], job[17], job[18], job[19], job[20],
                  _epilogue(job))  # fmt: skip


def _winograd_task(k, like, data):  # type: ignore[no-untyped-def]
    """Winograd's method on an OIHW weight, transformed at the call, or (``job[21]``
    `TRANSFORMED`: `_winograd_entry`) on one transformed at build time, (16, o, c) (or in bf16
    pairs, (16, o, c2): `TRANSFORMED_BF16`)."""
    x, w, out, job = _operands(data, like)
    if job[21] == TRANSFORMED or job[21] == TRANSFORMED_BF16:
        bf16 = 1 if job[21] == TRANSFORMED_BF16 else 0
        winograd.transformed_at(x, job[2], out, job[19], job[20], _epilogue(job), bf16)
    else:
        winograd.conv2d(x, w, out, job[19], job[20], _epilogue(job))


def _images_task(k, like, data):  # type: ignore[no-untyped-def]
    """Image ``k`` of a batch split by images (`by_images`): the job's method on it alone,
    in this thread (its own splits, nested in the pool's job, run here too)."""
    x, w, out, job = _operands(data, like)
    one = job.copy()
    one[1], one[3], one[4] = parfor.address(x[k]), parfor.address(out[k]), 1
    if one[_EPILOGUE + 3] != 0:  # a residual of the output's layout: image k's
        one[_EPILOGUE + 3] += one[3] - job[3]
    _dispatch(x, job[21], one)


for _name, _task in (
    (IMAGES_TASK, _images_task),
    ("conv2d_pointwise", _pointwise_task),
    ("conv2d_strided", _strided_task),
    ("conv2d_depthwise", _depthwise_method_task),
    ("conv2d_taps", _taps_task),
    ("conv2d_channels", _channels_task),
    ("conv2d_im2col", _im2col_task),
    ("conv2d_im2col_panels", _panels_task),
    ("conv2d_winograd", _winograd_task),
):
    parfor.export_task(_name, _task)
_call_pointwise = parfor.caller("conv2d_pointwise")
_call_strided = parfor.caller("conv2d_strided")
_call_depthwise = parfor.caller("conv2d_depthwise")
_call_taps = parfor.caller("conv2d_taps")
_call_channels = parfor.caller("conv2d_channels")
_call_im2col = parfor.caller("conv2d_im2col")
_call_panels = parfor.caller("conv2d_im2col_panels")
_call_winograd = parfor.caller("conv2d_winograd")
_run_images = parfor.runner(IMAGES_TASK)


@jit(**_OPTS)
def _conv2d_blas(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
    """`conv2d`'s work: -1 when the shapes disagree with the geometry (`_check`), else 1 when
    it applied the ``epilogue`` (`sgemm.sgemm_segments`' (bias, its step, act, residual), the
    residual of ``out``'s layout; `sgemm.NO_EPILOGUE`: none), 0 when the caller still has to
    (`fuses_epilogue`).

    The method by shape (`method`), each a task of its own built when first run (a model
    builds the methods its convolutions take).
    """
    if not _check(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):
        return -1
    n, o, oh, ow = out.shape
    cg, kh, kw = w.shape[1], w.shape[2], w.shape[3]
    if n * o * oh * ow == 0:
        return 1
    unpadded = pt == 0 and pl == 0 and pb == 0 and pr == 0
    c, ih, iw = x.shape[1], x.shape[2], x.shape[3]
    how = method(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow, ih, iw, unpadded, sgemm.applies(x))
    images = by_images(how, n, n * o * oh * ow * cg * kh * kw, parfor.threads())
    fused = fuses_epilogue(how, cg * kh * kw, epilogue) and sgemm.applies(x)
    job = _job(x, parfor.address(w), out, cg, kh, kw, groups, sh, sw, dh, dw, pt, pl, how,
               epilogue if fused else sgemm.NO_EPILOGUE)  # fmt: skip
    if images:
        _run_images(x, n, job)
    else:
        _dispatch(x, how, job)
    return 1 if fused else 0


@jit(**_OPTS, inline="always")
def _dispatch(x, how, job):  # type: ignore[no-untyped-def]
    """The convolution of ``job`` by method ``how``, in its task (`METHOD_TASKS`)."""
    if how == POINTWISE:
        _call_pointwise(x, 0, job)
    elif how == STRIDED:
        _call_strided(x, 0, job)
    elif how == DEPTHWISE:
        _call_depthwise(x, 0, job)
    elif how == CHANNELS:
        _call_channels(x, 0, job)
    elif how == TAPS:
        _call_taps(x, 0, job)
    elif how == WINOGRAD:
        _call_winograd(x, 0, job)
    elif takes_panels(x, job[13]):  # im2col, two tasks: a model builds the one it takes
        _call_panels(x, 0, job)
    else:
        _call_im2col(x, 0, job)


# -- the compiled entry point (see `rvm.kernels.entry`) ------------------------------


def _entry(a, b, c, dims, params):  # type: ignore[no-untyped-def]
    """`_conv2d_blas` on x (a), w (b), out (c): 0 done, 1 the shapes disagree."""
    d, p = nb.carray(dims, 12), nb.carray(params, 9)
    x = nb.carray(a, (d[0], d[1], d[2], d[3]))
    w = nb.carray(b, (d[4], d[5], d[6], d[7]))
    out = nb.carray(c, (d[8], d[9], d[10], d[11]))
    done = _conv2d_blas(x, w, out, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8],
                        sgemm.NO_EPILOGUE)  # fmt: skip
    return 0 if done >= 0 else 1


def _fused_entry(a, b, c, bias, res, dims, params):  # type: ignore[no-untyped-def]
    """`_conv2d_blas` on x (a), w (b), out (c), then its epilogue (`rvm.kernels.epipass`:
    the bias viewed (1, c or 1, 1, 1), the residual of out's shape; ``params``: the
    convolution's nine, then the activation, whether there is a bias, whether a residual; an
    array absent is passed as out, unread), in the GEMM's store where it can
    (`fuses_epilogue`), else by the pass: 0 done, 1 the shapes disagree."""
    d, p = nb.carray(dims, 20), nb.carray(params, 12)
    x = nb.carray(a, (d[0], d[1], d[2], d[3]))
    w = nb.carray(b, (d[4], d[5], d[6], d[7]))
    out = nb.carray(c, (d[8], d[9], d[10], d[11]))
    act = p[9]
    ok, biases, added = epipass.operands(out, bias, d[12:16], res, d[16:20], act, p[10], p[11])
    if not ok:
        return 1
    done = _conv2d_blas(x, w, out, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8],
                        _epilogue_of(biases, act, added))  # fmt: skip
    if done < 0:
        return 1
    if done == 0:
        epipass.epilogue_rows(out, biases, act, added)
    return 0


def _winograd_entry(a, b, c, bias, res, dims, params):  # type: ignore[no-untyped-def]
    """Winograd's F(2x2, 3x3) on x (a) by a weight transformed at build time (b: `U`, (16, o,
    c), viewed (16, o, c, 1): `rvm.kernels.winograd.transform`, `rvm.op.conv2d_winograd`)
    into out (c), then its epilogue in the output transform (the bias viewed (1, o or 1, 1,
    1), the residual of out's shape; ``params``: the padding (top, left, bottom, right), the
    activation, whether there is a bias, whether a residual, whether U holds bf16 pairs ((16,
    o, ceil(c / 2), 1) int32 words: `rvm.kernels.winograd.transform_bf16`); an array absent
    is passed as out, unread): 0 done, 1 the shapes disagree. The call runs in the method's
    task (`_winograd_task`)."""
    d, p = nb.carray(dims, 20), nb.carray(params, 8)
    x = nb.carray(a, (d[0], d[1], d[2], d[3]))
    out = nb.carray(c, (d[8], d[9], d[10], d[11]))
    n, ch, ih, iw, o = d[0], d[1], d[2], d[3], d[5]
    pt, pl, pb, pr, act = p[0], p[1], p[2], p[3], p[4]
    depth = (ch + 1) // 2 if p[7] else ch
    if min(pt, pl, pb, pr) < 0 or d[4] != winograd.POSITIONS or d[6] != depth or d[7] != 1:
        return 1
    if d[8] != n or d[9] != o or d[10] != _out_size(ih, 3, 1, 1, pt, pb):
        return 1
    if d[11] != _out_size(iw, 3, 1, 1, pl, pr):
        return 1
    ok, biases, added = epipass.operands(out, bias, d[12:16], res, d[16:20], act, p[5], p[6])
    if not ok:
        return 1
    if out.size == 0:
        return 0
    job = _job(x, parfor.address(nb.carray(b, 1)), out, ch, 3, 3, 1, 1, 1, 1, 1, pt, pl,
               TRANSFORMED_BF16 if p[7] else TRANSFORMED,
               _epilogue_of(biases, act, added))  # fmt: skip
    _call_winograd(x, 0, job)
    return 0


entry.export("conv2d", _entry)
entry.export("conv2d_fused", _fused_entry)
entry.export("conv2d_winograd", _winograd_entry)
# What kernels call (`rvm.kernels.entry.caller`): ``entry_call(arrays, params)``, 0 done.
entry_call = entry.caller("conv2d", 9)
conv2d_fused_call = entry.caller("conv2d_fused", 12)
conv2d_winograd_call = entry.caller("conv2d_winograd", 8)
"""Winograd's convolution by a weight transformed at build time and its epilogue
(`_winograd_entry`): ``conv2d_winograd_call((x, u, out, bias, res), (pt, pl, pb, pr, act,
with bias, with residual, bf16))``, ``u`` (16, o, c, 1), or with bf16 (16, o, ceil(c / 2),
1) int32 words."""
"""A float32 convolution and its epilogue (`_fused_entry`): ``conv2d_fused_call((x, w, out,
bias, res), (groups, sh, sw, dh, dw, pt, pl, pb, pr, act, with bias, with residual))``."""


# For Python callers (kernels call `entry_call`). Not cached: compiling it types the call, which
# registers the entry point (`entry.require`); cached object code would be linked without it.
@nb.njit(nogil=True)
def conv2d(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):  # type: ignore[no-untyped-def]
    """``out`` = the convolution of ``x`` by ``w`` (see the module docstring), by BLAS."""
    i = np.int64
    params = (i(groups), i(sh), i(sw), i(dh), i(dw), i(pt), i(pl), i(pb), i(pr))
    if entry_call((x, w, out), params) != 0:
        raise ValueError("conv2d: the operands' shapes do not match the geometry")


@jit(**_OPTS)
def conv2d_dot(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):  # type: ignore[no-untyped-def]
    """`conv2d` by im2col and ``np.dot`` (where NumPy's BLAS is not reachable)."""
    if not _check(x, w, out, groups, sh, sw, dh, dw, pt, pl, pb, pr):
        raise ValueError("conv2d: the operands' shapes do not match the geometry")
    conv2d_dot_unchecked(x, w, out, groups, sh, sw, dh, dw, pt, pl, sgemm.NO_EPILOGUE)
