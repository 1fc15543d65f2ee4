"""Weights read in place from a model file's bytes, every dtype and storage of them, corrupt
weights, and the memory an import holds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_helpers import make_model  # noqa: E402

import rvm  # noqa: E402
from rvm.dtypes import NARROW_DTYPES, dtype_kind  # noqa: E402
from rvm.frontend.onnx.weights import split_weights, weight_views  # noqa: E402
from rvm.ir import Constant  # noqa: E402
from rvm.ir.types import DTYPES  # noqa: E402


def sample(dtype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    """Values of ``dtype`` that a wrong element size, sign, byte order or packing would change
    (a narrow float without -0.0 holds 0 there, one without NaN 1: NaNs compare unequal)."""
    kind = dtype_kind(dtype)
    if kind == "b":
        flat = [True, False, True, False, False, True]
    elif kind in "iu":
        info = ml_dtypes.iinfo(dtype)
        flat = [info.min, info.max, 0, 1, info.max // 3, min(7, info.max)]
    else:
        info = ml_dtypes.finfo(dtype)
        inf = 2.0 if dtype in NARROW_DTYPES else np.inf  # onnx's make_tensor saturates float8
        flat = [float(info.min), float(info.max), -0.0, inf, float(info.tiny), 1 / 3]
        if dtype == "float8_e8m0fnu":  # make_tensor rounds 2**-127 (a float32 subnormal) up
            flat = [0.25, float(info.max), 1.0, 2.0, 2.0**-100, 0.5]
    n = int(np.prod(shape))
    with np.errstate(over="ignore", invalid="ignore"):
        arr = np.resize(np.array(flat, np.float64).astype(dtype), n).reshape(shape)
    return np.where(np.isnan(arr.astype(np.float64)), np.ones((), arr.dtype), arr)


# ONNX packs these several to a byte: they are unpacked into arrays of their own, not viewed.
PACKED = {"w_int4", "w_uint4", "w_int2", "w_uint2", "w_float4_e2m1fn", "w_float6_e2m3fn",
          "w_float6_e3m2fn"}  # fmt: skip


# Every rvm dtype, a 0-d and an empty tensor: name -> array.
ARRAYS = {
    **{f"w_{d}": sample(d) for d in DTYPES},
    "scalar": sample("float64", ()),
    "empty": sample("float32", (0, 4)),
}


def tensor(name: str, arr: np.ndarray, raw: bool) -> TensorProto:
    """``arr`` as a TensorProto, in ``raw_data`` or in its typed field (float_data, ...)."""
    if raw:
        return numpy_helper.from_array(arr, name)  # packs the 4-, 2- and 6-bit types
    elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
    return helper.make_tensor(name, elem, arr.shape, arr.flatten())


def identity_model(arrays: dict[str, np.ndarray], raw: dict[str, bool]) -> onnx.ModelProto:
    """One graph output per initializer (the initializer itself: no op takes every dtype);
    ``raw[name]`` picks its storage."""
    graph = helper.make_graph(
        [],
        "weights",
        [],
        [
            helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for k, v in arrays.items()
        ],
        [tensor(k, v, raw[k]) for k, v in arrays.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def mixed_model() -> onnx.ModelProto:
    """Every array of ARRAYS in raw_data, and each dtype once more in its typed field."""
    arrays = {**ARRAYS, **{f"typed_{d}": sample(d) for d in DTYPES}}
    return identity_model(arrays, {k: not k.startswith("typed_") for k in arrays})


def imported_constants(model_arg: object) -> list[np.ndarray]:
    """The arrays of the constants ``main`` returns, in output order."""
    out = rvm.from_onnx(model_arg)["main"].body.body
    assert all(isinstance(f, Constant) for f in out.fields)
    return [f.data for f in out.fields]


def as_source(model: onnx.ModelProto, source: str, tmp_path) -> object:
    if source == "proto":
        return model
    if source == "bytes":
        return model.SerializeToString()
    onnx.save(model, tmp_path / "m.onnx")
    return str(tmp_path / "m.onnx")


def test_split_cuts_exactly_the_raw_data_and_the_views_equal_the_arrays():
    model = mixed_model()
    data = model.SerializeToString()
    stripped, cuts = split_weights(data)
    payload = sum(len(t.raw_data) for t in model.graph.initializer)
    assert len(data) - payload - 4 * len(ARRAYS) <= len(stripped) <= len(data) - payload
    names = [t.name for t in model.graph.initializer]
    assert [c is None for c in cuts] == [n.startswith("typed_") for n in names]
    proto = onnx.ModelProto.FromString(stripped)
    assert [t.name for t in proto.graph.initializer] == names
    assert not any(t.HasField("raw_data") for t in proto.graph.initializer)
    assert list(proto.graph.node) == list(model.graph.node)
    views = weight_views(data, cuts, proto.graph.initializer)
    assert set(views) == set(ARRAYS)
    file_bytes = np.frombuffer(data, np.uint8)
    for name, expected in ARRAYS.items():
        assert views[name].dtype == expected.dtype and views[name].shape == expected.shape
        np.testing.assert_array_equal(views[name], expected)
        assert not views[name].flags.writeable
        shared = np.shares_memory(views[name], file_bytes)
        assert shared or expected.size == 0 or name in PACKED


def test_bytes_that_do_not_parse_are_left_to_protobuf():
    data = mixed_model().SerializeToString()
    assert split_weights(data[:-3]) is None  # truncated inside a field
    assert split_weights(b"\x0b\x00") is None  # a group: not read here
    assert split_weights(b"\x3a\x05\x2a\x10") is None  # an initializer longer than its graph


@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "typed_field"])
@pytest.mark.parametrize("source", ["path", "bytes", "proto"])
def test_every_dtype_imports_its_exact_values(source, raw, tmp_path):
    model = identity_model(ARRAYS, dict.fromkeys(ARRAYS, raw))
    got = imported_constants(as_source(model, source, tmp_path))
    for name, arr, expected in zip(ARRAYS, got, ARRAYS.values()):
        assert (arr.dtype, arr.shape) == (expected.dtype, expected.shape), name
        np.testing.assert_array_equal(arr, expected, err_msg=name)


def _root(arr: np.ndarray) -> object:
    while isinstance(arr, np.ndarray) and arr.base is not None:
        arr = arr.base
    return arr


def mixed_constants(model_arg: object) -> dict[str, np.ndarray]:
    """The imported constants of `mixed_model` by initializer name."""
    names = [t.name for t in mixed_model().graph.initializer]
    return dict(zip(names, imported_constants(model_arg), strict=True))


def test_weights_from_a_file_are_read_only_views_of_its_bytes(tmp_path):
    """Nothing is copied: every raw_data weight lives in the one bytes object read from the
    file, which holds the file's content."""
    path = as_source(mixed_model(), "path", tmp_path)
    arrays = mixed_constants(path)
    roots = {id(_root(arrays[name])) for name in ARRAYS if name not in PACKED}
    assert len(roots) == 1
    root = _root(arrays["w_float32"])
    assert isinstance(root, bytes) and root == open(path, "rb").read()
    for name in ARRAYS:
        assert not arrays[name].flags.writeable, name


