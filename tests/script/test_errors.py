"""Script errors name the line and show it with a caret under the offending code."""

from __future__ import annotations

import inspect
import re

import pytest

import rvm
from rvm import ScriptError, op
from rvm.script import T, func, module, parse

HEAD = "from rvm.script import T, func\n\n"  # the function starts on line 3


def parse_error(body: str) -> str:
    with pytest.raises(ScriptError) as info:
        parse(HEAD + body)
    return str(info.value)


def test_unknown_op_caret():
    msg = parse_error(
        '@func\ndef main(x: T[(2,), "float32"]):\n    y = op.relux(x)\n    return y\n'
    )
    assert msg.startswith("line 5: unknown op 'relux'")
    assert msg.splitlines()[1:] == ["    y = op.relux(x)", "        ^^^^^^^^"]


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        (
            "    return zz + x\n",
            r"line 5: undefined name 'zz'\n    return zz \+ x\n           \^\^$",
        ),
        ("    for i in x:\n        pass\n    return x\n", r"line 5: unsupported statement: for"),
        (
            '    y = op.matmul(x, rvm.const([[1.0, 2.0, 3.0]], "float32"))\n    return y\n',
            r"line 5: matmul: .*\n    y = op.matmul",
        ),
        (
            '    y = x + rvm.const([1.0, 2.0, 3.0], "float32")\n    return y\n',
            r"line 5: .*\(2,\).*\(3,\)",
        ),
        ("    y = helper(x, x)\n    return y\n", r"line 5: helper takes 1 arguments, got 2"),
        ("    if x > 0.0:\n        pass\n    return x\n", r"line 5: this `if` neither returns"),
        (
            "    if op.sum(x) > 0.0:\n        y = x\n    return y\n",
            r"line 5: 'y' is assigned in only some branches",
        ),
        (
            "    while op.sum(x) > 0.0:\n        return x\n    return x\n",
            r"line 5: a `return` inside a loop",
        ),
        ("    y = op.relu(x)\n", r"line 4: function 'main' does not return a value"),
        (
            "    def g(v):\n        return v\n    return g(x)\n",
            r"line 5: parameter 'v' of 'g' needs a type annotation",
        ),
        ("    return op.sum(x, axis=5)\n", r"line 5: sum: "),
        ("    a, b = x\n    return a\n", r"line 5: "),
        ("    x + x\n    return x\n", r"line 5: an expression statement has no effect"),
        ("    return Cons(x)\n", r"line 5: undefined name 'Cons'"),
        ("    return x[0:1]\n", r"line 5: only tuple fields can be indexed"),
        ("    return x\n    y = x\n", r"line 6: unreachable code after return"),
    ],
)
def test_error_messages(body, pattern):
    text = '@func\ndef main(x: T[(2,), "float32"]):\n' + body
    text += '\n@func\ndef helper(x: T[(2,), "float32"]):\n    return x\n'
    msg = parse_error(text)
    assert re.search(pattern, msg, re.MULTILINE), msg


def test_missing_annotation_on_module_function():
    msg = parse_error("@func\ndef main(x):\n    return x\n")
    assert msg.startswith("line 4: parameter 'x' of 'main' needs a type annotation")


def test_unknown_type_and_bad_tensor_type():
    assert "line 4: unknown type 'Lst'" in parse_error("@func\ndef main(x: Lst):\n    return x\n")
    msg = parse_error("@func\ndef main(x: T[(2,)]):\n    return x\n")
    assert msg.startswith("line 4: a tensor type is written T[shape, dtype]")


def test_match_errors():
    text = (
        '@rvm.script.adt\nclass L:\n    Nil: ()\n    Cons: (T[(2,), "float32"], "L")\n\n'
        "@func\ndef main(xs: L):\n    match xs:\n        case Cons(h):\n            return h\n"
        "        case Nil():\n            return xs\n"
    )
    msg = parse_error(text)
    assert msg.startswith("line 11: Cons has 2 fields, the pattern has 1")


def test_decorator_error_has_file_line():
    with pytest.raises(ScriptError) as info:

        @module
        class Bad:
            @func
            def main(x: T[(2,), "float32"]):
                y = op.relux(x)
                return y

    line = inspect.currentframe().f_lineno - 3
    assert str(info.value).startswith(f"line {line}: unknown op 'relux'")
    assert str(info.value).splitlines()[1] == "    y = op.relux(x)"


def test_syntax_error():
    with pytest.raises(ScriptError, match="line 1"):
        parse("def (:")


def test_while_else_and_guard_unsupported():
    body = (
        '    i = rvm.const(0, "int64")\n    while i < 3:\n        i = i + 1\n    else:\n'
        "        i = i\n    return x\n"
    )
    assert "`while ... else` is not supported" in parse_error(
        '@func\ndef main(x: T[(2,), "float32"]):\n' + body
    )
    assert rvm  # the module the scripts name
