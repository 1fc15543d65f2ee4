"""The reference AST interpreter: evaluates an IRModule directly, with NumPy ops.

It is the correctness oracle of rvm: compiled programs are compared with it. It favours being
obviously right over being fast, but it must run everything the VM runs, so it never recurses
in Python. The driver loop (`Interpreter._run`) works on evaluation requests (`_Eval`: an
expression and an environment) and keeps an explicit stack of generators:

- `_begin` starts an evaluation. Atoms, flat op calls (arguments that are atoms, the normal
  form the Builder emits), and bindings made only of those are evaluated on the spot. What is
  left in tail position (a function's body when it is called, a SeqExpr's result, the branch
  an If or Match takes) comes back as a new `_Eval`, which the driver loops on: a tail call
  replaces the caller instead of stacking on it, so a 100 000-deep tail-recursive loop runs
  in constant space.
- Anything else becomes a generator that yields an `_Eval` for each sub-expression it needs
  (``value = yield _Eval(expr, env)``) and returns a value or a tail `_Eval`. The driver keeps
  pending generators on a list, so non-tail recursion of any depth costs heap, not Python
  stack.

Every call checks its arguments against the callee's parameter types and binds the symbolic
dimensions of the callee (`rvm.interp.check`); op attributes that name symbolic dimensions
(``reshape(x, ("n", 784))``) are resolved from them before the op's reference runs.
"""

from __future__ import annotations

from collections.abc import Generator
from types import GeneratorType
from typing import Any

import numpy as np

from rvm.errors import DTypeError, FunctionNotFoundError, ShapeError
from rvm.interp.check import check_dim_exprs, check_value
from rvm.interp.effects import EFFECTS, PACKED_OPS, dim_call, packed_call
from rvm.interp.prims import (
    as_typed,
    get_item,
    match_pattern,
    names_dims,
    resolve_attr,
    run_reference,
    with_context,
)
from rvm.interp.values import Closure, Env, InterpError, describe
from rvm.ir import expr as E
from rvm.ir.module import IRModule
from rvm.ir.types import AnyType
from rvm.op import reference
from rvm.op.effects import DIM

_ATOMS = frozenset({E.Var, E.Constant, E.GlobalVar, E.Constructor, E.Function})
_SLOW = object()  # `_value`'s answer for "this needs the driver"


class _Eval:
    """A request to the driver: evaluate ``expr`` in ``env``."""

    __slots__ = ("expr", "env")

    def __init__(self, expr: E.Expr, env: Env) -> None:
        self.expr = expr
        self.env = env


_Gen = Generator[_Eval, Any, Any]


