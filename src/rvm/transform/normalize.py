"""A-normal form: every operand is an atom, every body and branch a flat SeqExpr.

Needs: any module.

Guarantees: call arguments and callees, tuple fields, tuple-index sources, If conditions and
Match data are atoms (Var, Constant, GlobalVar, Constructor); Function bodies, If branches and
Match clause bodies are SeqExprs of one binding block whose result is an atom, an If or a
Match; a Function literal is only ever the value of its own binding (``f = Function(...)``);
nested SeqExprs in binding position are flattened into the enclosing block. Fresh variables are
named ``lv0``, ``lv1``, ... (unique within the function). Running the pass twice changes nothing
(up to structural equality).

Algorithm: one walk per function. A binding list is filled in evaluation order; call/tuple trees
(which Python operators nest thousands deep) are flattened post-order with an explicit stack,
binding each non-atomic operand to a fresh variable. A node shared within one scope (the same
object used twice) is bound once: a per-scope memo maps it to its variable.
"""

from __future__ import annotations

from rvm.ir import expr as E
from rvm.ir.module import IRModule

_ATOMS = (E.Var, E.Constant, E.GlobalVar, E.Constructor)
_TREES = (E.Call, E.Tuple, E.TupleGetItem)


def normalize(mod: IRModule) -> IRModule:
    """Return ``mod`` with every function in A-normal form."""
    funcs = {name: _Normalizer(func).function(func) for name, func in mod.items()}
    return IRModule(funcs, mod.adts, mod.global_vars, mod.attrs)


def is_atom(expr: object) -> bool:
    """True for the expressions A-normal form allows as operands."""
    return isinstance(expr, _ATOMS)


class _Normalizer:
    """Normalizes one module function; owns its fresh names and the scoped memo."""

    def __init__(self, func: E.Function) -> None:
        self.used = _var_names(func)
        self.counter = 0
        self.memo: list[dict[E.Expr, E.Var]] = []

    def fresh(self) -> E.Var:
        while f"lv{self.counter}" in self.used:
            self.counter += 1
        name = f"lv{self.counter}"
        self.used.add(name)
        return E.Var(name)

    def function(self, func: E.Function) -> E.Function:
        body = self.block(func.body)
        if body is func.body:
            return func
        return E.Function(func.params, body, func.ret_type, func.attrs)

    def block(self, expr: E.Expr) -> E.SeqExpr:
        """``expr`` as a SeqExpr in a scope of its own (a body or branch)."""
        out: list[E.VarBinding] = []
        self.memo.append({})
        try:
            value = self.value(expr, out)
        finally:
            self.memo.pop()
        if not isinstance(value, (*_ATOMS, E.If, E.Match)):
            value = self.bind(value, out)
        if isinstance(expr, E.SeqExpr) and _same_seq(expr, out, value):
            return expr
        return E.seq(out, value)

    def bind(self, value: E.Expr, out: list[E.VarBinding], key: E.Expr | None = None) -> E.Var:
        var = self.fresh()
        if value.type is not None:
            var.with_type(value.type)
        out.append(E.VarBinding(var, value))
        if key is not None:
            self.memo[-1][key] = var
        return var

    def lookup(self, expr: E.Expr) -> E.Var | None:
        for scope in reversed(self.memo):
            var = scope.get(expr)
            if var is not None:
                return var
        return None

    def value(self, expr: E.Expr, out: list[E.VarBinding]) -> E.Expr:
        """Emit what ``expr`` needs into ``out``; return it with atomic operands."""
        while isinstance(expr, E.SeqExpr):  # flatten: its bindings join the current block
            for b in expr.bindings:
                out.append(self.binding(b, out))
            expr = expr.body
        if isinstance(expr, _TREES):
            return self.tree(expr, out)
        if isinstance(expr, E.If):
            cond = self.atom(expr.cond, out)
            t, f = self.block(expr.true_branch), self.block(expr.false_branch)
            if cond is expr.cond and t is expr.true_branch and f is expr.false_branch:
                return expr
            return E.If(cond, t, f)
        if isinstance(expr, E.Match):
            return self.match(expr, out)
        if isinstance(expr, E.Function):
            return self.function(expr)
        return expr

    def binding(self, b: E.VarBinding, out: list[E.VarBinding]) -> E.VarBinding:
        value = self.value(b.value, out)
        return b if value is b.value else E.VarBinding(b.var, value)

    def match(self, m: E.Match, out: list[E.VarBinding]) -> E.Expr:
        data = self.atom(m.data, out)
        clauses = []
        for c in m.clauses:
            body = self.block(c.body)
            clauses.append(c if body is c.body else E.Clause(c.pattern, body))
        if data is m.data and all(a is b for a, b in zip(clauses, m.clauses)):
            return m
        return E.Match(data, tuple(clauses))

    def atom(self, expr: E.Expr, out: list[E.VarBinding]) -> E.Expr:
        """``expr`` as an atom, binding it (and what it needs) when it is not one."""
        if isinstance(expr, _ATOMS):
            return expr
        if isinstance(expr, _TREES):
            return self.tree(expr, out, as_atom=True)
        known = self.lookup(expr)
        if known is not None:
            return known
        return self.bind(self.value(expr, out), out, key=expr)

    def tree(self, root: E.Expr, out: list[E.VarBinding], as_atom: bool = False) -> E.Expr:
        """Flatten a call/tuple tree post-order with an explicit stack (no recursion)."""
        stack: list[tuple[E.Expr, bool]] = [(root, False)]
        done: list[E.Expr] = []
        while stack:
            node, expanded = stack.pop()
            if not expanded:
                if isinstance(node, _ATOMS):
                    done.append(node)
                elif (known := self.lookup(node)) is not None:
                    done.append(known)
                elif isinstance(node, _TREES):
                    stack.append((node, True))
                    stack.extend((c, False) for c in reversed(_operands(node)))
                else:  # If, Match, Function, SeqExpr as an operand: bound to a variable
                    done.append(self.atom(node, out))
                continue
            n = len(_operands(node))
            kids = done[len(done) - n :]
            del done[len(done) - n :]
            value = _rebuild(node, kids)
            if node is root and not as_atom:
                return value
            done.append(self.bind(value, out, key=node))
        return done[0]


