"""The lowering of one VM function to the source of a Numba function, for the native exec mode
(`native_codegen` writes the file of an executable's functions).

Registers become typed locals `r0, r1, ...`; non-control instructions are their opcode's
template (`semantics.template(ins, "native")`: the `OVERRIDES["native"]` form where Numba
needs another, stating why, else the `SEMANTICS` one every mode renders; `OWN_STATEMENTS` are
written here, as the table says); jit kernels are called directly (`k<i>`, the kernels' own
dispatchers, so a call is njit to njit; all but small ones by symbol, `native_symbols`); tensors
are allocated by Numba in native code.

Control flow: a function with jumps or a self tail call is a `while True:` loop over its basic
blocks dispatched on a `_pc` local (LLVM turns the constant `_pc` stores into direct branches);
IF / IF_IMM compare 0-d values (`IF_SCALARS`, `IF_SCALAR`), a self tail call rebinds the
parameters and goes to block 0, another tail call or INVOKE is a call of that native function.

Scalars: a 0-d register whose definitions are all scalar values (an output of a jit kernel's
scalar form, `executable.SCALAR_META`; a 0-d constant; a 0-d parameter; a move of one) and that
no other kernel writes is a machine scalar `s<i>`: a kernel call with a scalar form becomes
`s5 = ks0(s3, s0)` (its output's allocation is nothing), IF tests compare scalars, self tail
calls carry them, a 0-d parameter read as a scalar is read once at entry (`s0 = r0[()]`), and
where an array is needed (another kernel's input, a result, a call's argument, a tuple field)
it is made there (`_full0`; a parameter never rebound is its argument). So a loop's counter and
compare allocate nothing and call no kernel.

Shapes: an int64 heap is a numpy array, MAKE_SHAPE builds a tuple of ints (every reader takes
a shape as `{shape:dims}`), MATCH_SHAPE compares the dims inline and, on a mismatch, hands the
call back (`BAIL`): the compiled mode reruns it and raises the builtin's own error. FATAL and a
recursion deeper than `MAX_DEPTH` hand back the same way (every function takes the call depth as
its last argument `_d`), so an error reads the same as in the other modes and no recursion can
exhaust the native stack.

Data type values and closures (`native_values`): a value of a non-recursive data type is a
tuple (slots..., tag) laid out from its constructors' recorded field types (`native_adts`):
ALLOC_ADT builds it, GET_TAG reads its last item (an int64 local the tag tests compare), and
GET_FIELD after a match's tag test reads its constructor's slot; a closure passed between
functions is a tuple of its captured values and target, and its call a switch over the
targets the program's closure flow finds (`native_closures`).

What cannot be native (`NotNative`, with the reason `vm.native_report()` shows): closures
returned, put in a tuple or of unknown origin, values of recursive data types (a recursive type,
which Numba cannot type) or of data types without recorded field types, packed functions that
are not jit kernels (numpy kernels, builtins and registered Python functions), constants that
are not numeric arrays, and calls of functions that are not native themselves. Functions that
recurse through each other are rendered each as its body, then merged into one function per call
cycle (`native_groups`: calls inside the cycle are that function's self-recursive calls, tail
calls its jumps). Numba typing errors are found when a function is compiled
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rvm.runtime import semantics as sem
from rvm.runtime import shape_patterns as sp
from rvm.runtime.bytecode import Opcode
from rvm.runtime.executable import SCALAR_META
from rvm.runtime.modes.lowering.blocks import emit_block_machine, restart
from rvm.runtime.modes.lowering.flow import FlowInfo
from rvm.runtime.modes.lowering.operands import Names, Operand, OperandRenderer
from rvm.runtime.modes.lowering.scalars import fixed_parameter, scalar_registers
from rvm.runtime.modes.lowering.writer import SourceWriter
from rvm.runtime.modes.native_closures import ClosureFlow
from rvm.runtime.modes.native_values import Refused, ValueLowering
from rvm.runtime.text import describe_instruction
from rvm.runtime.weights import constant_digest

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable
    from rvm.runtime.modes.native_groups import Group

__all__ = [
    "BAIL",
    "MAX_CONSTANT_BYTES",
    "MAX_DEPTH",
    "NATIVE_BUILTINS",
    "OWN_STATEMENTS",
    "FunctionLowering",
    "NotNative",
    "entry_checks",
    "slot_name",
]

O = Opcode
MAX_CONSTANT_BYTES = 4096
"""Constants larger than this are not written into generated files (Numba would freeze each
into the object code it compiles and caches): a function reads each through a slot bound to the
executable's array at load (`native_constants`), named in `NativeModule.bound`."""
MAX_DEPTH = 1000
"""Native calls nest at most this deep (a recursive function counts its depth); deeper, the
call hands back to the compiled mode, whose own limit hands on to the bytecode loop."""

