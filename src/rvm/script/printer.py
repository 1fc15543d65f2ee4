"""The rvm script printer: IR as Python source that `rvm.script.parse` reads back.

Bindings print one per line (``name = value  # type``); an `If` or `Match` bound to a variable
prints as a statement whose branches end by assigning that variable, and one in tail position
prints with ``return`` in each branch. Local functions print as nested ``def`` (or ``lambda``
when their parameters are unannotated). Names are made unique per module function, and never
shadow module functions, constructors or the script's own names (``op``, ``T``, ...).
"""

from __future__ import annotations

import keyword
import math
from typing import Any as _Any

from rvm.ir import expr as E
from rvm.ir.module import ADTDef, IRModule
from rvm.ir.types import ADTType, TensorType, Type
from rvm.script.consts import const_text
from rvm.script.types import type_text

INDENT = "    "
HEADER = (
    "import rvm\n"
    "from rvm import op\n"
    "from rvm.script import Any, Callable, Shape, T, Tuple, func, module\n"
)
RESERVED = frozenset(
    {
        "rvm",
        "op",
        "T",
        "Tuple",
        "Shape",
        "Any",
        "Callable",
        "func",
        "module",
        "adt",
        "float",
        "int",
        "bool",
        "const_b64",
        "lambda",
        "_",
    }
)


_EFFECT_CALLS = {
    "vm.call_packed": "call_packed",
    "vm.call_dps_packed": "call_dps_packed",
    "vm.debug_print": "debug_print",
    "vm.assert": "assert",
    "vm.dim": "dim",
}


def literal_text(value: _Any) -> str:
    """A Python literal for an attribute value (ints, floats, strings, tuples, None, bools)."""
    if isinstance(value, str):
        return (
            f'"{value}"'
            if value.isprintable() and '"' not in value and "\\" not in value
            else repr(value)
        )
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value)
    if isinstance(value, (tuple, list)):
        items = [literal_text(v) for v in value]
        if isinstance(value, tuple) and len(items) == 1:
            return f"({items[0]},)"
        inner = ", ".join(items)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"{literal_text(k)}: {literal_text(v)}" for k, v in value.items()) + "}"
        )
    return repr(value)


