"""Values of algebraic data types in native code: their layout as Numba tuples, the
constructor each GET_FIELD reads, and their conversion at the boundary with the VM.

Numba has no `ADT` object and no recursive types, so a value of a non-recursive data type is a
flat tuple ``(slot, ..., tag)``: its constructor's fields in the type's slots and its tag, an
int64, last. The slots come from the constructors' field types the executable records
(`ADTInfo.fields`): field ``j`` of a type ``k`` sits in the slot of ``(j, k)``, so
constructors that agree on a position's type share its slot (an ``Option`` is ``(x, tag)``,
padded to its widest constructor), and those that do not (``A(f32) | B(i64)``) each get their
own; a constructor fills the slots it does not use with an empty array of the slot's type
(a tuple of them for a tuple, a dummy value for a data type), so every value of a data type
has one Numba type and the branches of a match unify. A data type that contains itself
(``List = Nil | Cons(x, List)``) has no such tuple; its values stay in the compiled mode.

A field is read by its constructor's slot: GET_FIELD follows the tag test of a match
(`known_tags`: after ``GET_TAG t, v; IF_IMM t, C``, the taken branch knows that ``v`` is a
``C``), as the VM codegen emits every pattern.

At the boundary, `to_native` converts the VM's `ADT` arguments into tuples and `from_native`
the results back into `ADT` objects with their constructors' names, by the specs of the
function's parameters and result, so results read as in the other modes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from rvm.runtime.bytecode import Opcode
from rvm.runtime.objects import ADT

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable, ParamSpec
    from rvm.runtime.modes.lowering.flow import FlowInfo

__all__ = ["Key", "Layout", "Layouts", "NoLayout", "has_adt", "known_tags", "packing", "spec_key"]

Key = tuple
"""A field's type in native code: ``("tensor", dtype, ndim)``, ``("tuple", (key, ...))`` or
``("adt", name)``."""


class NoLayout(Exception):
    """A value cannot be a native tuple; the message says why."""


def spec_key(spec: ParamSpec | None) -> Key | None:
    """The native type of a value of ``spec``, or None where the spec does not fix one (an
    unknown kind, dtype or rank, a tuple of unknown fields)."""
    if spec is None:
        return None
    if spec.kind == "tensor" and spec.dtype and spec.shape is not None:
        return ("tensor", str(spec.dtype), len(spec.shape))
    if spec.kind == "tuple" and spec.fields is not None:
        keys = tuple(spec_key(f) for f in spec.fields)
        return None if any(k is None for k in keys) else ("tuple", keys)
    if spec.kind == "adt" and spec.adt:
        return ("adt", spec.adt)
    return None


def has_adt(key: Key | None) -> bool:
    """Whether a value of ``key`` holds a data type's value."""
    if key is None or key[0] == "tensor":
        return False
    return key[0] == "adt" or any(has_adt(k) for k in key[1])


@dataclass(frozen=True)
class Layout:
    """The native tuple of a data type's values.

    Attributes:
        name: The data type.
        slots: The type of each slot (the tag, an int64, follows them).
        where: Per constructor tag, the slot of each of its fields.
        fields: Per constructor tag, the type of each of its fields.
        names: Per constructor tag, the constructor's name.
    """

    name: str
    slots: tuple[Key, ...]
    where: dict[int, tuple[int, ...]]
    fields: dict[int, tuple[Key, ...]]
    names: dict[int, str]