OWN_STATEMENTS = frozenset({O.FATAL, O.MATCH_SHAPE, O.MAKE_SHAPE})
"""The opcodes this module writes itself (`_stmt`): those `semantics.OVERRIDES["native"]`
gives no template, for the reason it states. Besides, ALLOC_ADT of a constructor (tag >= 0;
tag -1, a tuple, is the table's variant) is the tuple `native_adts.Layouts.build` lays out,
and GET_FIELD of a known constructor renders `TUPLE_FIELD` with the field's slot."""

NATIVE_BUILTINS = {
    "vm.builtin.write_slice": "the native helper `native_support.write_slice`, which tests "
    "the fit with the builtin's own `builtins.slice_fits` and hands the call back where the "
    "builtin raises",
    "vm.builtin.check_tensor": "its dtype and rank compared inline (`_check_tensor`), the "
    "call handed back where the builtin raises; its text operands are never loaded",
}
"""The packed builtins native code runs, and how, with the builtin's meaning (a failed check
hands the call back, and the builtin raises its own error in the compiled mode)."""


class NotNative(Exception):
    """A function cannot be native; the message says why (`vm.native_report()`)."""


def _r(reg: int) -> str:
    return f"r{reg}"


class FunctionLowering:
    """The rendering of one VM function (see the module docstring)."""

    def __init__(
        self,
        ex: Executable,
        index: int,
        names: Names,
        kinds: list[str],
        slots: dict[int, str],
        group: Group | None = None,
        closures: ClosureFlow | None = None,
    ) -> None:
        fn = ex.functions[index]
        self.ex = ex
        self.index = index
        self.names = names
        self.kinds = kinds
        self.slots = slots  # big constants' slot names, shared by the module's functions
        self.group = group  # the call cycle it is merged into (`native_groups`), if any
        self.flow = FlowInfo(fn.instructions, len(fn.params), index)
        self.callees: set[int] = set()
        self.constants: set[int] = set()
        self.immediates: set[int] = set()
        self.dtypes: set[str] = set()
        self.kernels: set[int] = set()
        self.pads: set[int] = set()
        self.scalar_kernels: set[int] = set()
        self.recursive = False
        self.lines: list[str] = []
        self._head: list[str] = []  # `render`'s def line, docstring, checks and bindings
        self.sub: dict[int, str] = {}  # registers read as materialized scalars (`_stmt`)
        self.texts: set[int] = set()  # registers of check_tensor's text operands
        bail = f"raise RuntimeError({_bail()!r})"
        self.values = ValueLowering(self, closures or ClosureFlow(ex), bail)
        try:
            self.values.refuse_function()
        except Refused as e:
            raise NotNative(str(e)) from None
        self._check()
        self.scalars = scalar_registers(fn, self.flow, ex.constants, self._scalar_kernel)
        self.w = SourceWriter(lambda pc: describe_instruction(ex, self.flow.code[pc]))
        self.operands = _Operands(self)

    def _check(self) -> None:
        self.texts = self._text_operands()
        for pc, ins in enumerate(self.flow.code):
            op = Opcode(ins[0])
            why = self.values.reason(pc, ins)
            if op == O.INVOKE_PACKED and self.kinds[ins[1]] != "jit":
                why = _packed_reason(self.ex.primitive_names[ins[1]], self.kinds[ins[1]])
            if (  # a jit kernel's own output, or a builtin native code runs
                op == O.CALL_PACKED
                and self.kinds[ins[2]] != "jit"
                and self.ex.primitive_names[ins[2]] not in NATIVE_BUILTINS
            ):
                why = _packed_reason(self.ex.primitive_names[ins[2]], self.kinds[ins[2]])
            if op == O.LOAD_CONST and ins[1] not in self.texts:
                why = _constant_reason(self.ex.constants[ins[2]])
            if why is not None:
                raise NotNative(f"{why} (pc {pc}: {describe_instruction(self.ex, ins)})")

    def _text_operands(self) -> set[int]:
        """The registers that hold only text constants read only as check_tensor's dtype and
        context (`_check_tensor` reads them at render time)."""
        code, names = self.flow.code, self.ex.primitive_names
        texts: set[int] = set()
        for ins in code:
            if ins[0] == O.CALL_PACKED and names[ins[2]] == "vm.builtin.check_tensor":
                texts.update(ins[3][2:4])
        for pc, (reads, _) in enumerate(self.flow.rw):
            ins = code[pc]
            if ins[0] == O.KILL_REGISTER:
                continue
            checks = ins[0] == O.CALL_PACKED and names[ins[2]] == "vm.builtin.check_tensor"
            texts -= set(reads) - (set(ins[3][2:4]) if checks else set())
        for r in list(texts):
            loads = [code[w] for w in self.flow.writers.get(r, []) if code[w][0] != O.KILL_REGISTER]
            if not (
                r >= self.flow.nparams
                and len(loads) == 1
                and loads[0][0] == O.LOAD_CONST
                and isinstance(self.ex.constants[loads[0][2]], np.ndarray)
                and self.ex.constants[loads[0][2]].dtype.kind == "U"
            ):
                texts.discard(r)
        return texts

    def _text(self, reg: int) -> str:
        """The text constant register ``reg`` of `texts` holds."""
        (w,) = [w for w in self.flow.writers[reg] if self.flow.code[w][0] == O.LOAD_CONST]
        return str(self.ex.constants[self.flow.code[w][2]].item())

    def _builtin(self, ins: tuple, pc: int) -> list[str]:
        """The statements of CALL_PACKED of a builtin of `NATIVE_BUILTINS`."""
        name = self.ex.primitive_names[ins[2]]
        args = ins[3]
        if name == "vm.builtin.write_slice":
            values = ", ".join(self._reg(a) for a in args)
            return [f"{_r(ins[1])} = _write_slice({values})"]
        x, ndim, dtype = self._reg(args[0]), self.flow.const_int(args[1], pc), args[2]
        if ndim is None or dtype not in self.texts:
            raise NotNative(f"check_tensor of a rank or dtype not constant (pc {pc})")
        tests = [] if ndim < 0 else [f"{x}.ndim == {ndim}"]
        if self._text(dtype):
            self.dtypes.add(self._text(dtype))
            tests.append(f"{x}.dtype == {self.names.dtype(self._text(dtype))}")
        lines = [f"if not ({' and '.join(tests)}):", f"    raise RuntimeError({_bail()!r})"]
        return [*(lines if tests else []), f"{_r(ins[1])} = {x}"]

    # -- scalar registers --------------------------------------------------------------------

    def _scalar_kernel(self, k: int) -> str | None:
        """The scalar form of primitive `k` (a jit kernel of 0-d tensors), if it has one."""
        rec = self.ex.kernels.get(self.ex.primitive_names[k])
        if self.kinds[k] != "jit" or rec is None:
            return None
        return rec.meta.get(SCALAR_META)

    def _value(self, reg: int) -> str:
        """The machine value of 0-d register `reg` (a tag, GET_TAG's, is an int64 already)."""
        if reg in self.scalars:
            return f"s{reg}"
        if self.values.is_tag(reg):
            return _r(reg)
        return f"{_r(reg)}[()]"

    def _array(self, reg: int) -> str:
        """Register `reg` as an array: a scalar register materialized (`_full0`), but a
        parameter the function never rebinds is its argument."""
        if reg not in self.scalars or self._fixed(reg):
            return _r(reg)
        self.dtypes.add(self.scalars[reg])
        return f"_full0(s{reg}, {self.names.dtype(self.scalars[reg])})"

    def _fixed(self, reg: int) -> bool:
        """Whether `reg` is a parameter that holds its argument throughout."""
        return fixed_parameter(self.flow, reg)

    def _reg(self, reg: int) -> str:
        return self.sub.get(reg, _r(reg))

    # -- rendering ---------------------------------------------------------------------------

    def render(self) -> list[str]:
        fn = self.ex.functions[self.index]
        params = [_r(i) for i in range(len(fn.params))] + ["_d"]
        code = self.flow.code
        out = [f"def {self.names.funcs[self.index]}({', '.join(params)}):"]
        out.append(f'    """@{fn.name}: {len(code)} instructions."""')
        jumps = any(ins[0] in (O.IF, O.IF_IMM, O.GOTO) for ins in code) or self.flow.self_tails
        self.machine = bool(jumps)  # a block machine: a jump to another member `break`s out
        for i in range(len(fn.params)):
            if i in self.scalars:
                self.w.line(1, f"s{i} = {_r(i)}[()]  # a scalar parameter")
        if not jumps:
            for pc in range(len(code)):
                self._stmt(pc, 1)
        else:
            bail = f"raise RuntimeError({_bail()!r})"
            emit_block_machine(self.w, self.flow, self._stmt, self._cond, bail)
        if self.recursive:
            out.append(f"    if _d > {MAX_DEPTH}:")
            out.append(f"        raise RuntimeError({_bail()!r})")
        self._head = out + self.bindings()
        return self._head + self.w.lines

    def wrap(self, call: str) -> None:
        """Makes the rendered function the wrapper of its group's merged function, which runs
        its body (`native_groups.Group.render`): it returns ``call``."""
        self.w.reset()
        self.w.ret(1, call)
        self._head = self._head[:2]
        self.lines = self._head + self.w.lines

    def body_ending(self, end: str) -> list[str]:
        """The rendered function's body (after its def line and docstring: `render` first) with
        the statement ``end`` before each of its returns (`SourceWriter.ending`)."""
        return self._head[2:] + self.w.ending(end)

    def bindings(self) -> list[str]:
        """The big constants the function reads, each bound to its slot (`native_constants`)."""
        lines = []
        for c in sorted(self.constants):
            value = self.ex.constants[c]
            if value.nbytes > MAX_CONSTANT_BYTES:
                self.dtypes.add(value.dtype.name)
                name = slot_name(self.ex, c, self.slots)
                dtype = self.names.dtype(value.dtype.name)
                lines.append(f"    c{c} = _bound({name!r}, {tuple(value.shape)!r}, {dtype})")
        return lines

    def _cond(self, pc: int) -> str:
        """The test of the IF / IF_IMM at `pc` on machine scalars."""
        ins = self.flow.code[pc]
        if ins[0] == O.IF:
            given = {"test": self._value(ins[1]), "target": self._value(ins[2])}
            return sem.render(sem.IF_SCALARS, lambda f, _: given[f])
        given = {"test": self._value(ins[1]), "value": str(ins[2])}
        return sem.render(sem.IF_SCALAR, lambda f, _: given[f])

    def _stmt(self, pc: int, indent: int) -> bool:
        """Writes the statement(s) of the non-jump instruction at `pc`; True if it ends the
        path."""
        ins = self.flow.code[pc]
        op = ins[0]
        w = self.w
        scalar = self._scalar_stmt(ins)
        if scalar is not None:
            w.line(indent, scalar, pc)
            return False
        self.sub = {}
        if op != O.TAIL_INVOKE or pc not in self.flow.self_tails:
            for r in self.flow.rw[pc][0]:
                if r in self.scalars and r not in self.sub and not self._fixed(r):
                    self.sub[r] = f"m{r}"
                    w.line(indent, f"m{r} = {self._array(r)}  # scalar s{r} as an array")
        if op == O.RET:
            w.ret(indent, self._reg(ins[1]), pc)
            return True
        if op == O.LOAD_CONST and ins[1] in self.texts:
            w.line(indent, f"pass  # {_r(ins[1])}: a text check_tensor reads", pc)
            return False
        if op == O.CALL_PACKED and self.ex.primitive_names[ins[2]] in NATIVE_BUILTINS:
            *head, last = self._builtin(ins, pc)
            for text in head:
                w.line(indent, text)
            w.line(indent, last, pc)
            return False
        if op == O.FATAL:
            w.line(indent, f"raise RuntimeError({_bail()!r})", pc)
            return True
        if op == O.TAIL_INVOKE:
            self._tail(pc, ins, indent)
            return True
        ends = self.values.statement(pc, ins, indent)
        if ends is not None:
            return ends
        if op == O.INVOKE:
            w.line(indent, f"{_r(ins[1])} = {self._call(ins[2], ins[3])}", pc)
        elif op == O.MATCH_SHAPE:
            *head, last = self._match(ins, pc)
            for text in head:
                w.line(indent, text)
            w.line(indent, last, pc)
        elif op == O.MAKE_SHAPE:
            w.line(indent, f"{_r(ins[1])} = {self._make(ins, pc)}", pc)
        else:
            w.line(indent, self.operands.render(sem.template(ins, "native")[1], ins, pc), pc)
        return False

    def _scalar_stmt(self, ins: tuple) -> str | None:
        """The statement of `ins` on scalar registers, if it is one: the scalar form of a
        kernel, a value load or move, an allocation of a scalar (none)."""
        op, dst = ins[0], ins[1]
        if op == O.INVOKE_PACKED:
            name = self._scalar_kernel(ins[1])
            args = ins[4]
            if name is None or ins[3] != 1 or args[-1] not in self.scalars:
                return None
            self.scalar_kernels.add(ins[1])
            values = ", ".join(self._value(r) for r in args[:-1])
            return f"s{args[-1]} = ks{ins[1]}({values})"
        if op in (O.NEW_TENSOR, O.ALLOC_TENSOR) and dst in self.scalars:
            return f"pass  # s{dst} is a scalar"
        if op == O.LOAD_CONST and dst in self.scalars:
            self.constants.add(ins[2])
            return f"s{dst} = c{ins[2]}[()]"
        if op == O.LOAD_CONSTI and dst in self.scalars:
            return f"s{dst} = _int64({int(ins[2])})"
        if op == O.MOVE and dst in self.scalars:
            return f"s{dst} = {self._value(ins[2])}"
        if op == O.MOVE and ins[2] in self.scalars:
            return f"{_r(dst)} = {self._array(ins[2])}"
        return None

    def _call(self, callee: int, args: tuple[int, ...]) -> str:
        if callee == self.index:
            self.recursive = True
        self.callees.add(callee)
        if self.group is not None and callee in self.group.members:
            self.recursive = True
            return self.group.call(callee, [self._reg(a) for a in args])
        return f"{self.names.funcs[callee]}({', '.join([self._reg(a) for a in args] + ['_d + 1'])})"

    def _tail(self, pc: int, ins: tuple, indent: int) -> None:
        if self.group is not None and ins[1] in self.group.members and ins[1] != self.index:
            self.callees.add(ins[1])
            self.w.line(indent, self.group.jump(ins[1], [self._reg(a) for a in ins[2]]), pc)
            self.w.line(indent, "break" if self.machine else "continue", pc)
            return
        if pc not in self.flow.self_tails:
            self.w.ret(indent, self._call(ins[1], ins[2]), pc)
            return
        moved = [(i, r) for i, r in enumerate(ins[2]) if i != r]
        if moved:
            params, values = [], []
            for i, r in moved:
                params.append(f"s{i}" if i in self.scalars else _r(i))
                values.append(self._value(r) if i in self.scalars else self._array(r))
            self.w.line(indent, f"{', '.join(params)} = {', '.join(values)}", pc)
        restart(self.w, indent, pc)

    def _pairs(
        self, const: int, heap: int, pc: int, kinds: tuple[int, ...] = sp.MATCH_KINDS
    ) -> list[tuple[int, Any]]:
        """The (kind, value) pairs of shape pattern `const` read against heap register `heap`,
        whose slots must be in range of the one ALLOC_SHAPE_HEAP that surely made it by `pc`:
        native code indexes the heap unchecked."""
        code = self.flow.code
        made = [w for w in self.flow.writers.get(heap, []) if code[w][0] != O.KILL_REGISTER]
        if (
            heap < self.flow.nparams
            or len(made) != 1
            or code[made[0]][0] != O.ALLOC_SHAPE_HEAP
            or not self.flow.assigned(heap, pc)
        ):
            raise NotNative(f"shape heap {_r(heap)} is not one alloc_shape_heap's")
        try:
            return sp.decode(self.ex.constants[const], kinds, code[made[0]][2])
        except sp.PatternError as err:
            raise NotNative(f"shape pattern c{const} {err}") from None

    def _match(self, ins: tuple, pc: int) -> list[str]:
        """MATCH_SHAPE (`vm.builtin.match_shape`): the rank and dims compared inline, the
        symbolic dims stored in the heap; a mismatch hands the call back (the builtin raises
        the error in the compiled mode)."""
        tensor, heap = self._reg(ins[1]), self._reg(ins[2])
        pairs = self._pairs(ins[3], ins[2], pc)
        n = len(pairs)
        self.pads.add(n)
        test = [f"len({tensor}.shape) == {n}"]
        stores = []
        for axis, (k, v) in enumerate(pairs):
            if k == sp.LITERAL:
                test.append(f"_s[{axis}] == {v}")
            elif k == sp.STORE:
                stores.append(f"{heap}[{v}] = _s[{axis}]")
            elif k == sp.CHECK:
                test.append(f"_s[{axis}] == {heap}[{v}]")
            elif k == sp.EXPR:
                test.append(f"_s[{axis}] == {sp.render(v, lambda slot: f'{heap}[{slot}]')}")
        lines = [f"_s = {tensor}.shape + _PAD{n}"]
        # kind 2 may read a slot an earlier axis of this pattern stores: store, then test
        lines += stores
        lines += [f"if not ({' and '.join(test)}):", f"    raise RuntimeError({_bail()!r})"]
        return lines

    def _make(self, ins: tuple, pc: int) -> str:
        """MAKE_SHAPE (`vm.builtin.make_shape`) as a tuple of ints."""
        dims = []
        heap = self._reg(ins[2])
        for k, v in self._pairs(ins[3], ins[2], pc, sp.MAKE_KINDS):
            if k == sp.EXPR:
                dims.append(sp.render(v, lambda slot: f"{heap}[{slot}]"))
            else:
                dims.append(str(v) if k == sp.LITERAL else f"{heap}[{v}]")
        return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"

    def _is_shape(self, reg: int) -> bool:
        writers = self.flow.writers.get(reg, [])
        code = self.flow.code
        return bool(writers) and all(code[w][0] in (O.MAKE_SHAPE, O.KILL_REGISTER) for w in writers)


