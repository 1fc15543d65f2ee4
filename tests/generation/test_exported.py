"""`rvm.generation.greedy` on decoders exported by optimum (text-generation-with-past: the tiny
GPT-2 and Llama under tests/data/transformers, made by scripts/export_transformers.py),
against a greedy loop over ONNX Runtime, in every exec mode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import rvm
from rvm.testing.ort_greedy import ort_greedy

DATA = Path(__file__).parents[1] / "data" / "transformers"
KERNELS = {"gpt2_with_past": "numpy", "llama_with_past": "jit"}


@pytest.fixture(scope="module")
def gpt2() -> Path:
    return DATA / "gpt2_with_past.onnx"


@pytest.fixture(scope="module", params=sorted(KERNELS))
def decoder(request: pytest.FixtureRequest) -> tuple[Path, rvm.Executable]:
    path = DATA / f"{request.param}.onnx"
    mod = rvm.from_onnx(str(path))  # symbolic batch, sequence and past: one compile
    gen = rvm.generation.greedy(mod)
    assert "generate_step" in gen.functions  # the cache preallocated and written in place
    return path, rvm.compile(gen, kernels=KERNELS[request.param])


# The native mode compiles the Llama's generate whole (a minute on two cores): under -m slow;
# tests/generation/test_greedy.py runs generate natively on jit kernels.
@pytest.mark.parametrize(
    "exec_mode", ["bytecode", "compiled", pytest.param("native", marks=pytest.mark.slow)]
)
def test_generate_equals_onnx_runtime(decoder, exec_mode) -> None:
    path, executable = decoder
    session = ort.InferenceSession(str(path))
    vm = rvm.VirtualMachine(executable, exec_mode=exec_mode)
    rng = np.random.default_rng(0)
    for shape, n in (((1, 4), 6), ((2, 7), 6), ((3, 1), 6), ((2, 3), 40)):
        ids = rng.integers(0, 256, shape)
        np.testing.assert_array_equal(vm["generate"](ids, np.int64(n)), ort_greedy(session, ids, n))
    if exec_mode == "native" and KERNELS[path.stem] == "jit":  # numpy kernels run compiled
        report = vm.native_report()
        assert report.fallbacks == {}, report
        assert {"generate", "generate_step", "generate_decode", "main"} <= set(report.native)


def test_the_layout_of_an_optimum_export_is_read(gpt2: Path) -> None:
    """The layout read from the export imported with fixed shapes (which generate refuses,
    naming why), the position table's 128 rows (the tiny model's n_positions) found."""
    kv = (1, 4, 3, 16)
    shapes = {"input_ids": (1, 1), "attention_mask": (1, 4), "position_ids": (1, 1)}
    shapes.update({f"past_key_values.{i}.{n}": kv for i in range(2) for n in ("key", "value")})
    mod = rvm.from_onnx(str(gpt2), shape_dict=shapes)
    layout = rvm.generation.decoder_layout(mod)
    assert layout.layers == 2 and layout.positions == 128
    assert layout.roles[0] == "input_ids" and layout.roles[-2:] == (
        "attention_mask",
        "position_ids",
    )
    with pytest.raises(rvm.IRError, match="'input_ids' has the fixed shape"):
        rvm.generation.greedy(mod)
