"""PyTorch models through rvm.from_torch against the same model through rvm.from_onnx, eager
PyTorch, ONNX Runtime and torch.compile (inductor, CPU), where each runs here.

The models are the tiny random ones of `rvm.testing.torch_models` (transformers models from
small configs, no download; a torch.cond and a torch.while_loop module). Each is exported
once with symbolic batch (and sequence) sizes and timed at batch 2; every backend's output
is checked against eager PyTorch first (relative error <= 1e-4), then the backends take turns
sample by sample (interleaved medians), with default threads. Each turn starts after a
settling pause (`SETTLE_S`): eager PyTorch's, ONNX Runtime's and inductor's pool threads spin
on after their calls, which slowed the next backend's turn (rvm from_torch, right after eager)
by up to 2x. Both rvm rows run in the native mode; a function that falls back to the compiled
mode there is named under the table (and in the JSON's "fallbacks"). The ONNX file comes from
``torch.onnx.export`` of the same module: TorchScript's exporter, or where it fails (the
transformers decoders' causal masks, torch.cond, torch.while_loop) the dynamo exporter, named
under the row. ``from_torch`` must run every model with the right output (else the run
fails); another backend that cannot take a model, or gives a wrong output, shows "failed" with
the reason printed under the row; "not run" marks a backend skipped (``--no-compile``, or ONNX
Runtime when the ONNX export failed). torch.compile needs a C++ compiler (g++ here).

Run: python benchmarks/torch_models.py [--models gpt2,bert] [--repeat 51] [--no-compile]
Writes benchmarks/results/torch_models.json.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from common import interleaved_medians, machine, machine_line, write_results

import rvm
from rvm.testing.torch_models import CASES

SETTLE_S = 0.1  # the pause before each turn of the speed measurement (`interleaved_medians`)

# this folder's transformers.py (a benchmark) would shadow the transformers package, which
# the models import when they are built
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def _close(got: Any, ref: np.ndarray) -> bool:
    got = np.asarray(got[0] if isinstance(got, (list, tuple)) else got)
    scale = max(float(np.abs(ref).max()), 1e-30)
    return got.shape == ref.shape and float(np.abs(got - ref).max()) / scale <= 1e-4


def _onnx_bytes(model: Any, args: tuple, case: Any) -> tuple[bytes, str]:
    """The model as ONNX, and which exporter made it: TorchScript's, else (the transformers
    decoders' masks and torch.cond/while_loop do not trace) the dynamo exporter's."""
    import torch

    buf = io.BytesIO()
    names = list(case.seq_dims) or ["x"]
    axes = {n: {a: d for a, d in dims.items()} for n, dims in case.seq_dims.items() if dims}
    try:
        torch.onnx.export(
            model, args, buf, input_names=names, dynamic_axes=axes, dynamo=False, opset_version=17
        )
        return buf.getvalue(), "torchscript"
    except Exception:
        program = torch.onnx.export(
            model, args, dynamo=True, dynamic_shapes=case.dynamic_shapes(), verbose=False
        )
        return program.model_proto.SerializeToString(), "dynamo"


def backends(
    name: str, use_compile: bool
) -> tuple[dict[str, Callable[[], Any]], dict[str, str], dict[str, dict[str, str]], dict]:
    """The callables to time for model ``name`` (each checked), why others are missing, per
    rvm backend the functions its native mode runs in the compiled mode, with why, and notes
    (which ONNX exporter made the model, when not TorchScript's)."""
    import torch

    case = CASES[name]
    model = case.build()
    args = case.inputs(2, case.seqs[0])
    arrays = [a.numpy() for a in args]
    with torch.no_grad():
        ref = model(*args).numpy()
    fns: dict[str, Callable[[], Any]] = {}
    missing: dict[str, str] = {}
    fallbacks: dict[str, dict[str, str]] = {}
    notes: dict[str, str] = {}

    def add(label: str, make: Callable[[], Callable[[], Any]]) -> None:
        try:
            fn = make()
            if not _close(fn(), ref):
                missing[label] = "wrong output"
                return
            fns[label] = fn
        except Exception as err:  # a backend that cannot take the model: reported with why
            missing[label] = f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
        if label == "rvm from_torch" and label in missing:
            raise RuntimeError(f"{name}: rvm from_torch: {missing[label]}")

    def eager() -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return model(*args).numpy()

        return run

    def native(label: str, mod: rvm.IRModule) -> Callable[[], Any]:
        vm = rvm.VirtualMachine(rvm.compile(mod), exec_mode="native")
        report = vm.native_report(compile=True)
        if report.fallbacks:
            fallbacks[label] = report.fallbacks
        return lambda: vm["main"](*arrays)

    def via_torch() -> Callable[[], Any]:
        mod = rvm.from_torch(model, args=args, dynamic_shapes=case.dynamic_shapes())
        return native("rvm from_torch", mod)

    onnx_model: list[bytes] = []

    def via_onnx() -> Callable[[], Any]:
        data, exporter = _onnx_bytes(model, args, case)
        onnx_model.append(data)
        if exporter != "torchscript":
            notes["onnx"] = f"ONNX from the {exporter} exporter (TorchScript's failed)"
        return native("rvm from_onnx", rvm.from_onnx(data))

    def ort() -> Callable[[], Any]:
        import onnxruntime

        sess = onnxruntime.InferenceSession(onnx_model[0], providers=["CPUExecutionProvider"])
        feed = {i.name: a for i, a in zip(sess.get_inputs(), arrays)}
        return lambda: sess.run(None, feed)

    def compiled() -> Callable[[], Any]:
        fn = torch.compile(model)

        def run() -> Any:
            with torch.no_grad():
                return fn(*args).numpy()

        return run

    add("eager", eager)
    add("rvm from_torch", via_torch)
    add("rvm from_onnx", via_onnx)
    if onnx_model:
        add("onnxruntime", ort)
    if use_compile:
        add("torch.compile", compiled)
    return fns, missing, fallbacks, notes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--repeat", type=int, default=51)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    opts = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"{machine_line()}, threads: default")
    labels = ["eager", "rvm from_torch", "rvm from_onnx", "onnxruntime", "torch.compile"]
    print(f"{'model':16}" + "".join(f"{lab:>16}" for lab in labels) + "   torch/onnx")
    rows = {}
    for name in opts.models.split(","):
        fns, missing, fallbacks, notes = backends(name, not opts.no_compile)
        times = interleaved_medians(fns, repeat=opts.repeat, settle_s=SETTLE_S) if fns else {}
        cells = [
            f"{times[lab] * 1e3:14.3f}ms"
            if lab in times
            else f"{'failed' if lab in missing else 'not run':>16}"
            for lab in labels
        ]
        ratio = ""
        if "rvm from_torch" in times and "rvm from_onnx" in times:
            ratio = f"{times['rvm from_torch'] / times['rvm from_onnx']:.2f}"
        print(f"{name:16}" + "".join(cells) + f"   {ratio}")
        for label, why in missing.items():
            print(f"{'':16}{label} failed: {why}")
        for label, why in fallbacks.items():
            for func, reason in why.items():
                print(f"{'':16}{label} @{func} not native: {reason}")
        for note in notes.values():
            print(f"{'':16}{note}")
        rows[name] = {"seconds": times, "missing": missing, "fallbacks": fallbacks, **notes}
    write_results("torch_models", {"machine": machine(), "models": rows})


if __name__ == "__main__":
    main()
