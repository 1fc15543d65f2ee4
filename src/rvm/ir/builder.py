"""Builder: programmatic construction of flat, typed IR.

    bb = Builder()
    x = Var("x", tensor(("n", 4), "float32"))
    with bb.function("main", [x]):
        y = bb.emit(op.relu(x))
        bb.emit_output(y)
    mod = bb.get()

`emit` binds an expression to a fresh variable whose type is inferred at once; an error in
inference names the binding. `block(build)` (or `begin_scope()`/`end_scope()`) builds the
SeqExpr of an If or Match branch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from rvm.errors import IRError
from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.module import ADTDef, IRModule
from rvm.ir.types import Type


class Builder:
    """Builds functions binding by binding, and modules function by function."""

    def __init__(self, mod: IRModule | None = None) -> None:
        self._funcs: dict[str, E.Function] = dict(mod.functions) if mod else {}
        self._gvars: dict[str, E.GlobalVar] = dict(mod.global_vars) if mod else {}
        self._adts: dict[str, ADTDef] = dict(mod.adts) if mod else {}
        self._scopes: list[list[E.VarBinding]] = []
        self._counter = 0
        self._current: tuple[str, list[E.Var], dict, Type | None] | None = None
        self._output: E.Expr | None = None

    # -- names ------------------------------------------------------------------------------
    def fresh_name(self, hint: str = "lv") -> str:
        name = f"{hint}{self._counter}"
        self._counter += 1
        return name

    def global_var(self, name: str) -> E.GlobalVar:
        """The GlobalVar for ``name`` (created on first use, so functions may call ahead)."""
        gv = self._gvars.get(name)
        if gv is None:
            gv = self._gvars[name] = E.GlobalVar(name)
        return gv

    # -- scopes -----------------------------------------------------------------------------
    def begin_scope(self) -> None:
        self._scopes.append([])

    def end_scope(self, result: E.Expr) -> E.SeqExpr:
        """Close the innermost scope: its bindings and ``result`` as a SeqExpr."""
        bindings = self._scopes.pop()
        out = E.seq(bindings, result)
        infer_type(out)
        return out

    def block(self, build: Callable[[], E.Expr]) -> E.SeqExpr:
        """The SeqExpr of the bindings ``build`` emits in a new scope and the expression it
        returns (a branch, clause or function body); the scope is closed if ``build`` fails."""
        self.begin_scope()
        try:
            result = build()
        except BaseException:
            self._scopes.pop()
            raise
        return self.end_scope(result)

    @contextmanager
    def function(
        self,
        name: str,
        params: Sequence[E.Var],
        *,
        attrs: dict | None = None,
        ret_type: Type | None = None,
    ) -> Iterator[None]:
        """Build module function ``name`` (declared to return ``ret_type`` when given); call
        `emit_output` before leaving the block."""
        if self._current is not None:
            raise IRError("Builder.function blocks cannot nest; build inner functions as exprs")
        self._current = (name, list(params), dict(attrs or {}), ret_type)
        self._output = None
        self.begin_scope()
        try:
            yield
        except BaseException:
            self._scopes.pop()
            self._current = None
            raise
        if self._output is None:
            raise IRError(f"function {name}: emit_output was not called")
        body = self.end_scope(self._output)
        fname, fparams, fattrs, fret = self._current
        self._current = None
        self.add_function(fname, E.Function(tuple(fparams), body, fret, fattrs))

    def emit(self, value: E.Expr, name: str | None = None, annotation: Type | None = None) -> E.Var:
        """Bind ``value`` to a new variable of the value's inferred type and return it."""
        if not self._scopes:
            raise IRError("Builder.emit outside a function or scope")
        var = E.Var(name or self.fresh_name(), annotation)
        binding = E.VarBinding(var, value)
        try:
            ty = infer_type(value)
        except IRError as err:
            from rvm.ir.expr import _print

            raise IRError(f"{err}\n  in binding: {_print(binding)}") from None
        if annotation is None:
            var.with_type(ty)
        self._scopes[-1].append(binding)
        return var

    def bind(self, var: E.Var, value: E.Expr) -> E.Var:
        """Bind ``value`` to the given ``var``: a local function that calls its own variable
        (recursion, as a loop's tail call) must be bound to that very variable."""
        if not self._scopes:
            raise IRError("Builder.bind outside a function or scope")
        binding = E.VarBinding(var, value)
        ty = infer_type(value)
        if var.annotation is None:
            var.with_type(ty)
        self._scopes[-1].append(binding)
        return var

    def emit_output(self, value: E.Expr) -> None:
        """Set the result of the function being built."""
        self._output = value

    # -- module -----------------------------------------------------------------------------
    def add_function(self, name: str, func: E.Function) -> E.GlobalVar:
        self._funcs[name] = func
        return self.global_var(name)

    def add_adt(self, name: str, constructors: Sequence[tuple[str, Sequence[Type]]]) -> ADTDef:
        """Declare a data type; constructors get tags in order, unique within the module
        (so values carry the same tags in the interpreter and the VM)."""
        first = 1 + max((c.tag for a in self._adts.values() for c in a.constructors), default=-1)
        adt = ADTDef(
            name,
            tuple(
                E.Constructor(cname, first + i, tuple(fields), name)
                for i, (cname, fields) in enumerate(constructors)
            ),
        )
        self._adts[name] = adt
        return adt

    def get(self) -> IRModule:
        """The module built so far."""
        missing = [n for n in self._gvars if n not in self._funcs]
        if missing:
            raise IRError(f"functions called but never defined: {', '.join(missing)}")
        return IRModule(self._funcs, self._adts, self._gvars)