class _Printer:
    """Prints one module function (or a stand-alone node) with its own name table."""

    def __init__(self, reserved: set[str]) -> None:
        self.reserved = reserved
        self.names: dict[E.Var, str] = {}
        self.used: set[str] = set()
        self.lines: list[str] = []

    # -- names ------------------------------------------------------------------------------
    def define(self, var: E.Var, name: str | None = None) -> str:
        """Give ``var`` a fresh printed name (or ``name`` when forced)."""
        if name is None:
            base = var.name if var.name.isidentifier() and not keyword.iskeyword(var.name) else "v"
            name, k = base, 0
            while name in self.used or name in self.reserved:
                k += 1
                name = f"{base}_{k}"
        self.used.add(name)
        self.names[var] = name
        return name

    def name(self, var: E.Var) -> str:
        return self.names.get(var) or self.define(var)

    def emit(self, indent: int, text: str) -> None:
        self.lines.append(INDENT * indent + text)

    # -- expressions ------------------------------------------------------------------------
    def expr(self, e: object) -> str:  # noqa: C901 - one case per node kind
        """``e`` written inline (sub-expressions nested)."""
        if isinstance(e, E.Var):
            return self.name(e)
        if isinstance(e, (E.GlobalVar, E.Constructor)):
            return e.name
        if isinstance(e, E.Constant):
            return const_text(e)
        if isinstance(e, E.Tuple):
            items = [self.expr(f) for f in e.fields]
            return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"
        if isinstance(e, E.TupleGetItem):
            return f"{self.expr(e.tuple_value)}[{e.index}]"
        if isinstance(e, E.Call):
            return self.call(e)
        if isinstance(e, E.Function):
            text = self.lambda_text(e)
            return f"({text})" if text is not None else "<function>"
        if isinstance(e, E.If):
            t, f = _only_result(e.true_branch), _only_result(e.false_branch)
            if t is not None and f is not None:
                return f"({self.expr(t)} if {self.expr(e.cond)} else {self.expr(f)})"
        if isinstance(e, E.SeqExpr) and not e.blocks:
            return self.expr(e.body)
        return f"<{type(e).__name__}>"

    def call(self, c: E.Call) -> str:
        if isinstance(c.callee, E.Op) and c.callee.name in _EFFECT_CALLS:
            return self.effect_call(c)
        args = [self.expr(a) for a in c.args]
        args += [f"{k}={literal_text(v)}" for k, v in c.attrs.items()]
        callee = c.callee
        if isinstance(callee, E.Op):
            head = f"op.{callee.name}"
        elif isinstance(callee, E.Function):
            head = self.expr(callee)
        else:
            head = self.expr(callee)
        return f"{head}({', '.join(args)})"

    def effect_call(self, c: E.Call) -> str:
        """``rvm.call_packed("f", x, out=T[...])`` and the like (`rvm.op.effects`)."""
        name, a = _EFFECT_CALLS[c.callee.name], c.attrs  # type: ignore[union-attr]
        args = [self.expr(x) for x in c.args]
        if name == "debug_print":
            return f"rvm.debug_print({', '.join(args)}, {literal_text(a['label'])})"
        if name == "assert":
            return f"assert {args[0]}, {literal_text(a['message'])}"
        if name == "dim":
            return f"rvm.dim({args[0]}, {literal_text(a['name'])})"
        if "dtype" in a:
            args.append(f"out={type_text(TensorType(a.get('shape'), a['dtype']))}")
        elif "fields" in a:
            fields = [type_text(TensorType(shape, dtype)) for shape, dtype in a["fields"]]
            args.append(f"out=({', '.join(fields)}{',' if len(fields) == 1 else ''})")
        return f"rvm.{name}({', '.join([literal_text(a['func']), *args])})"

    def lambda_text(self, f: E.Function) -> str | None:
        """``lambda ...: body`` when ``f`` has unannotated params and its bindings inline."""
        body = _lambda_body(f)
        if body is None:
            return None
        params = ", ".join(self.define(p) for p in f.params)
        return f"lambda {params}: {self.expr(body)}"

    def pattern(self, p: E.Pattern) -> str:
        if isinstance(p, E.PatternVar):
            return self.define(p.var)
        if isinstance(p, E.PatternConstructor):
            return f"{p.constructor.name}({', '.join(self.pattern(q) for q in p.patterns)})"
        if isinstance(p, E.PatternTuple):
            items = [self.pattern(q) for q in p.patterns]
            return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"
        return "_"

    # -- statements -------------------------------------------------------------------------
    def binding(self, b: E.VarBinding, indent: int, name: str | None = None) -> None:
        value, var = b.value, b.var
        if name is not None:
            target = self.define(var, name)
        else:
            target = self.names.get(var) or self.define(var)
        if isinstance(value, E.Function) and _lambda_body(value) is None:
            self.function(target, value, indent, decorate=bool(value.attrs))
            return
        if isinstance(value, (E.If, E.Match)):
            self.branches(value, indent, target)
            return
        if isinstance(value, E.SeqExpr):
            self.assign_result(value, indent, target)
            return
        if isinstance(value, E.Call) and getattr(value.callee, "name", "") == "vm.assert":
            self.emit(indent, self.expr(value))  # a statement: `assert cond, "message"`
            return
        lam = self.lambda_text(value) if isinstance(value, E.Function) else None
        text = lam if lam is not None else self.expr(value)
        if var.annotation is not None:
            self.emit(indent, f"{target}: {type_text(var.annotation)} = {text}")
        elif var.type is not None:
            self.emit(indent, f"{target} = {text}  # {type_text(var.type)}")
        else:
            self.emit(indent, f"{target} = {text}")

    def bindings(self, seq: E.SeqExpr, indent: int, skip_last: bool = False) -> None:
        items = list(seq.bindings)
        for b in items[:-1] if skip_last else items:
            self.binding(b, indent)

    def tail(self, e: E.Expr, indent: int) -> None:
        """``e`` as the result of a function: branches of If/Match each ``return``."""
        if isinstance(e, E.SeqExpr):
            self.bindings(e, indent)
            e = e.body
        if isinstance(e, (E.If, E.Match)):
            self.branches(e, indent, None)
        else:
            self.emit(indent, f"return {self.expr(e)}")

    def assign_result(self, e: E.Expr, indent: int, target: str) -> None:
        """``e`` as a branch whose value is assigned to ``target``."""
        if isinstance(e, E.SeqExpr):
            items = list(e.bindings)
            if items and items[-1].var is e.body:
                self.bindings(e, indent, skip_last=True)
                self.binding(items[-1], indent, name=target)
                return
            self.bindings(e, indent)
            e = e.body
        if isinstance(e, (E.If, E.Match)):
            self.branches(e, indent, target)
        else:
            self.emit(indent, f"{target} = {self.expr(e)}")

    def branch(self, e: E.Expr, indent: int, target: str | None) -> None:
        if target is None:
            self.tail(e, indent)
        else:
            self.assign_result(e, indent, target)

    def branches(self, e: E.If | E.Match, indent: int, target: str | None) -> None:
        if isinstance(e, E.Match):
            self.emit(indent, f"match {self.expr(e.data)}:")
            for clause in e.clauses:
                self.emit(indent + 1, f"case {self.pattern(clause.pattern)}:")
                self.branch(clause.body, indent + 2, target)
            return
        keyword_ = "if"
        while True:
            self.emit(indent, f"{keyword_} {self.expr(e.cond)}:")
            self.branch(e.true_branch, indent + 1, target)
            nxt = e.false_branch
            if isinstance(nxt, E.SeqExpr) and not nxt.blocks:
                nxt = nxt.body
            if not isinstance(nxt, E.If):
                break
            e, keyword_ = nxt, "elif"
        self.emit(indent, "else:")
        self.branch(e.false_branch, indent + 1, target)

    def function(self, name: str, f: E.Function, indent: int, decorate: bool = True) -> None:
        if decorate:
            attrs = f"(attrs={literal_text(dict(f.attrs))})" if f.attrs else ""
            self.emit(indent, f"@func{attrs}")
        params = []
        for p in f.params:
            pname = self.define(p)
            params.append(f"{pname}: {type_text(p.annotation)}" if p.annotation else pname)
        ret = f" -> {type_text(f.ret_type)}" if f.ret_type is not None else ""
        self.emit(indent, f"def {name}({', '.join(params)}){ret}:")
        self.tail(f.body, indent + 1)


