"""``rvm.compile(mod, precision="bf16")``: products with constant weights compute in bf16 with
float32 sums, in every exec mode and kernel backend, against the NumPy reference of the same
bf16 program (tight) and of the float32 one (the accuracy bf16 costs); the precision is
recorded, saved, loaded, profiled and refused when unknown. Both of `to_bf16`'s ways run on
any CPU: the bf16 ops (what a CPU with AVX512-BF16 compiles; elsewhere their kernels widen
bf16 to float32) and the float32 kernels on weights rounded to bf16 (what the others
compile), `native_way` replaced for the compile (`_compiled`)."""

from __future__ import annotations

import numpy as np
import pytest
from bf16_checks import BF16_VS_F32, near_both

import rvm
from rvm import op
from rvm.ir import Builder, Call, Constant, Tuple, Var, const, tensor
from rvm.ir.infer import infer_type
from rvm.kernels import convmethod
from rvm.kernels.reference.bf16 import _round_bf16
from rvm.op.bf16 import pair_width, turned_panel
from rvm.runtime.executable import EXEC_MODES
from rvm.transform import to_bf16 as to_bf16_module
from rvm.transform.pipeline import default_passes, run_pipeline
from rvm.transform.to_bf16 import WAYS, native_way, to_bf16

F32 = "float32"
RNG = np.random.default_rng(0)
# bf16 keeps 8 bits of mantissa: products of depth k differ from float32's by about
# 2**-8 * sqrt(k) of their scale; the bound for a model's logits is 3e-2
# (`bf16_checks.BF16_VS_F32`).


def _model():
    """main(x, img, y, a): two dense layers of x (matmul or dense + bias + relu: pair panels, one
    product of both, the bias and relu in its epilogue) and a dense by ``op.dense`` of ``n``
    rows, a convolution of 7 channels + bias + relu (the bias and relu in its tile store, the
    7th channel's taps paired along the kernel's rows, at stride 2 across them),
    a dense of its 2 rows (a GEMV on the weight's rows), a depthwise convolution and a product
    of two inputs (these two stay float32), softmax on top; a convolution of the depthwise
    one's output + bias + the first convolution's output (a residual) + relu, all in its tile
    store; an attention of ``a`` (its products in bf16, a causal mask added)."""
    x = Var("x", tensor(("n", 48), F32))
    img = Var("img", tensor((2, 7, 6, 17), F32))
    y = Var("y", tensor(("n", 48), F32))
    a = Var("a", tensor((1, 2, 9, 16), F32))
    bb = Builder()
    with bb.function("main", [x, img, y, a]):
        w1 = const(RNG.standard_normal((48, 40)).astype(F32) / 7)
        h = bb.emit(op.matmul(x, w1))
        h = bb.emit(op.relu(bb.emit(op.add(h, const(RNG.standard_normal(40).astype(F32))))))
        w2 = const(RNG.standard_normal((10, 40)).astype(F32) / 6)
        logits = bb.emit(op.softmax(bb.emit(op.dense(h, w2))))
        wc = const(RNG.standard_normal((12, 8, 3, 3))[:, :7].astype(F32) / 8)
        c = bb.emit(op.conv2d(img, wc, strides=(1, 2), padding=(1, 1, 0, 1)))
        c = bb.emit(op.add(c, const(RNG.standard_normal((12, 1, 1)).astype(F32))))
        c = bb.emit(op.relu(c))
        wd = const(RNG.standard_normal((12, 1, 3, 3)).astype(F32))
        d = bb.emit(op.conv2d(c, wd, padding=1, groups=12))
        w5 = const(RNG.standard_normal((12, 12, 3, 3)).astype(F32) / 10)
        r = bb.emit(op.add(bb.emit(op.conv2d(d, w5, padding=1)), const(np.ones((12, 1, 1), F32))))
        r = bb.emit(op.relu(bb.emit(op.add(c, r))))
        g = bb.emit(op.matmul(x, bb.emit(op.transpose(y, (1, 0)))))
        w3 = const(RNG.standard_normal((6, 540)).astype(F32) / 20)
        e = bb.emit(op.dense(bb.emit(op.reshape(c, (2, 540))), w3))
        w4 = const(RNG.standard_normal((24, 48)).astype(F32) / 7)
        f = bb.emit(op.add(bb.emit(op.dense(x, w4)), const(RNG.standard_normal(24).astype(F32))))
        k = bb.emit(op.add(a, const(RNG.standard_normal(16).astype(F32))))
        causal = np.triu(np.full((1, 1, 9, 9), -np.inf, F32), 1)
        att = bb.emit(op.attention(a, k, bb.emit(op.tanh(a)), const(causal), scale=0.25))
        bb.emit_output(Tuple((logits, r, g, e, bb.emit(op.relu(f)), att)))
    return bb.get()


