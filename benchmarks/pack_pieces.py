"""`rvm.kernels.sgemm._pack` on 3 x 3 im2col panels (taps through a table, output rows of
``ow`` positions ``ow + 2`` apart), one thread, in one process: the branch's `move_lanes`
(``branch``) against session 53's float-at-a-time copy of a piece (``s53``) and session 55's
masked loads and stores (``s55 masked``), copied here; 60 interleaved calls each, medians.

Run: ``python benchmarks/pack_pieces.py``, which writes ``results/pack_pieces.json`` (session
57, the Zen 3: masked stores 2.2-2.9 times s53's time, the branch 0.48-0.83).
"""

import time

from common import machine, machine_line, write_results

# isort: split
import numpy as np
from llvmlite import ir
from numba import njit
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels.gemmshape import LANES, VECTORS
from rvm.kernels.microkernel import floats_at, ints_at
from rvm.kernels.sgemm import NR, _move_panel_row, _pack


@njit(nogil=True, error_model="numpy", boundscheck=False, cache=True)
def old_pack(b, ldb, table, p0, kc, j0, cols, run, b_step, into):
    rows = ints_at(table)
    for q0 in range(0, cols, NR):
        n = min(NR, cols - q0)
        q = j0 + q0
        s, off = q // run, q % run
        src, dst = b + 4 * (s * b_step + off), into + 4 * q0 * kc
        if n == NR and off + NR <= run:
            if table == 0:
                for r in range(kc):
                    _move_panel_row(src + 4 * (p0 + r) * ldb, dst + 4 * r * NR)
            else:
                for r in range(kc):
                    _move_panel_row(src + 4 * rows[p0 + r], dst + 4 * r * NR)
            continue
        for r in range(kc):
            row = floats_at(src + 4 * (rows[p0 + r] if table != 0 else (p0 + r) * ldb))
            at = floats_at(dst + 4 * r * NR)
            j, piece, skip = 0, min(n, run - off), 0
            while j < n:
                for t in range(piece):
                    at[j + t] = row[skip + t]
                j, skip = j + piece, skip + piece + b_step - run
                piece = min(n - j, run)
            for t in range(n, NR):
                at[t] = 0.0


@intrinsic
def move_lanes_masked(typingctx, src, dst, lo, hi):
    from rvm.kernels.gemmshape import NR as _NR

    def codegen(context, builder, signature, args):
        f32, i1, i32, i64 = ir.FloatType(), ir.IntType(1), ir.IntType(32), ir.IntType(64)
        vec, masks = ir.VectorType(f32, LANES), ir.VectorType(i1, LANES)
        vptr, module, name = vec.as_pointer(), builder.module, f"v{LANES}f32"
        load = cgutils.get_or_insert_function(
            module, ir.FunctionType(vec, [vptr, i32, masks, vec]), f"llvm.masked.load.{name}.p0"
        )
        store = cgutils.get_or_insert_function(
            module,
            ir.FunctionType(ir.VoidType(), [vec, vptr, i32, masks]),
            f"llvm.masked.store.{name}.p0",
        )
        src, dst, lo, hi = args
        wide, lane_bits = ir.IntType(128), ir.IntType(LANES)
        one = ir.Constant(wide, 1)
        first, past = (builder.shl(one, builder.zext(x, wide)) for x in (lo, hi))
        loads = builder.sub(past, first)
        stores = builder.sub(builder.shl(one, ir.Constant(wide, _NR)), first)
        zero = ir.Constant(vec, [0.0] * LANES)

        def part(bits, v):
            shifted = builder.lshr(bits, ir.Constant(wide, v * LANES))
            return builder.bitcast(builder.trunc(shifted, lane_bits), masks)

        for v in range(VECTORS):
            at = (builder.inttoptr(builder.add(x, i64(4 * v * LANES)), vptr) for x in (src, dst))
            value = builder.call(load, [next(at), i32(4), part(loads, v), zero])
            builder.call(store, [value, next(at), i32(4), part(stores, v)])
        return context.get_dummy_value()

    return nt.void(nt.int64, nt.int64, nt.int64, nt.int64), codegen


