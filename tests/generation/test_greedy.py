"""`rvm.generation.greedy`: ``generate`` equals a greedy Python loop over ONNX Runtime on the
same model, in every exec mode; eos stops and pads; bad input and bad models are refused."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

import rvm
from rvm import op
from rvm.ir import Builder, Var, const, tensor
from rvm.ir import dims as D
from rvm.runtime.builtins import write_slice
from rvm.runtime.text import signature
from rvm.testing.ort_greedy import ort_greedy
from rvm.testing.tiny_decoder import HEAD_DIM, HEADS, POSITIONS, VOCAB, WIDTH, tiny_decoder


@pytest.fixture(scope="module")
def model() -> bytes:
    return tiny_decoder(seed=2)


@pytest.fixture(scope="module")
def session(model: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(model)


@pytest.fixture(scope="module")
def executables(model: bytes) -> dict[object, rvm.Executable]:
    mod = rvm.from_onnx(model)
    return {
        None: rvm.compile(rvm.generation.greedy(mod)),
        "eos": rvm.compile(rvm.generation.greedy(mod, eos_token_id=EOS)),
    }


EOS = 30


# The tiny decoder compiled natively costs ~28 CPU-s (Numba links every kernel into its native
# file and optimizes them again): its native cases run under -m slow. The default run keeps a
# native sample of generate on the toy decoder (`test_a_past_read_otherwise_keeps_the_concat_
# loop[native-False]`), and tests/runtime/test_native_mode.py checks bad input and disagreeing
# symbolic dims in the native mode.
MODES = ["bytecode", "compiled", pytest.param("native", marks=pytest.mark.slow)]


def _prompts() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.integers(0, VOCAB, shape) for shape in ((1, 1), (2, 5), (3, 9))]


@pytest.mark.parametrize("exec_mode", MODES)
def test_generate_equals_a_greedy_loop_over_onnx_runtime(executables, session, exec_mode) -> None:
    vm = rvm.VirtualMachine(executables[None], exec_mode=exec_mode)
    for ids in _prompts():
        for n in (1, 7):
            got = vm["generate"](ids, np.int64(n))
            np.testing.assert_array_equal(got, ort_greedy(session, ids, n))
            assert got.shape == (ids.shape[0], ids.shape[1] + n)


@pytest.mark.parametrize("exec_mode", MODES)
def test_zero_new_tokens_is_the_prompt(executables, exec_mode) -> None:
    vm = rvm.VirtualMachine(executables[None], exec_mode=exec_mode)
    ids = np.array([[3, 1, 4], [1, 5, 9]])
    np.testing.assert_array_equal(vm["generate"](ids, np.int64(0)), ids)


@pytest.mark.parametrize("exec_mode", MODES)
def test_eos_stops_when_every_row_has_it_and_pads(executables, session, exec_mode) -> None:
    vm = rvm.VirtualMachine(executables["eos"], exec_mode=exec_mode)
    ids = np.array([[26, 14, 2, 10, 19], [15, 16, 24, 30, 1]])
    full = ort_greedy(session, ids, 12)
    assert (full[:, 5:] == EOS).any(axis=1).all(), "the test needs every row to reach eos"
    got = vm["generate"](ids, np.int64(12))
    expected = ort_greedy(session, ids, 12, eos=EOS)
    np.testing.assert_array_equal(got, expected)
    assert got.shape[1] < full.shape[1]  # stopped early
    first = [int(np.argmax(row[5:] == EOS)) for row in got]
    for row, k in zip(got, first):
        assert (row[5 + k :] == EOS).all()  # finished rows padded with eos


@pytest.mark.parametrize("exec_mode", MODES)
@pytest.mark.parametrize(
    "shape, n, message",
    [
        ((2, 3), -1, "max_new_tokens must be >= 0, got -1"),
        ((1, 0), 2, "the prompt is empty"),
        ((1, POSITIONS + 1), 0, f"the prompt has {POSITIONS + 1} tokens, more than the model's "),
        ((2, 30), 11, "the prompt's 30 tokens and max_new_tokens=11 need more than the model's 40"),
    ],
)
def test_bad_input_is_refused(executables, exec_mode, shape, n, message) -> None:
    vm = rvm.VirtualMachine(executables[None], exec_mode=exec_mode)
    with pytest.raises(rvm.VMError, match=message.replace("(", r"\(")):
        vm["generate"](np.zeros(shape, np.int64), np.int64(n))
    if exec_mode == "native":  # the entry raised: the compiled mode said why, nothing compiled
        from rvm.runtime.modes.native import _PLAN

        plan = _PLAN.get(executables[None], lambda: pytest.fail("no native plan"))
        assert plan.funcs[executables[None].function_index("generate")].signatures == []


def test_generate_declares_the_prompt_and_the_new_tokens(model: bytes, executables) -> None:
    gen = rvm.generation.greedy(rvm.from_onnx(model))
    assert gen["generate"].ret_type == tensor(("batch", D.add("seq", "steps")), "int64")
    head = next(line for line in str(gen).splitlines() if "def generate(" in line)
    assert head.endswith('-> T[("batch", "seq + steps"), "int64"]:')
    fn = executables[None].functions[executables[None].function_index("generate")]
    assert fn.result.shape == ("batch", "seq + steps") and fn.result.dtype == "int64"
    assert "-> Tensor((batch, seq + steps), int64)" in signature(fn, result=True)


@pytest.mark.parametrize("exec_mode", MODES)
def test_main_refuses_a_mask_that_contradicts_past_plus_seq(executables, tmp_path, exec_mode):
    """The entry checks compute ``past + seq`` (from a saved and loaded executable too) and
    name the argument and where past and seq came from."""
    path = tmp_path / "decoder.rvmx"
    executables[None].save(str(path))
    for ex in (executables[None], rvm.load_executable(str(path), trusted=True)):
        vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
        main = ex.functions[ex.function_index("main")]
        sizes = {"input_ids": (2, 3), "attention_mask": (2, 8), "position_ids": (2, 3)}
        args = [
            np.zeros(sizes.get(s.name, (2, 2, 4, 8)), np.int64 if s.name in sizes else np.float32)
            for s in main.param_specs
        ]
        mask = [s.name for s in main.param_specs].index("attention_mask")
        want = (
            rf"^main: argument {mask} 'attention_mask' has shape \(2, 8\), but axis 1 is past "
            r"\+ seq = 7 \(past = 4 from argument 1 'past_key_values_0_key', seq = 3 from "
            r"argument 0 'input_ids'\)$"
        )
        with pytest.raises(rvm.ShapeError, match=want):
            vm["main"](*args)
        args[mask] = np.ones((2, 7), np.int64)
        assert vm["main"](*args)[1].shape == (2, 2, 7, 8)


def _module(params: list[Var], result) -> rvm.IRModule:
    bb = Builder()
    with bb.function("main", params):
        bb.emit_output(bb.emit(result))
    return bb.get()


def test_a_module_without_the_with_past_layout_is_refused() -> None:
    x = Var("x", tensor(("n", 4), "float32"))
    with pytest.raises(rvm.IRError, match="parameter 'x' .* outside the layout.*expected main"):
        rvm.generation.greedy(_module([x], op.relu(x)))
    ids = Var("input_ids", tensor(("b", "s"), "int64"))
    with pytest.raises(rvm.IRError, match="no parameter any past_key_values.N.key/value"):
        rvm.generation.greedy(_module([ids], ids))
    k = Var("past_key_values.0.key", tensor(("b", 2, "p", 8), "float32"))
    with pytest.raises(rvm.IRError, match="no parameter past_key_values.0.value"):
        rvm.generation.greedy(_module([ids, k], ids))
    v = Var("past_key_values.0.value", tensor(("b", 2, "p", 8), "float32"))
    with pytest.raises(rvm.IRError, match="main returns 1 values, expected logits and 2 present"):
        rvm.generation.greedy(_module([ids, k, v], k))
    f = Var("input_ids", tensor(("b", "s"), "float32"))
    with pytest.raises(rvm.IRError, match="'input_ids' is float32 .*expected a 2-d int64"):
        rvm.generation.greedy(_module([f, k, v], k))


def test_greedy_checks_its_arguments(model: bytes) -> None:
    mod = rvm.from_onnx(model)
    with pytest.raises(rvm.IRError, match="eos_token_id must be an int >= 0 or None, got -2"):
        rvm.generation.greedy(mod, eos_token_id=-2)
    with pytest.raises(rvm.IRError, match="already has a function 'generate'"):
        rvm.generation.greedy(rvm.generation.greedy(mod))


def test_a_decoder_imported_with_fixed_lengths_is_refused(model: bytes) -> None:
    kv = (2, 2, 3, 8)
    shapes = {"input_ids": (2, 1), "attention_mask": (2, 4), "position_ids": (2, 1)}
    shapes.update({f"past_key_values.{i}.{n}": kv for i in range(2) for n in ("key", "value")})
    mod = rvm.from_onnx(model, shape_dict=shapes)
    with pytest.raises(rvm.IRError, match=r"'input_ids' has the fixed shape \(2, 1\).*symbolic"):
        rvm.generation.greedy(mod)


def test_the_interpreter_and_a_saved_executable_agree(model: bytes, executables, tmp_path) -> None:
    gen = rvm.generation.greedy(rvm.from_onnx(model), eos_token_id=EOS)
    ids = np.array([[26, 14, 2, 10, 19], [15, 16, 24, 30, 1]])
    want = rvm.VirtualMachine(executables["eos"])["generate"](ids, np.int64(9))
    np.testing.assert_array_equal(rvm.interpret(gen, "generate", ids, np.int64(9)), want)
    path = tmp_path / "generate.rvmx"
    executables["eos"].save(str(path))
    code = (
        "import sys, numpy as np, rvm; ex = rvm.load_executable(sys.argv[1]); "
        "ids = np.array([[26, 14, 2, 10, 19], [15, 16, 24, 30, 1]]); "
        "print(rvm.VirtualMachine(ex, exec_mode='compiled')['generate'](ids, np.int64(9)).tolist())"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(want.tolist())


def test_the_cache_is_preallocated_and_written_in_place(model: bytes) -> None:
    """optimum's layout: ``generate_step`` (main over buffers written by write_slice) is added,
    and main's cache concats are not in it."""
    gen = rvm.generation.greedy(rvm.from_onnx(model))
    step = gen["generate_step"]
    assert [p.name for p in step.params][1:5] == [
        f"cache_{i}_{n}" for i in range(2) for n in ("key", "value")
    ]
    assert step.params[-1].name == "write_at"
    calls = [b.value for b in step.body.bindings if hasattr(b.value, "callee")]
    names = [getattr(c.callee, "name", "") for c in calls]
    assert names.count("vm.call_packed") == 4
    assert {c.attrs["func"] for c in calls if c.attrs.get("func")} == {"vm.builtin.write_slice"}


