"""Each opcode's meaning is written once (`rvm.runtime.semantics`) and both exec modes run it.

The probe tests rewrite every template of the table to pass its value through `_probe(name,
value)`, rebuild both modes from the rewritten table and run real programs: a mode that wrote
an opcode's meaning itself, instead of rendering the table, would run without the probe and
fail them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import rt_helpers as h

from rvm.errors import VMError
from rvm.runtime import ExecBuilder, ExecContext, Executable, NaiveAllocator, Opcode
from rvm.runtime import semantics as sem
from rvm.runtime.compiled import CompiledMode
from rvm.runtime.decode import decode_executable
from rvm.runtime.kernels import resolve_primitives
from rvm.runtime.loop import BytecodeMode, compile_loop
from rvm.runtime.objects import Closure

O = Opcode
DERIVED_TEMPLATES = ("TINY_TENSOR", "ALLOC_VIEW", "IF_EQUAL", "IF_INT", "IF_BOOL")


def test_every_opcode_has_one_meaning_or_is_control():
    assert set(sem.SEMANTICS) | sem.CONTROL_OPCODES == set(Opcode)
    assert not set(sem.SEMANTICS) & sem.CONTROL_OPCODES
    for op, text in sem.SEMANTICS.items():  # every field names an operand of the opcode
        assert {f for f, _ in sem.fields(text)} <= set(sem.operand_kinds(op)), op


def _probed(name: str, text: str) -> str:
    """`text` with its value passed through `_probe(name, value)`."""
    if text.startswith("raise _Fatal("):
        return text.replace("_Fatal(", f"_Fatal(_probe({name!r}, ", 1) + ")"
    if text.startswith("{") and " = " in text:
        target, value = text.split(" = ", 1)
        return f"{target} = _probe({name!r}, {value})"
    return f"_probe({name!r}, {text})"


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every template of the table rewritten to record its name; the names recorded."""
    seen: list[str] = []

    def probe(name: str, value: Any) -> Any:
        seen.append(name)
        return value

    for op, text in list(sem.SEMANTICS.items()):
        monkeypatch.setitem(sem.SEMANTICS, op, _probed(op.name, text))
    for op, (variant, applies, text) in list(sem.VARIANTS.items()):
        probed = _probed(f"{op.name}.{variant}", text)
        monkeypatch.setitem(sem.VARIANTS, op, (variant, applies, probed))
    for name in DERIVED_TEMPLATES:
        monkeypatch.setattr(sem, name, _probed(name, getattr(sem, name)))
    monkeypatch.setitem(sem.RUNTIME_NAMES, "_probe", probe)
    return seen


def _mode(ex: Executable, mode: str) -> Any:
    """Mode `mode` of `ex` built from the templates as they are now."""
    allocator = NaiveAllocator()
    context = ExecContext(ex, decode_executable(ex), resolve_primitives(ex), lambda: allocator)

    class Probed(BytecodeMode):
        run = compile_loop()

    context.run_bytecode = Probed(context).run
    return Probed(context) if mode == "bytecode" else CompiledMode(context)


def _static_allocs() -> Executable:
    """main(x: f32[4]) = exp(exp(x)) through a tiny block and a 4 KiB one, each made, viewed
    and killed as the compiler emits them (the loop's ALLOC_STATIC)."""
    b = ExecBuilder()
    exp = b.add_kernel(h.EXP)
    f = b.function("main", ("x",), (h.tensor("x", (4,)),))
    size, st, t, big_size, big, u, shp, out = (f.new_register() for _ in range(8))
    for reg, block, tensor, shape in ((size, st, t, (4,)), (big_size, big, u, (1024,))):
        f.emit(O.LOAD_CONSTI, reg, int(np.prod(shape)) * 4)
        f.emit(O.ALLOC_STORAGE, block, reg, 64, "float32")
        f.emit(O.ALLOC_TENSOR, tensor, block, 0, shape, "float32")
        f.emit(O.KILL_REGISTER, block)
    f.emit(O.INVOKE_PACKED, exp, 2, 1, (0, t))
    f.emit(O.SHAPE_OF, shp, u)
    f.emit(O.RESHAPE_TENSOR, u, u, shp)
    f.emit(O.ALLOC_ADT, out, -1, (t, u))
    f.emit(O.RET, out)
    return b.build()


