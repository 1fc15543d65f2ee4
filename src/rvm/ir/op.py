"""The op registry of the IR: op objects by name and the type-inference table.

Ops themselves are defined in `rvm.op` (one place per op, its rules beside it); this module
owns what the IR layer needs of them: lookup by name (for Python operators and the script
parser) and the inference rules the Builder runs. Each rule takes the call and the types of
its arguments and returns the result type, raising `IRError` when shapes provably disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import TYPE_CHECKING

from rvm import _hooks
from rvm.errors import IRError
from rvm.ir.expr import Op

if TYPE_CHECKING:
    from rvm.ir.expr import Call
    from rvm.ir.types import Type


class OpPattern(IntEnum):
    """Fusion kinds, ordered as in TVM's OpPatternKind: lower kinds fuse more freely."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    REDUCTION = 3
    OUT_ELEMWISE_FUSABLE = 4  # matmul, dense, conv: absorb an elementwise epilogue
    OPAQUE = 8


InferRule = Callable[["Call", "list[Type]"], "Type"]

_ops: dict[str, Op] = {}
infer: dict[Op, InferRule] = {}


def register_op(name: str, pattern: OpPattern, num_inputs: int = -1) -> Op:
    """Create the op ``name`` once; registering a name twice is an error."""
    if name in _ops:
        raise IRError(f"op {name!r} is already registered")
    op = Op(name, int(pattern), num_inputs)
    _ops[name] = op
    return op


def _load_op_set() -> None:
    """Make sure the op set is registered: it is defined a layer up, in `rvm.op`, which
    supplies it through `rvm._hooks` when imported (during its own import the lookup finds
    the ops registered so far and reports others as unknown)."""
    _hooks.demand("ops")


def get_op(name: str) -> Op:
    """The op called ``name``; raises IRError naming close matches when there is none."""
    if name not in _ops:
        _load_op_set()
    try:
        return _ops[name]
    except KeyError:
        import difflib

        near = difflib.get_close_matches(name, list(_ops), n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise IRError(f"unknown op {name!r}{hint}") from None


def list_ops() -> list[str]:
    """Names of every registered op, sorted."""
    _load_op_set()
    return sorted(_ops)
