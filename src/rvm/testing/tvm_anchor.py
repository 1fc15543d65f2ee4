"""TVM's PyTorch frontend on the OpInfo samples of `rvm.testing.torch_opinfo`, as an anchor.

Each counted sample's ``torch.export`` program (before rvm's decomposition: TVM runs its own)
goes through ``tvm.relax.frontend.torch.from_exported_program`` with its defaults, is built
with ``relax.build`` for ``llvm`` and run on TVM's Relax VM; its outputs are compared with eager
PyTorch by the same rule as rvm's. Needs ``apache-tvm`` (0.27 is the measured version).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def available() -> str:
    """TVM's version, or "" when it does not import here."""
    try:
        import tvm
    except Exception:
        return ""
    return str(tvm.__version__)


def check(
    program: Any,
    inputs: list[np.ndarray],
    expected: list[np.ndarray],
    compare: Callable[[list[Any], list[np.ndarray]], str],
) -> tuple[str, str]:
    """(status, reason) of ``program`` on TVM against ``expected``, by ``compare``'s rule.

    Status is "pass", "import" (conversion or build failed), "run" or "mismatch", as for rvm.
    """
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    try:
        mod = from_exported_program(program)
        vm = relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())
    except Exception as err:
        return "import", _reason(err)
    try:
        out = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in inputs])
        got = _leaves(out)
    except Exception as err:
        return "run", _reason(err)
    problem = compare(got, expected)
    return ("mismatch", problem) if problem else ("pass", "")


def _leaves(value: Any) -> list[np.ndarray]:
    """The arrays of a TVM VM result (a tensor, or nested arrays/tuples of them)."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    if isinstance(value, (int, float, bool)):
        return [np.asarray(value)]
    out: list[np.ndarray] = []
    for item in value:
        out += _leaves(item)
    return out


def _reason(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
