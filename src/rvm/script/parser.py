"""The rvm script parser: Python source (read with `ast`) to an `IRModule`.

Entry points: `parse(text)` for printed modules, and the decorators ``@module`` (a class of
``@func`` methods), ``@func`` (one function, or a method marker) and ``@adt`` (a data type).
``@module`` and ``@func`` read the decorated object's source text, found through its code
objects (`rvm.script.source`); ``@adt`` reads the class's annotations. Free names (data types,
``op``, constants) resolve in the namespace where the object is defined. Nothing in a script
body is run by Python; each statement is translated, with errors reported as `ScriptError`
naming the line and showing it with a caret under the offending expression.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from collections.abc import Callable as _Callable
from collections.abc import Mapping
from typing import Any as _Any

from rvm.errors import IRError, ScriptError
from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.module import ADTDef, IRModule
from rvm.ir.types import ADTType, FuncType, TupleType, Type
from rvm.script._stmts import BodyParser
from rvm.script.consts import const_b64, literal_value
from rvm.script.source import class_source, function_source
from rvm.script.types import Any, Callable, Shape, T, Tuple, to_type, type_from_ast


class ModuleContext:
    """What the body parser needs to know about the module: names, types, source lines."""

    def __init__(
        self,
        lines: list[str],
        line_offset: int,
        namespace: Mapping[str, object],
        adts: Mapping[str, ADTDef],
        defs: Mapping[str, ast.FunctionDef],
    ) -> None:
        self.lines = lines
        self.line_offset = line_offset
        self.namespace = namespace
        self.adts = dict(adts)
        self.used: dict[str, None] = {}
        self.defs = dict(defs)
        self.gvars = {name: E.GlobalVar(name) for name in defs}

    # -- errors -----------------------------------------------------------------------------
    def error(self, node: ast.AST, msg: str) -> ScriptError:
        """A ScriptError for ``node``: its line number, the line, and a caret under it."""
        lineno = getattr(node, "lineno", None)
        if lineno is None or not 0 < lineno <= len(self.lines):
            return ScriptError(msg)
        line = self.lines[lineno - 1].rstrip()
        text = line.lstrip()
        cut = len(line) - len(text)
        col = node.col_offset  # type: ignore[attr-defined]
        end = node.end_col_offset if node.end_lineno == lineno else len(line)  # type: ignore
        caret = " " * (4 + max(col - cut, 0)) + "^" * max(1, (end or len(line)) - col)
        return ScriptError(f"line {lineno + self.line_offset}: {msg}\n    {text}\n{caret}")

    # -- names ------------------------------------------------------------------------------
    def resolve(self, name: str) -> object:
        """A free name: a module function, a constructor, or a value of the namespace."""
        if name in self.gvars:
            return self.gvars[name]
        ctor = self.constructor_named(name)
        if ctor is not None:
            return ctor
        return self.namespace.get(name)

    def constructor_named(self, name: str) -> E.Constructor | None:
        for adt in self.adts.values():
            for c in adt.constructors:
                if c.name == name:
                    self.use_adt(adt.name)
                    return c
        return None

    def constructor(self, node: ast.Name) -> E.Constructor | None:
        return self.constructor_named(node.id)

    def use_adt(self, name: str) -> None:
        """Record that the module uses data type ``name`` (and those its fields use)."""
        stack = [name]
        while stack:
            n = stack.pop()
            if n in self.used:
                continue
            if n not in self.adts:
                raise IRError(f"unknown data type '{n}'")
            self.used[n] = None
            for c in self.adts[n].constructors:
                stack.extend(_adt_names(c.field_types))

    def arity(self, name: str) -> int | None:
        node = self.defs.get(name)
        return None if node is None else len(node.args.args)

    # -- types and signatures ---------------------------------------------------------------
    def type_of(self, node: ast.expr) -> Type:
        """The type an annotation writes, located errors for bad ones."""

        def resolve_name(n: ast.expr, name: str) -> Type:
            value = self.namespace.get(name)
            if isinstance(value, ADTDef):
                self.adts.setdefault(value.name, value)
                name = value.name
            elif isinstance(value, Type):
                return value
            if name not in self.adts:
                raise self.error(n, f"unknown type '{name}'")
            self.use_adt(name)
            return ADTType(name)

        try:
            return type_from_ast(node, resolve_name)
        except ScriptError:
            raise
        except IRError as err:
            raise self.error(node, str(err)) from None

    def params(self, node: ast.FunctionDef) -> tuple[E.Var, ...]:
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
            raise self.error(node, f"'{node.name}' must take plain positional parameters")
        out = []
        for p in a.args:
            if p.annotation is None:
                raise self.error(
                    p,
                    f"parameter '{p.arg}' of '{node.name}' needs a type "
                    'annotation, e.g. T[(2,), "float32"]',
                )
            out.append(E.Var(p.arg, self.type_of(p.annotation)))
        return tuple(out)

    def decorator_attrs(self, node: ast.FunctionDef) -> dict[str, _Any]:
        """The ``attrs`` of ``@func(attrs={...})``; other decorators are errors."""
        attrs: dict[str, _Any] = {}
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if _last_name(target) != "func":
                raise self.error(dec, "unsupported decorator; functions take @func")
            if isinstance(dec, ast.Call):
                for kw in dec.keywords:
                    if kw.arg != "attrs" or dec.args:
                        raise self.error(dec, "@func takes one keyword argument: attrs={...}")
                    attrs.update(self.attrs_literal(kw.value))
        return attrs

    def attrs_literal(self, node: ast.expr) -> dict[str, _Any]:
        if not isinstance(node, ast.Dict) or any(k is None for k in node.keys):
            raise self.error(node, "attrs must be a dict literal")
        try:
            return {
                literal_value(k): literal_value(v)  # type: ignore[misc]
                for k, v in zip(node.keys, node.values)
            }
        except IRError as err:
            raise self.error(node, str(err)) from None

    def signature(self, node: ast.FunctionDef) -> tuple[tuple[E.Var, ...], Type | None]:
        params = self.params(node)
        ret = self.type_of(node.returns) if node.returns is not None else None
        return params, ret


def _adt_names(types: tuple[Type, ...]) -> list[str]:
    out, stack = [], list(types)
    while stack:
        t = stack.pop()
        if isinstance(t, ADTType):
            out.append(t.name)
        elif isinstance(t, TupleType):
            stack.extend(t.fields)
        elif isinstance(t, FuncType):
            stack.extend((*t.params, t.ret))
    return out


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


# ---------------------------------------------------------------------------------------------
# Functions and modules


def _function(ctx: ModuleContext, node: ast.FunctionDef) -> E.Function:
    attrs = ctx.decorator_attrs(node)
    params, ret = ctx.signature(node)
    body_parser = BodyParser(ctx)
    body_parser.scopes = [{p.name: p for p in params}]
    body = body_parser.function_body(node, node.body, node.name)
    func = E.Function(params, body, ret, attrs)
    try:
        ctx.gvars[node.name].with_type(infer_type(func))
    except IRError as err:
        raise ctx.error(node, str(err)) from None
    return func


def _call_order(defs: Mapping[str, ast.FunctionDef]) -> list[str]:
    """Callees before callers where possible (cycles in source order), so calls get types."""
    calls = {
        name: [
            n.id for n in ast.walk(d) if isinstance(n, ast.Name) and n.id in defs and n.id != name
        ]
        for name, d in defs.items()
    }
    order: dict[str, None] = {}
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order or name in visiting:
            return
        visiting.add(name)
        for callee in calls[name]:
            visit(callee)
        order[name] = None

    for name in defs:
        visit(name)
    return list(order)


def _build_module(ctx: ModuleContext, name: str | None) -> IRModule:
    for fname, node in ctx.defs.items():  # signatures first: calls ahead get typed results
        params, ret = ctx.signature(node)
        if ret is not None:
            ctx.gvars[fname].with_type(FuncType(tuple(p.type for p in params), ret))  # type: ignore
    funcs = {}
    for fname in _call_order(ctx.defs):
        funcs[fname] = _function(ctx, ctx.defs[fname])
    ordered = {fname: funcs[fname] for fname in ctx.defs}
    _settle_types(ctx, ordered)
    adts = {n: ctx.adts[n] for n in ctx.used}
    attrs = {"name": name} if name else {}
    try:
        return IRModule(ordered, adts, ctx.gvars, attrs)
    except IRError as err:
        raise ScriptError(str(err)) from None


def _settle_types(ctx: ModuleContext, funcs: Mapping[str, E.Function]) -> None:
    """Re-infer until the functions' types stop changing: a call parsed before its callee
    (recursion, calls ahead) was typed Any, and local recursive calls likewise."""
    for _ in range(4):
        changed = False
        for fname, func in funcs.items():
            try:
                ft = infer_type(func, refresh=True)
            except IRError as err:
                raise ctx.error(ctx.defs[fname], str(err)) from None
            if ctx.gvars[fname].type != ft:
                ctx.gvars[fname].with_type(ft)
                changed = True
        if not changed:
            return


def _adt_from_class(node: ast.ClassDef, type_of: _Callable[[ast.expr], Type]) -> ADTDef:
    ctors = []
    for stmt in node.body:
        if isinstance(stmt, ast.Pass) or (
            isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        ):
            continue
        if not (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.value is None
        ):
            raise IRError(
                f"a data type body holds lines `Name: (field types...)`, got {ast.unparse(stmt)}"
            )
        ann = stmt.annotation
        fields = ann.elts if isinstance(ann, ast.Tuple) else [ann]
        types = tuple(type_of(f) for f in fields)
        ctors.append(E.Constructor(stmt.target.id, len(ctors), types, node.name))
    return ADTDef(node.name, tuple(ctors))


def _adt_type_resolver(ctx: ModuleContext, own: set[str]) -> _Callable[[ast.expr], Type]:
    def type_of(node: ast.expr) -> Type:
        def resolve_name(n: ast.expr, name: str) -> Type:
            if name in own or name in ctx.adts:
                return ADTType(name)
            value = ctx.namespace.get(name)  # a declared data type or a type alias
            if isinstance(value, ADTDef):
                return ADTType(value.name)
            if isinstance(value, Type):
                return value
            raise ctx.error(n, f"unknown type '{name}'")

        try:
            return type_from_ast(node, resolve_name)
        except ScriptError:
            raise
        except IRError as err:
            raise ctx.error(node, str(err)) from None

    return type_of


def default_namespace() -> dict[str, object]:
    """Names a printed module may use without importing them."""
    import rvm
    import rvm.script

    ns: dict[str, object] = {
        "rvm": rvm,
        "T": T,
        "Tuple": Tuple,
        "Shape": Shape,
        "Any": Any,
        "Callable": Callable,
        "const_b64": const_b64,
    }
    try:
        import rvm.op

        ns["op"] = rvm.op
    except ImportError:
        pass
    return ns


def parse(text: str) -> IRModule:
    """Parse rvm script text (as `rvm.script.script` prints it) into an IRModule."""
    text = textwrap.dedent(text)
    try:
        tree = ast.parse(text)
    except SyntaxError as err:
        raise ScriptError(f"line {err.lineno}: {err.msg}") from None
    lines = text.splitlines()
    ctx = ModuleContext(lines, 0, default_namespace(), {}, {})
    adt_nodes, defs, name = [], {}, None
    for stmt in tree.body:
        decorators = [
            _last_name(d.func if isinstance(d, ast.Call) else d)
            for d in getattr(stmt, "decorator_list", [])
        ]
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(stmt, ast.ClassDef) and decorators == ["adt"]:
            adt_nodes.append(stmt)
        elif isinstance(stmt, ast.ClassDef) and decorators == ["module"]:
            if name is not None:
                raise ctx.error(stmt, "one @module class per script")
            name = stmt.name
            defs.update(_methods(ctx, stmt))
        elif isinstance(stmt, ast.FunctionDef) and decorators and decorators[0] == "func":
            defs[stmt.name] = stmt
        else:
            raise ctx.error(
                stmt,
                "expected imports, @rvm.script.adt classes, a @module class or @func functions",
            )
    own = {n.name for n in adt_nodes}
    for node in adt_nodes:
        try:
            adt = _adt_from_class(node, _adt_type_resolver(ctx, own))
        except IRError as err:
            raise err if isinstance(err, ScriptError) else ctx.error(node, str(err)) from None
        ctx.adts[adt.name] = adt
    ctx.used = {n.name: None for n in adt_nodes}
    ctx.defs, ctx.gvars = defs, {n: E.GlobalVar(n) for n in defs}
    return _build_module(ctx, name)


def _methods(ctx: ModuleContext, cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    defs = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if isinstance(stmt, ast.Pass):
            continue
        if not isinstance(stmt, ast.FunctionDef):
            raise ctx.error(stmt, "a @module class holds @func functions only")
        if stmt.name in defs:
            raise ctx.error(stmt, f"function '{stmt.name}' is defined twice")
        defs[stmt.name] = stmt
    return defs


# ---------------------------------------------------------------------------------------------
# Decorators


def _caller_namespace(depth: int) -> dict[str, object]:
    frame = sys._getframe(depth + 1)
    return {**frame.f_globals, **frame.f_locals}


def _namespace_adts(namespace: Mapping[str, object]) -> dict[str, ADTDef]:
    return {v.name: v for v in namespace.values() if isinstance(v, ADTDef)}


def module(cls: type) -> IRModule:
    """Class decorator: the class's ``@func`` methods parsed into an IRModule."""
    namespace = _caller_namespace(1)
    node, lines, offset = class_source(cls)
    assert isinstance(node, ast.ClassDef)
    ctx = ModuleContext(lines, offset, namespace, _namespace_adts(namespace), {})
    defs = _methods(ctx, node)
    ctx.defs, ctx.gvars = defs, {n: E.GlobalVar(n) for n in defs}
    return _build_module(ctx, node.name)


