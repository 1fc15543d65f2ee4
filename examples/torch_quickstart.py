"""Import a PyTorch model into rvm through torch.export, compile it, run it in every exec mode,
and compare with eager PyTorch.

Builds a tiny GPT-2 from a random config (no download), exports it with a symbolic batch and
sequence length, so one compiled program serves every shape, and checks rvm against PyTorch
at two batch sizes and two sequence lengths.

Run: python examples/torch_quickstart.py [--kernels jit|numpy]
(needs torch and transformers; the CPU wheel of torch is
pip install torch --index-url https://download.pytorch.org/whl/cpu)
"""

import argparse
import time
import warnings

import numpy as np
import torch
from torch.export import Dim

import rvm
from rvm.testing.torch_models import CASES


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernels", default="jit", choices=("jit", "numpy"))
    opts = parser.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)

    case = CASES["gpt2"]
    model = case.build()  # GPT2LMHeadModel, 2 layers, random weights, returns the logits
    ids = case.inputs(2, 8)[0]
    dims = {"x": {0: Dim("batch", min=1, max=64), 1: Dim("seq", min=2, max=128)}}

    start = time.perf_counter()
    mod = rvm.from_torch(model, args=(ids,), dynamic_shapes=dims)
    print(f"imported in {time.perf_counter() - start:.1f} s; main{mod['main'].params[0].type}")
    start = time.perf_counter()
    ex = rvm.compile(mod, kernels=opts.kernels)
    print(f"compiled in {time.perf_counter() - start:.1f} s")

    worst = 0.0
    for mode in ("bytecode", "compiled", "native"):
        vm = rvm.VirtualMachine(ex, exec_mode=mode)
        for batch, seq in [(2, 8), (3, 13)]:
            x = case.inputs(batch, seq)[0]
            with torch.no_grad():
                ref = model(x).numpy()
            out = vm["main"](x.numpy())
            err = float(np.abs(out - ref).max() / np.abs(ref).max())
            worst = max(worst, err)
            print(f"{mode:9} batch {batch} seq {seq:2}: logits {out.shape}, rel. error {err:.1e}")
    assert worst <= 1e-4, worst
    print("rvm matches eager PyTorch")


if __name__ == "__main__":
    main()
