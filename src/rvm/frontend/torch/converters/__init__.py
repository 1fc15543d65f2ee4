"""The converters, one module per category; importing this package registers them all."""

from __future__ import annotations

from rvm.frontend.torch.converters import (  # noqa: F401 - each registers its converters
    control,
    elemwise,
    grad,
    index,
    nn,
    reduce,
    tensor,
)