MODEL = _model()


def _inputs(seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = [(5, 48), (2, 7, 6, 17), (5, 48), (1, 2, 9, 16)]
    return [rng.standard_normal(s).astype(F32) for s in shapes]


def _winograd(patch: pytest.MonkeyPatch, winograd: bool | None) -> None:
    """Makes `to_bf16` take Winograd's bf16 convolution where Winograd's float32 rule pays
    (``winograd`` True: as a CPU with bf16 dot products does), or never (False: the direct
    bf16 convolutions, whose planes and prologues the tests read); None: this CPU's rule."""
    if winograd is not None:
        rule = _dot_cpu_winograd if winograd else (lambda *shape: False)
        patch.setattr(convmethod, "winograd_bf16_pays", rule)


def _dot_cpu_winograd(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow) -> bool:  # type: ignore[no-untyped-def]  # noqa: E501
    """Whether a CPU with bf16 dot products takes Winograd's bf16 convolution for the tests'
    shapes: they have AVX-512, whose float32 rule takes 3 x 3 stride-1 convolutions from one
    vector (16) of input and output channels (`convmethod.winograd_floors`), where AVX2's
    (this host's rule, perhaps) asks for 64."""
    plain = (groups, kh, kw, sh, sw, dh, dw) == (1, 3, 3, 1, 1, 1, 1)
    return plain and min(c, o) >= 16


def _converted(mod, way: str = "bf16", winograd: bool | None = False):
    """``mod`` after the pipeline's passes up to `to_bf16` taking ``way`` (what the bf16
    executable compiled that way runs), Winograd's bf16 convolution as ``winograd`` says
    (`_winograd`)."""
    passes = default_passes()
    before = passes[: [n for n, _ in passes].index("legalize")]
    with pytest.MonkeyPatch.context() as patch:
        _winograd(patch, winograd)
        return to_bf16(run_pipeline(mod, before), way)


def _compiled(mod, way: str, winograd: bool | None = False, **options):
    """``rvm.compile(mod, precision="bf16", **options)`` as a CPU whose `native_way` is
    ``way`` compiles it, Winograd's bf16 convolution as ``winograd`` says (`_winograd`)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(to_bf16_module, "native_way", lambda: way)
        _winograd(patch, winograd)
        return rvm.compile(mod, precision="bf16", **options)


def _is(binding, name: str) -> bool:
    return getattr(getattr(binding.value, "callee", None), "name", None) == name


def _panel(og: int, out: tuple[int, int], iw: int, pl: int, kw: int, sw: int = 1) -> int:
    """The panel this CPU's rule (`rvm.op.bf16.turned_panel`) gives a one-group convolution
    of ``og`` channels to an ``out`` map from an ``iw``-wide image (0: direct)."""
    return turned_panel(og, *out, pair_width(iw, out[1], pl, kw, 1, sw), 1)


def test_a_conv_epilogue_joins_only_its_sole_use() -> None:
    """A bias add and relu join a bf16 convolution only where they alone read it and the bias
    is one constant per channel: a conv read twice, or a bias along another axis, stays. (Two
    inputs: convolutions of one input would be one (`merge_convs`).)"""
    img = Var("img", tensor((1, 8, 6, 6), F32))
    img2 = Var("img2", tensor((1, 8, 6, 6), F32))
    w = const(RNG.standard_normal((4, 8, 3, 3)).astype(F32))
    bb = Builder()
    with bb.function("main", [img, img2]):
        a = bb.emit(op.conv2d(img, w, padding=1))
        a2 = bb.emit(op.relu(a))
        b = bb.emit(op.conv2d(img2, w, padding=1))
        b2 = bb.emit(op.relu(bb.emit(op.add(b, const(np.ones((1, 1, 6), F32))))))
        bb.emit_output(Tuple((a, a2, b2)))
    ops = _ops(_converted(bb.get()))
    assert ops.count("conv2d_bf16") == 2 and ops.count("relu") == 2 and ops.count("add") == 1


def test_shallow_convolutions_stay_float32_but_pointwise_ones_of_16_channels() -> None:
    """A 1 x 1 convolution of 16 channels computes in bf16 (`MIN_DEPTH`); a 3-channel 3 x 3
    stem (depth 27 < `MIN_CONV_DEPTH`) and a 1 x 1 of 8 channels stay float32."""
    img = Var("img", tensor((1, 3, 12, 12), F32))
    bb = Builder()
    with bb.function("main", [img]):
        stem = bb.emit(op.conv2d(img, const(RNG.standard_normal((16, 3, 3, 3)).astype(F32))))
        a = bb.emit(op.conv2d(stem, const(RNG.standard_normal((8, 16, 1, 1)).astype(F32))))
        b = bb.emit(op.conv2d(a, const(RNG.standard_normal((4, 8, 1, 1)).astype(F32))))
        bb.emit_output(b)
    assert _ops(_converted(bb.get())) == ["conv2d", "conv2d_bf16", "conv2d"]


def test_a_strided_shallow_stem_takes_bf16_without_amx(monkeypatch) -> None:
    """Without AMX a 3-channel 3 x 3 stem of stride 2 (depth 27) computes in bf16
    (`MIN_STRIDED_DEPTH`); with AMX, or at stride 1, it stays float32 (`MIN_CONV_DEPTH`)."""
    img = Var("img", tensor((1, 3, 13, 13), F32))
    w = const(RNG.standard_normal((16, 3, 3, 3)).astype(F32))
    for stride, amx, want in ((2, False, "conv2d_bf16"), (2, True, "conv2d"), (1, False, "conv2d")):
        bb = Builder()
        with bb.function("main", [img]):
            bb.emit_output(bb.emit(op.conv2d(img, w, strides=stride)))
        monkeypatch.setattr(to_bf16_module, "has_amx_tiles", lambda amx=amx: amx)
        assert _ops(_converted(bb.get())) == [want], (stride, amx)


def _ops(mod) -> list[str]:
    return [
        b.value.callee.name
        for b in mod["main"].body.bindings
        if isinstance(b.value, Call) and hasattr(b.value.callee, "name")
    ]


@pytest.fixture(scope="module")
def bf16_executables():
    """(way, kernels) -> MODEL compiled so, each on first use."""
    built: dict = {}

    def get(way: str, kernels: str):
        if (way, kernels) not in built:
            built[way, kernels] = _compiled(MODEL, way, kernels=kernels)
        return built[way, kernels]

    return get


def test_the_native_way_follows_the_cpu_and_its_dot_products_speed(monkeypatch, caplog) -> None:
    """The bf16 ops where the CPU has AMX tiles, or a bf16 dot product doing more
    multiply-adds a second than its float32 FMAs, or one that cannot be timed (a cross build);
    else the rounded way, which says why once, at INFO."""
    from rvm.kernels.amx import AMX
    from rvm.kernels.bf16gemm import DPBF16
    from rvm.op.bf16 import bf16_dot_speed

    speed = bf16_dot_speed()
    fast = speed is None or speed[0] > speed[1]
    assert native_way() == ("bf16" if DPBF16 and (AMX or fast) else "rounded")
    monkeypatch.setattr(to_bf16_module, "has_bf16_dot", lambda: True)
    monkeypatch.setattr(to_bf16_module, "has_amx_tiles", lambda: True)
    monkeypatch.setattr(to_bf16_module, "bf16_dot_speed", lambda: (11e9, 23e9))
    assert native_way() == "bf16"  # the tiles, however slow the vector dot product
    monkeypatch.setattr(to_bf16_module, "has_amx_tiles", lambda: False)
    with caplog.at_level("INFO", logger="rvm.transform"):
        for speed, way in (((2e9, 1e9), "bf16"), (None, "bf16"), ((11e9, 23e9), "rounded")):
            monkeypatch.setattr(to_bf16_module, "bf16_dot_speed", lambda s=speed: s)
            assert native_way() == way
            assert native_way() == way
    said = [r.getMessage() for r in caplog.records if "multiply-adds" in r.getMessage()]
    assert said == [
        "rvm: this CPU's bf16 dot product (vdpbf16ps) does 11G multiply-adds a second on one "
        "core, its float32 FMAs 23G: precision='bf16' runs its convolutions and GEMMs as float32"
        " kernels on weights rounded to bf16 at compile time (activations stay float32), its "
        "GEMVs of a few rows on bf16 weights"
    ]
    monkeypatch.setattr(to_bf16_module, "has_bf16_dot", lambda: False)
    assert native_way() == "rounded"
    with pytest.raises(ValueError, match="way must be one of"):
        to_bf16(MODEL, "fp16")


def test_the_rounded_way_keeps_float32_kernels_on_rounded_weights() -> None:
    """The way of a CPU without a bf16 dot product: each product the bf16 way converts keeps
    its float32 op on its weight rounded to bf16, but a GEMV of a few rows (``dense_bf16``)
    and attention (float32: no weight to round once)."""
    rounded = _converted(MODEL, "rounded")
    ops = _ops(rounded)
    assert "conv2d_bf16" not in ops and "dense_packed_bf16" not in ops
    assert ops.count("dense_bf16") == 1 and ops.count("conv2d") == 3
    for way, input in (("rounded", "float32"), ("bf16", "bf16")):  # the GEMV's activations
        gemv = next(b.value for b in _converted(MODEL, way)["main"].body.bindings
                    if _is(b, "dense_bf16"))  # fmt: skip
        assert gemv.attrs["input"] == input
    att = next(b.value for b in rounded["main"].body.bindings if _is(b, "attention"))
    assert att.attrs.get("precision", "fp32") == "fp32"
    weights = [
        b.value.args[1].data
        for b in rounded["main"].body.bindings
        if _is(b, "conv2d") or _is(b, "dense") or _is(b, "matmul")
        if isinstance(b.value.args[1], Constant) and b.value.args[1].data.shape[1] > 1
    ]  # the depthwise convolution's (one channel a group) stays float32
    assert len(weights) == 5
    for w in weights:
        np.testing.assert_array_equal(w, _round_bf16(w))  # bf16 values already


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
def test_the_rounded_way_against_numpy(exec_mode: str) -> None:
    """The float32 kernels on rounded weights give NumPy's products of the rounded weights
    and the float32 input: a dense of 7 rows, a 3 x 3 convolution; so does the GEMV of 2
    rows on the weight's bf16 bits (``dense_bf16``), its input not rounded."""
    x = Var("x", tensor((7, 40), F32))
    img = Var("img", tensor((1, 16, 9, 9), F32))
    w = RNG.standard_normal((24, 40)).astype(F32)
    wc = RNG.standard_normal((8, 16, 3, 3)).astype(F32)
    bb = Builder()
    with bb.function("main", [x, img]):
        d = bb.emit(op.dense(x, const(w)))
        g = bb.emit(op.dense(bb.emit(op.strided_slice(x, [0], [2], axes=[0])), const(w)))
        bb.emit_output(Tuple((d, bb.emit(op.conv2d(img, const(wc))), g)))
    ex = _compiled(bb.get(), "rounded", progress=False)
    xs = RNG.standard_normal((7, 40)).astype(F32)
    im = RNG.standard_normal((1, 16, 9, 9)).astype(F32)
    got_d, got_c, got_g = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](xs, im)
    np.testing.assert_allclose(got_d, xs @ _round_bf16(w).T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_g, xs[:2] @ _round_bf16(w).T, rtol=1e-5, atol=1e-5)
    assert np.abs(got_g - _round_bf16(xs[:2]) @ _round_bf16(w).T).max() > 1e-3
    windows = np.lib.stride_tricks.sliding_window_view(im[0], (3, 3), axis=(1, 2))
    want = np.einsum("chwij,ocij->ohw", windows, _round_bf16(wc))[None]
    np.testing.assert_allclose(got_c, want, rtol=1e-4, atol=1e-4)
    assert np.abs(got_d - xs @ w.T).max() > 1e-4  # the weights were rounded


