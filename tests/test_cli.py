"""The `rvm` command line, end to end in subprocesses, on small ONNX models built here with
onnx.helper: most commands in one process running `rvm.cli.main` for each (`rvm_cmd`), those
whose own process is the point in ``python -m rvm ...`` (`rvm_process`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

SRC = str(Path(__file__).resolve().parents[1] / "src")
ENV = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}


def rvm_process(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m rvm ARGS`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "rvm", *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )


# A command line run by `rvm_cmd`: `rvm.cli.main` in the directory given, its stdout and
# stderr captured, its status as ``python -m rvm``'s would be (argparse's SystemExit, an
# uncaught exception's traceback and status 1).
_SERVE = r"""
import contextlib, io, json, os, sys, traceback
from rvm.cli import main
reply = os.fdopen(int(sys.argv[1]), "w")
for line in sys.stdin:
    request = json.loads(line)
    if request is None:
        break
    os.chdir(request["cwd"])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(request["argv"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) or e.code is None else 1
            if not isinstance(e.code, int) and e.code is not None:
                print(e.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
    reply.write(json.dumps([code or 0, out.getvalue(), err.getvalue()]) + "\n")
    reply.flush()
"""


class _Server:
    """One process running many command lines, as ``python -m rvm`` would run each: a new
    process per command costs its start (rvm, NumPy, ONNX's ml_dtypes: 0.3-1.4 CPU-s) and its
    compiler's first use again. The tests that need a process of the command's own (its exit
    through ``sys.exit``, a reader closing its pipe, what a run imports) use `rvm_process`."""

    def __init__(self) -> None:
        read, self._write = os.pipe()
        self._log = tempfile.TemporaryFile("w+")
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE, str(self._write)],
            env=ENV,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            pass_fds=(self._write,),
            text=True,
        )
        os.close(self._write)
        self._replies = os.fdopen(read)

    def run(self, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"argv": argv, "cwd": str(cwd)}) + "\n")
        self._proc.stdin.flush()
        line = self._replies.readline()
        if not line:
            self._log.seek(0)
            status = self._proc.wait(timeout=60)
            raise AssertionError(f"the command-line process ended ({status}): {self._log.read()}")
        code, out, err = json.loads(line)
        return subprocess.CompletedProcess(["rvm", *argv], code, out, err)

    def close(self) -> None:
        # Said, not the end of its input: a process this one forked since (a compile helper)
        # holds the pipe open.
        assert self._proc.stdin is not None
        self._proc.stdin.write("null\n")
        self._proc.stdin.close()
        self._proc.wait(timeout=60)
        self._replies.close()
        self._log.close()


_server: list[_Server] = []


@pytest.fixture(scope="module", autouse=True)
def _serve():
    yield
    while _server:
        _server.pop().close()


def rvm_cmd(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``rvm ARGS`` run by this module's command-line process (`_Server`)."""
    if not _server:
        _server.append(_Server())
    return _server[0].run(list(args), cwd)


def ok(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    return run.stdout


def user_error(run: subprocess.CompletedProcess, *phrases: str) -> str:
    """The message of a user error (one line, or one per entry of a list after it): status 1,
    no traceback."""
    assert run.returncode == 1, (run.stdout, run.stderr)
    lines = run.stderr.replace("\r", "\n").splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("rvm:")]
    assert len(starts) == 1 and "Traceback" not in run.stderr, run.stderr
    message = "\n".join(lines[starts[0] :])
    for phrase in phrases:
        assert phrase in message, message
    return message


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """small.onnx (x: (n, 4) -> relu(x @ w + b)), two_out.onnx (a tuple result),
    unsupported.onnx (an op rvm lacks), and small.rvmx compiled from small.onnx."""
    d = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype("float32"), "b")
    f32 = TensorProto.FLOAT
    small = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Add", ["h", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", f32, ["n", 4])],
        [helper.make_tensor_value_info("y", f32, ["n", 3])],
        [w, b],
    )
    onnx.save(small, d / "small.onnx")
    two = _model(
        [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Neg", ["x"], ["m"])],
        [helper.make_tensor_value_info("x", f32, [2, 3])],
        [
            helper.make_tensor_value_info("e", f32, [2, 3]),
            helper.make_tensor_value_info("m", f32, [2, 3]),
        ],
    )
    onnx.save(two, d / "two_out.onnx")
    bad = _model(
        [helper.make_node("NonMaxSuppression", ["x", "s"], ["y"])],
        [
            helper.make_tensor_value_info("x", f32, [1, 4, 4]),
            helper.make_tensor_value_info("s", f32, [1, 1, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [None, 3])],
    )
    onnx.save(bad, d / "unsupported.onnx")
    ok(rvm_process("compile", "small.onnx", "-o", "small.rvmx", "--exec-mode", "compiled", cwd=d))
    np.save(d / "x.npy", rng.standard_normal((5, 4)).astype("float32"))
    return d


def test_compile_writes_a_loadable_executable(work):
    import rvm

    ex = rvm.load_executable(str(work / "small.rvmx"))
    assert ex.default_exec_mode == "compiled" and len(ex.kernels) == 1
    out = ok(rvm_cmd("compile", "two_out.onnx", "-q", cwd=work))  # -o defaults to beside it
    assert "wrote two_out.rvmx" in out and (work / "two_out.rvmx").is_file()


def test_run_given_inputs_matches_numpy(work):
    import onnx.numpy_helper as nh

    model = onnx.load(work / "small.onnx")
    w, b = (nh.to_array(t) for t in model.graph.initializer)
    x = np.load(work / "x.npy")
    for path in ("small.rvmx", "small.onnx"):
        out = ok(rvm_cmd("run", path, "--input", "x=x.npy", "-o", "out.npz", cwd=work))
        assert "output: shape (5, 3) float32  min " in out and " mean " in out
        got = np.load(work / "out.npz")["output"]
        np.testing.assert_allclose(got, np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)


def test_run_makes_random_inputs_from_the_signature(work):
    out = ok(rvm_cmd("run", "small.rvmx", "--dim", "n=7", cwd=work))
    assert "input x: shape (7, 4) float32" in out and "output: shape (7, 3) float32" in out
    out = ok(rvm_cmd("run", "two_out.onnx", cwd=work))
    assert "output[0]: shape (2, 3) float32" in out and "output[1]: shape (2, 3)" in out


def test_inspect_shows_stats_signatures_kernels_and_bytecode(work):
    out = ok(rvm_cmd("inspect", "small.rvmx", cwd=work))
    assert "exec mode compiled" in out and "functions: 1" in out
    assert "@main(x: Tensor((n, 4), float32)) -> Tensor((n, 3), float32)" in out
    assert "fused_matmul_add_relu" in out and "matmul,add,relu" in out
    assert "invoke_packed" not in out
    text = ok(rvm_cmd("inspect", "small.rvmx", "--text", cwd=work))
    assert "invoke_packed" in text and "func 0 @main" in text


def test_inspect_check_weights_finds_changed_weights(work):
    out = ok(rvm_cmd("inspect", "small.rvmx", "--check-weights", cwd=work))
    assert "their SHA-256 digest checked" in out
    data = bytearray((work / "small.rvmx").read_bytes())
    at = data.index(b"WGHT") + 16  # the payload: the first weight sits at a page of the file
    at += -at % 4096
    data[at] ^= 0x10
    (work / "changed.rvmx").write_bytes(data)
    assert "functions: 1" in ok(rvm_cmd("inspect", "changed.rvmx", cwd=work))  # data, unread
    user_error(
        rvm_cmd("inspect", "changed.rvmx", "--check-weights", cwd=work),
        "ExecutableFormatError",
        "do not match their SHA-256 digest",
    )


def test_bench_compares_with_onnxruntime_and_prints_json(work):
    pytest.importorskip("onnxruntime")
    run = rvm_cmd("bench", "small.onnx", "--dim", "n=16", "--repeat", "5", cwd=work)
    out = ok(run)
    assert "\r" not in run.stderr  # stderr is a pipe: no progress bar drawn into it
    assert "onnxruntime" in out and "rvm / onnxruntime:" in out
    report = json.loads(ok(rvm_cmd("bench", "small.rvmx", "--dim", "n=4", "--json", cwd=work)))
    assert set(report["median_ms"]) == {"rvm compiled"} and report["repeat"] == 20
    assert report["inputs"] == {"x": [[4, 4], "float32"]}


def test_user_errors_are_one_line_without_traceback(work):
    (work / "corrupt.rvmx").write_bytes((work / "small.rvmx").read_bytes()[:200])
    np.save(work / "wide.npy", np.zeros((5, 7), "float32"))
    np.save(work / "ints.npy", np.zeros((5, 4), "int32"))
    user_error(rvm_process("run", "missing.rvmx", cwd=work), "no such file: missing.rvmx")
    user_error(rvm_cmd("inspect", "corrupt.rvmx", cwd=work), "ExecutableFormatError")
    user_error(rvm_cmd("run", "x.npy", cwd=work), "ExecutableFormatError", "not an rvm executable")
    user_error(rvm_cmd("run", "small.rvmx", cwd=work), "give its size with --dim n=SIZE")
    user_error(
        rvm_cmd("run", "small.rvmx", "--input", "z=x.npy", cwd=work),
        "@main has no parameter 'z'; its parameters: x",
    )
    user_error(rvm_cmd("run", "small.rvmx", "--input", "x=wide.npy", cwd=work), "ShapeError")
    user_error(
        rvm_cmd("run", "small.rvmx", "--input", "x=ints.npy", cwd=work),
        "x=ints.npy holds int32, but parameter 'x' is float32",
        "or pass --cast",
    )
    user_error(rvm_cmd("run", "small.rvmx", "--input", "x=nope.npy", cwd=work), "no such file")
    user_error(rvm_cmd("run", "small.rvmx", "--dim", "n=many", cwd=work), "must be an integer")
    user_error(rvm_cmd("run", "small.rvmx", "-f", "nope", cwd=work), "no function 'nope'")
    user_error(rvm_cmd("compile", "unsupported.onnx", cwd=work), "OnnxImportError", "NonMax")
    user_error(rvm_cmd("compile", "small.rvmx", cwd=work), "takes an ONNX model")
    usage = rvm_process("frobnicate", cwd=work)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_compile_does_not_replace_a_file_it_was_not_named(work):
    ok(rvm_cmd("compile", "two_out.onnx", "-q", "-o", "two_out.rvmx", cwd=work))  # named: yes
    before = (work / "two_out.rvmx").read_bytes()
    user_error(rvm_cmd("compile", "two_out.onnx", "-q", cwd=work), "two_out.rvmx exists", "--force")
    assert (work / "two_out.rvmx").read_bytes() == before
    out = ok(rvm_cmd("compile", "two_out.onnx", "-q", "--force", cwd=work))
    assert "wrote two_out.rvmx" in out


def test_an_unwritable_output_is_reported_before_the_compile(work):
    # unsupported.onnx fails to import: the output's error first shows that nothing compiled
    for where, phrase in [("nodir/out.rvmx", "no such directory nodir"), (".", "a directory")]:
        message = user_error(rvm_cmd("compile", "unsupported.onnx", "-o", where, cwd=work), phrase)
        assert "OnnxImportError" not in message


def test_the_unsupported_ops_are_listed_one_per_line(work):
    f32 = TensorProto.FLOAT
    model = _model(
        [
            helper.make_node("RoiAlign", ["x", "r", "i"], ["y"], name="sel"),
            helper.make_node("Det", ["x"], ["d"], name="det"),
        ],
        [
            helper.make_tensor_value_info("x", f32, [1, 1, 4, 4]),
            helper.make_tensor_value_info("r", f32, [1, 4]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("y", f32, None),
            helper.make_tensor_value_info("d", f32, None),
        ],
    )
    onnx.save(model, work / "two_unsupported.onnx")
    message = user_error(rvm_cmd("compile", "two_unsupported.onnx", cwd=work), "OnnxImportError")
    entries = [ln for ln in message.splitlines() if "node" in ln and ("Det" in ln or "Roi" in ln)]
    assert len(entries) == 2, message
    assert sorted("RoiAlign" in ln for ln in entries) == [False, True], message


def test_a_float64_input_file_says_how_to_fix_it_or_is_cast(work):
    x = np.random.default_rng(1).standard_normal((3, 4))  # float64, as np.save of a default
    np.save(work / "x64.npy", x)
    user_error(
        rvm_cmd("run", "small.rvmx", "--input", "x=x64.npy", cwd=work),
        "x=x64.npy holds float64, but parameter 'x' is float32",
        "np.save(path, a.astype(np.float32))",
        "--cast",
    )
    ok(rvm_cmd("run", "small.rvmx", "--input", "x=x64.npy", "--cast", "-o", "c.npz", cwd=work))
    np.save(work / "x32.npy", x.astype(np.float32))
    ok(rvm_cmd("run", "small.rvmx", "--input", "x=x32.npy", "-o", "r.npz", cwd=work))
    cast, given = (np.load(work / f)["output"] for f in ("c.npz", "r.npz"))
    np.testing.assert_array_equal(cast, given)


def test_a_sequence_input_from_an_npz_file_and_sequence_outputs(work):
    f32 = TensorProto.FLOAT
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(f32, ["m", 3]))
    model = _model(
        [helper.make_node("SequenceInsert", ["s", "x"], ["parts"])],
        [helper.make_value_info("s", seq), helper.make_tensor_value_info("x", f32, [1, 3])],
        [helper.make_value_info("parts", seq)],
    )
    onnx.save(model, work / "seq.onnx")
    ok(rvm_cmd("compile", "seq.onnx", "-q", cwd=work))
    a, b = np.ones((1, 3), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    np.savez(work / "parts.npz", a, b)
    np.save(work / "row.npy", np.full((1, 3), 7, np.float32))
    out = ok(
        rvm_cmd(
            "run",
            "seq.rvmx",
            "--input",
            "s=parts.npz",
            "--input",
            "x=row.npy",
            "-o",
            "p.npz",
            cwd=work,
        )
    )
    assert "input s: a list of 2 arrays" in out and "output[2]: shape (1, 3)" in out, out
    saved = np.load(work / "p.npz")
    assert sorted(saved.files) == ["output[0]", "output[1]", "output[2]"]
    for i, want in enumerate([a, b, np.full((1, 3), 7, np.float32)]):
        np.testing.assert_array_equal(saved[f"output[{i}]"], want)
    user_error(rvm_cmd("run", "seq.rvmx", cwd=work), "--input s=FILE.npz")


def test_output_cut_short_by_its_reader_ends_quietly(work):
    cmd = [sys.executable, "-m", "rvm", "inspect", "small.rvmx", "--text"]
    proc = subprocess.Popen(
        cmd, cwd=work, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    proc.stdout.close()  # the reader is gone before the first line: `| head -0`
    err = proc.stderr.read()
    assert proc.wait(timeout=600) == 141, err  # 128 + SIGPIPE, as a Unix tool's
    assert err == "", err


def test_run_and_inspect_of_a_saved_executable_import_no_compiler(work):
    code = (
        "import sys; from rvm.cli import main; main(['run', 'small.rvmx', '--dim', 'n=2']); "
        "main(['inspect', 'small.rvmx']); "
        "print(sorted(m for m in sys.modules if m.startswith(('rvm.ir', 'rvm.codegen', "
        "'rvm.transform', 'rvm.frontend', 'onnx'))))"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"


def test_compile_with_bf16_precision(work):
    """``--precision bf16`` compiles the products in bf16 (recorded, shown by inspect); a
    saved executable keeps its precision and refuses another."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((32, 8)).astype("float32"), "w")
    f32 = TensorProto.FLOAT
    model = _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [helper.make_tensor_value_info("x", f32, [2, 32])],
        [helper.make_tensor_value_info("y", f32, [2, 8])],
        [w],
    )
    onnx.save(model, work / "deep.onnx")
    ok(rvm_cmd("compile", "deep.onnx", "-q", "--precision", "bf16", cwd=work))
    out = ok(rvm_cmd("inspect", "deep.rvmx", cwd=work))
    assert "precision bf16" in out and "bf16  dense_bf16" in out
    user_error(rvm_cmd("run", "deep.rvmx", "--precision", "fp32", cwd=work), "--precision applies")
    run = rvm_cmd("compile", "deep.onnx", "--precision", "fp16", cwd=work)
    assert run.returncode == 2 and "invalid choice: 'fp16'" in run.stderr


def test_compile_int8_quantizes_on_calibration_inputs(work):
    import rvm

    rng = np.random.default_rng(5)
    batches = rng.standard_normal((8, 5, 4)).astype("float32")
    np.savez(work / "calib.npz", x=batches)
    out = ok(rvm_cmd("compile", "small.onnx", "-o", "int8.rvmx", "--precision", "int8",
                     "--calibration", "calib.npz", "--exec-mode", "native", cwd=work))  # fmt: skip
    assert "wrote int8.rvmx" in out
    assert "precision int8" in ok(rvm_cmd("inspect", "int8.rvmx", cwd=work))
    model = onnx.load(work / "small.onnx")
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    x = batches[3]  # inside the calibrated ranges: no clipping, 8-bit steps only
    expected = np.maximum(x @ w + b, 0)
    got = rvm.VirtualMachine(rvm.load_executable(str(work / "int8.rvmx")))["main"](x)
    assert np.abs(got - expected).max() <= 0.05 * np.abs(expected).max()
    message = user_error(
        rvm_cmd("compile", "small.onnx", "-o", "n.rvmx", "--precision", "int8", cwd=work),
        "--precision int8 quantizes a float model on calibration inputs",
        "--calibration FILE.npz",
    )
    assert "QDQ" in message
