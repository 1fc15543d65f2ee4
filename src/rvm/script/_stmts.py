"""Statements of rvm script: assignments, ``if``, ``while``, ``match``, ``return``, local ``def``.

A function body becomes a flat `SeqExpr`. An ``if``/``match`` whose branches all return is the
function's result (tail position); one whose branches assign becomes an `If`/`Match` bound to
the variables assigned in a branch and used afterwards (one variable, or a tuple of several
unpacked after it). A ``while`` loop becomes a tail-recursive local function over the variables
it assigns that exist before it:

    def _while_loop0(h, i):
        if cond: <body>; return _while_loop0(h', i')
        else: return (h, i)
    h, i = _while_loop0(h, i)

A carried variable's shape widens to what the body gives it; its dtype is that of its value
before the loop, and a body that changes it is an error (the dtype rule of `rvm.ir.types`).
"""

from __future__ import annotations

import ast

from rvm.errors import IRError
from rvm.ir import expr as E
from rvm.ir.infer import infer_type, join_types
from rvm.ir.types import AnyType, FuncType, TensorType, TupleType, Type
from rvm.script import _flow
from rvm.script._exprs import ExprParser, is_atom
from rvm.script.types import type_text

_WHILE = "_while_loop"


class BodyParser(ExprParser):
    """Parses the body of one module function (and the local functions inside it)."""

    # -- blocks -----------------------------------------------------------------------------
    def block(self, stmts: list[ast.stmt], live_after: set[str]) -> E.Expr | None:
        """Parse ``stmts`` into the current scope; the result if they return, else None."""
        stmts = _flow.push_rest(list(stmts))
        for i, stmt in enumerate(stmts):
            rest = stmts[i + 1 :]
            result = self.statement(stmt, _flow.live_in(rest, live_after))
            if result is not None:
                if rest:
                    raise self.error(rest[0], "unreachable code after return")
                return result
        return None

    def sub_block(
        self, stmts: list[ast.stmt], live_after: set[str], names: dict[str, E.Expr] | None = None
    ) -> tuple[list[E.VarBinding], E.Expr | None, dict[str, E.Expr]]:
        """Parse a branch in scopes of its own: its bindings, result and final name scope."""
        self.scopes.append(dict(names or {}))
        self.blocks.append([])
        try:
            result = self.block(stmts, live_after)
            return self.blocks[-1], result, self.scopes[-1]
        finally:
            self.blocks.pop()
            self.scopes.pop()

    def function_body(self, node: ast.AST, stmts: list[ast.stmt], name: str) -> E.SeqExpr:
        self.blocks.append([])
        try:
            first = stmts[0] if stmts else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                stmts = stmts[1:]  # a docstring
            result = self.block(stmts, set())
            if result is None:
                raise self.error(node, f"function '{name}' does not return a value")
            return E.seq(self.blocks[-1], result)
        finally:
            self.blocks.pop()

    # -- statements -------------------------------------------------------------------------
    def statement(self, stmt: ast.stmt, live_after: set[str]) -> E.Expr | None:  # noqa: C901
        if isinstance(stmt, ast.Return):
            if stmt.value is None:
                raise self.error(stmt, "`return` needs a value")
            return self.atom(stmt.value)
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                raise self.error(stmt, "chained assignment (a = b = ...) is not supported")
            self.assign_target(stmt.targets[0], stmt.value)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is None or not isinstance(stmt.target, ast.Name):
                raise self.error(stmt, "an annotated assignment is written `name: type = value`")
            ann = self.ctx.type_of(stmt.annotation)
            value = self.value(stmt.value)
            with self.at(stmt.value):
                self.assign(stmt.target.id, value, ann)
        elif isinstance(stmt, ast.AugAssign):
            target = (
                ast.Name(stmt.target.id, ast.Load()) if isinstance(stmt.target, ast.Name) else None
            )
            if target is None:
                raise self.error(stmt, "augmented assignment needs a variable name")
            value_node = ast.copy_location(ast.BinOp(target, stmt.op, stmt.value), stmt)
            ast.copy_location(target, stmt.target)
            self.assign_target(stmt.target, value_node)
        elif isinstance(stmt, ast.If):
            return self.if_stmt(stmt, live_after)
        elif isinstance(stmt, ast.Match):
            return self.match_stmt(stmt, live_after)
        elif isinstance(stmt, ast.While):
            self.while_stmt(stmt)
        elif isinstance(stmt, ast.FunctionDef):
            self.local_def(stmt)
        elif isinstance(stmt, ast.Pass):
            pass
        elif (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
        ):
            pass  # a docstring or a string used as a comment
        elif isinstance(stmt, ast.Expr) and _effect_call(stmt.value):
            self.emit(self.value(stmt.value))  # debug_print, call_packed: kept for the effect
        elif isinstance(stmt, ast.Expr):
            raise self.error(stmt, "an expression statement has no effect; assign or return it")
        elif isinstance(stmt, ast.Assert):
            self.assert_stmt(stmt)
        else:
            word = type(stmt).__name__.lower()
            raise self.error(stmt, f"unsupported statement: {word}")
        return None

    def assert_stmt(self, stmt: ast.Assert) -> None:
        """``assert cond, "message"``: a conditional fatal (`rvm.op.effects.assert_`)."""
        from rvm.op.effects import assert_

        if stmt.msg is None:
            message = f"assertion failed: {ast.unparse(stmt.test)}"
        elif isinstance(stmt.msg, ast.Constant) and isinstance(stmt.msg.value, str):
            message = stmt.msg.value
        else:
            raise self.error(stmt.msg, "an assert's message must be a string literal")
        cond = self.atom(stmt.test)
        with self.at(stmt):
            self.emit(assert_(cond, message))

    def assign_target(self, target: ast.expr, value_node: ast.expr) -> None:
        if isinstance(target, ast.Name) and _dim_call(value_node):
            # `n = rvm.dim(steps)`: `n` is the dimension "n" in shapes (`rvm.op.effects.dim`)
            if len(value_node.args) == 1:  # type: ignore[attr-defined]
                from rvm.op.effects import dim

                with self.at(value_node):
                    value = dim(self.atom(value_node.args[0]), target.id)  # type: ignore[attr-defined]
            else:
                value = self.value(value_node)
            with self.at(value_node):
                self.assign(target.id, value, infer_type(value))
            return
        if isinstance(target, ast.Name):
            value = self.value(value_node)
            with self.at(value_node):
                self.assign(target.id, value)
            return
        if not isinstance(target, (ast.Tuple, ast.List)):
            raise self.error(target, "only variables and tuples of variables can be assigned")
        if any(not isinstance(t, ast.Name) for t in target.elts):
            raise self.error(target, "unpack a tuple into plain variables: a, b = t")
        names = [t.id for t in target.elts]  # type: ignore[attr-defined]
        if isinstance(value_node, ast.Tuple) and len(value_node.elts) == len(names):
            values = [self.value(v) for v in value_node.elts]  # all read before any is assigned
            with self.at(value_node):
                for n, v in zip(names, values):
                    self.assign(n, v)
            return
        tup = self.atom(value_node)
        ty = infer_type(tup)
        if not isinstance(ty, (TupleType, AnyType)):
            raise self.error(
                value_node,
                f"cannot unpack a value of type {type_text(ty)} into "
                f"{len(names)} variables; only tuples unpack",
            )
        if isinstance(ty, TupleType) and len(ty.fields) != len(names):
            raise self.error(
                target, f"cannot unpack a tuple of {len(ty.fields)} into {len(names)} variables"
            )
        with self.at(value_node):
            for i, n in enumerate(names):
                self.assign(n, E.TupleGetItem(tup, i))

    # -- if and match -----------------------------------------------------------------------
    def if_stmt(self, stmt: ast.If, live_after: set[str]) -> E.Expr | None:
        cond = self.atom(stmt.test)
        if _flow.terminates([stmt]):
            t = self.tail_branch(stmt.body)
            f = self.tail_branch(stmt.orelse)
            with self.at(stmt.test):
                out = E.If(cond, t, f)
                infer_type(out)
            return out
        results = self.results(stmt, [stmt.body, stmt.orelse], live_after)
        t = self.assign_branch(stmt.body, results, stmt)
        f = self.assign_branch(stmt.orelse, results, stmt)
        with self.at(stmt.test):
            self.bind_results(E.If(cond, t, f), results)
        return None

    def results(
        self, stmt: ast.stmt, branches: list[list[ast.stmt]], live_after: set[str]
    ) -> list[str]:
        """The variables an if/match statement gives values to: those assigned in a branch
        and used after it; if none is used (a dead statement), those every branch assigns."""
        if _flow.contains_return(stmt):
            raise self.error(
                stmt,
                "some paths through this statement return and others do "
                "not; every path of a function must return a value",
            )
        assigned = _flow.assigned_names(s for b in branches for s in b)
        results = [n for n in assigned if n in live_after]
        if not results:
            per_branch = [set(_flow.assigned_names(b)) for b in branches]
            results = [
                n
                for n in assigned
                if self.lookup(n) is not None or all(n in names for names in per_branch)
            ]
        if not results:
            raise self.error(
                stmt,
                f"this `{type(stmt).__name__.lower()}` neither returns nor "
                "assigns a variable used after it",
            )
        return results

    def tail_branch(self, stmts: list[ast.stmt], names: dict | None = None) -> E.SeqExpr:
        bindings, result, _ = self.sub_block(stmts, set(), names)
        assert result is not None  # the branch terminates
        return E.seq(bindings, result)

    def assign_branch(
        self, stmts: list[ast.stmt], results: list[str], stmt: ast.stmt, names: dict | None = None
    ) -> E.SeqExpr:
        """A branch that assigns ``results``: its SeqExpr, whose body holds their values."""
        bindings, _, scope = self.sub_block(stmts, set(results), names)
        values = []
        for n in results:
            v = scope.get(n) if n in scope else self.lookup(n)
            if v is None:
                raise self.error(stmt, f"'{n}' is assigned in only some branches but used after")
            values.append(v)
        body: E.Expr = values[0] if len(values) == 1 else E.Tuple(tuple(values))
        if len(values) == 1 and bindings and bindings[-1].var is body:
            last = bindings[-1]
            if is_atom(last.value) and last.var.annotation is None:
                bindings, body = bindings[:-1], last.value  # `y = x` in a branch: no alias
        return E.seq(bindings, body)

    def bind_results(self, value: E.Expr, results: list[str]) -> None:
        if len(results) == 1:
            self.assign(results[0], value)
            return
        tup = self.emit(value)
        for i, n in enumerate(results):
            self.assign(n, E.TupleGetItem(tup, i))

    def match_stmt(self, stmt: ast.Match, live_after: set[str]) -> E.Expr | None:
        data = self.atom(stmt.subject)
        data_type = infer_type(data)
        tail = _flow.terminates([stmt])
        results = [] if tail else self.results(stmt, [c.body for c in stmt.cases], live_after)
        clauses = []
        for case in stmt.cases:
            if case.guard is not None:
                raise self.error(case.guard, "`case ... if guard` is not supported")
            names: dict[str, E.Expr] = {}
            pattern = self.pattern(case.pattern, data_type, names)
            if tail:
                body = self.tail_branch(case.body, names)
            else:
                body = self.assign_branch(case.body, results, stmt, names)
            clauses.append(E.Clause(pattern, body))
        with self.at(stmt.subject):
            out = E.Match(data, tuple(clauses))
            if tail:
                infer_type(out)
                return out
            self.bind_results(out, results)
        return None

    def pattern(self, node: ast.pattern, ty: Type, names: dict[str, E.Expr]) -> E.Pattern:
        if isinstance(node, ast.MatchAs) and node.pattern is None:
            if node.name is None:
                return E.PatternWildcard()
            var = E.Var(node.name)
            var.with_type(ty)
            names[node.name] = var
            return E.PatternVar(var)
        if isinstance(node, ast.MatchClass):
            ctor = self.ctx.constructor(node.cls) if isinstance(node.cls, ast.Name) else None
            if ctor is None:
                raise self.error(node.cls, f"unknown constructor '{ast.unparse(node.cls)}'")
            if node.kwd_patterns:
                raise self.error(node, "constructor patterns take positional sub-patterns")
            if len(node.patterns) != len(ctor.field_types):
                raise self.error(
                    node,
                    f"{ctor.name} has {len(ctor.field_types)} fields, "
                    f"the pattern has {len(node.patterns)}",
                )
            subs = [self.pattern(p, t, names) for p, t in zip(node.patterns, ctor.field_types)]
            return E.PatternConstructor(ctor, tuple(subs))
        if isinstance(node, ast.MatchSequence):
            fields = ty.fields if isinstance(ty, TupleType) else (AnyType(),) * len(node.patterns)
            if len(fields) != len(node.patterns):
                raise self.error(
                    node,
                    f"a tuple of {len(fields)} fields cannot match this "
                    f"pattern of {len(node.patterns)}",
                )
            return E.PatternTuple(
                tuple(self.pattern(p, t, names) for p, t in zip(node.patterns, fields))
            )
        raise self.error(node, "unsupported pattern; use Constructor(...), a name, _ or a tuple")

    # -- while ------------------------------------------------------------------------------
    def while_stmt(self, stmt: ast.While) -> None:
        if stmt.orelse:
            raise self.error(stmt, "`while ... else` is not supported")
        if _flow.contains_return(stmt):
            raise self.error(stmt, "a `return` inside a loop is not supported")
        carried = [n for n in _flow.assigned_names(stmt.body) if self.lookup(n) is not None]
        if not carried:
            raise self.error(stmt, "this `while` assigns no variable that exists before it")
        initial = [self.lookup(n) for n in carried]
        types = [infer_type(v) for v in initial]
        fname = f"{_WHILE}{sum(1 for s in self.scopes for k in s if k.startswith(_WHILE))}"
        for _ in range(3):  # widen the parameter types until the loop body agrees
            func, fvar, end_types = self.loop_function(stmt, fname, carried, types)
            joined = [
                self.carried_type(stmt, n, a, b) for n, a, b in zip(carried, types, end_types)
            ]
            if joined == types:
                break
            types = joined
        with self.at(stmt):
            self.emit(func, var=fvar)
            self.scopes[-1][fname] = fvar
            self.bind_results(E.Call(fvar, tuple(initial)), carried)  # type: ignore[arg-type]

    def carried_type(self, stmt: ast.While, name: str, start: Type, end: Type) -> Type:
        """The type of loop-carried ``name``: its type before the loop joined with the type the
        body gives it (`rvm.ir.infer.join_types`). Shapes widen; the dtype stays the one before
        the loop (unknown if either is unknown), and a body that changes it is an error."""
        if isinstance(end, AnyType):
            return start
        try:
            return join_types(start, end)
        except IRError:
            pass
        if isinstance(start, TensorType) and isinstance(end, TensorType):
            msg = (
                f"'{name}' is carried by this loop, so it keeps the dtype it has before the loop "
                f"({type_text(start)}), but the loop body makes it {type_text(end)}: start it "
                f'as {end.dtype} (e.g. rvm.const(..., "{end.dtype}")) or op.cast it back to '
                f"{start.dtype} in the body"
            )
        else:
            msg = (
                f"the loop body makes '{name}' a {type_text(end)}, but it is a "
                f"{type_text(start)} before the loop"
            )
        raise self.error(stmt, msg)

    def loop_function(
        self, stmt: ast.While, fname: str, carried: list[str], types: list[Type]
    ) -> tuple[E.Function, E.Var, list[Type]]:
        params = tuple(E.Var(n, t if t is not None else AnyType()) for n, t in zip(carried, types))
        fvar = E.Var(fname)
        self.scopes.append({fname: fvar, **{p.name: p for p in params}})
        self.blocks.append([])
        try:
            cond = self.atom(stmt.test)
            bindings, _, scope = self.sub_block(stmt.body, set(carried))
            values = [scope[n] if n in scope else self.lookup(n) for n in carried]
            end_types = [infer_type(v) for v in values]  # type: ignore[arg-type]
            self.blocks.append(bindings)
            with self.at(stmt):
                again = self.emit(E.Call(fvar, tuple(values)))  # type: ignore[arg-type]
            self.blocks.pop()
            done: E.Expr = params[0] if len(params) == 1 else E.Tuple(params)
            with self.at(stmt.test):
                body = E.seq(self.blocks[-1], E.If(cond, E.seq(bindings, again), E.seq([], done)))
            return E.Function(params, body), fvar, end_types
        finally:
            self.blocks.pop()
            self.scopes.pop()

    # -- local functions --------------------------------------------------------------------
    def local_def(self, stmt: ast.FunctionDef) -> None:
        attrs = self.ctx.decorator_attrs(stmt)
        params = self.ctx.params(stmt)
        ret = self.ctx.type_of(stmt.returns) if stmt.returns is not None else None
        fvar = E.Var(stmt.name)
        if ret is not None:
            fvar.with_type(FuncType(tuple(p.type for p in params), ret))  # type: ignore[misc]
        self.scopes.append({stmt.name: fvar, **{p.name: p for p in params}})
        try:
            body = self.function_body(stmt, stmt.body, stmt.name)
        finally:
            self.scopes.pop()
        with self.at(stmt):
            self.emit(E.Function(params, body, ret, attrs), var=fvar)
        self.scopes[-1][stmt.name] = fvar


def _effect_call(node: ast.expr) -> bool:
    """Whether ``node`` is ``rvm.debug_print(...)``, ``rvm.call_packed(...)`` or
    ``rvm.call_dps_packed(...)``: calls worth making for their effect alone."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "rvm"
        and node.func.attr in ("debug_print", "call_packed", "call_dps_packed")
    )


def _dim_call(node: ast.expr) -> bool:
    """Whether ``node`` is ``rvm.dim(...)``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "rvm"
        and node.func.attr == "dim"
    )