class _Operands(OperandRenderer):
    """The native mode's operands: registers through the function's scalar substitutions,
    `{size:scalar}` as a machine value, shapes only from MAKE_SHAPE, kernels as `k<i>`; every
    constant, dtype, immediate and kernel named is recorded for the file's head."""

    def __init__(self, f: FunctionLowering) -> None:
        super().__init__(f.ex, f.names)
        self.f = f

    def reg(self, o: Operand) -> str:
        f, v = self.f, o.value
        if o.form == "scalar" and v in f.scalars:
            return f"s{v}"
        if o.form == "scalar":
            size = f.flow.const_int(v, o.pc)
            return str(size) if size is not None else f"{_r(v)}[()]"
        if o.form == "dims" and not f._is_shape(v):
            raise NotNative(f"shape register {_r(v)} is not made by make_shape")
        return f._reg(v)

    def const(self, o: Operand) -> str:
        self.f.constants.add(o.value)
        return f"c{o.value}"

    def packed(self, o: Operand) -> str:
        self.f.kernels.add(o.value)
        return f"k{o.value}"

    def dtype(self, o: Operand) -> str:
        self.f.dtypes.add(o.value)
        return Names.dtype(o.value)

    def value(self, o: Operand) -> str:
        if o.form == "consti":
            self.f.immediates.add(o.value)
        return super().value(o)


