"""Greedy generation inside the VM: one ``vm["generate"]`` call against a loop over ORT.

Run: ``python examples/generate.py [--model decoder.onnx | --export] [--new 16]``.

The model is a decoder in optimum's ``text-generation-with-past`` layout (``input_ids``,
``attention_mask``, ``position_ids``, ``past_key_values.N.key/value`` -> ``logits``,
``present.N.key/value``). By default it is rvm's tiny test decoder (`rvm.testing.tiny_decoder`,
random weights); ``--export`` exports a tiny random GPT-2 with optimum (needs torch,
transformers and optimum-onnx: the ``export`` extra); ``--model`` reads one you exported.
rvm imports it once with symbolic dimensions, `rvm.generation.greedy` adds ``generate``
beside ``main``, and the whole decoding loop (prompt pass, argmax, mask, positions, the KV
cache passed from step to step) runs in one VM call, compared with the greedy Python loop over
ONNX Runtime users write (`rvm.testing.ort_greedy`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

import rvm
from rvm.testing.ort_greedy import ort_greedy
from rvm.testing.tiny_decoder import tiny_decoder


def export_tiny_gpt2(folder: Path) -> Path:
    """A 2-layer, width-64 random GPT-2 exported with past by optimum; its model.onnx."""
    import transformers
    from optimum.exporters.onnx import main_export

    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder / "src")
    main_export(str(folder / "src"), output=str(folder / "onnx"), task="text-generation-with-past")
    return folder / "onnx" / "model.onnx"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a decoder exported with past (default: rvm's tiny one)")
    ap.add_argument("--export", action="store_true", help="export a tiny GPT-2 with optimum")
    ap.add_argument("--new", type=int, default=16, help="tokens to generate")
    ap.add_argument("--exec-mode", default="native", choices=("bytecode", "compiled", "native"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if a.export:
            model: Path | bytes = export_tiny_gpt2(Path(tmp))
        else:
            model = Path(a.model) if a.model else tiny_decoder(seed=6)
        source = str(model) if isinstance(model, Path) else model
        mod = rvm.from_onnx(source)  # symbolic batch, sequence and past: one compile
        start = time.perf_counter()
        ex = rvm.compile(rvm.generation.greedy(mod))
        print(f"compiled main + generate in {time.perf_counter() - start:.1f} s")
        vm = rvm.VirtualMachine(ex, exec_mode=a.exec_mode)
        session = ort.InferenceSession(source)
        vocab = session.get_outputs()[0].shape[-1]
        for shape in ((1, 5), (2, 9)):
            ids = np.random.default_rng(0).integers(0, vocab, shape)
            start = time.perf_counter()
            tokens = vm["generate"](ids, np.int64(a.new))
            took = time.perf_counter() - start
            want = ort_greedy(session, ids, a.new)
            same = "equal" if np.array_equal(tokens, want) else "DIFFERENT"
            print(f"prompt {shape}: {a.new} new tokens in {1e3 * took:.1f} ms; tokens {same} to "
                  "the ONNX Runtime loop's")  # fmt: skip
            print(tokens)


if __name__ == "__main__":
    main()