def test_weights_from_bytes_share_the_memory_of_those_bytes():
    data = mixed_model().SerializeToString()
    arrays = mixed_constants(data)
    data_view = np.frombuffer(data, np.uint8)
    for name in ARRAYS:
        assert not arrays[name].flags.writeable, name
        shared = np.shares_memory(arrays[name], data_view)
        assert shared or ARRAYS[name].size == 0 or name in PACKED, name
    assert not np.shares_memory(arrays["typed_float32"], data_view)


def test_the_weights_run_on_the_vm(kernels, exec_mode, tmp_path):
    path = as_source(mixed_model(), "path", tmp_path)
    vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(path), kernels=kernels), exec_mode=exec_mode)
    expected = [*ARRAYS.values(), *(sample(d) for d in DTYPES)]
    for got, want in zip(vm["main"](), expected, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def _short_raw_data(t: TensorProto) -> None:
    t.raw_data = t.raw_data[:-4]


def _negative_dim(t: TensorProto) -> None:
    t.dims[:] = [-2, -6]  # the product matches the data


def _data_twice(t: TensorProto) -> None:
    t.float_data.extend([1.0] * 12)


def _complex64(t: TensorProto) -> None:
    t.data_type = TensorProto.COMPLEX64
    t.dims[:] = [2, 3]


def _unknown_type(t: TensorProto) -> None:
    t.data_type = 99


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (_short_raw_data, r"'w'.* (takes 48 bytes, but its raw_data holds 44|size 11 into)"),
        (_negative_dim, r"initializer 'w' has a negative dimension: dims \[-2, -6\]"),
        (_data_twice, r"initializer 'w' holds its data twice: in \w+_data and in \w+_data"),
        (_complex64, "initializer 'w' has ONNX element type COMPLEX64, which rvm does not support"),
        (_unknown_type, r"'w' has ONNX element type 99|data_type \(tensor name: w\): 99"),
    ],
)
@pytest.mark.parametrize("source", ["bytes", "proto"])
def test_a_weight_that_does_not_fit_its_tensor_is_an_import_error(source, corrupt, message):
    """Read in place (bytes) or from the message (proto): a clear error naming the weight."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    model = identity_model({"w": w}, {"w": True})
    corrupt(model.graph.initializer[0])
    with pytest.raises(rvm.OnnxImportError, match=message):
        rvm.from_onnx(model.SerializeToString() if source == "bytes" else model)


def _flips(data: bytes):
    """Every truncation of ``data`` and every single-bit flip of it."""
    for n in range(len(data)):
        yield data[:n]
    for i in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[i] ^= 1 << bit
            yield bytes(flipped)


def test_the_walker_stays_in_bounds_on_every_truncation_and_bit_flip():
    """Pure Python over every corrupt variant of a small model: the walker returns None or
    payloads inside the bytes, and the views that follow raise OnnxImportError or fit.
    (The whole import of corrupt bytes, C++ parser included, is fuzzed in test_fuzz.py.)"""
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = identity_model({"w": w, "i": np.array([3, -1], np.int64)}, {"w": True, "i": True})
    parsed = 0
    for data in _flips(model.SerializeToString()):
        split = split_weights(data)
        if split is None:
            continue
        stripped, cuts = split
        assert len(stripped) <= len(data)
        for cut in cuts:
            assert cut is None or 0 <= cut[0] <= cut[1] <= len(data)
        try:
            proto = onnx.ModelProto.FromString(stripped)
        except Exception:  # protobuf rejects it: the import reports that
            continue
        parsed += 1
        try:
            views = weight_views(data, cuts, proto.graph.initializer)
        except rvm.OnnxImportError:
            continue
        for arr in (views or {}).values():
            assert np.shares_memory(arr, np.frombuffer(data, np.uint8)) or arr.size == 0
    assert parsed > 100  # the flips reached the views, not only the walker


def save_external(model: onnx.ModelProto, path, one_file: bool = True) -> None:
    """``model`` saved with every raw_data initializer in external data (``w.bin`` if one file)."""
    location = "w.bin" if one_file else None
    onnx.save(
        model,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=one_file,
        location=location,
        size_threshold=0,
    )


@pytest.mark.parametrize("one_file", [True, False], ids=["one_file", "file_per_tensor"])
def test_external_data_is_read_from_beside_the_model(one_file, tmp_path):
    model = mixed_model()
    save_external(model, tmp_path / "m.onnx", one_file)
    assert len(os.listdir(tmp_path)) == 1 + (1 if one_file else len(ARRAYS))
    skeleton = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    external = [t.name for t in skeleton.graph.initializer if t.data_location == t.EXTERNAL]
    assert external == list(ARRAYS)
    arrays = mixed_constants(str(tmp_path / "m.onnx"))
    for name, expected in [*ARRAYS.items(), *((f"typed_{d}", sample(d)) for d in DTYPES)]:
        assert (arrays[name].dtype, arrays[name].shape) == (expected.dtype, expected.shape)
        np.testing.assert_array_equal(arrays[name], expected, err_msg=name)
        assert not arrays[name].flags.writeable or name.startswith("typed_")


def test_a_constant_node_in_external_data(tmp_path):
    value = np.arange(300, dtype=np.float32).reshape(3, 100)
    node = helper.make_node("Constant", [], ["y"], value=tensor("v", value, raw=True))
    model = make_model([node], [], ["y"])
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, convert_attribute=True)
    assert os.path.getsize(tmp_path / "m.onnx") < value.nbytes
    ex = rvm.compile(rvm.from_onnx(str(tmp_path / "m.onnx")), kernels="numpy")
    np.testing.assert_array_equal(rvm.VirtualMachine(ex)["main"](), value)


def _set_entry(key: str, value: str):
    def edit(path) -> None:
        model = onnx.load(path, load_external_data=False)
        for t in model.graph.initializer:
            if t.name == "w_float32":
                for entry in t.external_data:
                    if entry.key == key:
                        entry.value = value
        onnx.save(model, path)

    return edit


def _data_up(path) -> None:
    """w_float32 points at a copy of the data outside the model's directory."""
    shutil.copy(path.parent / "w.bin", path.parent.parent / "w.bin")
    _set_entry("location", "../w.bin")(path)