def test_the_pass_converts_products_with_constant_weights_only() -> None:
    ops = _ops(_converted(MODEL))
    assert ops.count("dense_packed_bf16") == 3 and ops.count("dense_bf16") == 1
    assert ops.count("conv2d_bf16") == 2 and ops.count("relu") == 2  # the convs joined theirs
    first, second = (b.value for b in _converted(MODEL)["main"].body.bindings
                     if _is(b, "conv2d_bf16"))  # fmt: skip
    assert len(first.args) == 3 and first.args[2].data.shape == (12,)
    assert first.attrs["activation"] == "relu" == second.attrs["activation"]
    assert len(second.args) == 4 and second.args[3] is not None  # bias, residual
    # 5 x 9 maps of 12 channels: turned around at AVX-512's 16 lanes, direct at AVX2's 8
    assert first.attrs["panel"] == _panel(12, (5, 9), 17, 1, 3, 2)
    assert second.attrs["panel"] == _panel(12, (5, 9), 9, 1, 3)
    assert (first.attrs["pairing"], second.attrs["pairing"]) == ("columns", "channels")
    assert ops.count("conv2d") == 1 and ops.count("matmul") == 1  # depthwise, two inputs
    assert "dense" not in ops and "softmax" in ops
    att = next(b.value for b in _converted(MODEL)["main"].body.bindings if _is(b, "attention"))
    assert att.attrs["precision"] == "bf16" and att.attrs["scale"] == 0.25