def _only_result(e: E.Expr) -> E.Expr | None:
    if isinstance(e, E.SeqExpr):
        return e.body if not e.blocks else None
    return e


def _lambda_body(f: E.Function) -> E.Expr | None:
    """The inline body of ``f`` when it prints as a lambda, else None."""
    if f.attrs or f.ret_type is not None or any(p.annotation is not None for p in f.params):
        return None
    return _inline(f.body)


def _inline(body: E.Expr) -> E.Expr | None:
    """``body`` with its bindings substituted into their single uses, if that keeps the
    evaluation order (so parsing the nested form gives the same bindings back)."""
    if not isinstance(body, E.SeqExpr):
        return body
    items = list(body.bindings)
    values = {b.var: b.value for b in items}
    if any(isinstance(v, (E.Function, E.If, E.Match, E.SeqExpr)) for v in values.values()):
        return None
    order: list[E.Var] = []

    def subst(e: E.Expr) -> E.Expr:
        if isinstance(e, E.Var) and e in values:
            value = subst(values.pop(e))  # popped: a second use is not inlined
            order.append(e)
            return value
        if isinstance(e, E.Call):
            return E.Call(e.callee, tuple(subst(a) for a in e.args), e.attrs)
        if isinstance(e, E.Tuple):
            return E.Tuple(tuple(subst(f) for f in e.fields))
        if isinstance(e, E.TupleGetItem):
            return E.TupleGetItem(subst(e.tuple_value), e.index)
        return e

    out = subst(body.body)
    if values or order != [b.var for b in items]:
        return None
    return out


def _reserved(mod: IRModule | None) -> set[str]:
    names = set(RESERVED)
    if mod is not None:
        names.update(mod)
        for adt in mod.adts.values():
            names.add(adt.name)
            names.update(c.name for c in adt.constructors)
    return names


def adt_text(adt: ADTDef) -> str:
    """The ``@rvm.script.adt`` class declaring ``adt``."""
    lines = ["@rvm.script.adt", f"class {adt.name}:"]
    for c in adt.constructors:
        fields = [f'"{t.name}"' if isinstance(t, ADTType) else type_text(t) for t in c.field_types]
        text = f"({fields[0]},)" if len(fields) == 1 else "(" + ", ".join(fields) + ")"
        lines.append(f"{INDENT}{c.name}: {text}")
    if not adt.constructors:
        lines.append(f"{INDENT}pass")
    return "\n".join(lines) + "\n"


def module_text(mod: IRModule) -> str:
    """The whole module: imports, data types, then the ``@module`` class."""
    parts = [HEADER]
    parts += [adt_text(adt) for adt in mod.adts.values()]
    name = mod.attrs.get("name")
    cls = name if isinstance(name, str) and name.isidentifier() else "Module"
    lines = ["@module", f"class {cls}:"]
    reserved = _reserved(mod)
    for i, (fname, func) in enumerate(mod.items()):
        p = _Printer(reserved)
        p.function(fname, func, 1)
        if i:
            lines.append("")
        lines.extend(p.lines)
    if len(mod) == 0:
        lines.append(f"{INDENT}pass")
    parts.append("\n".join(lines) + "\n")
    return "\n\n".join(parts)


def script(node: object) -> str:
    """The rvm script text of a module, function, expression, binding, pattern or type."""
    if isinstance(node, IRModule):
        return module_text(node)
    if isinstance(node, ADTDef):
        return adt_text(node)
    if isinstance(node, Type):
        return type_text(node)
    p = _Printer(set(RESERVED))
    if isinstance(node, E.Function):
        name = node.attrs.get("global_symbol", "main")
        p.function(name if isinstance(name, str) and name.isidentifier() else "main", node, 0)
    elif isinstance(node, E.VarBinding):
        p.binding(node, 0)
    elif isinstance(node, E.BindingBlock):
        for b in node.bindings:
            p.binding(b, 0)
    elif isinstance(node, E.SeqExpr):
        p.tail(node, 0)
    elif isinstance(node, (E.If, E.Match)):
        p.tail(node, 0)
    elif isinstance(node, E.Pattern):
        return p.pattern(node)
    elif isinstance(node, E.Clause):
        p.emit(0, f"case {p.pattern(node.pattern)}:")
        p.tail(node.body, 1)
    elif isinstance(node, E.Expr):
        return p.expr(node)
    else:
        return repr(node)
    return "\n".join(p.lines)
