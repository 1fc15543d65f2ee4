"""Post-training static quantization of a float module: `quantize`.

``rvm.quantize(mod, calibration=[inputs...], scheme="static")`` returns a module whose
convolutions (conv2d) and dense products (matmul/dense by a constant 2-d weight) run as the
integer ops `rvm.op.qconv2d` / `rvm.op.qdense`:

- **chains**: in ``mod``'s entry function, an anchor on a constant float weight, with the
  per-channel bias add and the ReLU that follow it (each value used once), is one chain;
- **calibration**: the float module runs on every calibration input (compiled, jit kernels),
  returning each chain's input and output; ``method="minmax"`` takes their extremes,
  ``"percentile"`` the extremes of each batch's ``(100 - percentile)``-th and
  ``percentile``-th percentiles (clipping each batch's outliers);
- **activations** are uint8 per tensor (asymmetric: the range always contains 0); **weights**
  int8 per output channel, symmetric (zero point 0, ``max |w| / 127``); the bias is int32 in
  the accumulator's scale ``x_scale * w_scale``;
- each chain becomes ``quantize(x) -> qconv2d/qdense -> dequantize`` (the ReLU folded into the
  clip at the output zero point), so everything between chains stays in float32.

Accuracy against the float module is the user's to check on their data (the tests and
``benchmarks/precision.py`` report top-1 agreement and logit error on random inputs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rvm import op
from rvm.errors import RVMError
from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule

__all__ = ["quantize"]

SCHEMES = ("static",)
METHODS = ("minmax", "percentile")


@dataclass
class _Chain:
    """An anchor (conv2d/matmul/dense on a constant weight) with its bias add and ReLU."""

    bindings: list[E.VarBinding]  # anchor [, add] [, relu]
    x: E.Expr  # the anchor's input
    weight: np.ndarray  # float, (O, C/g, kh, kw) or (N, K)
    bias: np.ndarray | None  # per output channel
    relu: bool
    attrs: dict  # the convolution's attributes ({} for dense)

    @property
    def out(self) -> E.Var:
        return self.bindings[-1].var


def quantize(
    mod: IRModule,
    calibration: Sequence[Sequence[np.ndarray]],
    scheme: str = "static",
    *,
    method: str = "minmax",
    percentile: float = 99.99,
    entry: str = "main",
) -> IRModule:
    """``mod`` with its convolutions and dense products quantized to int8 (module docstring).

    Args:
        mod: a float module (``rvm.from_onnx``, ``rvm.from_torch``, rvm script).
        calibration: inputs of ``entry``, each a sequence of its arguments.
        scheme: ``"static"`` (activation scales fixed by calibration).
        method: ``"minmax"`` or ``"percentile"`` calibration.
        percentile: the upper percentile of ``"percentile"`` (the lower is ``100 - it``).
        entry: the function to quantize.

    Raises:
        RVMError: a bad scheme, method or percentile, no calibration inputs, or no entry.
    """
    if scheme not in SCHEMES:
        raise RVMError(f"quantize: scheme must be one of {SCHEMES}, got {scheme!r}")
    if method not in METHODS:
        raise RVMError(f"quantize: method must be one of {METHODS}, got {method!r}")
    if not 50.0 < percentile <= 100.0:
        raise RVMError(f"quantize: percentile must be in (50, 100], got {percentile!r}")
    if not calibration:
        raise RVMError("quantize: calibration needs at least one input (a list of arguments)")
    from rvm.transform.infer_shapes import infer_shapes
    from rvm.transform.normalize import normalize

    mod = infer_shapes(normalize(mod))
    func = mod[entry]
    chains = _chains(func)
    if not chains:
        return mod
    ranges = _calibrate(mod, entry, chains, calibration, method, percentile)
    return mod.with_functions({entry: _rewrite(func, chains, ranges)})


def _bindings(func: E.Function) -> list[E.VarBinding]:
    body = func.body
    if not isinstance(body, E.SeqExpr):
        return []
    return [b for block in body.blocks for b in block.bindings]


def _is_call(value: E.Expr, *names: str) -> bool:
    if not isinstance(value, E.Call) or not isinstance(value.callee, E.Op):
        return False
    return value.callee.name in names


def _uses(func: E.Function) -> dict[E.Var, int]:
    counts: dict[E.Var, int] = {}
    stack: list[E.Expr] = [func.body]
    seen: set[int] = set()
    while stack:  # every Var reference, iteratively
        e = stack.pop()
        if id(e) in seen and not isinstance(e, E.Var):
            continue
        seen.add(id(e))
        if isinstance(e, E.Var):
            counts[e] = counts.get(e, 0) + 1
        elif isinstance(e, E.Call):
            stack.extend(e.args)
        elif isinstance(e, E.Tuple):
            stack.extend(e.fields)
        elif isinstance(e, E.SeqExpr):
            stack.extend(b.value for block in e.blocks for b in block.bindings)
            stack.append(e.body)
        elif isinstance(e, E.TupleGetItem):
            stack.append(e.tuple_value)
        elif isinstance(e, E.If):
            stack.extend([e.cond, e.true_branch, e.false_branch])
    return counts


def _chains(func: E.Function) -> list[_Chain]:
    bindings = _bindings(func)
    uses = _uses(func)
    by_input: dict[E.Var, E.VarBinding] = {}
    for b in bindings:
        if isinstance(b.value, E.Call) and b.value.args and isinstance(b.value.args[0], E.Var):
            by_input.setdefault(b.value.args[0], b)
    chains = []
    for b in bindings:
        chain = _anchor(b)
        if chain is None:
            continue
        nxt = by_input.get(b.var) if uses.get(b.var) == 1 else None
        if nxt is not None and _is_call(nxt.value, "add"):
            bias = _channel_bias(nxt.value.args[1], chain)
            if bias is not None:
                chain.bias = bias
                chain.bindings.append(nxt)
                nxt = by_input.get(nxt.var) if uses.get(nxt.var) == 1 else None
        if nxt is not None and _is_call(nxt.value, "relu"):
            chain.relu = True
            chain.bindings.append(nxt)
        chains.append(chain)
    return chains


def _anchor(b: E.VarBinding) -> _Chain | None:
    v = b.value
    if not _is_call(v, "conv2d", "matmul", "dense") or len(v.args) != 2:
        return None
    x, w = v.args
    if not isinstance(w, E.Constant) or w.data.dtype != np.float32:
        return None
    if not isinstance(x, E.Var) or getattr(infer_type(x), "dtype", None) != "float32":
        return None
    if v.callee.name == "conv2d":
        return _Chain([b], x, w.data, None, False, dict(v.attrs))
    if w.data.ndim != 2:
        return None
    weight = w.data if v.callee.name == "dense" else np.ascontiguousarray(w.data.T)
    return _Chain([b], x, weight, None, False, {})


def _channel_bias(value: E.Expr, chain: _Chain) -> np.ndarray | None:
    """A constant added per output channel (NCHW's axis 1, or a dense product's last)."""
    if not isinstance(value, E.Constant) or value.data.dtype != np.float32:
        return None
    data, channels = value.data, chain.weight.shape[0]
    squeezed = data.reshape(-1) if data.size == channels else None
    if squeezed is None:
        return None
    conv = bool(chain.attrs)
    if conv and data.ndim >= 3 and data.shape[-2:] != (1, 1):
        return None
    if not conv and data.ndim >= 1 and data.shape[-1] != channels:
        return None
    return squeezed.astype(np.float64)


def _calibrate(mod, entry, chains, calibration, method, percentile):  # type: ignore[no-untyped-def]
    """(low, high) of each chain's input and output over the calibration inputs."""
    import rvm

    func = mod[entry]
    watched = [c.x for c in chains] + [c.out for c in chains]
    body = func.body
    probe_body = E.SeqExpr(body.blocks, E.Tuple((body.body, *watched)))
    probe = E.Function(func.params, probe_body, None, func.attrs)
    vm = rvm.VirtualMachine(rvm.compile(mod.with_functions({entry: probe})))
    lows: list[list[float]] = [[] for _ in watched]
    highs: list[list[float]] = [[] for _ in watched]
    for args in calibration:
        outs = vm[entry](*args)[1:]
        for i, value in enumerate(outs):
            value = np.asarray(value, np.float32)
            if method == "minmax":
                lows[i].append(float(value.min()))
                highs[i].append(float(value.max()))
            else:
                lo, hi = np.percentile(value, [100.0 - percentile, percentile])
                lows[i].append(float(lo))
                highs[i].append(float(hi))
    return [(min(lo), max(hi)) for lo, hi in zip(lows, highs)]