def _classifier(last_rows: int = 2):
    """main(x): a GEMV of x's 2 rows, ReLU, then a dense of ``last_rows`` of its rows (a GEMV
    at 2 or fewer, pair panels above `GEMV_ROWS`), a bias and softmax: a classifier's head."""
    x = Var("x", tensor((2, 64), F32))
    w1 = RNG.standard_normal((48, 64)).astype(F32) / 8
    w2 = RNG.standard_normal((10, 48)).astype(F32) / 7
    bias = RNG.standard_normal(10).astype(F32)
    bb = Builder()
    with bb.function("main", [x]):
        h = bb.emit(op.relu(bb.emit(op.dense(x, const(w1)))))
        if last_rows > 2:
            h = bb.emit(op.tile(h, (last_rows // 2, 1)))
        z = bb.emit(op.add(bb.emit(op.dense(h, const(w2))), const(bias)))
        bb.emit_output(bb.emit(op.softmax(z)))
    return bb.get(), w1, w2, bias


def test_the_last_gemv_takes_its_input_float32() -> None:
    """A function's last product, a GEMV, takes its input unrounded (its rounding would move
    the logits themselves); the GEMV before it rounds its input; a last product of more rows
    than a GEMV's (pair panels) is not changed, nor a GEMV some product follows."""
    mod = _classifier()[0]
    gemvs = [b.value for b in _converted(mod)["main"].body.bindings if _is(b, "dense_bf16")]
    assert [g.attrs["input"] for g in gemvs] == ["bf16", "float32"]
    packed = list(_converted(_classifier(8)[0])["main"].body.bindings)
    assert [b.value.attrs["input"] for b in packed if _is(b, "dense_bf16")] == ["bf16"]
    assert sum(_is(b, "dense_packed_bf16") for b in packed) == 1
    inputs = [g.attrs["input"] for g in (b.value for b in _converted(MODEL)["main"].body.bindings
                                          if _is(b, "dense_bf16"))]  # fmt: skip
    assert inputs == ["bf16"]  # the attention comes after MODEL's GEMV


@pytest.mark.parametrize("exec_mode", EXEC_MODES)
def test_the_last_gemv_against_numpy(exec_mode: str) -> None:
    """The classifier's head in bf16: its first GEMV on bf16 inputs, its last on the float32
    values it gets, both on bf16 weights, as NumPy computes them."""
    mod, w1, w2, bias = _classifier()
    ex = _compiled(mod, "bf16", progress=False)
    xs = RNG.standard_normal((2, 64)).astype(F32)
    got = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](xs)
    h = np.maximum(_round_bf16(xs).astype(np.float64) @ _round_bf16(w1).T, 0).astype(F32)
    z = h.astype(np.float64) @ _round_bf16(w2).T + bias
    want = np.exp(z - z.max(1, keepdims=True))
    np.testing.assert_allclose(got, want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("way", WAYS)
def test_every_exec_mode_and_backend(
    bf16_executables, exec_mode: str, kernels: str, way: str
) -> None:
    ex = bf16_executables(way, kernels)
    assert ex.precision == "bf16"
    args = _inputs()
    got = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](*args)
    exact = rvm.interpret(_converted(MODEL, way), "main", *args)  # the same bf16 program
    full = rvm.interpret(MODEL, "main", *args)  # float32 throughout
    for a, b, f in zip(got, exact, full):
        assert a.dtype == np.float32 and a.shape == f.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * np.abs(b).max())
        assert np.abs(a - f).max() <= BF16_VS_F32 * np.abs(f).max()
    np.testing.assert_array_equal(got[0].argmax(-1), full[0].argmax(-1))
    np.testing.assert_allclose(got[2], full[2], rtol=1e-5, atol=1e-5)  # stayed float32


def test_saved_and_loaded_with_its_precision(bf16_executables, tmp_path) -> None:
    ex = bf16_executables(native_way(), "jit")
    path = tmp_path / "m.rvmx"
    ex.save(str(path))
    loaded = rvm.load_executable(str(path))
    assert loaded.precision == "bf16" and "precision" in str(loaded.stats())
    args = _inputs(2)
    want = rvm.VirtualMachine(ex)["main"](*args)
    for mode in ("bytecode", "native"):
        got = rvm.VirtualMachine(loaded, exec_mode=mode)["main"](*args)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    fp32 = rvm.compile(MODEL, build_kernels=False)
    assert type(fp32).from_bytes(fp32.to_bytes(native=False)).precision == "fp32"


@pytest.mark.parametrize("way", WAYS)
def test_profile_shows_each_kernels_precision(bf16_executables, way: str) -> None:
    vm = rvm.VirtualMachine(bf16_executables(way, "jit"))
    report = vm.profile("main", *_inputs(), warmup=1, repeat=2)
    precision = {r["name"]: r["precision"] for r in report.rows}
    # the bf16 ops' kernels, the attention's (an attribute); the rounded way's float32
    # kernels multiply in float32, and its attention stays float32
    reduced = ("bf16", "attention") if way == "bf16" else ("bf16",)
    assert {p for n, p in precision.items() if any(r in n for r in reduced)} == {"bf16"}
    assert {p for n, p in precision.items() if not any(r in n for r in reduced)} == {"fp32"}
    assert " bf16 " in str(report) and ",bf16," in report.csv()


def _chained():
    """main(img): densenet's dense layer -- batch norm, a scale, a shift, relu, a 1 x 1
    convolution + relu, a 3 x 3 one (its padding uneven) -- and a VGG-like pair on the same
    input -- a 3 x 3 convolution of stride 2 to 41 channels (the last pair's high half 0) +
    bias + relu, a 3 x 3 one: the affine and relu
    join the 1 x 1 convolution as its prologue, and the first convolution of each pair writes
    the second's pair plane (direct at 16 x 16, turned around at 8 x 8)."""
    img = Var("img", tensor((1, 40, 16, 16), F32))
    c = 40
    bb = Builder()
    with bb.function("main", [img]):
        stats = [RNG.standard_normal(c), RNG.standard_normal(c), RNG.standard_normal(c)]
        var = const(RNG.uniform(0.5, 2.0, c).astype(F32))
        h = bb.emit(op.batch_norm(img, *(const(v.astype(F32)) for v in stats), var))
        h = bb.emit(op.multiply(h, const(RNG.uniform(0.5, 1.5, (c, 1, 1)).astype(F32))))
        h = bb.emit(op.relu(bb.emit(op.add(h, const(RNG.standard_normal((c, 1, 1)).astype(F32))))))
        w1 = const(RNG.standard_normal((48, c, 1, 1)).astype(F32) / 6)
        a = bb.emit(op.relu(bb.emit(op.conv2d(h, w1))))
        b = bb.emit(op.conv2d(a, const(RNG.standard_normal((24, 48, 3, 3)).astype(F32) / 20),
                              padding=(1, 0, 2, 1)))  # fmt: skip
        d = bb.emit(op.conv2d(img, const(RNG.standard_normal((41, c, 3, 3)).astype(F32) / 20),
                              strides=2, padding=1))  # fmt: skip
        d = bb.emit(op.relu(bb.emit(op.add(d, const(RNG.standard_normal((41, 1, 1)).astype(F32))))))
        e = bb.emit(op.conv2d(d, const(RNG.standard_normal((32, 41, 3, 3)).astype(F32) / 20),
                              padding=1))  # fmt: skip
        bb.emit_output(Tuple((b, e)))
    return bb.get()


CHAINED = _chained()


def test_activations_stay_bf16_between_convolutions() -> None:
    """The pass's decisions: a convolution read by one stride-1 convolution alone writes its
    pair plane (``plane``, int32), which that one reads (``source``); a BN-scale-shift-ReLU
    chain before a convolution is its prologue, one scale and shift a channel."""
    bindings = list(_converted(CHAINED)["main"].body.bindings)
    convs = [b for b in bindings if _is(b, "conv2d_bf16")]
    assert len(convs) == 4 and len(bindings) == 5  # the affine chain and the relus joined
    first, second, strided, last = (b.value for b in convs)
    assert first.attrs["prologue"] == "affine_relu" and first.args[-1].data.shape == (2, 40)
    assert first.attrs["plane"] == (1, 0, 20, 17) and convs[0].var.type.dtype == "int32"
    # The panels by this CPU's rule: at AVX-512's 16 lanes ``second`` direct, ``strided``
    # and ``last`` turned (planes written both ways); at AVX2's 8 the writers direct and
    # the readers turned
    assert first.attrs["panel"] == _panel(48, (16, 16), 16, 0, 1)
    assert second.attrs["source"] == (48, 16, 16)
    assert second.attrs["panel"] == _panel(24, (17, 15), 16, 0, 3)
    # 8 wide, its right padding the next row's left (`pair_width`); ``first``'s (pl 0) not
    assert strided.attrs["plane"] == (1, 1, 11, 9) and strided.attrs["source"] == ()
    assert strided.attrs["panel"] == _panel(41, (8, 8), 16, 1, 3, 2)
    assert last.attrs["source"] == (41, 8, 8)  # odd channels
    assert last.attrs["panel"] == _panel(32, (8, 8), 8, 1, 3)
    assert second.attrs["plane"] == last.attrs["plane"] == ()  # outputs stay float32


@pytest.fixture(scope="module")
def chained_executables():
    """CHAINED compiled the bf16 way on any CPU: its pair planes and prologues."""
    return {k: _compiled(CHAINED, "bf16", kernels=k) for k in ("jit", "numpy")}


def test_pair_planes_and_prologues_in_every_exec_mode(
    chained_executables, exec_mode: str, kernels: str
) -> None:
    x = np.random.default_rng(3).standard_normal((1, 40, 16, 16)).astype(F32)
    got = rvm.VirtualMachine(chained_executables[kernels], exec_mode=exec_mode)["main"](x)
    # an activation rounded to bf16 between two convolutions may round the other way when
    # its float32 sum differs in the last bits (another order): one bf16 step of one input
    # moves a few outputs by about 2**-8 of one product
    near_both(got, rvm.interpret(_converted(CHAINED), "main", x),
              rvm.interpret(CHAINED, "main", x), 2e-4)  # fmt: skip


def _taps_model():
    """main(img): a 3 x 3 convolution of 64 channels + ReLU (stride 1) read by another
    (stride 1, its pair plane) and by a strided one (its words copied into that one's
    phases); both returned."""
    img = Var("img", tensor((1, 64, 18, 18), F32))
    bb = Builder()
    with bb.function("main", [img]):
        w = [const(RNG.standard_normal((o, 64, 3, 3)).astype(F32) / 24) for o in (64, 40, 32)]
        a = bb.emit(op.relu(bb.emit(op.conv2d(img, w[0], padding=1))))
        b = bb.emit(op.conv2d(a, w[1], padding=1))
        c = bb.emit(op.conv2d(a, w[2], strides=2, padding=1))
        bb.emit_output(Tuple((b, c)))
    return bb.get()


TAPS = _taps_model()


@pytest.mark.parametrize("amx", [True, False], ids=["amx", "vectors"])
def test_taps_first_on_amx(amx: bool, exec_mode: str, monkeypatch) -> None:
    """On AMX a stride-1 direct convolution whose pairs fill whole steps takes its weight tap
    by tap, in tiles where its output channels fill bands of 32 (``pairing`` ``"tiles"``: the
    walk turned around, `rvm.kernels.amxconv`), else as rows (``"taps"``: the walk's tiles
    load from the plane); a strided one channel pair by channel pair (their phases' tiles
    load faster packed); elsewhere all channel by channel. Either program runs on any CPU
    (a weight in tiles where the walk is not turned is turned back into rows), in every exec
    mode, near the NumPy reference of the same bf16 program and within the bound of the
    float32 one."""
    monkeypatch.setattr(to_bf16_module, "has_amx_tiles", lambda: amx)
    converted = _converted(TAPS)
    first, b, c = (x.value for x in converted["main"].body.bindings if _is(x, "conv2d_bf16"))
    assert first.attrs["panel"] == b.attrs["panel"] == 0 and b.attrs["source"]
    tiles, taps = ("tiles", "taps") if amx else ("channels", "channels")
    assert (first.attrs["pairing"], b.attrs["pairing"], c.attrs["pairing"]) == (
        tiles, taps, "channels")  # fmt: skip
    ex = _compiled(TAPS, "bf16")
    x = np.random.default_rng(6).standard_normal((1, 64, 18, 18)).astype(F32)
    got = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](x)
    near_both(got, rvm.interpret(converted, "main", x), rvm.interpret(TAPS, "main", x), 2e-4)


