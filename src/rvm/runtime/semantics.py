"""Each opcode's meaning, written once, as Python source over the opcode's named operands.

`SEMANTICS` holds, for every opcode that computes a value (all but the control opcodes RET,
GOTO, IF, INVOKE, INVOKE_CLOSURE and their tail forms, whose mechanics are each mode's own: a
frame stack in the bytecode loop, Python calls and structured branches in the compiled mode),
one statement template. Both exec modes render these templates and nothing else for those opcodes:

- the bytecode loop (`loop.py`) is generated from them: an operand becomes a read of the
  decoded instruction (`ins[3]`) or of the register list (`regs[ins[1]]`);
- the compiled mode (`compiled_codegen.py`) renders them with registers as locals (`r3`),
  immediates as literals and constants by name (`c2`).

A meaning that depends on an instruction's operands is a variant (`VARIANTS`: a tuple ADT, a
tiny tensor), chosen once from the instruction; the cheaper IF tests a mode may use where it
knows more (`IF_INT`, `IF_BOOL`) are stated here too, next to the rule that makes them equal.

Template language: `{field}` is an operand of `OPCODE_INFO` (or one of `DERIVED`); `{field:form}`
asks for one form of it:

| form | of | renders as |
|---|---|---|
| `splat` | `regs` | call arguments: `r1, r2` |
| `tuple` | `regs` | a tuple value: `(r1, r2)` |
| `dims` | a `reg` holding a 1-d int64 shape | a tuple of ints |
| `consti` | `imm` | the shared read-only 0-d int64 array of the immediate (`consti`) |

A template writes a register only as its first target (`{dst} = ...`). The free names templates
use are `RUNTIME_NAMES` plus, bound per VM, `_alloc` (the allocator's `alloc`), `_alloc_view`
(`memory.alloc_view_of`) and `_Fatal` (the exception FATAL raises).

The native mode (`native_codegen.py`) renders the same templates inside a Numba function, where
a few Python forms have no meaning (`None`, `type(x) is`, the VM's allocator, ADT objects).
`OVERRIDES["native"]` states, per opcode it runs otherwise, why and how: its native template,
with the same meaning for the values native code holds (tensors, tuples of them, int64 shape
heaps, shapes as tuples of ints), or none where the mode writes the statement itself (a shape
check inline, FATAL handing the call back). `template(ins, mode)` picks an instruction's
template for a mode from these tables; every opcode a mode does not override runs its
`SEMANTICS` template there. The native mode's own free names are those of
`rvm.runtime.modes.native_support` (`_empty`, `_storage`, `_view`, `_shape_array`) and
`_zeros`, `_int64` (numpy's).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rvm.dtypes import numpy_dtype
from rvm.errors import VMError
from rvm.runtime.builtins import make_shape, match_shape
from rvm.runtime.bytecode import OPCODE_INFO, Opcode
from rvm.runtime.memory import is_tiny
from rvm.runtime.objects import ADT, Closure

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable

__all__ = [
    "CONTROL_OPCODES",
    "DERIVED",
    "IF_BOOL",
    "IF_EQUAL",
    "IF_INT",
    "IF_SCALAR",
    "IF_SCALARS",
    "OVERRIDES",
    "Override",
    "RUNTIME_NAMES",
    "SEMANTICS",
    "TINY_TENSOR",
    "TUPLE_FIELD",
    "VARIANTS",
    "VIEW_TENSOR",
    "VIEW_TENSOR_REG",
    "closure_error",
    "consti",
    "fields",
    "new_tensor_nbytes",
    "operand_kinds",
    "render",
    "template",
]

O = Opcode

SEMANTICS: dict[Opcode, str] = {
    O.MOVE: "{dst} = {src}",
    O.FATAL: "raise _Fatal({text})",
    O.INVOKE_PACKED: "{packed}({args:splat})",
    O.CALL_PACKED: "{dst} = {packed}({args:splat})",
    O.ALLOC_STORAGE: "{dst} = _alloc({size}, {alignment})",
    O.ALLOC_TENSOR: "{dst} = _ndarray({shape}, {dtype}, {storage}.buffer, {offset})",
    O.ALLOC_TENSOR_REG: "{dst} = _ndarray({shape:dims}, {dtype}, {storage}.buffer, {offset})",
    O.ALLOC_ADT: "{dst} = _ADT({tag}, {fields:tuple}, {name})",
    O.ALLOC_CLOSURE: "{dst} = _Closure({func}, {free_vars:tuple}, {name})",
    O.GET_FIELD: "{dst} = {obj}.fields[{index}] if type({obj}) is _ADT else {obj}[{index}]",
    O.GET_TAG: "{dst} = {obj}.tag",
    O.LOAD_CONST: "{dst} = {const}",
    O.LOAD_CONSTI: "{dst} = {value:consti}",
    O.SHAPE_OF: "{dst} = _array({tensor}.shape, dtype=_int64)",
    O.RESHAPE_TENSOR: "{dst} = {tensor}.reshape({shape:dims})",
    O.KILL_REGISTER: "{reg} = None",
    O.NEW_TENSOR: "{dst} = _alloc_view({nbytes}, {alignment}, {shape}, {dtype})",
    O.NEW_TENSOR_REG: (
        "{dst} = _alloc_view(_prod(_s := {shape:dims}) * {itemsize}, {alignment}, _s, {dtype})"
    ),
    O.ALLOC_SHAPE_HEAP: "{dst} = _zeros({size}, _int64)",
    O.MATCH_SHAPE: "_match_shape({tensor}, {heap}, {pattern}, {context})",
    O.MAKE_SHAPE: "{dst} = _make_shape({heap}, {pattern})",
}
"""The statement of every opcode that is not control flow (see the module docstring)."""

CONTROL_OPCODES = frozenset(
    {O.RET, O.GOTO, O.IF, O.IF_IMM, O.INVOKE, O.INVOKE_CLOSURE}
    | {O.TAIL_INVOKE, O.TAIL_INVOKE_CLOSURE}
)
"""The opcodes each mode runs by its own mechanics (IF's test is `IF_EQUAL`, IF_IMM's
`IF_INT`)."""


def new_tensor_nbytes(ins: tuple) -> int:
    """The bytes of the block of NEW_TENSOR `ins` (raw): its shape's size times the itemsize."""
    return math.prod(ins[2]) * numpy_dtype(ins[3]).itemsize


