"""The well-formedness verifier.

`verify(mod)` checks that every variable is defined once and before use (a local function may
call its own variable), that called module functions and constructors exist, that calls have
the callee's arity, and that types infer. Errors name the function and show the offending
binding in printed IR.
"""

from __future__ import annotations

from rvm.errors import IRError
from rvm.ir import expr as E
from rvm.ir.functor import ExprVisitor
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule


class _WellFormed(ExprVisitor):
    def __init__(self, mod: IRModule, fname: str) -> None:
        super().__init__()
        self.mod = mod
        self.fname = fname
        self.defined: set[E.Var] = set()
        self.scopes: list[set[E.Var]] = [set()]
        self.binding: E.VarBinding | None = None

    def fail(self, msg: str) -> None:
        where = f"\n  in binding: {E._print(self.binding)}" if self.binding is not None else ""
        raise IRError(f"function {self.fname}: {msg}{where}")

    def in_scope(self, v: E.Var) -> bool:
        return any(v in s for s in self.scopes)

    def visit_var_def(self, v: E.Var) -> None:
        if v in self.defined:
            self.fail(f"variable {v.name} is defined twice")
        self.defined.add(v)
        self.scopes[-1].add(v)

    def visit_var(self, v: E.Var) -> None:
        if not self.in_scope(v):
            self.fail(f"variable {v.name} is used outside its scope (or before definition)")

    def visit_global_var(self, gv: E.GlobalVar) -> None:
        if gv.name not in self.mod:
            self.fail(f"call of unknown function {gv.name}")

    def visit_binding(self, b: E.VarBinding) -> None:
        outer, self.binding = self.binding, b
        if isinstance(b.value, E.Function):
            self.visit_var_def(b.var)  # recursive local function
            self.visit(b.value)
        else:
            self.visit(b.value)
            self.visit_var_def(b.var)
        self.binding = outer

    def visit_function(self, f: E.Function) -> None:
        self.scopes.append(set())
        super().visit_function(f)
        self.scopes.pop()

    def visit_seq_expr(self, s: E.SeqExpr) -> None:
        self.scopes.append(set())
        super().visit_seq_expr(s)
        self.scopes.pop()

    def visit_match(self, m: E.Match) -> None:
        self.visit(m.data)
        for clause in m.clauses:
            self.scopes.append(set())
            for v in E.pattern_vars(clause.pattern):
                self.visit_var_def(v)
            self._check_pattern(clause.pattern)
            self.visit(clause.body)
            self.scopes.pop()

    def _check_pattern(self, p: E.Pattern) -> None:
        if isinstance(p, E.PatternConstructor):
            c = p.constructor
            adt = self.mod.adts.get(c.adt_name)
            if adt is None or all(k is not c and k.name != c.name for k in adt.constructors):
                self.fail(f"pattern uses unknown constructor {c.name}")
            if len(p.patterns) != len(c.field_types):
                self.fail(
                    f"pattern {c.name} has {len(p.patterns)} fields, expected {len(c.field_types)}"
                )
        if isinstance(p, (E.PatternConstructor, E.PatternTuple)):
            for q in p.patterns:
                self._check_pattern(q)

    def visit_call(self, c: E.Call) -> None:
        if isinstance(c.callee, E.Constructor) and len(c.args) != len(c.callee.field_types):
            self.fail(
                f"constructor {c.callee.name} takes {len(c.callee.field_types)} fields, "
                f"got {len(c.args)}"
            )
        if isinstance(c.callee, E.GlobalVar) and c.callee.name in self.mod:
            want = len(self.mod[c.callee.name].params)
            if want != len(c.args):
                self.fail(f"{c.callee.name} takes {want} arguments, got {len(c.args)}")
        super().visit_call(c)


def verify(mod: IRModule) -> None:
    """Raise IRError at the first ill-formed binding of ``mod``."""
    for name, func in mod.items():
        _WellFormed(mod, name).visit(func)
        try:
            infer_type(func, refresh=True)
        except IRError as err:
            raise IRError(f"function {name}: {err}") from None