BAIL = "rvm native: rerun in compiled mode"
"""The message of the exception native code raises to hand a call back to the compiled mode."""


def _bail() -> str:
    return BAIL


def _packed_reason(name: str, kind: str) -> str:
    if kind == "numpy":
        return f"numpy (non-jit) kernel {name}"
    if name.startswith("vm.builtin."):
        return f"packed Python builtin {name}"
    return f"calls the registered Python function {name}"


def _constant_reason(value: object) -> str | None:
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        return f"constant of type {type(value).__name__}"
    return None


def slot_name(ex: Executable, index: int, slots: dict[int, str]) -> str:
    """The slot's name of big constant ``index`` of ``ex``, by its dtype, shape and bytes
    (`rvm.runtime.weights.constant_digest`: a loaded file's are recorded in it, so a load
    does not hash the weights; `native_constants`); ``slots`` remembers it per index."""
    if index not in slots:
        slots[index] = f"rvm_const_{constant_digest(ex, index)[:24]}"
    return slots[index]


def entry_checks(ex: Executable, index: int) -> list[str]:
    """The dims checks of a call of function `index` from Python (its entry runs them,
    `native_codegen.entry_name`): fixed dims, symbolic dims shared by parameters, dimension
    expressions whose names they bind (``past + seq``, `shape_patterns.DimProgram`), and the
    declared ranges of bounded ones (`VMFunction.dim_ranges`: the VM's fast path leaves them
    to this check).
    Their dtypes and ranks are the compiled signature of the mode's entry dispatcher, so
    Numba checks those; a mismatch raises, and the VM's own entry checks then report it in
    the words of every mode."""
    fn = ex.functions[index]
    tests: list[str] = []
    seen: dict[str, str] = {}
    exprs: list[tuple[str, sp.DimProgram]] = []
    for i, spec in enumerate(fn.param_specs):
        for axis, want in enumerate(spec.shape or ()):
            dim = f"{_r(i)}.shape[{axis}]"
            if isinstance(want, int):
                tests.append(f"{dim} == {want}")
            elif isinstance(want, sp.DimProgram):
                exprs.append((dim, want))
            elif isinstance(want, str):
                if want in seen:
                    tests.append(f"{dim} == {seen[want]}")
                else:
                    seen[want] = dim
    for dim, want in exprs:  # a name no parameter binds: a size of its own
        if all(n in seen for n in want.names):
            value = sp.render(want.program, lambda s, n=want.names: seen[n[s]])
            tests.append(f"{dim} == {value}")
    for name, lo, hi in fn.dim_ranges:
        if name in seen:  # else `range_probes` keeps the VM from taking the fast path
            tests += [f"{seen[name]} >= {lo}"] * (lo is not None)
            tests += [f"{seen[name]} <= {hi}"] * (hi is not None)
    if not tests:
        return []
    return [
        "    if not (" + " and ".join(tests) + "):  # the entry's dims",
        f"        raise RuntimeError({_bail()!r})",
    ]
