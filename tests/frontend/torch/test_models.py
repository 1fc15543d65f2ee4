"""Real models against eager PyTorch: tiny random transformers models (no download) and
modules with torch.cond and torch.while_loop, exported once with batch 2 and symbolic batch
(and sequence) sizes, run at two batch sizes and two sequence lengths in every exec mode.

The transformers models compile for tens of seconds each: all but one are marked slow
(``pytest -m slow``), and that one's native mode too."""

from __future__ import annotations

import importlib.util

import pytest

import rvm
from rvm.runtime.executable import EXEC_MODES

torch = pytest.importorskip("torch")
if importlib.util.find_spec("transformers") is None:  # looked up, not imported:
    pytest.skip("transformers is not installed", allow_module_level=True)  # importing costs 3 CPU-s
from torch_helpers import check_eager  # noqa: E402

from rvm.testing.torch_models import CASES  # noqa: E402

FAST = ("cond", "while_loop", "bert")
_modules: dict[str, tuple] = {}


def _imported(name: str) -> tuple:
    """(model, module) for a case, imported once per session."""
    if name not in _modules:
        case = CASES[name]
        model = case.build()
        args = case.inputs(case.batches[0], case.seqs[0])
        mod = rvm.from_torch(model, args=args, dynamic_shapes=case.dynamic_shapes())
        _modules[name] = (model, mod)
    return _modules[name]


def _cases() -> list:
    """(name, exec mode) in every exec mode; by default the `FAST` cases but BERT's native
    mode (a native compile of its whole program, 11 CPU-s on a Zen 3 core), which
    tests/frontend/onnx/test_transformers.py's `test_native_mode_runs_every_function_natively`
    runs on the ONNX BERT with jit kernels (no fallback allowed), beside cond's and
    while_loop's native runs here: the rest under -m slow."""
    return [
        pytest.param(name, mode, id=f"{mode}-{name}", marks=pytest.mark.slow)
        if name not in FAST or (name, mode) == ("bert", "native")
        else pytest.param(name, mode, id=f"{mode}-{name}")
        for name in CASES
        for mode in EXEC_MODES
    ]


@pytest.mark.parametrize(("name", "exec_mode"), _cases())
def test_model_matches_eager_pytorch(name: str, exec_mode: str) -> None:
    case = CASES[name]
    model, mod = _imported(name)
    inputs = [case.inputs(b, s) for b in case.batches for s in case.seqs]
    check_eager(model, mod, inputs, exec_mode, rtol=1e-4)
