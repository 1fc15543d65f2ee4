"""The rvm script format: Python syntax for IR modules, printed and parsed back.

    from rvm.script import T, module, func

    @module
    class Model:
        @func
        def main(x: T[("n", 784), "float32"], w: T[(784, 128), "float32"]):
            return op.relu(op.matmul(x, w))

`script(node)` prints any module, function, expression or type; `parse(text)` reads a printed
module back (``parse(script(mod))`` is structurally equal to ``mod``). Importing this package
installs the printer behind ``repr``/``str`` of every IR node.
"""

from __future__ import annotations

from rvm import _hooks
from rvm.script.consts import const_b64
from rvm.script.parser import adt, func, module, parse
from rvm.script.printer import script
from rvm.script.types import Any, Callable, Shape, T, Tuple

# The IR prints itself (repr, errors) with this printer (see rvm._hooks).
_hooks.supply("printer", script)

__all__ = [
    "Any",
    "Callable",
    "Shape",
    "T",
    "Tuple",
    "adt",
    "const_b64",
    "func",
    "module",
    "parse",
    "script",
]