TINY_TENSOR = "{dst} = _empty({shape}, {dtype})"
"""NEW_TENSOR of a tiny block (`memory.is_tiny`), or ALLOC_TENSOR of a tiny constant-size block:
a plain numpy array, in every mode (the block itself is never made)."""

VARIANTS: dict[Opcode, tuple[str, Callable[[tuple], bool], str]] = {
    O.ALLOC_ADT: ("tuple", lambda ins: ins[2] == -1, "{dst} = {fields:tuple}"),
    O.NEW_TENSOR: ("tiny", lambda ins: is_tiny(new_tensor_nbytes(ins)), TINY_TENSOR),
}
"""Opcodes whose meaning depends on their operands: `(name, applies(ins), template)`. Both modes
choose when they see the instruction (tag -1 builds a Python tuple, not an `ADT`; a tiny
NEW_TENSOR is a plain array, the tiny-tensor rule's one place)."""

IF_EQUAL = "{test} == {target}"
"""IF's test: jump to the true offset when it holds."""

IF_INT = "({test}.item() if type({test}) is _ndarray and not {test}.ndim else {test}) == {value}"
"""IF_IMM's test, against the int `value`: a 0-d array equals an int exactly when its Python
scalar does (numeric dtypes, the only ones a test holds), without a ufunc call."""

IF_BOOL = "{test}"
"""IF_INT when `test` surely holds a bool tensor and `value` is 1 (`not` it for 0)."""


IF_SCALAR = "{test} == {value}"
"""IF_IMM's test in native code, where `test` is a machine scalar (a scalar local, or a 0-d
array's `[()]`) and `value` an int (`IF_INT`)."""

IF_SCALARS = "{test} == {target}"
"""IF's test in native code, where `test` and `target` are machine scalars (`IF_EQUAL`)."""

TUPLE_FIELD = "{dst} = {obj}[{index}]"
"""GET_FIELD of a tuple (native code holds no `ADT`: its functions take and build tuples)."""

VIEW_TENSOR = "{dst} = _view({storage}, {offset}, {shape}, {dtype})"
"""ALLOC_TENSOR in native code: the block's bytes from `offset` as a tensor (`_view`)."""

VIEW_TENSOR_REG = "{dst} = _view({storage}, {offset}, {shape:dims}, {dtype})"
"""ALLOC_TENSOR_REG in native code (the shape register holds a tuple of ints there)."""


@dataclass(frozen=True)
class Override:
    """A mode's own form of an opcode, and why the `SEMANTICS` template does not serve there.

    Attributes:
        why: The reason, for a reader of the table.
        template: The template the mode runs instead, or None where the mode writes the
            statement itself (`why` says where).
    """

    why: str
    template: str | None = None


_NUMBA_MEMORY = "Numba's allocator owns native memory (there is no VM allocator)"