def _activation(low: float, high: float) -> tuple[float, int]:
    """uint8 (scale, zero point) of a range (widened to contain 0)."""
    low, high = min(low, 0.0), max(high, 0.0)
    scale = (high - low) / 255.0 or 1.0
    zero = int(np.clip(np.round(-low / scale), 0, 255))
    return float(np.float32(scale)), zero


def _rewrite(func: E.Function, chains: list[_Chain], ranges) -> E.Function:  # type: ignore[no-untyped-def]
    n = len(chains)
    replace: dict[int, list[E.VarBinding]] = {}
    drop: set[int] = set()
    for k, chain in enumerate(chains):
        replace[id(chain.bindings[-1])] = _quantized(chain, ranges[k], ranges[n + k], k)
        drop.update(id(b) for b in chain.bindings[:-1])
    blocks = []
    for block in func.body.blocks:
        out: list[E.VarBinding] = []
        for b in block.bindings:
            if id(b) in drop:
                continue
            out.extend(replace.get(id(b), [b]))
        blocks.append(E.BindingBlock(tuple(out)))
    body = E.SeqExpr(tuple(blocks), func.body.body)
    return E.Function(func.params, body, func.ret_type, func.attrs)


def _quantized(chain: _Chain, x_range, y_range, k: int) -> list[E.VarBinding]:  # type: ignore[no-untyped-def]
    """The bindings computing ``chain.out`` through the integer op."""
    sx, zx = _activation(*x_range)
    sy, zy = _activation(*y_range)
    w = chain.weight.astype(np.float64)
    reach = np.abs(w.reshape(w.shape[0], -1)).max(axis=1)
    sw = np.where(reach > 0, reach / 127.0, 1.0)
    shape = (-1,) + (1,) * (w.ndim - 1)
    wq = np.clip(np.round(w / sw.reshape(shape)), -127, 127).astype(np.int8)
    acc_scale = sx * sw
    bias = np.zeros(w.shape[0], np.int32)
    if chain.bias is not None:
        bias[:] = np.round(chain.bias / acc_scale).astype(np.int32)
    multiplier = (acc_scale / sy).astype(np.float32)
    scaled = op.round(op.divide(chain.x, E.const(sx, "float32")))
    q = op.cast(op.clip(op.add(scaled, E.const(float(zx), "float32")), 0.0, 255.0), "uint8")
    xq = E.Var(f"q{k}_x")
    args = (xq, E.Constant(wq), E.Constant(bias), E.Constant(multiplier))
    quant = {"x_zero": zx, "y_zero": zy, "dtype": "uint8", "relu": chain.relu}
    if chain.attrs:
        a = chain.attrs
        ohwi = E.Constant(np.ascontiguousarray(wq.transpose(0, 2, 3, 1)))  # the kernel's order
        yq_value = op.qconv2d(xq, ohwi, *args[2:], **quant, strides=a["strides"],
                              padding=a["padding"], dilation=a["dilation"], groups=a["groups"],
                              weight_layout="OHWI")  # fmt: skip
    else:
        yq_value = op.qdense(*args, **quant)
    yq = E.Var(f"q{k}_y")
    centered = op.subtract(op.cast(yq, "float32"), E.const(float(zy), "float32"))
    y = op.multiply(centered, E.const(sy, "float32"))
    return [
        E.VarBinding(xq, q),
        E.VarBinding(yq, yq_value),
        E.VarBinding(chain.out, y),
    ]
