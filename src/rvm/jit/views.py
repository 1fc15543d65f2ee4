"""Reshaped views of a kernel's arrays, shared by the layout ops and reductions (`rvm.jit.layout`,
`rvm.jit.reduce`) and the product stages (`rvm.jit.stages`, `bf16`, `packed`), below them all so
that none imports another's compute registrations."""

from __future__ import annotations

from collections.abc import Sequence

from rvm.jit.cond import ne
from rvm.jit.kernel import KernelBuilder
from rvm.jit.te import Tensor, product, shape_tuple


def reshape_to(kb: KernelBuilder, x: Tensor, dims: Sequence[str], checked: bool = False) -> Tensor:
    """``x`` viewed with ``dims`` (same size: checked unless ``checked`` says it was): a
    reshaped view of its array."""
    if not checked:
        check_size(kb, x, dims)
    src = kb.materialize(x)
    name = kb.fresh("r")
    kb.root.lines.append(f"{name} = {src}.reshape({shape_tuple(dims)})")
    return Tensor(tuple(dims), x.dtype, array=name, kind="array")


def array_view(kb: KernelBuilder, name: str, dims: Sequence[str], to: Sequence[str]) -> str:
    """The array ``name`` (of shape ``dims``) reshaped to ``to``: itself when they are equal."""
    if tuple(dims) == tuple(to):
        return name
    view = kb.fresh("w")
    kb.root.lines.append(f"{view} = {name}.reshape({shape_tuple(to)})")
    return view


def check_size(kb: KernelBuilder, x: Tensor, dims: Sequence[str]) -> None:
    """Checks at run time that ``dims`` has the size of ``x``."""
    kb.check(
        ne(product(x.dims), product(dims)),
        f"{kb.kernel}: reshape: the new shape does not have the input's size",
    )