def test_tiles_saved_and_loaded(tmp_path) -> None:
    """A saved bf16 executable whose weights are AMX's tiles (on this CPU's AMX, else its
    rows) loads and runs as it ran, in every exec mode."""
    ex = _compiled(TAPS, "bf16")
    path = tmp_path / "tiles.rvmx"
    ex.save(str(path))
    loaded = rvm.load_executable(str(path))
    x = np.random.default_rng(8).standard_normal((1, 64, 18, 18)).astype(F32)
    want = rvm.VirtualMachine(ex)["main"](x)
    for mode in ("bytecode", "compiled", "native"):
        got = rvm.VirtualMachine(loaded, exec_mode=mode)["main"](x)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match=r"precision must be one of \('fp32', 'bf16', 'int8'\)"):
        rvm.compile(MODEL, precision="fp16")


@pytest.fixture(scope="module")
def bert():
    """The small BERT of tests/data (hidden size 64) in float32 and in bf16 (this CPU's way)."""
    pytest.importorskip("onnx")
    from pathlib import Path

    path = Path(__file__).parents[1] / "data" / "transformers" / "bert_dynamo.onnx"
    mod = rvm.from_onnx(str(path))
    return rvm.compile(mod, progress=False), rvm.compile(mod, precision="bf16", progress=False)


