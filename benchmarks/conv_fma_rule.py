"""The CNNs with the convolution method rule (`rvm.kernels.direct.prefers`) under either FMA
width: the core running its vectors' multiply-adds whole (``FMA_LANES`` = the vector's lanes,
Zen 5) or as two halves (half of them, Zen 4), against each other and ONNX Runtime.

Run: ``python benchmarks/conv_fma_rule.py [--only squeezenet,inception_v2] [--repeat 21]
[--threads 1] [--batch 1]``. Each model (random weights, `common.light_model_files`) is
compiled twice in one process, `rvm.kernels.direct.FMA_LANES` set to each width while the
build-time pass packs the weights where the rule says (`rvm.op.conv.pack_conv2d`; the
library's choice at the call, on maps of `rvm.kernels.direct.PACK_MIN_POSITIONS` or more,
keeps this machine's fact), and run in compiled mode beside ORT, interleaved medians after
checking both outputs against ORT's. One thread each by default (rvm's and ORT's intra-op
threads), timed by the calling thread's CPU time, which a loaded machine distorts least.
Prints per model the convolutions packed under each width, milliseconds of each, whole /
halves, and rvm (this machine's fact, ``this``) over ORT; writes
``benchmarks/results/conv_fma_rule.json`` (``_t2``, ``_b8``... for other threads and batches).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import interleaved_medians, light_model_files, machine, machine_line, write_results

# isort: split
import numpy as np
import onnxruntime as ort

import rvm
from rvm.kernels import direct
from rvm.testing.onnx_models import LIGHT_MODELS


def _built(path: Path, fma_lanes: int) -> tuple[object, int]:
    """The model compiled with the rule's FMA width set to ``fma_lanes``, and how many of its
    convolutions took the direct method's packed weights."""
    from rvm.transform.pack_conv_weights import pack_conv_weights

    saved = direct.FMA_LANES
    direct.FMA_LANES = fma_lanes
    try:
        mod = rvm.from_onnx(str(path))
        packed = str(pack_conv_weights(mod)).count("conv2d_packed(")
        return rvm.compile(mod), packed
    finally:
        direct.FMA_LANES = saved


def measure(name: str, repeat: int, threads: int, batch: int, tmp: Path) -> dict:
    path, _, _, inputs = light_model_files(name, tmp, batch)
    lanes = direct.LANES
    widths = {"whole": lanes, "halves": lanes // 2}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = threads
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feeds = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
    want = session.run(None, feeds)
    fns, packed = {}, {}
    for key, width in widths.items():
        ex, packed[key] = _built(path, width)
        run = rvm.VirtualMachine(ex, exec_mode="compiled")["main"]
        got = run(*inputs)
        got = got if isinstance(got, tuple | list) else (got,)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-3, atol=1e-3, err_msg=key)
        fns[key] = lambda run=run: run(*inputs)
    fns["ort"] = lambda: session.run(None, feeds)
    clock = time.thread_time if threads == 1 else time.perf_counter
    t = interleaved_medians(fns, repeat, sample_s=0.02, settle_s=0.0 if threads == 1 else 0.1,
                            clock=clock)  # fmt: skip
    this = "halves" if direct.FMA_LANES < lanes else "whole"
    return {"ms": {k: v * 1e3 for k, v in t.items()}, "packed": packed, "this": this}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(LIGHT_MODELS), help="comma-separated models")
    parser.add_argument("--repeat", type=int, default=21, help="interleaved samples per model")
    parser.add_argument("--threads", type=int, default=1, help="threads of both runtimes")
    parser.add_argument("--batch", type=int, default=1, help="images a call")
    args = parser.parse_args()
    if args.threads < 1 or args.batch < 1:
        parser.error("--threads and --batch take positive counts")
    rvm.set_num_threads(args.threads)
    print(machine_line(), f"threads: {args.threads}; batch {args.batch};",
          f"this CPU's FMA lanes: {direct.FMA_LANES} of {direct.LANES}")  # fmt: skip
    print(f"{'model':14} {'packed w/h':>10} {'whole ms':>9} {'halves ms':>9} {'ort ms':>8} "
          f"{'w/h':>6} {'this/ort':>8}")  # fmt: skip
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            r = measure(name, args.repeat, args.threads, args.batch, Path(tmp))
            ms, p = r["ms"], r["packed"]
            print(f"{name:14} {p['whole']:>4}/{p['halves']:<5} {ms['whole']:9.3f} "
                  f"{ms['halves']:9.3f} {ms['ort']:8.3f} {ms['whole'] / ms['halves']:6.3f} "
                  f"{ms[r['this']] / ms['ort']:8.3f}")  # fmt: skip
            rows[name] = r
    name = "conv_fma_rule" + ("" if args.threads == 1 else f"_t{args.threads}")
    name += "" if args.batch == 1 else f"_b{args.batch}"
    payload = {"machine": machine(), "threads": args.threads, "batch": args.batch}
    write_results(name, {**payload, "fma_lanes": direct.FMA_LANES, "models": rows})


if __name__ == "__main__":
    main()