def _toy_decoder(past_read_otherwise: bool) -> rvm.IRModule:
    """A 1-layer with-past decoder whose keys are its embeddings split into heads; with
    ``past_read_otherwise`` the logits also read the past (a sum), which the preallocated cache
    cannot serve. Its names and sizes are the tiny decoder's, so it reuses most of its kernels
    (~6 compile CPU-s fewer)."""
    ids = Var("input_ids", tensor(("batch", "seq"), "int64"))
    pk = Var("past_key_values.0.key", tensor(("batch", HEADS, "past", HEAD_DIM), "float32"))
    pv = Var("past_key_values.0.value", tensor(("batch", HEADS, "past", HEAD_DIM), "float32"))
    mask = Var("attention_mask", tensor(("batch", "past + seq"), "int64"))
    rng = np.random.default_rng(3)
    table = const(rng.standard_normal((VOCAB, WIDTH)).astype(np.float32))
    head = const(rng.standard_normal((WIDTH, VOCAB)).astype(np.float32))
    bb = Builder()
    with bb.function("main", [ids, pk, pv, mask]):
        emb = bb.emit(op.take(table, ids, axis=0))
        split = op.reshape(emb, ("batch", "seq", HEADS, HEAD_DIM))
        new = bb.emit(op.transpose(split, (0, 2, 1, 3)))
        k = bb.emit(op.concat([pk, new], axis=2))
        v = bb.emit(op.concat([pv, new], axis=2))
        logits = bb.emit(op.matmul(emb, head))
        if past_read_otherwise:
            logits = bb.emit(op.add(logits, op.sum(pk)))
        bb.emit_output(bb.emit(rvm.ir.Tuple((logits, k, v))))
    return bb.get()