# The bound is the kernels', the same in every exec mode (test_every_exec_mode_and_backend
# runs bf16 in each): the native mode's compile of BERT (tens of seconds cold) is -m slow.
@pytest.mark.parametrize(
    "exec_mode",
    [m if m != "native" else pytest.param(m, marks=pytest.mark.slow) for m in EXEC_MODES],
)
def test_bert_within_the_bound_of_float32(bert, exec_mode: str) -> None:
    """The issue's bound on a transformer: outputs within 3e-2 (relative to their largest
    value) of float32's; its dense layers (attention projections, feed-forward) and its
    attention's products run bf16."""
    fp32, bf16 = bert
    if native_way() == "bf16":
        assert sum(r.meta["precision"] == "bf16" for r in bf16.kernels.values()) >= 3
    rng = np.random.default_rng(5)
    for _ in range(2):
        ids = rng.integers(0, 100, (2, 16))
        feed = (ids, np.ones_like(ids), np.zeros_like(ids))
        want = rvm.VirtualMachine(fp32)["main"](*feed)
        got = rvm.VirtualMachine(bf16, exec_mode=exec_mode)["main"](*feed)
        for a, b in zip(got, want):
            assert np.abs(a - b).max() <= BF16_VS_F32 * np.abs(b).max()
            assert not np.array_equal(a, b)  # computed in bf16 (its weights, at least)


