"""fuse_activations: GELU and SiLU written as arithmetic become gelu and silu calls.

Needs: an inlined module in A-normal form whose op calls are not yet legalized (run before
`legalize`).

Guarantees: the same program, where with scalar constants (within 1e-6 relative of the
values named) and every intermediate used only by the chain,

    GELU (erf):  (x * 0.5) * (erf(x / sqrt(2) | x * (1 / sqrt(2))) + 1)
                 or x * ((erf(...) + 1) * 0.5), or (x * (erf(...) + 1)) * 0.5
    GELU (tanh): (x * 0.5) * (tanh((x + power(x, 3) * 0.044715) * sqrt(2 / pi)) + 1)
    SiLU:        x * sigmoid(x)

(each product in either order) are ``gelu(x)``, ``gelu(x, approximate="tanh")`` and
``silu(x)``. The chains already fused into one elementwise kernel; as one op the kernel
evaluates one expression per element instead of six to nine.

Algorithm: one walk over each straight-line region; each ``multiply`` is tried as the end of
a chain, matched backwards through single-use bindings (`rvm.transform.pattern`).
"""

from __future__ import annotations

import math

from rvm import op
from rvm.ir import expr as E
from rvm.ir.module import IRModule
from rvm.op import ops
from rvm.transform.pattern import Region, fuse_chains, operands

_SQRT2 = math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _near(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= 1e-6 * abs(want)


def fuse_activations(mod: IRModule) -> IRModule:
    """Rewrite every GELU and SiLU chain of ``mod`` into one op call."""
    return fuse_chains(mod, "fuse_activations", {ops.multiply: (_silu, _gelu)}, "activations")


def _silu(r: Region, z: E.Call) -> E.Call | None:
    for x, s in operands(z):
        mark = len(r.matched)
        sig = r.call(s, ops.sigmoid)
        if sig is not None and sig.args[0] is x:
            return op.silu(x)
        del r.matched[mark:]
    return None


def _halved(r: Region, e: E.Expr) -> E.Expr | None:
    """``y`` of ``y * 0.5``."""
    mark = len(r.matched)
    mul = r.call(e, ops.multiply)
    for y, c in operands(mul) if mul is not None else []:
        if r.scalar(c) == 0.5:
            return y
    del r.matched[mark:]
    return None


def _gelu(r: Region, z: E.Call) -> E.Call | None:
    """The three placements of the 0.5 around ``x * (phi + 1)``."""
    for a, b in operands(z):
        mark = len(r.matched)
        x = _halved(r, a)  # (x * 0.5) * (phi + 1)
        if x is not None:
            found = _one_plus(r, b, x)
            if found is not None:
                return op.gelu(x, approximate=found)
        del r.matched[mark:]
        inner = _halved(r, b)  # x * ((phi + 1) * 0.5)
        if inner is not None:
            found = _one_plus(r, inner, a)
            if found is not None:
                return op.gelu(a, approximate=found)
        del r.matched[mark:]
    if r.scalar(z.args[1]) == 0.5 or r.scalar(z.args[0]) == 0.5:  # (x * (phi + 1)) * 0.5
        prod = z.args[0] if r.scalar(z.args[1]) == 0.5 else z.args[1]
        mul = r.call(prod, ops.multiply)
        for x, b in operands(mul) if mul is not None else []:
            mark = len(r.matched)
            found = _one_plus(r, b, x)
            if found is not None:
                return op.gelu(x, approximate=found)
            del r.matched[mark:]
    return None


def _one_plus(r: Region, e: E.Expr, x: E.Expr) -> str | None:
    """``"none"`` for ``erf(x / sqrt 2) + 1``, ``"tanh"`` for the tanh form, else None."""
    mark = len(r.matched)
    add = r.call(e, ops.add)
    for phi, c in operands(add) if add is not None else []:
        if r.scalar(c) != 1.0:
            continue
        erf = r.call(phi, ops.erf)
        if erf is not None and _scaled_by(r, erf.args[0], x, 1 / _SQRT2):
            return "none"
        tanh = r.call(phi, ops.tanh)
        if tanh is not None and _tanh_arg(r, tanh.args[0], x):
            return "tanh"
    del r.matched[mark:]
    return None


def _scaled_by(r: Region, e: E.Expr, x: E.Expr, factor: float) -> bool:
    """Whether ``e`` is ``x * factor`` or ``x / (1 / factor)``."""
    mark = len(r.matched)
    call = r.call(e, ops.multiply, ops.divide)
    if (
        call is not None
        and call.args[0] is x
        or (call is not None and call.callee is ops.multiply and call.args[1] is x)
    ):
        c = call.args[1] if call.args[0] is x else call.args[0]
        value = r.scalar(c)
        if call.callee is ops.multiply and _near(value, factor):
            return True
        if call.callee is ops.divide and call.args[0] is x and _near(value, 1 / factor):
            return True
    del r.matched[mark:]
    return False


def _tanh_arg(r: Region, e: E.Expr, x: E.Expr) -> bool:
    """Whether ``e`` is ``(x + power(x, 3) * 0.044715) * sqrt(2 / pi)``."""
    mark = len(r.matched)
    mul = r.call(e, ops.multiply)
    for inner, c in operands(mul) if mul is not None else []:
        if not _near(r.scalar(c), _SQRT_2_OVER_PI):
            continue
        add = r.call(inner, ops.add)
        for y, cube in operands(add) if add is not None else []:
            if y is not x:
                continue
            scaled = r.call(cube, ops.multiply)
            for p, k in operands(scaled) if scaled is not None else []:
                power = r.call(p, ops.power)
                if (
                    _near(r.scalar(k), 0.044715)
                    and power is not None
                    and power.args[0] is x
                    and r.scalar(power.args[1]) == 3.0
                ):
                    return True
    del r.matched[mark:]
    return False
