"""A jit kernel's output loop cut into pieces on rvm's thread pool (`rvm.kernels.loopsplit`).

A kernel whose whole work is one loop nest over its output, at the end of its body (an
elementwise chain, a broadcast, a cast, a reduction per output element: `splits`), gets two
more functions in its source (`split_form`): a part, the kernel's body again with its
outermost loop over one piece's range (`rvm.kernels.parfor.piece_range`; counted from 0, the
index the range's start plus the count, which LLVM is told is not negative,
`rvm.kernels.loopsplit.at_least_zero`: a loop from an unknown start, ``range(lo, hi)``, checks
each index for a negative one to wrap around, and LLVM left it scalar), and a piece, a
`numba.cfunc` of the pool's signature that rebuilds the kernel's arrays from a job and calls
the part. The kernel, after its checks, runs the loop itself when it touches fewer than
`rvm.kernels.parfor.MIN_WORK` elements or the pool has one thread (`parfor.chunks`), and the
pieces on the pool otherwise. The loop's facts come from the builder (`rvm.jit.te.Loop`,
recorded as each loop closes), not from the emitted text.

Only kernels whose arrays can touch `MIN_WORK` elements (their sizes' sum; any symbolic size
may) get the form: the others would pay its compile time (the body twice) for a branch never
taken.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

from rvm.jit.te import AT_LEAST_ZERO, Body, Loop
from rvm.kernels import loopsplit
from rvm.kernels.parfor import MIN_WORK

__all__ = ["IMPORTS", "SYMBOL", "SplitForm", "splits", "split_form", "symbol_for"]

SYMBOL = "rvm_piece_@"
"""The slot's symbol in a kernel's source until `symbol_for` names it by the source's hash."""
IMPORTS = tuple((loopsplit.__name__, name, f"ls_{name}") for name in loopsplit.__all__)
"""What a kernel with the form imports (module, name, alias): `rvm.kernels.loopsplit`'s."""
SPLIT_ALIGN = 16
"""A flat loop's pieces start on a multiple of this many elements (a cache line of float32,
whole vectors): neighbouring pieces write no line in common."""


@dataclass(frozen=True)
class SplitForm:
    """A kernel's split form: the module's lines before the kernel (the part, the piece and
    their slot) and the kernel's body (the root's lines with the dispatch before its loop)."""

    before: tuple[str, ...]
    body: tuple[str, ...]


def splits(root: Body, entries: bool, staged: bool, static_work: int | None) -> Loop | None:
    """The root's loop to cut, when the kernel's whole work is that one loop at the end of its
    body: no library call (``entries``), no stage or buffer filled before it (``staged``; a
    buffer is always a stage's, and a value materialized outside one is a loop of its own),
    and its arrays touching `MIN_WORK` elements or more (``static_work``, None when a size is
    symbolic); else None."""
    if entries or staged or len(root.loops) != 1:
        return None
    loop = root.loops[0]
    if loop.end != len(root.lines):
        return None
    if static_work is not None and static_work < MIN_WORK:
        return None
    return loop


def static_work(shapes: Sequence[Sequence[object] | None]) -> int | None:
    """The elements arrays of ``shapes`` hold together, or None when a size is not an int."""
    total = 0
    for shape in shapes:
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        total += math.prod(shape)  # type: ignore[arg-type]
    return total


def split_form(
    root: Body, loop: Loop, arrays: Sequence[tuple[str, str, int]], flags: str
) -> SplitForm:
    """The split form of a kernel whose root is ``root`` and whose loop to cut is ``loop``
    (`splits`); ``arrays``: its parameters in order, (name, dtype, ndim) each (inputs, then
    outputs); ``flags``: the kernel's njit options but its signature."""
    names = [a for a, _, _ in arrays]
    head, rest = list(root.lines[: loop.at]), list(root.lines[loop.at + 1 : loop.end])
    total = loop.extent if loop.start == "0" else f"({loop.extent}) - ({loop.start})"
    align = 1 if loop.nested else SPLIT_ALIGN
    first = "" if loop.start == "0" else f"{loop.start} + "
    part = [
        f"@nb.njit({flags})",
        f"def _split_part({', '.join(names)}, split_piece, split_pieces):",
        *_indent(head),
        f"    split_lo, split_hi = ls_piece_range(split_piece, split_pieces, {total}, {align})",
        "    for split_j in range(split_hi - split_lo):",
        f"        {loop.var} = {AT_LEAST_ZERO[2]}({first}split_lo + split_j)",
        *_indent(rest),
        "",
        "",
    ]
    fields, views, k = [], [], 2
    for name, dtype, ndim in arrays:
        at, dims = k, [f"split_job[{k + 1 + d}]" for d in range(ndim)]
        fields.append(f"split_job[{at}] = ls_address({name})")
        fields.extend(f"split_job[{k + 1 + d}] = {name}.shape[{d}]" for d in range(ndim))
        shape = f"({', '.join(dims)}{',' if ndim == 1 else ''})"
        views.append(f"nb.carray(ls_pointer(split_job[{at}]), {shape}, {_numpy_type(dtype)})")
        k += 1 + ndim
    piece = [
        '@nb.cfunc(ls_PIECE, cache=CACHE, error_model="numpy", boundscheck=False)',
        "def _split_piece(split_piece, split_null, split_data):",
        "    split_job = ls_job(split_data)",
        "    _split_part(",
        *(f"        {v}," for v in views),
        "        split_piece,",
        "        split_job[1],",
        "    )",
        "",
        "",
        f'_split_slot = ls_slot("{SYMBOL}")',
        "_split_slot.value = _split_piece.address",
        f'_split_address = ls_address_in("{SYMBOL}")',
        f"_split_job = ls_stack_job({k})",
        "",
        "",
    ]
    work = " + ".join(f"{n}.size" for n in names)
    dispatch = [
        f"split_pieces = ls_chunks({work}, {total})",
        "if split_pieces > 1:",
        "    split_job = _split_job()",
        f"    split_job[0] = {k}",
        "    split_job[1] = split_pieces",
        *(f"    {f}" for f in fields),
        "    ls_run(_split_address(), split_pieces, ls_address(split_job))",
        "    return",
    ]
    body = (*head, *dispatch, *root.lines[loop.at : loop.end])
    return SplitForm(tuple(part + piece), body)


def symbol_for(source: str) -> str:
    """``source`` with its slot's symbol (`SYMBOL`) named by the hash of the rest of it: the
    same kernel source, the same symbol, in every process; another source, another."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    return source.replace(SYMBOL, f"rvm_piece_{digest}")


def _indent(lines: Sequence[str]) -> list[str]:
    return ["    " + line for line in lines]


def _numpy_type(dtype: str) -> str:
    return "np.bool_" if dtype == "bool" else f"np.{dtype}"