class Layouts:
    """The layouts of an executable's data types, made when first asked for."""

    def __init__(self, ex: Executable) -> None:
        self.infos = {info.name: info for info in ex.adts}
        self.adt_of = {tag: info.name for info in ex.adts for _, tag, _ in info.constructors}
        self._made: dict[str, Layout] = {}

    def get(self, name: str) -> Layout:
        """The layout of data type ``name``; NoLayout says why it has none."""
        found = self._made.get(name)
        if found is None:
            self._contains(name, name, set())
            found = self._made[name] = self._layout(name)
        return found

    def _contains(self, name: str, inside: str, seen: set[str]) -> None:
        """Refuses ``name`` if a field of ``inside``, nested, is of type ``name``."""
        info = self.infos.get(inside)
        if info is None:
            raise NoLayout(f"data type {inside} is not in the executable")
        if info.fields is None:
            raise NoLayout(f"data type {inside} has no recorded field types")
        seen.add(inside)
        for spec in (s for fields in info.fields for s in fields):
            for adt in _adts_in(spec_key(spec)):
                if adt == name:
                    raise NoLayout(f"recursive data type {name}")
                if adt not in seen:
                    self._contains(name, adt, seen)

    def _layout(self, name: str) -> Layout:
        info = self.infos[name]
        slots: dict[tuple[int, Key], int] = {}
        where, fields, names = {}, {}, {}
        for (cname, tag, _), specs in zip(info.constructors, info.fields or ()):
            keys = tuple(spec_key(s) for s in specs)
            if any(k is None for k in keys):
                raise NoLayout(
                    f"data type {name}: constructor {cname} has a field of no fixed type"
                )
            where[tag] = tuple(slots.setdefault((j, k), len(slots)) for j, k in enumerate(keys))
            fields[tag], names[tag] = keys, cname
        return Layout(name, tuple(k for _, k in slots), where, fields, names)

    def dummy(self, key: Key, dtype: Callable[[str], str]) -> str:
        """Numba source of a placeholder value of type ``key`` (`dtype` names a dtype)."""
        if key[0] == "tensor":
            return f"_np.empty({(0,) * key[2]!r}, {dtype(key[1])})"
        if key[0] == "tuple":
            return _tuple([self.dummy(k, dtype) for k in key[1]])
        layout = self.get(key[1])
        return _tuple([*(self.dummy(k, dtype) for k in layout.slots), "_int64(-1)"])

    def build(self, tag: int, values: list[str], dtype: Callable[[str], str]) -> str:
        """Numba source of the value of constructor ``tag`` of the fields ``values``."""
        layout = self.get(self.adt_of[tag])
        out = [self.dummy(k, dtype) for k in layout.slots]
        for slot, value in zip(layout.where[tag], values):
            out[slot] = value
        return _tuple([*out, f"_int64({tag})"])

    # -- the boundary with the VM ------------------------------------------------------------

    def to_native(self, key: Key) -> Callable[[Any], Any]:
        """The conversion of a VM value of type ``key`` into native code's value (made once
        per function: a call converts with no lookups)."""
        if key[0] == "tensor":
            return _contiguous
        if key[0] == "tuple":
            items = [self.to_native(k) for k in key[1]]
            return lambda value: tuple(f(v) for f, v in zip(items, value))
        layout = self.get(key[1])
        empty = [self.empty(k) for k in layout.slots]  # never written: native code reads
        per_tag = {  # only the slots of the constructor its tag names
            tag: tuple(zip(layout.where[tag], (self.to_native(k) for k in layout.fields[tag])))
            for tag in layout.where
        }
        pack = packing(empty, per_tag)
        return lambda value: pack(value.tag, value.fields)

    def from_native(self, key: Key) -> Callable[[Any], Any] | None:
        """The conversion of native code's value of type ``key`` into the VM's, or None where
        they are the same (a tensor)."""
        if key[0] == "tensor":
            return None
        if key[0] == "tuple":
            items = [self.from_native(k) or _same for k in key[1]]
            return lambda value: tuple(f(v) for f, v in zip(items, value))
        layout = self.get(key[1])
        per_tag: dict[int, Callable[[tuple], ADT]] = {}
        for tag, slots in layout.where.items():
            fields = [self.from_native(k) for k in layout.fields[tag]]
            per_tag[tag] = _constructor(tag, layout.names[tag], slots, fields)
        return lambda value: per_tag[value[-1]](value)

    def empty(self, key: Key) -> Any:
        """A placeholder value of type ``key`` (`dummy`'s, made in Python)."""
        if key[0] == "tensor":
            return np.empty((0,) * key[2], key[1])
        if key[0] == "tuple":
            return tuple(self.empty(k) for k in key[1])
        return (*(self.empty(k) for k in self.get(key[1]).slots), -1)


