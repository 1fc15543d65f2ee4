"""Matching chains of op calls in a straight-line region: what the fusion passes share.

`Region` indexes one region's bindings (`rvm.transform.legalize.map_regions`): the call each
variable is bound to, and how often each variable is used in the whole function. A matcher
walks a chain back from its last call with `Region.call` (the argument is a variable bound to
a call of one of the given ops, used only as often as the chain uses it), recording the
bindings it went through; `Region.rewrite` then binds the chain's last variable to the fused
call and drops the bindings of the chain that nothing else uses. `fuse_chains` is the pass
driver: it walks every region of every function and tries each call of a chain's last op with
the pass's matchers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.ir.types import TensorType
from rvm.transform.legalize import count_uses, map_function_regions, map_functions, replace_changed

logger = logging.getLogger("rvm.transform")

Matcher = Callable[["Region", E.Call], "E.Call | None"]
"""Given a region and a call that may end a chain, the fused call equal to the chain or None."""


class Region:
    """One region's bindings, and a chain's matched bindings while it is matched."""

    def __init__(self, bindings: list[E.VarBinding], uses: dict[E.Var, int]) -> None:
        self.bindings: list[E.VarBinding | None] = list(bindings)
        self.uses = uses
        self.index = {b.var: i for i, b in enumerate(bindings)}
        self.consts: dict[E.Var, np.ndarray] = {
            b.var: b.value.data for b in bindings if isinstance(b.value, E.Constant)
        }
        self.matched: list[E.Var] = []
        self.pending: list[E.VarBinding] = []  # new bindings the fused call needs
        self.before: dict[int, list[E.VarBinding]] = {}
        self._fresh = 0

    def __iter__(self) -> Iterator[tuple[int, E.VarBinding]]:
        for i, b in enumerate(list(self.bindings)):
            if b is not None and self.bindings[i] is b:
                yield i, b

    def call(self, expr: E.Expr, *ops: E.Op, uses: int = 1) -> E.Call | None:
        """The call of one of ``ops`` that ``expr`` (a variable of this region) is bound to,
        when it is used exactly ``uses`` times; recorded as matched."""
        if not isinstance(expr, E.Var) or self.uses.get(expr, 0) != uses:
            return None
        i = self.index.get(expr)
        b = self.bindings[i] if i is not None else None
        value = b.value if b is not None else None
        if not isinstance(value, E.Call) or value.callee not in ops:
            return None
        self.matched.append(expr)
        return value

    def scalar(self, expr: E.Expr) -> float | None:
        """The value of a one-element constant (a literal or a variable bound to one)."""
        data = expr.data if isinstance(expr, E.Constant) else self.consts.get(expr)  # type: ignore[arg-type]
        if data is None or data.size != 1 or data.dtype.kind not in "fiu":
            return None
        return float(data.reshape(-1)[0])

    def constant(self, expr: E.Expr) -> np.ndarray | None:
        """The data of a constant (a literal or a variable bound to one)."""
        if isinstance(expr, E.Constant):
            return expr.data
        return self.consts.get(expr) if isinstance(expr, E.Var) else None

    def start(self) -> None:
        """Start matching a new chain."""
        self.matched = []
        self.pending = []

    def bind(self, value: E.Call, hint: str) -> E.Var:
        """A new variable bound to ``value``, placed before the chain's last binding if the
        chain is rewritten (an operand the fused call needs in another layout)."""
        var = E.Var(f"{hint}_{self._fresh}", infer_type(value))
        self._fresh += 1
        self.pending.append(E.VarBinding(var, value))
        return var

    def rewrite(self, root: int, value: E.Call) -> bool:
        """Bind the variable of binding ``root`` to ``value`` (whose type must equal it) and
        drop the chain's matched bindings; False (nothing changed) when ``value`` does not
        type-check or changes the type."""
        var = self.bindings[root].var  # type: ignore[union-attr]
        try:
            ty = infer_type(value)
        except Exception:  # the fused op refuses these operands: keep the chain
            return False
        if not _same_type(ty, var.type):
            return False
        self.bindings[root] = E.VarBinding(var, value)
        for v in self.matched:
            if v is not var:
                self.bindings[self.index[v]] = None
        if self.pending:
            self.before[root] = self.pending
        self.matched, self.pending = [], []
        return True

    def result(self) -> list[E.VarBinding]:
        out: list[E.VarBinding] = []
        for i, b in enumerate(self.bindings):
            out += self.before.get(i, [])
            if b is not None:
                out.append(b)
        return out


def fuse_chains(
    mod: IRModule, name: str, matchers: Mapping[E.Op, Sequence[Matcher]], what: str
) -> IRModule:
    """Rewrite every chain of ``mod`` that a matcher recognizes into its fused call.

    Args:
        mod: an inlined module in A-normal form.
        name: the pass's name (for the debug log).
        matchers: for each op that may end a chain, the matchers tried in order on each call
            of it; the first that returns a call (which type-checks) rewrites the chain.
        what: what the log counts ("attention chains").

    Returns:
        ``mod`` itself when no chain was fused, else the module with the fused functions.
    """
    fused = 0

    def region(bindings: list[E.VarBinding], body: E.Expr, uses: dict[E.Var, int]):
        nonlocal fused
        r = Region(bindings, uses)
        for i, b in r:
            value = b.value
            if not isinstance(value, E.Call) or value.callee not in matchers:
                continue
            r.start()
            call = None
            for match in matchers[value.callee]:  # type: ignore[index]
                call = match(r, value)
                if call is not None:
                    break
            if call is not None and r.rewrite(i, call):
                fused += 1
        return r.result(), body

    def rewrite(fname: str, func: E.Function) -> E.Function:
        uses = count_uses(func.body)
        return map_function_regions(func, lambda bs, result, depth: region(bs, result, uses))

    funcs = map_functions(mod, rewrite)
    if not fused:
        return mod
    logger.debug("%s: %d %s fused", name, fused, what)
    return replace_changed(mod, funcs)


def _same_type(a: object, b: object) -> bool:
    if not isinstance(a, TensorType) or not isinstance(b, TensorType):
        return False
    return a.dtype == b.dtype and (a.shape == b.shape or b.shape is None)


def operands(call: E.Call) -> list[tuple[E.Expr, E.Expr]]:
    """Both orders of a commutative binary call's arguments."""
    a, b = call.args
    return [(a, b), (b, a)]


def rank(expr: E.Expr) -> int | None:
    ty = expr.type if isinstance(expr, E.Var) else None
    if isinstance(ty, TensorType) and ty.shape is not None:
        return len(ty.shape)
    return None
