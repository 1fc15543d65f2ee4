"""Functions that recurse through each other, as one native function (`native_codegen`).

Numba types a recursive call only where the function it calls has a return path without
recursion typed first: a cycle of separate functions compiles from one member and fails from
another ("cannot type infer runaway recursion"). So each cycle of the call graph (a strongly
connected component of more than one function, `groups`) becomes one native function,
`_g<k>(_sel, <each member's parameters>, _d)`, whose branch ``_sel == m`` is member m's body:
every call inside the cycle is a self-recursive call of it, which Numba types from any
member's return path. A call of member m passes its arguments in m's parameters and, in the
others, the values the merged function was called with (of their types); the member's own
function (what the rest of the program and its entry from Python call) is a wrapper that passes
one of its arguments of the same type, or an empty array, in the other members' parameters.

The branches sit in a `while True:` loop: a tail call to another member is a jump (`jump`:
its arguments stored in that member's parameters, `_sel` set to it), as a self tail call is a
jump inside its member's branch, so mutual tail recursion runs at any depth in constant stack.
Where members call each other otherwise, the merged function counts the call depth as a
self-recursive function does (`MAX_DEPTH`: deeper, the call hands back to the compiled mode),
and it and its callers are not disk-cached.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rvm.runtime.bytecode import Opcode
from rvm.runtime.modes.lowering.writer import INDENT
from rvm.runtime.modes.native_lowering import BAIL, MAX_DEPTH

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable, ParamSpec
    from rvm.runtime.modes.lowering.operands import Names
    from rvm.runtime.modes.native_lowering import FunctionLowering

__all__ = ["Group", "groups"]


@dataclass
class Group:
    """A cycle of functions merged into one native function.

    Attributes:
        name: The merged function's Python name (`_g<k>`).
        members: The functions' indices; a member's position is its selector.
        specs: Per member, its parameters' specs.
        recursive: Whether the merged function calls itself (a call inside the cycle that is
            not a tail call: `call`).
    """

    name: str
    members: list[int]
    specs: list[tuple[ParamSpec, ...]]
    recursive: bool = False

    def slots(self, m: int) -> list[str]:
        """The merged function's parameters that hold member at position `m`'s arguments."""
        return [f"_p{m}_{j}" for j in range(len(self.specs[m]))]

    def call(self, callee: int, args: list[str]) -> str:
        """A call of member `callee` from inside the merged function, one level deeper."""
        self.recursive = True
        m = self.members.index(callee)
        values = [v for k in range(len(self.members)) for v in (args if k == m else self.slots(k))]
        return f"{self.name}({', '.join([str(m), *values, '_d + 1'])})"

    def wrapper_call(self, callee: int, names: Names, dtypes: set[str]) -> str:
        """The call of the merged function in member `callee`'s own function (its parameters
        `r<j>`, depth `_d`): an argument of the same type, else an empty array, in the other
        members' parameters (the dtypes it names added to ``dtypes``)."""
        m = self.members.index(callee)
        own = {}
        for j, spec in enumerate(self.specs[m]):
            own.setdefault(type_key(spec), f"r{j}")
        values = []
        for k, specs in enumerate(self.specs):
            for j, spec in enumerate(specs):
                if k == m:
                    values.append(f"r{j}")
                else:
                    values.append(own.get(type_key(spec)) or _empty(spec, names, dtypes))
        return f"{self.name}({', '.join([str(m), *values, '_d'])})"

    def jump(self, callee: int, args: list[str]) -> str:
        """A tail call of member `callee` from inside the merged function, without a call:
        its arguments stored in its parameters and `_sel` set to it; then the member's code
        leaves its body (`FunctionLowering`: `break` out of its block machine, else
        `continue`) and the merged function's loop runs `callee`'s branch."""
        m = self.members.index(callee)
        slots = self.slots(m)
        if not slots:
            return f"_sel = {m}"
        return f"_sel, {', '.join(slots)} = {m}, {', '.join(args)}"

    def render(self, functions: list[FunctionLowering]) -> list[str]:
        """The merged function's lines from its members' rendered bodies (in `members`'
        order), each member's registers renamed apart (`r<j>` -> `r<j>_<m>`, scalars' `s` and
        `m` too, so no value flows between members' registers at the loop's head); then each
        member's own function becomes its wrapper (`FunctionLowering.wrap`), and, where the
        merged function calls itself, each member counts as recursive (it and its callers are
        not disk-cached)."""
        names = ", ".join(f"@{f.ex.functions[f.index].name}" for f in functions)
        params = [p for m in range(len(self.members)) for p in self.slots(m)]
        out = [
            f"def {self.name}({', '.join(['_sel', *params, '_d'])}):",
            f'    """{names}: one function (they recurse through each other); _sel picks."""',
        ]
        if self.recursive:
            out += [f"    if _d > {MAX_DEPTH}:", f"        raise RuntimeError({BAIL!r})"]
        bound: list[str] = []
        for f in functions:
            bound += [line for line in f.bindings() if line not in bound]
        out += [*bound, "    while True:"]
        for m, f in enumerate(functions):
            out.append(f"        {'if' if m == 0 else 'elif'} _sel == {m}:")
            out += [f"            r{j}_{m} = {p}" for j, p in enumerate(self.slots(m))]
            rename = re.compile(r"\b([rsm]\d+)\b")
            out += [INDENT * 2 + rename.sub(rf"\1_{m}", line) for line in f.w.lines]
        out += ["        else:", f"            raise RuntimeError({BAIL!r})"]
        for f in functions:
            f.recursive = f.recursive or self.recursive
            f.wrap(self.wrapper_call(f.index, f.names, f.dtypes))
        return out