def _hard_link(path) -> None:
    """w.bin gets a second name (as a link to a file elsewhere would look)."""
    os.link(path.parent / "w.bin", path.parent.parent / "alias")


def _truncate_data(path) -> None:
    os.truncate(path.parent / "w.bin", 40)


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda p: os.remove(p.parent / "w.bin"), r"'w_bool': its external data file .* not exist"),
        (_data_up, r"'w_float32' keeps its data in '../w.bin', outside the model's dir"),
        (_truncate_data, r"bytes are expected at offset \d+ of .*w.bin', which holds \d+ from"),
        (_set_entry("length", "4"), r"takes 24 bytes, but its external data length holds 4"),
        (_set_entry("offset", "-8"), r"'w_float32': External data offset must be non-negative"),
        (_hard_link, r"its external data file .*w.bin' is a hard link \(it has 2 names\); rvm"),
    ],
)
def test_external_data_that_cannot_be_read_is_an_import_error(spoil, message, tmp_path):
    (tmp_path / "model").mkdir()
    path = tmp_path / "model" / "m.onnx"
    save_external(mixed_model(), path)
    spoil(path)
    with pytest.raises(rvm.OnnxImportError, match=message):
        rvm.from_onnx(str(path))


@pytest.mark.parametrize("source", ["bytes", "proto"])
def test_external_data_without_the_models_path_is_an_import_error(source, tmp_path):
    save_external(mixed_model(), tmp_path / "m.onnx")
    if source == "bytes":
        arg = (tmp_path / "m.onnx").read_bytes()
    else:
        arg = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    with pytest.raises(rvm.OnnxImportError, match="'w_bool' keeps its data in the external file"):
        rvm.from_onnx(arg)


