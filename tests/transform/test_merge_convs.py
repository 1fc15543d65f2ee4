"""merge_convs: convolutions of one input with the same geometry and chain are one convolution
cut by channel slices (`rvm.transform.merge_convs`), which the memory plan makes views of its
result (`rvm.transform.concat_plan.slice_offset`): which convolutions merge, and programs
against the interpreter in every exec mode, the slices' storage alive while they are read."""

from __future__ import annotations

import numpy as np
import pytest
from fusion_helpers import op_names

import rvm
from rvm import op
from rvm.interp import interpret
from rvm.ir import Builder, Call, IRModule, Var, const, tensor, verify
from rvm.transform.merge_convs import merge_convs
from rvm.transform.pipeline import run_pipeline

F32 = "float32"
RNG = np.random.default_rng(7)
C = 8
OUTS = (5, 3, 4)


def _w(out: int, kernel: int = 1, cin: int = C) -> np.ndarray:
    scale = 1 / np.sqrt(cin * kernel * kernel)  # values stay near 1 through chains of them
    return (RNG.standard_normal((out, cin, kernel, kernel)) * scale).astype(F32)


def _b(out: int) -> np.ndarray:
    return RNG.standard_normal((out, 1, 1)).astype(F32)


def _branches(
    batch: int | str = 1, kernel: int = 1, chains=("add", "relu"), dilation=(1, 1, 1),
    weights_const=True, uses=1, size=9,
) -> IRModule:  # fmt: skip
    """main(x, w) with x (batch, C, size, size): an inception block: three convolutions of x
    (`OUTS` channels, ``kernel`` wide, ``dilation`` each, padded to keep the map), each with
    the chain ``chains`` (or per branch a tuple of chains); the first branch goes to a concat,
    the second through a 3x3 convolution into it, the third through an average pool into it;
    ``weights_const`` False takes the first branch's weight from the parameter ``w``; ``uses``
    2 also returns the second branch's convolution itself, 3 the third branch's result."""
    x = Var("x", tensor((batch, C, size, size), F32))
    wp = Var("w", tensor((OUTS[0], C, kernel, kernel), F32))
    bb = Builder()
    with bb.function("main", [x, wp]):
        ends, raw = [], []
        for n, (out, d) in enumerate(zip(OUTS, dilation)):
            w = const(_w(out, kernel)) if weights_const or n else wp
            y = bb.emit(op.conv2d(x, w, padding=d * (kernel // 2), dilation=d))
            raw.append(y)
            chain = chains[n] if chains and isinstance(chains[0], tuple) else chains
            for kind in chain:
                y = bb.emit(op.add(y, const(_b(out))) if kind == "add" else op.relu(y))
            ends.append(y)
        second = bb.emit(op.conv2d(ends[1], const(_w(6, 3, OUTS[1])), padding=1))
        third = bb.emit(op.avg_pool2d(ends[2], 3, 1, 1))
        joined = bb.emit(op.concat(rvm.ir.Tuple((ends[0], second, third)), axis=1))
        out = bb.emit(op.relu(joined))
        tail = {2: (raw[1],), 3: (ends[2],)}.get(uses, ())  # 3: a member's result escapes
        bb.emit_output(rvm.ir.Tuple((out, *tail)) if tail else out)
    return bb.get()


def _inputs(mod: IRModule, batch: int = 1, size: int = 9) -> list[np.ndarray]:
    return [
        RNG.standard_normal((batch, C, size, size)).astype(F32),
        _w(OUTS[0], mod["main"].params[1].type.shape[2]),
    ]


@pytest.mark.parametrize(
    ("case", "chain"),
    [
        (dict(), ["add", "relu"]),
        (dict(kernel=3), ["add", "relu"]),  # any geometry, one for all
        (dict(chains=("relu",)), ["relu"]),
        (dict(chains=()), []),
        (dict(chains=(("add",), ("add",), ("add",))), ["add"]),
    ],
)
def test_convolutions_of_one_input_merge(case, chain) -> None:
    mod = _branches(**case)
    merged = merge_convs(mod)
    verify(merged)
    ops = op_names(merged)
    assert ops[: 1 + len(chain) + 3] == ["conv2d", *chain, *["strided_slice"] * 3]
    assert ops.count("conv2d") == 2  # the merged one and the second branch's 3x3
    conv = next(b.value for b in merged["main"].body.bindings if isinstance(b.value, Call))
    assert conv.args[1].data.shape[0] == sum(OUTS)
    args = _inputs(mod)
    want = interpret(mod, "main", *args)
    np.testing.assert_allclose(interpret(merged, "main", *args), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "case",
    [
        dict(batch=2),  # a channel slice of two images is no run of the result
        dict(batch="n"),
        dict(kernel=3, dilation=(1, 2, 2)),  # the first alone: the other two merge (below)
        dict(chains=(("add", "relu"), ("add",), ("relu",))),  # three chains: nothing to merge
        dict(weights_const=False, chains=(("relu",), ("add", "relu"), ("relu",))),
    ],
)
def test_what_cannot_merge_stays(case) -> None:
    mod = _branches(**case)
    merged = merge_convs(mod)
    if case.get("dilation") is not None:
        assert op_names(merged).count("conv2d") == 3  # the two of stride 2 merged
        args = _inputs(mod)
        want = interpret(mod, "main", *args)
        np.testing.assert_allclose(interpret(merged, "main", *args), want, rtol=1e-5, atol=1e-5)
        return
    assert merged is mod


def test_a_chain_step_read_twice_ends_the_chain() -> None:
    """The second branch's convolution is also returned: its chain is the convolution alone,
    unlike the others'; those two merge."""
    mod = _branches(uses=2)
    merged = merge_convs(mod)
    assert op_names(merged).count("conv2d") == 3
    args = _inputs(mod)
    want = interpret(mod, "main", *args)
    for got, ref in zip(interpret(merged, "main", *args), want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def _late_reader(size: int) -> IRModule:
    """main(x): three merged branches, the first read by a convolution to as many channels
    as the merged result has (which a plan that freed the merged result at its slices would
    put in its storage), the second after it, the third at the end."""
    x = Var("x", tensor((1, C, size, size), F32))
    bb = Builder()
    with bb.function("main", [x]):
        ends = []
        for out in (C, C, C):
            y = bb.emit(op.conv2d(x, const(_w(out))))
            ends.append(bb.emit(op.relu(bb.emit(op.add(y, const(_b(out)))))))
        y = ends[0]  # its first reader's result, as large as the merged one, comes first
        for n in range(3):
            y = bb.emit(op.conv2d(y, const(_w(C * 3))))
            y = bb.emit(op.conv2d(y, const(_w(C, cin=C * 3))))
            y = bb.emit(op.add(y, ends[1])) if n == 0 else y
        bb.emit_output(bb.emit(op.multiply(y, ends[2])))
    return bb.get()


@pytest.mark.parametrize("kernels", ["numpy", "jit"])
def test_compiled_programs_match_the_reference(exec_mode, kernels) -> None:
    """Through rvm.compile (the pass runs in the default pipeline): the slices that feed
    kernels are views of the merged result (no slice kernel), the one in the concat is
    copied there; same results as the interpreter, in every exec mode."""
    for mod, args, copies in (
        (_branches(size=16), None, 1),
        (_branches(kernel=3, size=16), None, 1),
        (_branches(size=16, uses=3), None, 1),  # a view returned: its block never reused
        (_late_reader(16), [RNG.standard_normal((1, C, 16, 16)).astype(F32)], 0),
    ):
        args = _inputs(mod, size=16) if args is None else args
        planned = run_pipeline(mod).script()
        assert planned.count("call_dps(fused_strided_slice") == copies
        ex = rvm.compile(mod, kernels=kernels, exec_mode=exec_mode)
        got = rvm.VirtualMachine(ex)["main"](*args)
        want = interpret(mod, "main", *args)
        for g, w in zip(*((v if isinstance(v, tuple | list) else (v,)) for v in (got, want))):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