class Interpreter:
    """Evaluates the functions of one IRModule.

    Args:
        mod: The module; its functions call each other through GlobalVars.
    """

    def __init__(self, mod: IRModule) -> None:
        self.mod = mod
        self._reference = {**reference, **EFFECTS}
        self._needs_resolve: dict[E.Call, bool] = {}
        self.max_depth = 0  # the deepest the stack of pending evaluations grew (for tests)
        self._plans: dict[E.SeqExpr, tuple[tuple[E.VarBinding, ...], E.Expr, E.Var | None]] = {}

    def call(self, fname: str | E.GlobalVar, *args: Any) -> Any:
        """Run module function ``fname`` on ``args`` (numpy arrays, Python scalars and lists,
        array-like objects, tuples, ADT values) and return its result."""
        name = fname.name if isinstance(fname, E.GlobalVar) else fname
        if name not in self.mod:
            raise FunctionNotFoundError.missing(name, "the module", self.mod)
        func = self.mod[name]
        env = self._enter(func, name, None, args, convert=True)
        return self._run(_Eval(func.body, env))

    # -- the driver loop ----------------------------------------------------------------------
    def _run(self, item: Any) -> Any:
        """Evaluate the request ``item`` with an explicit stack of generators (no recursion)."""
        stack: list[_Gen] = []
        begin = self._begin
        try:
            while True:
                while type(item) is _Eval:
                    item = begin(item.expr, item.env)
                if type(item) is GeneratorType:
                    stack.append(item)
                    if len(stack) > self.max_depth:
                        self.max_depth = len(stack)
                    item = None  # a new generator is started with send(None)
                elif not stack:
                    return item
                try:
                    item = stack[-1].send(item)
                except StopIteration as stop:
                    stack.pop()
                    item = stop.value  # a value for the generator below, or a tail _Eval
        except Exception as err:
            _add_stack_note(err, stack)
            raise

    def _begin(self, expr: E.Expr, env: Env) -> Any:
        """Start evaluating ``expr``: a value, a tail `_Eval`, or a generator for the driver."""
        kind = type(expr)
        if kind is E.SeqExpr:
            return self._begin_seq(expr, env)  # type: ignore[arg-type]
        if kind is E.If:
            cond = self._value(expr.cond, env)  # type: ignore[attr-defined]
            if cond is _SLOW:
                return self._gen_if(expr, env)  # type: ignore[arg-type]
            return _Eval(_branch(expr, cond, env), env)  # type: ignore[arg-type]
        if kind is E.Call:
            callee = expr.callee  # type: ignore[attr-defined]
            if type(callee) is not E.Op and all(type(a) in _ATOMS for a in expr.args):  # type: ignore
                target = None if type(callee) is E.GlobalVar else self._value(callee, env)
                if target is not _SLOW:
                    args = [self._atom(a, env) for a in expr.args]  # type: ignore[attr-defined]
                    return self._apply(expr, target, args, env)  # type: ignore[arg-type]
        elif kind is E.Match:
            data = self._value(expr.data, env)  # type: ignore[attr-defined]
            if data is not _SLOW:
                return _Eval(_choose_clause(expr, data, env), env)  # type: ignore[arg-type]
        value = self._value(expr, env)
        if value is _SLOW:
            return _GENERATORS[kind](self, expr, env)
        return value

    def _value(self, expr: E.Expr, env: Env) -> Any:
        """The value of an atom or of a flat op call, tuple or tuple index; `_SLOW` for what
        needs the driver (calls of functions, control flow, nested expressions)."""
        kind = type(expr)
        if kind is E.Var:
            return env.lookup(expr)  # type: ignore[arg-type]
        if kind is E.Constant:
            return expr.data  # type: ignore[attr-defined]
        if kind is E.Call:
            callee = expr.callee  # type: ignore[attr-defined]
            args = expr.args  # type: ignore[attr-defined]
            if (type(callee) is E.Op or type(callee) is E.Constructor) and all(
                type(a) in _ATOMS for a in args
            ):
                values = [self._atom(a, env) for a in args]
                return self._primitive(callee, expr, values, env)  # type: ignore[arg-type]
            return _SLOW
        if kind is E.Tuple:
            fields = expr.fields  # type: ignore[attr-defined]
            if all(type(f) in _ATOMS for f in fields):
                return tuple([self._atom(f, env) for f in fields])
            return _SLOW
        if kind is E.TupleGetItem:
            inner = expr.tuple_value  # type: ignore[attr-defined]
            if type(inner) in _ATOMS:
                return get_item(self._atom(inner, env), expr.index, env)  # type: ignore
            return _SLOW
        if kind in _ATOMS:
            return self._atom(expr, env)
        return _SLOW

    def _atom(self, expr: E.Expr, env: Env) -> Any:
        kind = type(expr)
        if kind is E.Var:
            return env.lookup(expr)  # type: ignore[arg-type]
        if kind is E.Constant:
            return expr.data  # type: ignore[attr-defined]
        if kind is E.Function:
            name = expr.attrs.get("global_symbol") or "<lambda>"  # type: ignore[attr-defined]
            return Closure(expr, env, f"{env.name}.{name}")  # type: ignore[arg-type]
        if kind is E.GlobalVar:
            return Closure(self.mod[expr.name], None, expr.name)  # type: ignore[attr-defined]
        return expr  # a Constructor is its own value: calling it builds an ADT

    # -- sequences of bindings ------------------------------------------------------------------
    def _plan(self, seq: E.SeqExpr) -> tuple[tuple[E.VarBinding, ...], E.Expr, E.Var | None]:
        """The bindings to run, the expression left in tail position, and its binding.

        ``lv = f(x); return lv`` (how the script parser writes a return) puts ``f(x)`` itself
        in tail position, so such calls are tail calls too.
        """
        plan = self._plans.get(seq)
        if plan is None:
            bindings = tuple(seq.bindings)
            plan = (bindings, seq.body, None)
            if bindings:
                last = bindings[-1]
                ann = last.var.annotation
                if (
                    last.var is seq.body
                    and (ann is None or type(ann) is AnyType)
                    and type(last.value) is not E.Function
                ):
                    plan = (bindings[:-1], last.value, last.var)
            self._plans[seq] = plan
        return plan

    def _begin_seq(self, seq: E.SeqExpr, env: Env) -> Any:
        """Run bindings on the spot until one needs the driver; then continue in a generator."""
        bindings, result, result_var = self._plan(seq)
        for index, binding in enumerate(bindings):
            var, value_expr = binding.var, binding.value
            env.binding = var
            if type(value_expr) is E.Function:
                # Bound before anything runs, so the function may call itself.
                value: Any = Closure(value_expr, env, f"{env.name}.{var.name}")
            else:
                value = self._value(value_expr, env)
                if value is _SLOW:
                    return self._gen_seq(bindings, index, result, result_var, env)
            self._bind(var, value, env)
        env.binding = result_var
        return _Eval(result, env)

    def _gen_seq(
        self,
        bindings: tuple[E.VarBinding, ...],
        start: int,
        result: E.Expr,
        result_var: E.Var | None,
        env: Env,
    ) -> _Gen:
        for binding in bindings[start:]:
            var, value_expr = binding.var, binding.value
            env.binding = var
            if type(value_expr) is E.Function:
                value: Any = Closure(value_expr, env, f"{env.name}.{var.name}")
            else:
                value = self._value(value_expr, env)
                if value is _SLOW:
                    value = yield _Eval(value_expr, env)
                    env.binding = var  # the evaluation may have run other bindings of env
            self._bind(var, value, env)
        env.binding = result_var
        return _Eval(result, env)

    def _bind(self, var: E.Var, value: Any, env: Env) -> None:
        ann = var.annotation
        if ann is not None and type(ann) is not AnyType:
            value = check_value(self.mod, ann, value, env, f"binding '{var.name}'", convert=False)
        env.vars[var] = value

    # -- generators for what needs sub-evaluations ----------------------------------------------
    def _eval(self, expr: E.Expr, env: Env) -> _Gen:
        """``value = yield from self._eval(e, env)``: directly when it can, else via the driver."""
        value = self._value(expr, env)
        if value is _SLOW:
            value = yield _Eval(expr, env)
        return value

    def _gen_if(self, e: E.If, env: Env) -> _Gen:
        cond = yield from self._eval(e.cond, env)
        return _Eval(_branch(e, cond, env), env)

    def _gen_match(self, m: E.Match, env: Env) -> _Gen:
        data = yield from self._eval(m.data, env)
        return _Eval(_choose_clause(m, data, env), env)

    def _gen_tuple(self, t: E.Tuple, env: Env) -> _Gen:
        fields = []
        for f in t.fields:
            fields.append((yield from self._eval(f, env)))
        return tuple(fields)

    def _gen_getitem(self, t: E.TupleGetItem, env: Env) -> _Gen:
        value = yield from self._eval(t.tuple_value, env)
        return get_item(value, t.index, env)

    def _gen_call(self, call: E.Call, env: Env) -> _Gen:
        callee = call.callee
        target: Any = None
        if isinstance(callee, (E.Op, E.Constructor)):
            target = callee
        elif not isinstance(callee, E.GlobalVar):
            target = yield from self._eval(callee, env)
        args = []
        for a in call.args:
            args.append((yield from self._eval(a, env)))
        return self._apply(call, target, args, env)

    # -- calls --------------------------------------------------------------------------------
    def _apply(self, call: E.Call, target: Any, args: list[Any], env: Env) -> Any:
        """Apply the callee of ``call`` (``target``: its value; None for a GlobalVar) to
        ``args``: a value for ops and constructors, a tail `_Eval` of the body for functions."""
        try:
            if target is None:
                name = call.callee.name
                func = self.mod[name]
                return _Eval(func.body, self._enter(func, name, None, args, convert=False))
            if type(target) is Closure:
                new_env = self._enter(target.func, target.name, target.env, args, convert=False)
                return _Eval(target.func.body, new_env)
        except (TypeError, ValueError) as err:  # a bad argument: say who passed it
            raise with_context(err, f"{err}\n  called from {env.where()}") from err
        if type(target) is E.Op or type(target) is E.Constructor:
            return self._primitive(target, call, args, env)
        raise InterpError(f"{env.where()}: cannot call {describe(target)}")

    def _enter(
        self, func: E.Function, name: str, parent: Env | None, args: Any, *, convert: bool
    ) -> Env:
        """A new invocation environment of ``func`` with its parameters bound to checked
        ``args`` and its symbolic dimensions bound from their shapes."""
        params = func.params
        if len(args) != len(params):
            plural = "argument" if len(params) == 1 else "arguments"
            raise TypeError(f"{name} takes {len(params)} {plural}, got {len(args)}")
        env = Env(name, parent)
        bind = env.vars
        checked = []
        for i, (param, arg) in enumerate(zip(params, args)):
            ann = param.annotation
            if ann is not None or convert:
                what = f"argument {i} '{param.name}'"
                arg = check_value(self.mod, ann, arg, env, what, convert=convert)
                checked.append((ann, arg, what))
            bind[param] = arg
        check_dim_exprs(env, checked)  # once every name is bound
        return env

    def _primitive(self, callee: E.Op | E.Constructor, call: E.Call, args: list, env: Env) -> Any:
        """Run an op's NumPy reference, or build an ADT value for a constructor call."""
        if type(callee) is E.Constructor:
            if len(args) != len(callee.field_types):
                raise InterpError(
                    f"{env.where()}: constructor {callee.name} takes "
                    f"{len(callee.field_types)} fields, got {len(args)}"
                )
            return _make_adt(callee, args)
        ref = self._reference.get(callee)
        if ref is None:
            raise InterpError(f"{env.where()}: op.{callee.name} has no reference implementation")
        if callee in PACKED_OPS:  # its result binds the dims no earlier value bound
            return packed_call(ref, callee, call, args, env)
        if callee is DIM:
            return dim_call(call, args[0], env)
        needs = self._needs_resolve.get(call)
        if needs is None:
            needs = any(names_dims(k, v) for k, v in call.attrs.items())
            self._needs_resolve[call] = needs
        attrs = call.attrs
        if needs:
            attrs = {k: resolve_attr(k, v, env, callee.name) for k, v in attrs.items()}
        out = run_reference(ref, callee, args, attrs, env)  # type: ignore[arg-type]
        return as_typed(out, call.type)