Fills = dict[int, tuple[tuple[int, Callable[[Any], Any]], ...]]
"""Per tag (or closure target), the slot and the conversion of each of its values."""


def packing(empty: list[Any], fills: Fills) -> Callable[[int, tuple], tuple]:
    """The conversion of a tag's values into native code's flat tuple: the placeholders
    ``empty``, each value converted in its slot (``fills``), the tag last."""

    def pack(tag: int, values: tuple) -> tuple:
        out = list(empty)
        for (slot, f), v in zip(fills[tag], values):
            out[slot] = f(v)
        return (*out, tag)

    return pack


def _constructor(
    tag: int, name: str, slots: tuple[int, ...], fields: list[Callable[[Any], Any] | None]
) -> Callable[[tuple], ADT]:
    """The `ADT` of constructor ``tag`` from its native tuple: each field read from its slot
    (by one `operator.itemgetter` where no field needs converting: an `Option` returned to
    Python pays one call for it)."""
    if all(f is None for f in fields):
        if not slots:
            return lambda value: ADT(tag, (), name)
        get = itemgetter(*slots)
        if len(slots) == 1:
            return lambda value: ADT(tag, (get(value),), name)
        return lambda value: ADT(tag, get(value), name)
    pairs = list(zip(slots, fields))
    return lambda value: ADT(tag, [value[s] if f is None else f(value[s]) for s, f in pairs], name)


def _contiguous(value: Any) -> np.ndarray:
    """A tensor as native code holds it: C-contiguous (0-d ones too)."""
    value = np.asarray(value)
    return value if value.flags.c_contiguous else value.copy(order="C")


def _same(value: Any) -> Any:
    return value


def _tuple(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _adts_in(key: Key | None) -> list[str]:
    if key is None or key[0] == "tensor":
        return []
    if key[0] == "adt":
        return [key[1]]
    return [a for k in key[1] for a in _adts_in(k)]


def known_tags(flow: FlowInfo) -> list[dict[int, int] | None]:
    """Per pc, the registers surely holding a value of a known constructor there, with its
    tag (None at a pc no path reaches): a forward dataflow whose facts come from ALLOC_ADT
    and from the taken branch of a tag test (``GET_TAG t, v`` directly followed by
    ``IF_IMM t, tag``), move with MOVE and die with any other write of their register."""
    code = flow.code
    state: list[dict[int, int] | None] = [None] * len(code)
    state[0] = {}
    work = [0]
    while work:
        pc = work.pop()
        ins = code[pc]
        out = {r: t for r, t in state[pc].items() if r not in flow.rw[pc][1]}
        if ins[0] == Opcode.ALLOC_ADT and ins[2] >= 0:
            out[ins[1]] = ins[2]
        elif ins[0] == Opcode.MOVE and ins[2] in state[pc]:
            out[ins[1]] = state[pc][ins[2]]
        for s in flow.succ[pc]:
            facts = out
            prev = code[pc - 1] if pc else None
            if (
                ins[0] == Opcode.IF_IMM
                and s == pc + ins[3] != pc + ins[4]
                and prev is not None
                and prev[0] == Opcode.GET_TAG
                and prev[1] == ins[1]
                and prev[2] != ins[1]
            ):
                facts = {**out, prev[2]: ins[2]}
            old = state[s]
            new = facts if old is None else {r: t for r, t in old.items() if facts.get(r) == t}
            if new != old:
                state[s] = new
                work.append(s)
    return state
