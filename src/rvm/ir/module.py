"""IRModule: the unit of compilation, holding functions and algebraic data types."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from rvm import _html
from rvm.errors import IRError
from rvm.ir import expr as E
from rvm.ir.infer import infer_type


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class ADTDef(E.Node):
    """An algebraic data type: a name and its constructors (tags 0, 1, ...)."""

    name: str
    constructors: tuple[E.Constructor, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "constructors", tuple(self.constructors))

    def constructor(self, name: str) -> E.Constructor:
        for c in self.constructors:
            if c.name == name:
                return c
        raise IRError(f"data type {self.name} has no constructor {name!r}")


class IRModule(E.Node):
    """Functions by name (each reachable through a `GlobalVar`) and data types by name.

    A module is treated as immutable: passes build a new one (`with_functions`).
    """

    __slots__ = ("_funcs", "_gvars", "adts", "attrs")

    def __init__(
        self,
        functions: Mapping[str, E.Function] | None = None,
        adts: Mapping[str, ADTDef] | None = None,
        global_vars: Mapping[str, E.GlobalVar] | None = None,
        attrs: Mapping[str, object] | None = None,
    ) -> None:
        self._funcs: dict[str, E.Function] = dict(functions or {})
        self._gvars: dict[str, E.GlobalVar] = {}
        self.adts: dict[str, ADTDef] = dict(adts or {})
        self.attrs: dict[str, object] = dict(attrs or {})
        for name in self._funcs:
            gv = (global_vars or {}).get(name)
            self._gvars[name] = E.GlobalVar(name) if gv is None else gv
        self._record_types()

    # -- access ---------------------------------------------------------------------------
    def __getitem__(self, name: str | E.GlobalVar) -> E.Function:
        key = name.name if isinstance(name, E.GlobalVar) else name
        try:
            return self._funcs[key]
        except KeyError:
            raise IRError(f"module has no function {key!r}; it has {list(self._funcs)}") from None

    def __contains__(self, name: object) -> bool:
        key = name.name if isinstance(name, E.GlobalVar) else name
        return key in self._funcs

    def __iter__(self) -> Iterator[str]:
        return iter(self._funcs)

    def __len__(self) -> int:
        return len(self._funcs)

    @property
    def functions(self) -> dict[str, E.Function]:
        """Functions by name (a copy)."""
        return dict(self._funcs)

    def items(self) -> Iterator[tuple[str, E.Function]]:
        return iter(list(self._funcs.items()))

    def get_global_var(self, name: str) -> E.GlobalVar:
        try:
            return self._gvars[name]
        except KeyError:
            raise IRError(f"module has no function {name!r}") from None

    @property
    def global_vars(self) -> dict[str, E.GlobalVar]:
        return dict(self._gvars)

    def constructor(self, name: str) -> E.Constructor:
        """The constructor called ``name`` in any of the module's data types."""
        for adt in self.adts.values():
            for c in adt.constructors:
                if c.name == name:
                    return c
        raise IRError(f"module has no constructor {name!r}")

    # -- building new modules --------------------------------------------------------------
    def with_functions(
        self, functions: Mapping[str, E.Function], *, replace_all: bool = False
    ) -> IRModule:
        """A new module with ``functions`` added or replaced (all replaced with replace_all)."""
        funcs = {} if replace_all else dict(self._funcs)
        funcs.update(functions)
        gvars = {n: g for n, g in self._gvars.items() if n in funcs}
        return IRModule(funcs, self.adts, gvars, self.attrs)

    def without(self, *names: str) -> IRModule:
        funcs = {n: f for n, f in self._funcs.items() if n not in names}
        return IRModule(funcs, self.adts, self._gvars, self.attrs)

    def script(self) -> str:
        """The module as rvm script source."""
        return E._print(self)

    # -- display --------------------------------------------------------------------------
    def __repr__(self) -> str:
        # One line: a module's script can run to thousands of lines (`str` and `print` give it).
        adts = f" adts=[{', '.join(self.adts)}]" if self.adts else ""
        return f"<IRModule functions=[{', '.join(self._funcs)}]{adts}>"

    __str__ = script

    def _repr_html_(self) -> str:
        """The script, syntax-highlighted, for notebooks."""
        return _html.code_block(self.script(), highlighted=True)

    def _record_types(self) -> None:
        """Give each GlobalVar its function's type; iterate for recursive functions."""
        for attempt in range(4):
            changed = False
            for name, func in self._funcs.items():
                try:
                    ft = infer_type(func, refresh=attempt > 0)
                except IRError as err:
                    raise IRError(f"in function {name}: {err}") from None
                gv = self._gvars[name]
                if gv.type != ft:
                    gv.with_type(ft)
                    changed = True
            if not changed:
                break


__all__ = ["ADTDef", "IRModule"]