def func(fn: _Callable | None = None, *, attrs: dict | None = None) -> _Any:
    """Mark a method of a ``@module`` class; on a plain function, parse it into an IRModule
    holding that one function. ``@func(attrs={...})`` sets the function's attrs."""
    namespace = _caller_namespace(1)

    def decorate(f: _Callable) -> _Any:
        parts = f.__qualname__.split(".")
        if len(parts) > 1 and parts[-2] != "<locals>":
            return f  # a method: the @module class parses it
        node, lines, offset = function_source(f)
        if not isinstance(node, ast.FunctionDef):
            raise ScriptError(f"@func decorates a plain `def` function, got {f!r}")
        ctx = ModuleContext(lines, offset, namespace, _namespace_adts(namespace), {node.name: node})
        return _build_module(ctx, None)

    return decorate if fn is None else decorate(fn)


def adt(cls: type) -> ADTDef:
    """Class decorator: lines ``Name: (field types...)`` declare an algebraic data type.

    The fields come from the class's annotations, so no source text is needed: evaluated
    types, or under ``from __future__ import annotations`` strings, read as a script reads
    annotations with names looked up where the class is defined.
    """
    namespace = _caller_namespace(1)
    ctx = ModuleContext([], 0, namespace, _namespace_adts(namespace), {})
    type_of = _adt_type_resolver(ctx, {cls.__name__})
    ctors = []
    for cname, value in inspect.get_annotations(cls).items():
        try:
            fields = _adt_fields(value, type_of)
        except IRError as err:
            raise ScriptError(f"data type {cls.__name__}, constructor {cname}: {err}") from None
        ctors.append(E.Constructor(cname, len(ctors), fields, cls.__name__))
    return ADTDef(cls.__name__, tuple(ctors))


def _adt_fields(value: object, type_of: _Callable[[ast.expr], Type]) -> tuple[Type, ...]:
    """A constructor's field types from its annotation: a value, or a string to read."""
    if isinstance(value, str):
        try:
            node = ast.parse(value, mode="eval").body
        except SyntaxError:
            raise IRError(f"not a type: {value}") from None
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        return tuple(type_of(e) for e in items)
    values = value if isinstance(value, tuple) else (value,)
    return tuple(to_type(v) for v in values)