OVERRIDES: dict[str, dict[Opcode, Override]] = {
    "native": {
        O.ALLOC_STORAGE: Override(
            f"{_NUMBA_MEMORY}: a block is a fresh byte array; `{{size:scalar}}` is the "
            "register's 0-d int64 value (`{reg}[()]`) or its inlined literal",
            "{dst} = _storage({size:scalar})",
        ),
        O.ALLOC_TENSOR: Override(
            "a tensor over a block is a view of its bytes (`_view`; no `ndarray(buffer=)`)",
            VIEW_TENSOR,
        ),
        O.ALLOC_TENSOR_REG: Override(
            "as ALLOC_TENSOR; the shape register holds a tuple of ints there", VIEW_TENSOR_REG
        ),
        O.GET_FIELD: Override(
            "native code holds no `ADT` (no `type(x) is`): its values are tuples", TUPLE_FIELD
        ),
        O.GET_TAG: Override(
            "a data type value is a tuple (slots..., tag) in native code, its tag last "
            "(`native_adts`)",
            "{dst} = {obj}[-1]",
        ),
        O.SHAPE_OF: Override(
            "`np.array(shape, dtype=)` does not type in Numba: `_shape_array`",
            "{dst} = _shape_array({tensor})",
        ),
        O.KILL_REGISTER: Override(
            "a local cannot be rebound to None in typed code; Numba frees a value after its "
            "last use",
            "pass  # {reg} dies where Numba sees its last use",
        ),
        O.NEW_TENSOR: Override(
            f"{_NUMBA_MEMORY}: a NEW_TENSOR of any size is a fresh array", TINY_TENSOR
        ),
        O.NEW_TENSOR_REG: Override(
            f"{_NUMBA_MEMORY}: a fresh array of the shape", "{dst} = _empty({shape:dims}, {dtype})"
        ),
        O.MATCH_SHAPE: Override(
            "the dims are compared inline against the heap (`native_lowering`, `_match`); a "
            "mismatch hands the call back, and the compiled mode's builtin raises its error"
        ),
        O.MAKE_SHAPE: Override(
            "a shape is a tuple of ints built inline from the heap (`native_lowering`, `_make`)"
        ),
        O.FATAL: Override(
            "no Python exception object in native code: the call is handed back (`BAIL`), "
            "and the compiled mode raises the FATAL's own error"
        ),
    },
}
"""Per exec mode, the opcodes it does not run by their `SEMANTICS` template (see the module
docstring). The bytecode and compiled modes override none."""

DERIVED: dict[Opcode, tuple[str, Callable[[Executable, tuple], Any]]] = {
    O.FATAL: ("text", lambda ex, ins: str(ex.constants[ins[1]].item())),
    O.ALLOC_ADT: ("name", lambda ex, ins: ex.constructor_names.get(ins[2])),
    O.ALLOC_CLOSURE: ("name", lambda ex, ins: ex.functions[ins[2]].name),
    O.NEW_TENSOR: ("nbytes", lambda ex, ins: new_tensor_nbytes(ins)),
    O.NEW_TENSOR_REG: ("itemsize", lambda ex, ins: numpy_dtype(ins[3]).itemsize),
}
"""Operands computed from the executable once, after the instruction's own: `(field, value)`."""

RUNTIME_NAMES: dict[str, Any] = {
    "_ndarray": np.ndarray,
    "_empty": np.empty,
    "_array": np.array,
    "_int64": np.int64,
    "_zeros": np.zeros,
    "_prod": math.prod,
    "_match_shape": match_shape,
    "_make_shape": make_shape,
    "_ADT": ADT,
    "_Closure": Closure,
}
"""The free names of the templates that are the same for every VM."""

_FIELD = re.compile(r"\{(\w+)(?::(\w+))?\}")


def template(ins: tuple, mode: str = "") -> tuple[str, str]:
    """`(variant, template)` of raw instruction `ins` in exec mode `mode`: the mode's
    override (variant: the mode's name; `OVERRIDES`), else the variant that applies, else the
    plain template (variant `""`).

    Raises:
        KeyError: `mode` writes the statement of `ins` itself (its override has no template).
    """
    op = Opcode(ins[0])
    override = OVERRIDES.get(mode, {}).get(op)
    if override is not None:
        if override.template is None:
            raise KeyError(f"{mode} writes {op.name} itself: {override.why}")
        return mode, override.template
    variant = VARIANTS.get(op)
    if variant is not None and variant[1](ins):
        return variant[0], variant[2]
    return "", SEMANTICS[op]


def fields(text: str) -> list[tuple[str, str]]:
    """The `(field, form)` pairs a template names, in order, with repeats."""
    return [(m.group(1), m.group(2) or "") for m in _FIELD.finditer(text)]


def render(text: str, operand: Callable[[str, str], str]) -> str:
    """`text` with each `{field:form}` replaced by `operand(field, form)`."""
    return _FIELD.sub(lambda m: operand(m.group(1), m.group(2) or ""), text)


def consti(value: int) -> np.ndarray:
    """The 0-d int64 array LOAD_CONSTI `value` loads: read-only, as it is shared by every run
    (kernels only write their outputs)."""
    arr = np.array(value, dtype=np.int64)
    arr.flags.writeable = False
    return arr


def closure_error(closure: Any, nargs: int, nparams: int) -> VMError:
    """The error of INVOKE_CLOSURE on `closure` with `nargs` args when the callee takes
    `nparams` values (free vars first): not a closure, or the wrong count."""
    if type(closure) is not Closure:
        return VMError(f"invoke_closure on a {type(closure).__name__}, not a closure")
    return VMError(
        f"closure @{closure.name} takes {nparams} values, got "
        f"{len(closure.free_vars)} free vars + {nargs} args"
    )


def operand_kinds(op: Opcode) -> dict[str, tuple[int, str]]:
    """Field -> (position in the instruction, kind), derived operands (kind "derived") last."""
    info = OPCODE_INFO[op]
    out = {f: (i + 1, kind) for i, (f, kind) in enumerate(info.operands)}
    if op in DERIVED:
        out[DERIVED[op][0]] = (len(info.operands) + 1, "derived")
    return out