def interpret(mod: IRModule, fname: str | E.GlobalVar, *args: Any) -> Any:
    """Run function ``fname`` of ``mod`` on ``args`` with the reference interpreter.

    Args:
        mod: The module.
        fname: The function's name (or GlobalVar).
        *args: Its arguments: numpy arrays (of exactly the annotated dtype), Python scalars and
            lists (converted to the annotated dtype), objects with ``__dlpack__`` or
            ``__array__``, tuples, and `rvm.runtime.objects.ADT` values.

    Returns:
        numpy arrays, tuples, ADT values or interpreter `Closure` objects.

    Raises:
        rvm.errors.FunctionNotFoundError: ``mod`` has no function ``fname`` (the message names
            those it has; also a KeyError).
        TypeError: wrong number or kind of arguments.
        rvm.DTypeError: a tensor argument of the wrong dtype.
        rvm.ShapeError: a tensor argument of the wrong shape, or symbolic dimensions that
            disagree between arguments.
        InterpError: a failure while running (an op failing, no match clause matching).
    """
    return Interpreter(mod).call(fname, *args)


def _branch(e: E.If, cond: Any, env: Env) -> E.Expr:
    """The branch of ``e`` that the 0-d bool tensor ``cond`` selects."""
    if type(cond) is not np.ndarray or cond.dtype != np.bool_:
        raise DTypeError(f"{env.where()}: `if` needs a 0-d bool tensor, got {describe(cond)}")
    if cond.ndim != 0:
        raise ShapeError(f"{env.where()}: `if` needs a 0-d bool tensor, got {describe(cond)}")
    return e.true_branch if cond else e.false_branch


