"""Five decisions of the bf16 pass, each made both ways for whole models in one process: a
direct stride-1 convolution's weight tap by tap on AMX (``pairing="taps"``,
`rvm.kernels.reference.bf16.conv_pairing`), and in tiles for the walk turned around where its
channels fill bands of 32 (``pairing="tiles"``, `rvm.kernels.amxconv`), a channel
concatenation of convolutions read only by convolutions as a concatenation of their pair
planes, a max pool between bf16 convolutions on their pair planes (``max_pool2d_pairs``), and
the planes between convolutions that walk turned around laid out as positions by channel
pairs (``plane_layout="positions"``; the last three `rvm.transform.bf16_joins`).

Run: ``python benchmarks/bf16_decisions.py [--only squeezenet,resnet50] [--repeat 41]
[--ways all_but_positions,all]``.

Per model (random weights, `common.light_model_files`), executables compiled with
``precision="bf16"``: no decision taken ("base"), each of the first three alone, all ("all":
what `rvm.compile` does), and all but the pools, the tiles or the positions (each one's gain
where the others are taken); or the ``--ways`` asked, with the base; every one's outputs checked
against float32's first (the bound of `benchmarks/precision.py`, 3e-2 of the largest), then
interleaved medians of whole calls in the compiled exec mode, each turn after 20 ms of calls
(`interleaved_medians`' ``warm_s``), at rvm's default threads. Kernel changes cannot be
measured this way (one library a process), but a pass's choices can, free of the spread
between processes on a shared host (10-20% here, against a few % in one process). Prints the
milliseconds and each one's time over the base's; writes
``benchmarks/results/bf16_decisions.json`` (``--name``). The decisions only change anything
where the CPU has AMX's tiles (taps, tiles) and bf16 dot products.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import interleaved_medians, light_model_files, machine, machine_line, write_results

# isort: split
import numpy as np

import rvm
from rvm.transform import bf16_joins
from rvm.transform import to_bf16 as to_bf16_module

BOUND = 3e-2  # bf16's largest error against float32, of the largest output (the issue's)
WAYS = {  # (taps, concat, pools, tiles, positions)
    "base": (False, False, False, False, False), "taps": (True, False, False, False, False),
    "concat": (False, True, False, False, False), "pools": (False, False, True, False, False),
    "all_but_pools": (True, True, False, True, True),
    "all_but_tiles": (True, True, True, False, False),
    "all_but_positions": (True, True, True, True, False), "all": (True, True, True, True, True),
}  # fmt: skip


def _compiled(
    mod: rvm.IRModule, taps: bool, concat: bool, pools: bool, tiles: bool, positions: bool
) -> rvm.Executable:
    """``mod`` in bf16 with the taps order, the concatenated planes, the pools on planes, the
    weights in tiles (the walk turned around) and the planes of positions as given."""
    pairing, writers, pooled = to_bf16_module.conv_pairing, bf16_joins._writers, bf16_joins._pools
    lines = bf16_joins._lines

    def no_taps(c: int, kw: int, kh: int = 1, taps_: bool = False, out: int = 0) -> str:
        return pairing(c, kw, kh, taps_ and taps, out if tiles else 0)

    def no_concat(out, i, at, uses, residuals):  # type: ignore[no-untyped-def]
        value = out[i].value
        if not concat and getattr(value, "callee", None) is rvm.op.ops.concat:
            return None
        return writers(out, i, at, uses, residuals)

    def no_pools(value):  # type: ignore[no-untyped-def]
        return pools and pooled(value)

    def no_positions(writer, readers):  # type: ignore[no-untyped-def]
        return lines(writer, readers) if positions else "channels"

    to_bf16_module.conv_pairing, bf16_joins._writers = no_taps, no_concat
    bf16_joins._pools, bf16_joins._lines = no_pools, no_positions
    try:
        return rvm.compile(mod, precision="bf16")
    finally:
        to_bf16_module.conv_pairing, bf16_joins._writers = pairing, writers
        bf16_joins._pools, bf16_joins._lines = pooled, lines


def _first(out):  # type: ignore[no-untyped-def]
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out, np.float64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="squeezenet,resnet50,inception_v2,vgg19")
    parser.add_argument("--repeat", type=int, default=41)
    parser.add_argument("--name", default="bf16_decisions")
    parser.add_argument("--ways", default=",".join(WAYS), help="of " + ", ".join(WAYS))
    args = parser.parse_args()
    ways = {w: WAYS[w] for w in ["base", *args.ways.split(",")]}
    print(machine_line())
    rows = []
    for name in args.only.split(","):
        path, _, _, inputs = light_model_files(name, Path(tempfile.mkdtemp()))
        mod = rvm.from_onnx(str(path))
        full = _first(rvm.VirtualMachine(rvm.compile(mod), exec_mode="compiled")["main"](*inputs))
        vms = {}
        for way, decisions in ways.items():
            vm = rvm.VirtualMachine(_compiled(mod, *decisions), exec_mode="compiled")
            err = np.abs(_first(vm["main"](*inputs)) - full).max() / np.abs(full).max()
            if not err <= BOUND:
                raise AssertionError(f"{name} {way}: {err:.2e} of float32's largest output")
            vms[way] = vm["main"]
        times = interleaved_medians(
            {way: (lambda f=f, xs=inputs: f(*xs)) for way, f in vms.items()},
            repeat=args.repeat, warm_s=0.02,
        )  # fmt: skip
        row = {"model": name, **{f"{w}_ms": times[w] * 1e3 for w in ways}}
        row.update({f"{w}_ratio": times[w] / times["base"] for w in ways})
        rows.append(row)
        print(f"{name:14s} " + "  ".join(
            f"{w} {row[f'{w}_ms']:7.3f} ms ({row[f'{w}_ratio']:.3f})" for w in ways))  # fmt: skip
    write_results(args.name, {"machine": machine(), "repeat": args.repeat, "rows": rows})


if __name__ == "__main__":
    main()
