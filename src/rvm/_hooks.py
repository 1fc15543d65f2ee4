"""Capabilities a lower layer uses and a higher layer supplies, wired at the package root.

The IR prints itself as rvm script and turns ``x + y`` on its values into calls of the op
``add``, but the printer lives in `rvm.script` and the op set in `rvm.op`, both layers above
it. Neither layer names the other: `rvm.script` and `rvm.op` register what they supply here
when they are imported (`supply`), and the IR asks for it (`demand`). This table, the one
place that knows which package supplies what, loads the supplier on first demand, so a
program that imports only `rvm.ir` still prints and still builds ``x + y``. Standard library
only, like `rvm.errors`.
"""

from __future__ import annotations

import importlib
from typing import Any

# capability -> the package whose import supplies it
SUPPLIERS = {"printer": "rvm.script", "ops": "rvm.op"}

_supplied: dict[str, Any] = {}


def supply(name: str, value: Any) -> None:
    """Register ``value`` as capability ``name`` (its supplier calls this at import)."""
    if name not in SUPPLIERS:
        raise KeyError(f"unknown capability {name!r}; known: {sorted(SUPPLIERS)}")
    _supplied[name] = value


def demand(name: str) -> Any:
    """Capability ``name``, importing its supplier first if it has not been imported.

    Returns None while the supplier is still being imported (a lookup from inside its own
    import), so the caller reports what it was looking for as missing.
    """
    if name not in _supplied:
        importlib.import_module(SUPPLIERS[name])
    return _supplied.get(name)
