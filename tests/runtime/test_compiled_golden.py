"""The compiled mode's generated source for representative functions, against golden files.

Each case renders one VM function (`VirtualMachine.compiled_source`) and compares it with
``golden/<case>.txt`` as a whole, so a change to the generator shows as a reviewable diff of
whole functions rather than passing or failing a substring check. After a deliberate change,
regenerate with ``RVM_UPDATE_GOLDEN=1 pytest tests/runtime/test_compiled_golden.py`` and
review the diff. What the cases pin down:

- ``self_tail_call``: a self tail call becomes a ``while True`` loop (no recursion);
- ``unstructured``: control flow that is not structured runs as a ``_pc`` dispatch loop;
- ``inline_shapes``: the shape instructions inline (the builtin only on the mismatch path),
  NEW_TENSOR_REG one ``_alloc_view`` call;
- ``mlp``: a compiled program's entry checks and kernel calls;
- ``small_blocks``: straight-line code gives each small block one array (``_empty``), without
  the per-site slots a loop needs;
- ``loop_slots``: a loop's tiny tensors come from per-site slots (``_rc``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import rt_helpers as h

import rvm
from rvm.runtime import Executable, VirtualMachine
from rvm.testing.programs import MLP, RNN

GOLDEN = Path(__file__).with_name("golden")


def _small_blocks() -> Executable:
    head = ["@module", "class Chain:", "    @func"]
    head.append('    def main(h: T[(1, 8), "float32"], w: T[(8, 8), "float32"]):')
    text = "\n".join(head + ["        h = op.tanh(op.matmul(h, w))"] * 6 + ["        return h"])
    return rvm.compile(rvm.script.parse(text), kernels="numpy")


CASES: dict[str, tuple[Callable[[], Executable], str]] = {
    "self_tail_call": (h.counting_loop, "loop"),
    "unstructured": (h.triangle, "tri"),
    "inline_shapes": (h.checked_add, "main"),
    "mlp": (lambda: rvm.compile(MLP, kernels="numpy"), "main"),
    "small_blocks": (_small_blocks, "main"),
    "loop_slots": (lambda: rvm.compile(RNN, kernels="numpy"), "main__while_loop0"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_source_matches_golden(case: str) -> None:
    make, function = CASES[case]
    source = VirtualMachine(make()).compiled_source(function)
    path = GOLDEN / f"{case}.txt"
    if os.environ.get("RVM_UPDATE_GOLDEN"):
        path.write_text(source)
    assert path.exists(), f"no golden file {path}: run with RVM_UPDATE_GOLDEN=1 to write it"
    assert source == path.read_text(), (
        f"the compiled source of {case} changed; if deliberate, rerun with RVM_UPDATE_GOLDEN=1 "
        "and review the diff of tests/runtime/golden"
    )