@njit(nogil=True, error_model="numpy", boundscheck=False, cache=True)
def masked_pack(b, ldb, table, p0, kc, j0, cols, run, b_step, into):
    rows = ints_at(table)
    for q0 in range(0, cols, NR):
        n = min(NR, cols - q0)
        q = j0 + q0
        s, off = q // run, q % run
        src, dst = b + 4 * (s * b_step + off), into + 4 * q0 * kc
        if n == NR and off + NR <= run:
            if table == 0:
                for r in range(kc):
                    _move_panel_row(src + 4 * (p0 + r) * ldb, dst + 4 * r * NR)
            else:
                for r in range(kc):
                    _move_panel_row(src + 4 * rows[p0 + r], dst + 4 * r * NR)
            continue
        for r in range(kc):
            row = src + 4 * (rows[p0 + r] if table != 0 else (p0 + r) * ldb)
            j, piece, skip = 0, min(n, run - off), 0
            while j < n:
                move_lanes_masked(row + 4 * (skip - j), dst + 4 * r * NR, j, j + piece)
                j, skip = j + piece, skip + piece + b_step - run
                piece = min(n - j, run)


def case(c, k, ow, wp, oh):
    # im2col of a kxk conv, stride 1, on a padded plane (c channels, rows of wp), rows of ow
    kc = min(c * k * k, 256)
    cols = ow * oh
    plane = np.random.rand(c * (oh + k) * wp + 64).astype(np.float32)
    taps = np.array(
        [(ci * (oh + k) + i) * wp + j for ci in range(c) for i in range(k) for j in range(k)][:kc],
        dtype=np.int64,
    )
    into = np.zeros(kc * (cols + NR), np.float32)
    ain, aint, ab = into.ctypes.data, taps.ctypes.data, plane.ctypes.data
    f = {
        "new": lambda: _pack(ab, 0, aint, 0, kc, 0, cols, ow, wp, ain),
        "old": lambda: old_pack(ab, 0, aint, 0, kc, 0, cols, ow, wp, ain),
        "masked": lambda: masked_pack(ab, 0, aint, 0, kc, 0, cols, ow, wp, ain),
    }
    for nm in f:
        f[nm]()
    outs = {}
    for nm in f:
        into[:] = -1
        f[nm]()
        outs[nm] = into.copy()
    for nm in ("new", "masked"):
        differ = np.nonzero(outs[nm] != outs["old"])[0]
        assert not len(differ), f"{nm}: {len(differ)} floats differ from the old copy"
    ts = {nm: [] for nm in f}
    for _ in range(60):
        for nm in f:
            t = time.perf_counter()
            f[nm]()
            ts[nm].append(time.perf_counter() - t)
    return {nm: np.median(v) * 1e6 for nm, v in ts.items()}


SHAPES = [
    (16, 3, 55, 57, 55),
    (32, 3, 27, 29, 27),
    (64, 3, 13, 15, 13),
    (64, 3, 56, 58, 56),
    (128, 3, 28, 30, 28),
    (256, 3, 14, 16, 14),
    (3, 7, 112, 230, 112),
]


def main() -> None:
    print(machine_line(), flush=True)
    rows = []
    for c, k, ow, wp, oh in SHAPES:
        r = case(c, k, ow, wp, oh)
        old, masked, new = r["old"], r["masked"], r["new"]
        rows.append({"channels": c, "kernel": k, "ow": ow, "s53_us": old, "s55_masked_us": masked,
                     "branch_us": new})  # fmt: skip
        print(
            f"c{c} k{k} ow{ow}: s53 float-at-a-time {old:.1f} us, s55 masked {masked:.1f} "
            f"({masked / old:.2f}), branch {new:.1f} ({new / old:.2f})",
            flush=True,
        )
    write_results("pack_pieces", {"machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