def _choose_clause(m: E.Match, data: Any, env: Env) -> E.Expr:
    """The body of the first clause of ``m`` matching ``data``, its variables bound in env."""
    for clause in m.clauses:
        bound = match_pattern(clause.pattern, data)
        if bound is not None:
            env.vars.update(bound)
            return clause.body
    raise InterpError(f"{env.where()}: no match clause matches {describe(data)}")


def _add_stack_note(err: Exception, stack: list[_Gen], limit: int = 8) -> None:
    """Add the functions (and bindings) pending on the interpreter's stack to ``err``; runs of
    the same place (a recursion) are shown once with a count."""
    if not stack or not hasattr(err, "add_note"):
        return
    runs: list[list[Any]] = []  # [where, count], innermost first
    for gen in reversed(stack[-10_000:]):
        if gen.gi_frame is None:  # the generator the error came out of has finished
            continue
        env = gen.gi_frame.f_locals.get("env")
        where = env.where() if isinstance(env, Env) else "?"
        if runs and runs[-1][0] == where:
            runs[-1][1] += 1
        else:
            runs.append([where, 1])
    parts = [w if n == 1 else f"{w} (x{n})" for w, n in runs[:limit]]
    if not runs:
        return
    if len(runs) > limit:
        parts.append("...")
    err.add_note("interpreter stack, innermost first: " + " <- ".join(parts))


def _make_adt(ctor: E.Constructor, args: list) -> Any:
    from rvm.runtime.objects import ADT

    return ADT(ctor.tag, tuple(args), ctor.name)


_GENERATORS = {  # SeqExprs are started by Interpreter._begin_seq
    E.If: Interpreter._gen_if,
    E.Match: Interpreter._gen_match,
    E.Call: Interpreter._gen_call,
    E.Tuple: Interpreter._gen_tuple,
    E.TupleGetItem: Interpreter._gen_getitem,
}