EVERY_OPCODE_RESULT_OPS = {op.name for op in sem.SEMANTICS} | {"ALLOC_ADT.tuple"}
"""The templates `every_opcode_program` runs (its IF's branches coincide: no test runs)."""


@pytest.mark.parametrize("mode", ["bytecode", "compiled"])
def test_both_modes_run_every_meaning_from_the_table(probes, mode):
    ex = h.every_opcode_program()
    run = _mode(ex, mode).run
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    moved, _, tr = run(ex.function_index("main"), [x])
    np.testing.assert_allclose(moved, np.exp(x))
    np.testing.assert_allclose(tr, np.exp(x))
    with pytest.raises(VMError, match="boom!"):
        run(ex.function_index("boom"), [])
    assert EVERY_OPCODE_RESULT_OPS <= set(probes)  # every meaning, from the table


@pytest.mark.parametrize("mode", ["bytecode", "compiled"])
def test_fused_forms_are_built_from_the_table(probes, mode):
    """The superinstructions and fused allocations run the templates too."""
    ex = _static_allocs()
    x = np.linspace(0, 1, 4, dtype=np.float32)
    small, big = _mode(ex, mode).run(0, [x])
    np.testing.assert_allclose(small, np.exp(x))
    assert big.shape == (1024,) and big.dtype == np.float32
    seen = set(probes)
    assert "TINY_TENSOR" in seen  # the 16-byte block is a plain array in both modes
    if mode == "bytecode":
        assert {"LOAD_CONSTI", "ALLOC_STORAGE", "ALLOC_TENSOR", "KILL_REGISTER"} <= seen
    else:
        assert "ALLOC_VIEW" in seen  # made, viewed, killed: one allocator call
    total = h.recursive_sum()
    probes.clear()
    assert _mode(total, mode).run(0, [np.array(5, np.int64)]) == 15
    assert "IF_INT" in probes  # LOAD_CONSTI feeding IF: the loop's IF_CONST, compiled inline


def test_fuse_substitutes_a_block_living_for_one_use():
    made = ["_b = alloc(64, 8)", "t = view(_b.buffer)", "_b = None"]
    assert sem.fuse(made, frozenset(["_b"])) == ["t = view(alloc(64, 8).buffer)"]
    read_twice = ["_b = alloc(64, 8)", "t = pair(_b, _b)", "_b = None"]
    assert sem.fuse(read_twice, frozenset(["_b"])) == read_twice
    kept = ["_b = alloc(64, 8)", "t = view(_b.buffer)", "u = view(_b.buffer)"]
    assert sem.fuse(kept, frozenset(["_b"])) == kept
    assert sem.fuse(made, frozenset()) == made  # not a temporary: a register stays


def test_render_forms():
    text = sem.SEMANTICS[O.CALL_PACKED]
    assert sem.fields(text) == [("dst", ""), ("packed", ""), ("args", "splat")]
    names = {"dst": "r0", "packed": "f", "args": "r1, r2"}
    assert sem.render(text, lambda field, _: names[field]) == "r0 = f(r1, r2)"
    assert sem.template((O.ALLOC_ADT, 0, -1, (1,)))[0] == "tuple"
    assert sem.template((O.ALLOC_ADT, 0, 3, (1,)))[0] == ""


def test_consti_is_shared_read_only():
    arr = sem.consti(7)
    assert arr.shape == () and arr.dtype == np.int64 and arr == 7
    with pytest.raises(ValueError):
        arr[()] = 1


def test_closure_error_says_what_was_wrong():
    assert str(sem.closure_error(3, 0, 0)) == "invoke_closure on a int, not a closure"
    closure = Closure(0, (np.float32(1),), "add")
    message = str(sem.closure_error(closure, 2, 2))
    assert message == "closure @add takes 2 values, got 1 free vars + 2 args"
