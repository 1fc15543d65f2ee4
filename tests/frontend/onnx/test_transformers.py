"""The tiny transformers of tests/data/transformers (scripts/export_transformers.py) against
ONNX Runtime: imported with symbolic dimensions and no shape_dict, compiled once, run at several
batch sizes and sequence/past lengths in every exec mode.

GPT-2 and BERT come from ``torch.onnx.export(dynamo=True)``; GPT-2 and a Llama-style decoder
(RoPE, RMSNorm, SiLU MLP, grouped-query attention) in optimum's text-generation-with-past
layout. Their shape sub-graphs (``Shape -> Gather -> Range``, causal masks, ``Expand`` to
``past + seq``) need the run-time shapes of `rvm.op.dynamic`. Numpy kernels run every model in
the default run; jit kernels run the Llama model there and all four with ``-m slow``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import rvm  # noqa: E402
from rvm.runtime.executable import EXEC_MODES  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "transformers")
VOCAB = 256
MODELS = ("gpt2_dynamo", "bert_dynamo", "gpt2_with_past", "llama_with_past")
WITH_PAST = ("gpt2_with_past", "llama_with_past")
# (batch, sequence, past): a prompt of one token, several prompts, decode steps after a past
SHAPES = ((1, 1, 0), (2, 5, 0), (3, 1, 4), (2, 7, 3), (1, 16, 0))

_EXECUTABLES: dict[tuple[str, str], rvm.Executable] = {}
_SESSIONS: dict[str, object] = {}


def _path(name: str) -> str:
    return os.path.join(DATA, f"{name}.onnx")


def _executable(name: str, kernels: str) -> rvm.Executable:
    key = (name, kernels)
    if key not in _EXECUTABLES:
        _EXECUTABLES[key] = rvm.compile(rvm.from_onnx(onnx.load(_path(name))), kernels=kernels)
    return _EXECUTABLES[key]


def _session(name: str):
    if name not in _SESSIONS:
        _SESSIONS[name] = ort.InferenceSession(_path(name), providers=["CPUExecutionProvider"])
    return _SESSIONS[name]


def _feeds(session, batch: int, seq: int, past: int, seed: int) -> dict[str, np.ndarray]:
    """Inputs by name: random tokens and caches, a mask with a padded first row."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for info in session.get_inputs():
        name = info.name
        if name == "input_ids":
            feeds[name] = rng.integers(0, VOCAB, (batch, seq)).astype(np.int64)
        elif name == "attention_mask":
            mask = np.ones((batch, past + seq), np.int64)
            if batch > 1 and past + seq > 1:
                mask[0, 0] = 0  # left padding in the first row
            feeds[name] = mask
        elif name == "token_type_ids":
            feeds[name] = rng.integers(0, 2, (batch, seq)).astype(np.int64)
        elif name == "position_ids":
            feeds[name] = np.tile(np.arange(past, past + seq, dtype=np.int64), (batch, 1))
        else:  # past_key_values.N.key/value: (batch, heads, past, head size)
            shape = (batch, info.shape[1], past, info.shape[3])
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _check(name: str, kernels: str, exec_mode: str, shapes=SHAPES) -> None:
    session = _session(name)
    vm = rvm.VirtualMachine(_executable(name, kernels), exec_mode=exec_mode)
    names = [i.name for i in session.get_inputs()]
    for seed, (batch, seq, past) in enumerate(shapes):
        if past and name not in WITH_PAST:
            continue
        feeds = _feeds(session, batch, seq, past, seed)
        expected = session.run(None, feeds)
        out = vm["main"](*[feeds[n] for n in names])
        out = list(out) if isinstance(out, tuple) else [out]
        assert len(out) == len(expected)
        where = (name, kernels, exec_mode, batch, seq, past)
        for i, (got, want) in enumerate(zip(out, expected)):
            assert got.shape == want.shape, (where, i)
            err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-12)
            assert err <= 1e-4, (where, i, err)


@pytest.mark.parametrize("name", MODELS)
def test_imports_with_symbolic_dims(name):
    mod = rvm.from_onnx(onnx.load(_path(name)))
    params = mod["main"].params
    assert params[0].type.shape == (
        ("batch", "seq") if "dynamo" in name else ("batch_size", "sequence_length")
    )


@pytest.mark.parametrize("name", WITH_PAST)
def test_cache_outputs_have_past_plus_seq(name):
    """The present keys and values are the past concatenated with the new sequence: their
    type says ``past + seq`` (a dimension expression, not a fresh name), in the printed module
    too, and the attention mask declared with that sum has the same dimension."""
    from rvm.ir import infer_type
    from rvm.ir.dims import DimExpr

    mod = rvm.from_onnx(onnx.load(_path(name)))
    total = "past_sequence_length + sequence_length"
    logits, *presents = infer_type(mod["main"]).ret.fields
    assert logits.shape == ("batch_size", "sequence_length", VOCAB)
    for present in presents:
        assert isinstance(present.shape[2], DimExpr) and present.shape[2] == total
    mask = [p for p in mod["main"].params if p.name == "attention_mask"]
    assert mask[0].type.shape == ("batch_size", total)
    assert f'"{total}"' in str(mod)


