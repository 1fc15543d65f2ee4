"""The source text of a decorated class or function, found through its code objects.

`inspect.getsource` finds a class by searching the file of the class's module for
``class <name>``. That fails where the module has no file it can name (a notebook cell,
``python -m cProfile script.py``, a module that `importlib` runs before it is in `sys.modules`),
and before Python 3.13 it takes the first class of that name when a file defines two, so a
decorator would compile another class's body without a word.

A function's code object knows better: it names the file it was compiled from
(``co_filename``) and its first line (``co_firstlineno``, the first decorator's line), and
`linecache` holds that file's text -- for notebook cells and ``exec``'d strings too, when the
runner registers them there as IPython does. So the source of a class is the ``class``
statement of that text whose body defines its functions on those lines. What is found is
checked against the object (name, function names and lines, ``__firstlineno__`` on 3.13+)
before it is used; a mismatch is an error, never another definition's body.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import textwrap
from typing import Any, NamedTuple

from rvm.errors import ScriptError

_PARSE_INSTEAD = (
    "The decorators compile the source text; where Python keeps none, pass the text to "
    "rvm.script.parse instead:\n\n"
    "    mod = rvm.script.parse('''\n"
    "    @module\n"
    "    class Model:\n"
    "        @func\n"
    '        def main(x: T[(2,), "float32"]):\n'
    "            return x + x\n"
    "    ''')"
)

_NOT_WHAT_RAN = (
    "The text there is not the text that ran (edited since?); run the definition again, or "
    "pass its text to rvm.script.parse."
)


class Source(NamedTuple):
    """A definition's syntax tree and lines (dedented), and the file line before its first."""

    node: ast.stmt
    lines: list[str]
    line_offset: int


class _Def(NamedTuple):
    """A ``class`` or ``def`` statement of a source text, as line numbers (1-based)."""

    name: str
    is_class: bool
    first: int  # the first decorator's line, as ``co_firstlineno`` and ``__firstlineno__``
    end: int
    defs: frozenset[tuple[str, int]]  # the functions directly in its body: (name, first line)


def class_source(cls: object) -> Source:
    """The ``class`` statement that defined ``cls``, found through its functions' code."""
    if not isinstance(cls, type):
        raise ScriptError(f"@module decorates a class, got {cls!r}")
    fns = _own_functions(cls)
    what = f"class {cls.__qualname__}"
    if not fns:
        raise ScriptError(
            f"@module {what} defines no functions: its body holds the module's @func "
            "functions (and rvm finds the class's source text through them)"
        )
    filename = fns[0].__code__.co_filename
    lines = _file_lines(filename, fns[0].__globals__, what)
    expected = {(f.__code__.co_name, f.__code__.co_firstlineno) for f in fns}
    anchor = min(expected, key=_line)
    found = next((d for d in _definitions(lines) if d.is_class and anchor in d.defs), None)
    first = getattr(cls, "__firstlineno__", None)  # Python 3.13+
    if (
        found is None
        or found.name != cls.__name__
        or not expected <= found.defs
        or any(f.__code__.co_filename != filename for f in fns)
        or (first is not None and first != found.first)
    ):
        where = ", ".join(f"{name} (line {line})" for name, line in sorted(expected, key=_line))
        raise ScriptError(
            f"cannot find the source of {what} in {filename}: no class {cls.__name__} there "
            f"defines {where}. {_NOT_WHAT_RAN}"
        )
    return _extract(lines, found, what)


def function_source(fn: object) -> Source:
    """The ``def`` statement that defined ``fn``, found through its code object."""
    fn = inspect.unwrap(fn)  # type: ignore[arg-type]
    code = getattr(fn, "__code__", None)
    if code is None:
        raise ScriptError(f"@func decorates a function, got {fn!r}")
    what = f"function {fn.__qualname__}"  # type: ignore[attr-defined]
    lines = _file_lines(code.co_filename, fn.__globals__, what)  # type: ignore[attr-defined]
    line = code.co_firstlineno
    found = next(
        (
            d
            for d in _definitions(lines)
            if not d.is_class and d.first == line and d.name == code.co_name
        ),
        None,
    )
    if found is None:
        raise ScriptError(
            f"cannot find the source of {what} in {code.co_filename}: no function "
            f"{code.co_name} starts on line {line} there. {_NOT_WHAT_RAN}"
        )
    return _extract(lines, found, what)


def _own_functions(cls: type) -> list[Any]:
    """The functions the class body defines (not ones assigned from elsewhere), once each;
    unwrapped, so a stray decorator reaches the parser's error, not a missing source."""
    fns: dict[int, Any] = {}
    for value in vars(cls).values():
        fn = inspect.unwrap(value) if inspect.isfunction(value) else None
        if fn is not None and fn.__qualname__ == f"{cls.__qualname__}.{fn.__name__}":
            fns[id(fn)] = fn
    return list(fns.values())


def _file_lines(filename: str, module_globals: dict[str, Any], what: str) -> list[str]:
    # checkcache drops a file's stale text (a module reloaded after an edit); text registered
    # without a modification time (notebook cells, exec'd strings) stays.
    linecache.checkcache(filename)
    lines = linecache.getlines(filename, module_globals)
    if not lines:
        raise ScriptError(
            f"cannot read the source of {what}: the source is not available -- Python keeps "
            f"no text for {filename!r} (code run by `python -c`, typed into a plain REPL, or "
            f"exec'd from a string not registered in linecache). {_PARSE_INSTEAD}"
        )
    return lines


def _definitions(lines: list[str]) -> tuple[_Def, ...]:
    try:
        return _definitions_of("".join(lines))
    except SyntaxError as err:
        raise ScriptError(
            f"cannot parse the source text of {err.filename or 'the file'} "
            f"(line {err.lineno}: {err.msg}); it changed since it ran?"
        ) from None


# Cached by the text itself (a pure function of it), so a file defining many modules is
# parsed once, not once per decorator.
@functools.lru_cache(maxsize=16)
def _definitions_of(text: str) -> tuple[_Def, ...]:
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defs = frozenset(
                (s.name, _first_line(s))
                for s in node.body
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            )
            is_class = isinstance(node, ast.ClassDef)
            end = node.end_lineno or node.lineno
            out.append(_Def(node.name, is_class, _first_line(node), end, defs))
    return tuple(out)


def _first_line(node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def _line(item: tuple[str, int]) -> int:
    return item[1]


def _extract(lines: list[str], found: _Def, what: str) -> Source:
    """The definition's lines, dedented (a class nested in a function, an indented cell)."""
    text = textwrap.dedent("".join(lines[found.first - 1 : found.end]))
    try:
        node = ast.parse(text).body[0]
    except SyntaxError as err:
        raise ScriptError(f"cannot parse the source of {what}: {err.msg}") from None
    return Source(node, text.splitlines(), found.first - 1)