MEMORY = textwrap.dedent(
    """
    import sys
    import numpy as np
    import onnx
    import rvm

    def peak_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024

    base = peak_mb()
    mod = rvm.from_onnx(sys.argv[1])
    ex = rvm.compile(mod, kernels="numpy")
    print(peak_mb() - base)
    """
)


# Made in a process of its own: building, checking and saving it copy the weights several
# times, which raised a test worker's peak memory by 670 MB. One process writes both files
# (the weights inline, and in a file beside the model), once for the module.
MAKE_BIG = textwrap.dedent(
    """
    import sys
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    from onnx_helpers import make_model

    w = np.random.default_rng(0).standard_normal((6, 2048, 2048)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["w", "i"], ["y"], axis=0)]
    model = make_model(nodes, [("i", TensorProto.INT64, [1])], ["y"], {"w": w})
    onnx.save(model, sys.argv[1])
    onnx.save(model, sys.argv[2], save_as_external_data=True)
    """
)
WEIGHTS_MB = 6 * 2048 * 2048 * 4 / 2**20
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


@pytest.fixture(scope="module")
def big_models(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, str]:
    """``{external: path}``: the model with 96 MB of weights, inline and external."""
    paths = {False: tmp_path_factory.mktemp("inline"), True: tmp_path_factory.mktemp("external")}
    files = {external: str(folder / "big.onnx") for external, folder in paths.items()}
    make = [sys.executable, "-c", MAKE_BIG, files[False], files[True]]
    made = subprocess.run(make, capture_output=True, text=True, env=ENV)
    assert made.returncode == 0, made.stderr
    return files


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM (Linux)")
@pytest.mark.parametrize("external", [False, True], ids=["inline", "external_data"])
def test_import_and_compile_hold_the_weights_once(external, big_models):
    """A model with 96 MB of weights, imported from its file in a fresh process."""
    path = big_models[external]
    if external:  # the weights are in a file beside it
        assert os.path.getsize(path) < WEIGHTS_MB * 2**20 / 100
    proc = subprocess.run(
        [sys.executable, "-c", MEMORY, path],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert proc.returncode == 0, proc.stderr
    held_mb = float(proc.stdout.split()[-1])
    assert held_mb < 1.5 * WEIGHTS_MB, f"{held_mb:.0f} MB held for {WEIGHTS_MB:.0f} MB of weights"
