"""The facts of kernel records saved before executable format 1.5, which did not carry them.

Since format 1.5 a kernel record's ``requires``, ``imports`` and ``cost`` (`KernelRecord`) are
set by the generator that made the kernel and saved in the FACT section (`rvm.runtime.serialize`).
A file saved before has jit kernels without them; `recovered` reads them off such a kernel's
source once, when the file is loaded, as the rvm that wrote it read them (its import and
``require`` lines at the start of a line, its loops and inlined mathlib calls). Nothing else
reads generated source for its facts.
"""

from __future__ import annotations

import re
from dataclasses import replace

from rvm.runtime.executable import KernelRecord

__all__ = ["recovered"]

_REQUIRE = re.compile(r"^require\('(\w+)', '(\w+)'\)$", re.MULTILINE)
_IMPORT = re.compile(
    r"^(?:from[ \t]+(rvm(?:\.\w+)*)[ \t]+import|import[ \t]+(rvm(?:\.\w+)*))", re.M
)
_LOOP = re.compile(r"^\s+for \w+ in ", re.MULTILINE)
_MATHLIB_CALL = re.compile(r"\b(?:exp32|tanh32|sigmoid32)\(")


def recovered(rec: KernelRecord) -> KernelRecord:
    """``rec`` (a jit kernel of a file before format 1.5) with the facts its source states."""
    if rec.backend != "jit":
        return rec
    source = rec.source
    requires = tuple(sorted({(m.group(1), m.group(2)) for m in _REQUIRE.finditer(source)}))
    imports = tuple(sorted({m.group(1) or m.group(2) for m in _IMPORT.finditer(source)}))
    cost = (
        10
        + source.count("\n")
        + 8 * len(_LOOP.findall(source))
        + 6 * len(_MATHLIB_CALL.findall(source))
    )
    return replace(rec, requires=requires, imports=imports, cost=cost)
