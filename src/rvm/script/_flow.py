"""Control-flow facts about script statements, read from the syntax tree before parsing.

The parser needs to know, for an ``if``/``match`` statement, which variables it assigns that
are used afterwards (they become the branch results), for a ``while`` loop which variables it
assigns (the loop-carried ones), and whether a branch returns. An early ``return`` in one
branch is handled by moving the statements after the ``if`` into the other branches
(`push_rest`), so every ``if`` either returns in all branches or in none.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterable, Sequence

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _target_names(t)]
    return []


def assigned_names(stmts: Iterable[ast.stmt]) -> list[str]:
    """Names a statement list assigns (at any depth, outside nested functions), in order."""
    out: dict[str, None] = {}
    for stmt in stmts:
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                out.update(dict.fromkeys(_target_names(t)))
        elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
            out.update(dict.fromkeys(_target_names(stmt.target)))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[stmt.name] = None
        elif isinstance(stmt, (ast.If, ast.While)):
            out.update(dict.fromkeys(assigned_names(stmt.body + stmt.orelse)))
        elif isinstance(stmt, ast.Match):
            for case in stmt.cases:
                out.update(dict.fromkeys(assigned_names(case.body)))
    return list(out)


def read_names(node: ast.AST) -> set[str]:
    """Every name read anywhere inside ``node`` (nested functions included: captures)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def live_in(stmts: Sequence[ast.stmt], live_after: set[str]) -> set[str]:
    """Names whose current value ``stmts`` may read, given those read after them."""
    live = set(live_after)
    for stmt in reversed(stmts):
        if isinstance(stmt, ast.Return):
            live = read_names(stmt)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                live -= set(_target_names(t))
            live |= read_names(stmt.value)
        else:
            live |= read_names(stmt)
    return live


def terminates(stmts: Sequence[ast.stmt]) -> bool:
    """True when every path through ``stmts`` ends in a ``return``."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    if isinstance(last, ast.If):
        return terminates(last.body) and terminates(last.orelse)
    if isinstance(last, ast.Match):
        return all(terminates(c.body) for c in last.cases)
    return False


def contains_return(node: ast.AST) -> bool:
    """True when ``node`` holds a ``return`` outside nested functions."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Return):
            return True
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, _SCOPES):
                stack.append(child)
    return False


def push_rest(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """Move the statements after an ``if``/``match`` that returns on some paths only into its
    branches that fall through, so that the ``if`` returns on every path."""
    for i, stmt in enumerate(stmts):
        if not isinstance(stmt, (ast.If, ast.Match)) or not contains_return(stmt):
            continue
        if terminates([stmt]):
            return stmts
        rest = stmts[i + 1 :]
        new = copy.copy(stmt)
        if isinstance(stmt, ast.If):
            new.body = _extend(stmt.body, rest)
            new.orelse = _extend(stmt.orelse, rest)
        else:
            new.cases = []
            for case in stmt.cases:
                c = copy.copy(case)
                c.body = _extend(case.body, rest)
                new.cases.append(c)
        return stmts[:i] + [new]
    return stmts


def _extend(branch: list[ast.stmt], rest: list[ast.stmt]) -> list[ast.stmt]:
    if terminates(branch):
        return push_rest(list(branch))
    return push_rest(list(branch) + list(rest))