def _winograd_model():
    """main(img, r): a 3 x 3 convolution of 39 channels (the last pair's high half 0) to 33
    on a 15 x 17 image, its padding uneven, + bias + a residual + relu, which Winograd's
    F(2x2, 3x3) takes in bf16 where it pays, the epilogue in its output transform; and a 3 x
    3 one to 8 channels (too few for Winograd's: the direct bf16 convolution)."""
    img = Var("img", tensor((2, 39, 15, 17), F32))
    r = Var("r", tensor((2, 33, 16, 16), F32))
    bb = Builder()
    with bb.function("main", [img, r]):
        w = const(RNG.standard_normal((33, 39, 3, 3)).astype(F32) / 20)
        a = bb.emit(op.conv2d(img, w, padding=(1, 0, 2, 1)))
        a = bb.emit(op.add(a, const(RNG.standard_normal((33, 1, 1)).astype(F32))))
        a = bb.emit(op.relu(bb.emit(op.add(a, r))))
        w8 = const(RNG.standard_normal((8, 33, 3, 3)).astype(F32) / 20)
        bb.emit_output(Tuple((a, bb.emit(op.conv2d(a, w8, padding=1)))))
    return bb.get()


WINOGRAD = _winograd_model()


def test_winograd_takes_bf16_products_where_it_pays(monkeypatch) -> None:
    """Where Winograd's pays, the convolution is `conv2d_winograd` with precision bf16 on its
    weight transformed, rounded and paired once (int32 words, (16, o, ceil(c / 2))); the
    shallow one stays the direct bf16 convolution. This CPU's rule takes it only with bf16
    dot products (without them the bf16 products are float32 FMAs on widened pairs)."""
    bindings = list(_converted(WINOGRAD, winograd=True)["main"].body.bindings)
    wino = [b.value for b in bindings if _is(b, "conv2d_winograd")]
    assert len(wino) == 1 and wino[0].attrs["precision"] == "bf16"
    u = wino[0].args[1].data
    assert u.dtype == np.int32 and u.shape == (16, 33, 20)
    assert [b for b in bindings if _is(b, "conv2d_bf16")]
    from rvm.kernels import bf16gemm

    monkeypatch.setattr(bf16gemm, "DPBF16", False)
    assert not _ops(_converted(WINOGRAD, winograd=None)).count("conv2d_winograd")


