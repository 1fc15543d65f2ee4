"""Which float32 kernels are a per-channel affine map and a ReLU (`rvm.kernels.affine`).

`affine_chain` matches a primitive function whose every binding takes the previous one's value
(the first, a float32 input of 3 or 4 dims, channels at axis 1) through an inference
``batch_norm`` on the channels, or ``add``, ``subtract``, ``multiply`` or ``divide`` (by) an
array broadcast along the channels only (or a scalar), then an optional ``relu`` last, and
whose result is the last binding. `rvm.jit.lower` then computes each channel's scale and shift
(`coefficients`: the steps composed, as ONNX Runtime folds a batch norm) in a loop over the
channels and calls the library's pass rather than emitting its own loop over the output, and
`rvm.jit.first_run` lists the pass's task for it (`is_affine`).
"""

from __future__ import annotations

from collections.abc import Callable

from rvm.ir import expr as E
from rvm.ir.types import TensorType
from rvm.jit.kernel import KernelBuilder
from rvm.jit.scalar import lit
from rvm.jit.te import Body, Scalar, Tensor, idx
from rvm.op import ops

__all__ = ["affine_chain", "coefficients", "is_affine"]

_STEPS = (ops.batch_norm, ops.add, ops.subtract, ops.multiply, ops.divide)

# A step: its op, whether the running value is its second operand, its other operands (a batch
# norm's gamma, beta, mean and variance), its attributes.
Step = tuple[E.Op, bool, list[E.Expr], dict]


def _steps(func: E.Function) -> tuple[E.Var, list[Step], int] | None:
    """(x, steps, activation) of the chain ``func`` is, by its IR alone; else None."""
    body = func.body
    bindings = list(body.bindings) if isinstance(body, E.SeqExpr) else []
    if not (bindings and body.body is bindings[-1].var):  # type: ignore[attr-defined]
        return None
    first = bindings[0].value
    if not (isinstance(first, E.Call) and first.args and isinstance(first.args[0], E.Var)):
        return None
    x = cur = first.args[0]
    if not any(p is x for p in func.params):
        return None
    steps: list[Step] = []
    act = 0
    for b in bindings:
        v = b.value
        if act or not isinstance(v, E.Call) or sum(a is cur for a in v.args) != 1:
            return None
        if v.callee is ops.relu and len(v.args) == 1:
            act = 1
        elif v.callee is ops.batch_norm and v.args[0] is cur:
            steps.append((v.callee, False, list(v.args[1:]), dict(v.attrs)))
        elif any(v.callee is op for op in _STEPS[1:]) and len(v.args) == 2:
            second = v.args[1] is cur
            if second and v.callee is ops.divide:
                return None  # p / x is not affine in x
            steps.append((v.callee, second, [v.args[0 if second else 1]], {}))
        else:
            return None
        cur = b.var
    chain = [x, *(b.var for b in bindings)]
    if any(o is c for _, _, operands, _ in steps for o in operands for c in chain):
        return None  # x times a value of x: not affine (x of one element a channel)
    return (x, steps, act) if steps or act else None


def is_affine(func: E.Function) -> bool:
    """Whether ``func`` may be such a chain (its types unchecked: `affine_chain` decides)."""
    return _steps(func) is not None


def affine_chain(
    func: E.Function, env: dict, arg: Callable[[E.Expr], object]
) -> tuple[Tensor, list[tuple[E.Op, bool, list[Tensor], dict]], int] | None:
    """(x, steps, activation) when ``func`` is such a chain (see the module docstring): x's
    tensor; each affine step's op, whether the running value is its second operand, its
    other operands' tensors (``arg`` lowers an operand) and attributes; the activation (an
    index of `rvm.kernels.epipass.ACTIVATIONS`); else None."""
    found = _steps(func)
    if found is None:
        return None
    xv, steps, act = found
    x = env.get(xv)
    if not (isinstance(x, Tensor) and x.kind == "array" and x.loader is None):
        return None
    if x.dtype != "float32" or x.ndim not in (3, 4):
        return None
    for b in func.body.bindings:  # type: ignore[attr-defined]  (a SeqExpr's: `_steps`)
        t = env.get(b.var)
        if not (isinstance(t, Tensor) and t.dtype == "float32" and t.dims == x.dims):
            return None
    lowered = []
    for op, second, operands, attrs in steps:
        if op is ops.batch_norm and attrs["axis"] % x.ndim != 1:
            return None
        ts = [arg(a) for a in operands]
        bn = op is ops.batch_norm  # its parameters are of the channels (checked by its compute)
        if not all(_channel_vector(t) if bn else _per_channel(t, x) for t in ts):
            return None
        lowered.append((op, second, ts, attrs))  # type: ignore[arg-type]
    ty = func.body.body.type  # type: ignore[attr-defined]
    if isinstance(ty, TensorType) and ty.dtype != "float32":
        return None
    return x, lowered, act


