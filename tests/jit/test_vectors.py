"""`rvm.kernels.vectors.first_lanes`: the mask of a vector's first ``n`` lanes, any ``n``."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir
from numba import njit
from numba import types as nt
from numba.extending import intrinsic

from rvm.kernels.vectors import VectorIR, first_lanes


def _store_first(lanes: int, through_vector_ir: bool):  # type: ignore[no-untyped-def]
    """A jitted ``f(n, out)`` storing 1.0 in the lanes of ``out[:lanes]`` that the mask of
    the first ``n`` lanes holds (`first_lanes`, or `VectorIR.first`), the others untouched."""

    @intrinsic
    def store(typingctx, n, address):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            v = VectorIR(builder, lanes)
            mask = v.first(args[0]) if through_vector_ir else first_lanes(builder, args[0], lanes)
            v.store(ir.Constant(v.f32, [1.0] * lanes), args[1], mask)
            return context.get_dummy_value()

        return nt.void(nt.int64, nt.int64), codegen

    @njit
    def f(n, out):  # type: ignore[no-untyped-def]
        store(n, out.ctypes.data)

    return f


@pytest.mark.parametrize("through_vector_ir", [False, True])
@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_first_lanes_masks_the_first_n_lanes_clamped(lanes: int, through_vector_ir: bool) -> None:
    f = _store_first(lanes, through_vector_ir)
    for n in [-(2**40), -1, 0, 1, lanes // 2, lanes - 1, lanes, lanes + 1, 63, 64, 65, 2**40]:
        out = np.zeros(lanes + 4, dtype=np.float32)
        f(n, out)
        want = np.zeros(lanes + 4, dtype=np.float32)
        want[: min(max(n, 0), lanes)] = 1.0
        np.testing.assert_array_equal(out, want, err_msg=f"n={n}, lanes={lanes}")