@pytest.mark.parametrize("name", MODELS)
def test_numpy_kernels_match_ort(name, exec_mode):
    _check(name, "numpy", exec_mode)


@pytest.mark.parametrize("name", MODELS)
def test_interpreter_matches_ort(name):
    """rvm.interpret runs the run-time shape ops by their references, names resolved."""
    session = _session(name)
    feeds = _feeds(session, 2, 3, 2 if name in WITH_PAST else 0, 7)
    mod = rvm.from_onnx(onnx.load(_path(name)))
    out = rvm.interpret(mod, "main", *[feeds[i.name] for i in session.get_inputs()])
    out = list(out) if isinstance(out, tuple) else [out]
    for got, want in zip(out, session.run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# The native mode's compile of a transformer on jit kernels runs in the default run with BERT
# (`test_native_mode_runs_every_function_natively`); the Llama's under -m slow.
@pytest.mark.parametrize(
    "exec_mode", ["bytecode", "compiled", pytest.param("native", marks=pytest.mark.slow)]
)
def test_llama_jit_matches_ort(exec_mode):
    _check("llama_with_past", "jit", exec_mode)


@pytest.mark.parametrize(
    "name",
    [n if n == "bert_dynamo" else pytest.param(n, marks=pytest.mark.slow) for n in MODELS],
)
def test_native_mode_runs_every_function_natively(name):
    """With jit kernels, the run-time shape ops included, nothing falls back from the native
    mode to the compiled one, after calls at every shape (one native compile serves them)."""
    _check(name, "jit", "native")
    report = rvm.VirtualMachine(_executable(name, "jit"), exec_mode="native").native_report()
    assert report.fallbacks == {} and report.native == ["main"]
    assert report.compiled + report.loaded == 1  # one native function for every shape


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_jit_kernels_match_ort(name):
    for mode in EXEC_MODES:
        _check(name, "jit", mode)


@pytest.mark.parametrize("name", WITH_PAST)
def test_inconsistent_past_is_a_shape_error(name, exec_mode):
    """A mask shorter than past + seq contradicts the model: a ShapeError naming the sizes
    that disagree, not a wrong answer; the interpreter says the same."""
    session = _session(name)
    feeds = _feeds(session, 2, 3, 4, 0)
    feeds["attention_mask"] = feeds["attention_mask"][:, 1:]
    args = [feeds[i.name] for i in session.get_inputs()]
    vm = rvm.VirtualMachine(_executable(name, "numpy"), exec_mode=exec_mode)
    message = (
        r"^main: argument \d 'attention_mask' has shape \(2, 6\), but axis 1 is "
        r"past_sequence_length \+ sequence_length = 7 \(past_sequence_length = \d from argument "
        r"\d '[\w.]+', sequence_length = \d from argument \d 'input_ids'\)$"
    )
    with pytest.raises(rvm.ShapeError, match=message):
        vm["main"](*args)
    with pytest.raises(rvm.ShapeError, match=message):
        rvm.interpret(rvm.from_onnx(_path(name)), "main", *args)


@pytest.mark.slow
def test_export_script_reproduces_the_models(tmp_path):
    """scripts/export_transformers.py (the ``export`` extra) writes models that import and
    match ONNX Runtime; the committed files came from it."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("optimum.exporters.onnx")
    import runpy

    script = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts")
    exporter = runpy.run_path(os.path.join(script, "export_transformers.py"))
    exporter["main"](["--out", str(tmp_path)])
    for name in MODELS:
        path = tmp_path / f"{name}.onnx"
        assert path.stat().st_size <= 2_000_000
        model = onnx.load(str(path))
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = _feeds(session, 2, 3, 2 if name in WITH_PAST else 0, 0)
        vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(model), kernels="numpy"))
        out = vm["main"](*[feeds[i.name] for i in session.get_inputs()])
        out = list(out) if isinstance(out, tuple) else [out]
        for got, want in zip(out, session.run(None, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# jit kernels under -m slow: a cold jit compile of this model (tens of seconds) checks no more
# of the import than NumPy kernels do; test_llama_jit_matches_ort runs a Llama on jit kernels.
@pytest.mark.parametrize("kernels", ["numpy", pytest.param("jit", marks=pytest.mark.slow)])
def test_llama_dynamo_export_matches_ort(exec_mode, kernels):
    """The dynamo exporter's Llama (``llama_dynamo.onnx``: `rvm.testing.torch_models`'s, by
    scripts/export_transformers.py) reshapes attention to ``(-1, seq, 8)`` with ``seq`` read
    from a Range's length: it used to reach a kernel as the string 'seq' (a TypeError at run
    time). One compile runs two batch sizes and sequence lengths."""
    from rvm.testing.torch_models import CASES

    case = CASES["llama"]
    session = _session("llama_dynamo")
    vm = rvm.VirtualMachine(_executable("llama_dynamo", kernels), exec_mode)
    for batch, seq in [(2, case.seqs[0]), (1, case.seqs[1])]:
        (x,) = [a.numpy() for a in case.inputs(batch, seq)]
        (want,) = session.run(None, {session.get_inputs()[0].name: x})
        got = vm["main"](x)
        got = got[0] if isinstance(got, tuple) else got
        assert got.shape == want.shape
        assert np.max(np.abs(got - want)) / np.max(np.abs(want)) <= 1e-4