@pytest.mark.parametrize(
    ("exec_mode", "other"),
    [(mode, other) for mode in ("bytecode", "compiled") for other in (False, True)]
    + [("native", False), pytest.param("native", True, marks=pytest.mark.slow)],
)
def test_a_past_read_otherwise_keeps_the_concat_loop(exec_mode, other) -> None:
    gen = rvm.generation.greedy(_toy_decoder(other))
    assert ("generate_step" in gen.functions) is not other
    ids = np.array([[1, 2, 3], [4, 5, 6]])
    got = rvm.VirtualMachine(rvm.compile(gen), exec_mode=exec_mode)["generate"](ids, np.int64(5))
    np.testing.assert_array_equal(got, rvm.interpret(gen, "generate", ids, np.int64(5)))


def test_write_slice_checks_what_it_writes() -> None:
    buf = np.zeros((1, 2, 5, 3), np.float32)
    new = np.ones((1, 2, 2, 3), np.float32)
    assert write_slice(buf, new, 3, 2) is buf and buf[0, 0, 3:, 0].tolist() == [1, 1]
    with pytest.raises(rvm.ShapeError, match=r"\(1, 2, 2, 3\) does not fit .* at 4 along axis 2"):
        write_slice(buf, new, 4, 2)
    with pytest.raises(rvm.ShapeError, match="does not fit"):
        write_slice(buf, np.ones((1, 3, 2, 3), np.float32), 0, 2)
    with pytest.raises(rvm.DTypeError, match="a float64 value into a float32 buffer"):
        write_slice(buf, new.astype(np.float64), 0, 2)
    with pytest.raises(rvm.DTypeError, match="expected a writeable tensor"):
        write_slice(np.broadcast_to(buf, buf.shape), new, 0, 2)


def test_native_write_slice_writes_what_the_builtin_writes() -> None:
    """The native mode's write_slice (`native_support.write_slice`) writes what the builtin
    writes along every axis, and where the builtin raises it hands the call back (BAIL)
    before writing anything."""
    from rvm.runtime.modes import native_support

    rng = np.random.default_rng(0)
    for axis in range(4):
        shape = [2, 3, 5, 4]
        buf = rng.standard_normal(shape).astype(np.float32)
        shape[axis] = 1 if axis == 0 else 2
        new = rng.standard_normal(shape).astype(np.float32)
        start = buf.shape[axis] - new.shape[axis]  # the last rows
        want, got = buf.copy(), buf.copy()
        write_slice(want, new, start, axis)
        out = native_support.write_slice(got, new, np.array(start), np.array(axis))
        assert out is got
        np.testing.assert_array_equal(got, want)
    buf = np.zeros((1, 2, 5, 3), np.float32)
    for value, start in ((np.ones((1, 2, 2, 3), np.float32), 4), (np.ones((1, 3, 2, 3)), 0)):
        with pytest.raises(RuntimeError, match=native_support.BAIL):
            native_support.write_slice(buf, value.astype(np.float32), np.array(start), np.array(2))
        assert not buf.any()