def _channel_vector(t: object) -> bool:
    """Whether ``t`` is a float32 tensor of one axis (a batch norm's parameter)."""
    return isinstance(t, Tensor) and t.dtype == "float32" and t.ndim == 1


def _per_channel(t: object, x: Tensor) -> bool:
    """Whether ``t`` is a float32 tensor varying along x's channels only (or not at all)."""
    if not (isinstance(t, Tensor) and t.dtype == "float32" and t.ndim <= x.ndim):
        return False
    full = ("1",) * (x.ndim - t.ndim) + t.dims
    return all(d == "1" for a, d in enumerate(full) if a != 1) and full[1] in ("1", x.dims[1])


def coefficients(
    kb: KernelBuilder, x: Tensor, steps: list[tuple[E.Op, bool, list[Tensor], dict]]
) -> Tensor:
    """The (channels, 2) tensor of each channel's scale (column 0) and shift (column 1): the
    steps composed on ``x * 1 + 0``, so that the chain is ``x * scale + shift``."""
    channels = x.dims[1]

    def on_channels(t: Tensor) -> Tensor:
        """``t`` (a batch norm's parameter, or an operand broadcast to x) on the channels."""
        if t.ndim == 1 and t.dims[0] != "1":
            return t  # a batch norm's: (c,) (an operand of 1 dim broadcasts along the last)

        def at(body: Body, index: list[Scalar]) -> list[Scalar]:
            full = [idx(0)] * x.ndim
            full[1] = index[0]
            return kb.broadcast_index(t.dims, x.dims, full)

        return kb.index_map(t, (channels,), at)

    def f(fn: Callable[..., str], *args: Tensor) -> Tensor:
        return kb.elemwise(fn, "float32", args)

    scale, shift = _constant(channels, 1.0), _constant(channels, 0.0)
    for op, second, operands, attrs in steps:
        ps = [on_channels(t) for t in operands]
        if op is ops.batch_norm:
            gamma, beta, mean, var = ps
            eps = lit(attrs["epsilon"], "float32")
            k = f(lambda g, v, e=eps: f"({g} / np.sqrt({v} + {e}))", gamma, var)
            scale = f(lambda s, c: f"({s} * {c})", scale, k)
            shift = f(lambda t, m, c, b: f"(({t} - {m}) * {c} + {b})", shift, mean, k, beta)
        elif op is ops.add:
            shift = f(lambda t, q: f"({t} + {q})", shift, ps[0])
        elif op is ops.subtract and second:  # p - x
            scale = f(lambda s: f"(-{s})", scale)
            shift = f(lambda t, q: f"({q} - {t})", shift, ps[0])
        elif op is ops.subtract:
            shift = f(lambda t, q: f"({t} - {q})", shift, ps[0])
        elif op is ops.multiply:
            scale = f(lambda s, q: f"({s} * {q})", scale, ps[0])
            shift = f(lambda t, q: f"({t} * {q})", shift, ps[0])
        else:  # x / p
            scale = f(lambda s, q: f"({s} / {q})", scale, ps[0])
            shift = f(lambda t, q: f"({t} / {q})", shift, ps[0])

    def load(body: Body, index: list[Scalar]) -> Scalar:
        # Both depend on the channel alone: computed once a channel, in the outer loop.
        s, t = (kb.load(r, body, [index[0]]) for r in (scale, shift))
        return Scalar(f"({s.code} if {index[1].code} == 0 else {t.code})",
                      index[1].deps | s.deps | t.deps, "float32")  # fmt: skip

    return Tensor((channels, "2"), "float32", load)


def _constant(channels: str, value: float) -> Tensor:
    """A (channels,) tensor of ``value``."""
    code = lit(value, "float32")
    return Tensor((channels,), "float32", lambda body, index: Scalar(code, frozenset(), "float32"))
