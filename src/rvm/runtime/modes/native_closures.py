"""Closures in native code: which functions a closure may call, and its value as a tuple.

Numba has no closure object, so a closure that stays inside the program is the tuple of its
captured values and its target function's index, ``(slot, ..., target)``, and a call of it is a
switch over the targets it may hold. Which ones: a whole-program flow analysis (`ClosureFlow`)
of where each ALLOC_CLOSURE's value goes, through moves, calls' arguments and parameters,
results and closure calls, to a fixpoint. The targets that may meet in one register form one
class (union-find), whose values share one Numba type: the captured values laid out as a data
type's fields are (a slot per (position, type), the others an empty array of their type;
`native_adts.Layouts`), the target last, so every value of a class types the same and the
switch's branches unify.

A closure Python passes in (a `Closure` a VM call returned) becomes its class's tuple at the
boundary (`to_native`): every closure some function returns may come back so, in any parameter
of no fixed type, and the analysis counts it there. A closure read from a tuple or a packed
function's result (its origin unknown), one put in a tuple and one returned from a function (a
VM object where the caller is Python) are not lowered: those functions run in the compiled
mode, saying why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rvm.runtime.bytecode import Opcode
from rvm.runtime.modes.native_adts import Key, Layouts, packing, spec_key

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable

__all__ = ["UNKNOWN", "ClosureFlow"]

O = Opcode
UNKNOWN = -1
"""A closure whose target the analysis does not know: a value read from a tuple or data type
value, or returned by a packed function, once the program puts a closure in one or gives one to
a packed function (`ClosureFlow.boxed`)."""


class ClosureFlow:
    """Where an executable's closures go (see the module docstring).

    Attributes:
        held: Per (function, register), the targets of the closures it may hold.
        returned: Per function, the targets of the closures it may return.
        captured: Per target, how many captured values its closures hold.
    """

    def __init__(self, ex: Executable) -> None:
        self.ex = ex
        self.held: dict[tuple[int, int], set[int]] = {}
        self.returned: dict[int, set[int]] = {}
        self.captured: dict[int, int] = {}
        self.boxed = False  # whether a closure is put in a tuple or given to a packed function
        self._solve()
        self._parent: dict[int, int] = {t: t for t in self.captured}
        for targets in [*self.held.values(), *self.returned.values()]:
            known = sorted(t for t in targets if t != UNKNOWN)
            for t in known[1:]:
                self._parent[self._find(t)] = self._find(known[0])
        self._slots: dict[int, dict[tuple[int, Key], int]] = {}

    def _flow(self, into: set[int], source: set[int]) -> bool:
        new = source - into
        into |= new
        return bool(new)

    def _solve(self) -> None:
        functions = self.ex.functions
        for f in functions:
            for ins in f.instructions:
                if ins[0] == O.ALLOC_CLOSURE:
                    self.captured[ins[2]] = len(ins[3])
        changed = True
        while changed:
            changed = False
            for i, f in enumerate(functions):
                for ins in f.instructions:
                    changed |= self._step(i, ins)
            # Python may pass back, in any parameter of no fixed type, a closure returned to it
            escaped = {t for out in self.returned.values() for t in out if t != UNKNOWN}
            for i, f in enumerate(functions):
                for p, spec in enumerate(f.param_specs):
                    if spec.kind == "any":
                        changed |= self._flow(self._set(i, p), escaped)

    def _set(self, fidx: int, reg: int) -> set[int]:
        return self.held.setdefault((fidx, reg), set())

    def _step(self, i: int, ins: tuple) -> bool:
        """Applies instruction ``ins`` of function ``i``; whether any set grew."""
        op = ins[0]
        out = self.returned.setdefault(i, set())
        if op == O.ALLOC_CLOSURE:
            return self._flow(self._set(i, ins[1]), {ins[2]})
        if op == O.MOVE:
            return self._flow(self._set(i, ins[1]), self._set(i, ins[2]))
        if op == O.RET:
            return self._flow(out, self._set(i, ins[1]))
        if op == O.ALLOC_ADT and not self.boxed:  # a closure put in a value: fields unknown
            self.boxed = any(self._set(i, r) - {UNKNOWN} for r in ins[3])
            return self.boxed
        if op in (O.INVOKE_PACKED, O.CALL_PACKED) and not self.boxed:  # given to Python
            args = ins[4] if op == O.INVOKE_PACKED else ins[3]
            self.boxed = any(self._set(i, r) - {UNKNOWN} for r in args)
            return self.boxed
        if op == O.GET_FIELD and self.boxed or op == O.CALL_PACKED and self.boxed:
            return self._flow(self._set(i, ins[1]), {UNKNOWN})
        if op in (O.INVOKE, O.TAIL_INVOKE):
            callee, args = (ins[2], ins[3]) if op == O.INVOKE else (ins[1], ins[2])
            grew = self._args(i, callee, args, 0)
            into = self._set(i, ins[1]) if op == O.INVOKE else out
            return self._flow(into, self.returned.setdefault(callee, set())) or grew
        if op in (O.INVOKE_CLOSURE, O.TAIL_INVOKE_CLOSURE):
            closure, args = (ins[2], ins[3]) if op == O.INVOKE_CLOSURE else (ins[1], ins[2])
            grew = False
            into = self._set(i, ins[1]) if op == O.INVOKE_CLOSURE else out
            for t in list(self._set(i, closure)):
                if t == UNKNOWN:
                    grew |= self._flow(into, {UNKNOWN})
                    continue
                grew |= self._args(i, t, args, self.captured[t])
                grew |= self._flow(into, self.returned.setdefault(t, set()))
            return grew
        return False

    def _args(self, i: int, callee: int, args: tuple[int, ...], first: int) -> bool:
        grew = False
        for j, a in enumerate(args):
            grew |= self._flow(self._set(callee, first + j), self._set(i, a))
        return grew

    def _find(self, t: int) -> int:
        while self._parent[t] != t:
            self._parent[t] = self._parent[self._parent[t]]
            t = self._parent[t]
        return t

    # -- layout --------------------------------------------------------------------------------

    def held_any(self, fidx: int, regs: tuple[int, ...]) -> bool:
        """Whether a register of ``regs`` of function ``fidx`` may hold a known closure."""
        return any(self.targets(fidx, r) - {UNKNOWN} for r in regs)

    def targets(self, fidx: int, reg: int) -> set[int]:
        """The targets of the closures register ``reg`` of function ``fidx`` may hold."""
        return self.held.get((fidx, reg), set())

    def slots(self, target: int) -> dict[tuple[int, Key], int]:
        """The slots of the class of ``target``: per (position, type) of a captured value.

        Raises:
            ValueError: A captured value of a target of the class has no fixed type.
        """
        root = self._find(target)
        if root not in self._slots:
            slots: dict[tuple[int, Key], int] = {}
            for t in sorted(t for t in self.captured if self._find(t) == root):
                for j, key in enumerate(self.keys(t)):
                    slots.setdefault((j, key), len(slots))
            self._slots[root] = slots
        return self._slots[root]

    def keys(self, target: int) -> list[Key]:
        """The types of the values a closure of ``target`` captures."""
        fn = self.ex.functions[target]
        keys = [spec_key(s) for s in fn.param_specs[: self.captured[target]]]
        if any(k is None for k in keys):
            raise ValueError(f"a closure of @{fn.name} captures a value of no fixed type")
        return keys  # type: ignore[return-value]

    def where(self, target: int) -> list[int]:
        """The slot of each value a closure of ``target`` captures."""
        slots = self.slots(target)
        return [slots[(j, k)] for j, k in enumerate(self.keys(target))]

    def to_native(self, fidx: int, param: int, layouts: Layouts) -> Callable[[Any], Any] | None:
        """The conversion of a `Closure` Python passes in parameter ``param`` of ``fidx``
        into its class's tuple, or None where the program passes that parameter no closure.
        A closure of a function outside the class raises KeyError (the call then runs in the
        compiled mode); one of the class the code does not call there hands the call back."""
        targets = {t for t in self.targets(fidx, param) if t != UNKNOWN}
        if not targets:
            return None
        root = self._find(min(targets))
        members = [t for t in self.captured if self._find(t) == root]
        slots = self.slots(root)
        empty = [layouts.empty(key) for _, key in slots]  # never written: native code reads
        per_target = {
            t: tuple(zip(self.where(t), (layouts.to_native(k) for k in self.keys(t))))
            for t in members
        }
        pack = packing(empty, per_target)
        return lambda value: pack(value.func_index, value.free_vars)