def test_winograd_bf16_in_every_exec_mode(exec_mode: str, kernels: str) -> None:
    """Against the NumPy reference of the same bf16 program (the transformed input rounded
    to bf16, float64 sums: tight) and the float32 program (the bound)."""
    ex = _compiled(WINOGRAD, "bf16", winograd=True, kernels=kernels, progress=False)
    rng = np.random.default_rng(4)
    args = [rng.standard_normal((2, 39, 15, 17)).astype(F32), rng.random((2, 33, 16, 16), F32)]
    vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
    got = vm["main"](*args)
    exact = rvm.interpret(_converted(WINOGRAD, winograd=True), "main", *args)
    full = rvm.interpret(WINOGRAD, "main", *args)
    for a, b, f in zip(got, exact, full):
        assert a.dtype == np.float32 and a.shape == f.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-4 * np.abs(b).max())
        assert np.abs(a - f).max() <= BF16_VS_F32 * np.abs(f).max()
    if kernels == "jit" and exec_mode != "native":
        rows = vm.profile("main", *args, warmup=0, repeat=1).rows
        assert {r["precision"] for r in rows if "winograd" in r["name"]} == {"bf16"}


def test_winograd_bf16_weights_are_checked() -> None:
    x = Var("x", tensor((1, 8, 6, 6), F32))
    u32 = const(np.zeros((16, 4, 8), F32))
    with pytest.raises(rvm.IRError, match="precision bf16 takes"):
        infer_type(op.conv2d_winograd(x, u32, 1, precision="bf16"))
    with pytest.raises(rvm.IRError, match="input .* does not match weight"):
        infer_type(op.conv2d_winograd(x, const(np.zeros((16, 4, 3), np.int32)), 1, "bf16"))
    with pytest.raises(rvm.IRError, match="precision must be"):
        op.conv2d_winograd(x, u32, 1, precision="int8")
    assert infer_type(op.conv2d_winograd(x, const(np.zeros((16, 4, 4), np.int32)), 1, "bf16"))