def type_key(spec: ParamSpec) -> tuple | None:
    """What a parameter's values are to Numba (dtype and rank; a tuple's fields'), or None
    when its spec does not say."""
    if spec.kind == "tensor" and spec.dtype and spec.shape is not None:
        return ("tensor", spec.dtype, len(spec.shape))
    if spec.kind == "tuple" and spec.fields is not None:
        fields = tuple(type_key(s) for s in spec.fields)
        return None if None in fields else ("tuple", fields)
    return None


def _empty(spec: ParamSpec, names: Names, dtypes: set[str]) -> str:
    """A value of `spec`'s type that holds nothing (`type_key` says it has one)."""
    if spec.kind == "tuple":
        fields = [_empty(s, names, dtypes) for s in spec.fields or ()]
        return f"({', '.join(fields)}{',' if len(fields) == 1 else ''})"
    assert spec.dtype is not None and spec.shape is not None
    dtypes.add(spec.dtype)
    n = len(spec.shape)
    shape = "(" + ", ".join(["0"] * n) + ("," if n == 1 else "") + ")"
    return f"_np.empty({shape}, {names.dtype(spec.dtype)})"


def _calls(ex: Executable) -> dict[int, set[int]]:
    """Each function's callees, from its INVOKE and TAIL_INVOKE instructions."""
    out: dict[int, set[int]] = {}
    for i, fn in enumerate(ex.functions):
        out[i] = set()
        for ins in fn.instructions:
            if ins[0] == Opcode.INVOKE:
                out[i].add(ins[2])
            elif ins[0] == Opcode.TAIL_INVOKE:
                out[i].add(ins[1])
    return out


def _reach(calls: dict[int, set[int]], start: int) -> set[int]:
    seen: set[int] = set()
    todo = list(calls[start])
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo.extend(calls.get(f, ()))
    return seen


def groups(ex: Executable) -> tuple[dict[int, Group], dict[int, str]]:
    """The call cycles through more than one function of ``ex``: per member, its `Group`;
    and per member of a cycle that cannot merge (a parameter whose type its spec does not
    say: the other members' calls could not fill it), why not."""
    calls = _calls(ex)
    reach = {i: _reach(calls, i) for i in calls}
    out: dict[int, Group] = {}
    refused: dict[int, str] = {}
    for i in sorted(calls):
        if i in out or i in refused:
            continue
        members = sorted(j for j in reach[i] if i in reach[j])
        if len(members) < 2:
            continue
        specs = [ex.functions[j].param_specs for j in members]
        untyped = [
            (ex.functions[j].name, s.name)
            for j, ss in zip(members, specs, strict=True)
            for s in ss
            if type_key(s) is None
        ]
        if untyped:
            others = ", ".join(f"@{ex.functions[j].name}" for j in members)
            fname, pname = untyped[0]
            why = (
                f"recursion through {others}, and parameter {pname!r} of @{fname} has no "
                "static type to merge them by"
            )
            refused.update(dict.fromkeys(members, why))
            continue
        group = Group(f"_g{min(members)}", members, specs)
        out.update(dict.fromkeys(members, group))
    return out, refused
