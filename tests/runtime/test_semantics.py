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
from rvm.runtime import ExecContext, Executable, NaiveAllocator, Opcode
from rvm.runtime import semantics as sem
from rvm.runtime.kernels import resolve_primitives
from rvm.runtime.modes.bytecode import BytecodeMode, compile_loop
from rvm.runtime.modes.compiled import CompiledMode
from rvm.runtime.modes.decode import decode_executable

O = Opcode
DERIVED_TEMPLATES = ("TINY_TENSOR", "IF_EQUAL", "IF_INT", "IF_BOOL")


def test_every_opcode_has_one_meaning_or_is_control():
    assert set(sem.SEMANTICS) | sem.CONTROL_OPCODES == set(Opcode)
    assert not set(sem.SEMANTICS) & sem.CONTROL_OPCODES
    for op, text in sem.SEMANTICS.items():  # every field names an operand of the opcode
        assert {f for f, _ in sem.fields(text)} <= set(sem.operand_kinds(op)), op


def test_the_loop_dispatches_every_opcode_of_the_table_hot_ones_first():
    from rvm.runtime.modes import bytecode
    from rvm.runtime.modes.decode import ALLOC_TUPLE, NEW_TINY

    order = [code for code, _, _ in bytecode.dispatch_order()]
    assert len(order) == len(set(order))
    assert set(order) == set(sem.SEMANTICS) | sem.CONTROL_OPCODES | {NEW_TINY, ALLOC_TUPLE}
    assert order[: len(bytecode.HOT)] == list(bytecode.HOT)
    labels = [label for _, label, _ in bytecode.dispatch_order()]
    assert "NEW_TENSOR tiny" in labels and "ALLOC_ADT tuple" in labels


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


EVERY_OPCODE_RESULT_OPS = {op.name for op in sem.SEMANTICS} | {"ALLOC_ADT.tuple", "NEW_TENSOR.tiny"}
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
def test_the_if_tests_are_from_the_table(probes, mode):
    """IF_IMM runs `IF_INT` (`IF_BOOL` on a known bool tensor), IF runs `IF_EQUAL`."""
    assert _mode(h.recursive_sum(), mode).run(0, [np.array(5, np.int64)]) == 15
    assert "IF_INT" in probes and "IF_EQUAL" not in probes
    probes.clear()
    assert _mode(h.count_down(), mode).run(0, [np.array(4), np.array(10)]) == 14
    assert "IF_EQUAL" in probes
