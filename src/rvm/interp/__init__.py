"""The reference AST interpreter: `interpret(mod, fname, *args)` runs the IR with NumPy ops.

It is the oracle compiled programs are compared with. See `rvm.interp.interpreter` for how it
evaluates without Python recursion (tail calls in constant space, deep non-tail recursion on
an explicit stack).
"""

from __future__ import annotations

from rvm.interp.interpreter import Interpreter, interpret
from rvm.interp.values import Closure, Env, InterpError

__all__ = ["Closure", "Env", "InterpError", "Interpreter", "interpret"]