def _operands(node: E.Expr) -> list[E.Expr]:
    if isinstance(node, E.Call):
        head = [node.callee] if isinstance(node.callee, E.Expr) else []
        return head + list(node.args)
    if isinstance(node, E.Tuple):
        return list(node.fields)
    return [node.tuple_value]  # type: ignore[attr-defined]


def _rebuild(node: E.Expr, kids: list[E.Expr]) -> E.Expr:
    if all(a is b for a, b in zip(kids, _operands(node))):
        return node
    if isinstance(node, E.Call):
        if isinstance(node.callee, E.Expr):
            return E.Call(kids[0], tuple(kids[1:]), node.attrs)
        return E.Call(node.callee, tuple(kids), node.attrs)
    if isinstance(node, E.Tuple):
        return E.Tuple(tuple(kids))
    return E.TupleGetItem(kids[0], node.index)  # type: ignore[attr-defined]


def _same_seq(seq: E.SeqExpr, bindings: list[E.VarBinding], body: E.Expr) -> bool:
    """True when ``seq`` is already one block holding exactly ``bindings`` and ``body``."""
    if body is not seq.body or len(seq.blocks) != 1:
        return False
    old = seq.blocks[0].bindings
    return len(old) == len(bindings) and all(a is b for a, b in zip(old, bindings))


def _var_names(func: E.Function) -> set[str]:
    """Names of every variable in ``func`` (iterative: bodies may nest deeply before ANF)."""
    names: set[str] = set()
    stack: list[object] = [func]
    while stack:
        node = stack.pop()
        if isinstance(node, E.Var):
            names.add(node.name)
        elif isinstance(node, E.Function):
            stack.extend(node.params)
            stack.append(node.body)
        elif isinstance(node, E.SeqExpr):
            for b in node.bindings:
                stack.extend((b.var, b.value))
            stack.append(node.body)
        elif isinstance(node, E.Match):
            stack.append(node.data)
            for c in node.clauses:
                stack.extend(E.pattern_vars(c.pattern))
                stack.append(c.body)
        elif isinstance(node, E.If):
            stack.extend((node.cond, node.true_branch, node.false_branch))
        elif isinstance(node, _TREES):
            stack.extend(_operands(node))
    return names
