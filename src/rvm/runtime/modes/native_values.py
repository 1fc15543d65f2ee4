"""The data type values and closures of one native function's lowering: which of them native
code cannot hold (a reason for `native_lowering.NotNative`), and their statements.

A data type value is the tuple `native_adts` lays out (ALLOC_ADT builds it, GET_FIELD of a
constructor the match tested reads its slot, GET_TAG its last item, the table's native
override); a closure is its class's tuple (`native_closures`): ALLOC_CLOSURE builds it, and
INVOKE_CLOSURE / TAIL_INVOKE_CLOSURE are a switch over the targets it may hold, each a native
call with the captured values first, any other target handing the call back (`BAIL`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rvm.runtime import semantics as sem
from rvm.runtime.bytecode import Opcode
from rvm.runtime.modes.lowering.operands import Names
from rvm.runtime.modes.native_adts import Key, Layouts, NoLayout, has_adt, known_tags, spec_key
from rvm.runtime.modes.native_closures import UNKNOWN, ClosureFlow

if TYPE_CHECKING:
    from rvm.runtime.modes.native_lowering import FunctionLowering

__all__ = ["Refused", "ValueLowering"]

O = Opcode
_CLOSURES = (O.ALLOC_CLOSURE, O.INVOKE_CLOSURE, O.TAIL_INVOKE_CLOSURE)


class Refused(Exception):
    """A value of the function native code cannot hold; the message says why."""


class ValueLowering:
    """The data type values and closures of function lowering ``f`` (see the module
    docstring); ``bail`` is the statement that hands a call back."""

    def __init__(self, f: FunctionLowering, closures: ClosureFlow, bail: str) -> None:
        self.f = f
        self.adts = Layouts(f.ex)
        self.closures = closures
        self.bail = bail
        self.tags = known_tags(f.flow)  # per pc, the registers of a known constructor

    # -- what cannot be native ---------------------------------------------------------------

    def refuse_function(self) -> None:
        """Refuses parameters and a result native code cannot hold or convert at the
        boundary, and a closure returned (`Refused`)."""
        f = self.f
        fn = f.ex.functions[f.index]
        if self.closures.returned.get(f.index, set()) - {UNKNOWN}:
            raise Refused("returns a closure (a VM object where its caller is Python)")
        for spec in fn.param_specs:
            key = spec_key(spec)
            if spec.kind == "adt" and key is None:
                raise Refused(f"parameter {spec.name!r} is a data type value of unknown type")
            if has_adt(key):
                self._layout(key, f"parameter {spec.name!r}")
        key = spec_key(fn.result)
        if has_adt(key):
            self._layout(key, "its result")
        unknown = fn.result is None or (key is None and fn.result.kind != "tensor")
        if unknown and self._holds_adts():
            raise Refused("a result of unknown type in a function of data type values")

    def reason(self, pc: int, ins: tuple) -> str | None:
        """Why instruction ``ins`` at ``pc`` cannot be native, or None."""
        op = ins[0]
        if op in _CLOSURES:
            return self._closure_reason(ins)
        if op == O.ALLOC_ADT and self.closures.held_any(self.f.index, ins[3]):
            return "a closure in a tuple or data type value"
        if op == O.ALLOC_ADT and ins[2] >= 0:
            try:
                self.adts.get(self.adts.adt_of[ins[2]])
            except NoLayout as e:
                return str(e)
        if op == O.GET_FIELD and ins[2] not in (self.tags[pc] or {}):
            return self._untagged(ins[2])
        return None

    def _layout(self, key: Key, what: str) -> None:
        try:
            self.adts.dummy(key, Names.dtype)
        except NoLayout as e:
            raise Refused(f"{what}: {e}") from None

    def _holds_adts(self) -> bool:
        """Whether the function takes, builds or is given data type values."""
        f = self.f
        functions = f.ex.functions
        if any(has_adt(spec_key(s)) for s in functions[f.index].param_specs):
            return True
        for ins in f.flow.code:
            if ins[0] == O.ALLOC_ADT and ins[2] >= 0:
                return True
            if ins[0] in (O.INVOKE, O.TAIL_INVOKE):
                callee = functions[ins[2] if ins[0] == O.INVOKE else ins[1]]
                if has_adt(spec_key(callee.result)):
                    return True
        return False

    def _closure_reason(self, ins: tuple) -> str | None:
        f = self.f
        if ins[0] == O.ALLOC_CLOSURE:
            targets = {ins[2]}
        else:
            targets = self.closures.targets(f.index, ins[2 if ins[0] == O.INVOKE_CLOSURE else 1])
            if not targets or UNKNOWN in targets:
                return (
                    "a call of a closure of unknown origin (read from a tuple or a packed result)"
                )
        for t in sorted(targets):
            if t == f.index or (f.group is not None and t in f.group.members):
                return f"a closure call of @{f.ex.functions[t].name} inside its call cycle"
            try:
                for _, key in self.closures.slots(t):
                    self._layout(key, "a captured value")
            except (ValueError, Refused) as e:
                return str(e)
        return None

    def _untagged(self, reg: int) -> str | None:
        """Why GET_FIELD of ``reg`` with no known constructor cannot be native: it is read as
        a tuple, so ``reg`` must not hold a data type value there."""
        flow = self.f.flow
        writes = [flow.code[w] for w in flow.writers.get(reg, [])]
        specs = self.f.ex.functions[self.f.index].param_specs
        if (reg < flow.nparams and specs[reg].kind == "adt") or any(
            w[0] == O.ALLOC_ADT and w[2] >= 0 for w in writes
        ):
            return f"a field of data type value r{reg} read with no constructor test"
        return None

    # -- statements --------------------------------------------------------------------------

    def is_tag(self, reg: int) -> bool:
        """Whether ``reg`` holds only GET_TAG's tags (an int64 local, no 0-d array)."""
        flow = self.f.flow
        writes = [flow.code[w][0] for w in flow.writers.get(reg, [])]
        return bool(writes) and reg >= flow.nparams and all(w == O.GET_TAG for w in writes)

    def statement(self, pc: int, ins: tuple, indent: int) -> bool | None:
        """Writes the statement(s) of ``ins`` if it is one of these values' (True if it ends
        the path), else returns None."""
        f, op = self.f, ins[0]
        if op == O.ALLOC_CLOSURE:
            f.w.line(indent, f"r{ins[1]} = {self._closure(ins)}", pc)
        elif op in (O.INVOKE_CLOSURE, O.TAIL_INVOKE_CLOSURE):
            self._closure_call(pc, ins, indent)
            return op == O.TAIL_INVOKE_CLOSURE
        elif op == O.ALLOC_ADT and ins[2] >= 0:
            for key in self.adts.get(self.adts.adt_of[ins[2]]).slots:
                self._dtypes_of(key)
            value = self.adts.build(ins[2], [f._reg(a) for a in ins[3]], Names.dtype)
            f.w.line(indent, f"r{ins[1]} = {value}", pc)
        elif op == O.GET_FIELD and ins[2] in (self.tags[pc] or {}):
            tag = self.tags[pc][ins[2]]
            slot = self.adts.get(self.adts.adt_of[tag]).where[tag][ins[3]]
            given = {"dst": f"r{ins[1]}", "obj": f._reg(ins[2]), "index": str(slot)}
            f.w.line(indent, sem.render(sem.TUPLE_FIELD, lambda name, _: given[name]), pc)
        else:
            return None
        return False

    def _dtypes_of(self, key: Key) -> None:
        """Records the dtypes the placeholders of a value of type ``key`` name."""
        if key[0] == "tensor":
            self.f.dtypes.add(key[1])
        else:
            keys = key[1] if key[0] == "tuple" else self.adts.get(key[1]).slots
            for k in keys:
                self._dtypes_of(k)

    def _closure(self, ins: tuple) -> str:
        """ALLOC_CLOSURE as its class's tuple: captured values, target."""
        target, values = ins[2], [self.f._reg(r) for r in ins[3]]
        out = []
        for _, key in self.closures.slots(target):
            self._dtypes_of(key)
            out.append(self.adts.dummy(key, Names.dtype))
        for slot, value in zip(self.closures.where(target), values):
            out[slot] = value
        out.append(f"_int64({target})")
        return f"({out[0]},)" if len(out) == 1 else f"({', '.join(out)})"

    def _closure_call(self, pc: int, ins: tuple, indent: int) -> None:
        """A switch over the closure's targets, each a call of its function with the captured
        values first; any other target hands the call back."""
        f = self.f
        tail = ins[0] == O.TAIL_INVOKE_CLOSURE
        closure, args = (ins[1], ins[2]) if tail else (ins[2], ins[3])
        c = f._reg(closure)
        for n, t in enumerate(sorted(self.closures.targets(f.index, closure))):
            f.callees.add(t)
            values = [f"{c}[{s}]" for s in self.closures.where(t)]
            values += [f._reg(a) for a in args] + ["_d + 1"]
            call = f"{f.names.funcs[t]}({', '.join(values)})"
            f.w.line(indent, f"{'if' if n == 0 else 'elif'} {c}[-1] == {t}:", pc)
            if tail:
                f.w.ret(indent + 1, call)
            else:
                f.w.line(indent + 1, f"r{ins[1]} = {call}")
        f.w.line(indent, "else:")
        f.w.line(indent + 1, self.bail)
