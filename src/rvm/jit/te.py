"""A small tensor-expression and loop representation that renders to Numba source.

A lowered value is a `Tensor`: its dimensions (source of an int: a literal or a local
variable set at the kernel's start) and a ``loader`` that, given the loop body it is needed in
and an index (one `Scalar` per axis), returns the element as a `Scalar` (source of a scalar
and the loop variables it depends on). Elementwise ops are loaders over their operands' loads,
broadcast and injective ops are loaders that map the index, reductions are loaders that emit a
loop, and anchors (matmul, conv) are stages that fill an array the loader reads.

`Body` is one level of a loop nest. Every statement goes to the deepest enclosing body whose
loop variable it depends on, so loop-invariant work (a row's max in softmax, a broadcast
operand) is hoisted out of inner loops, and each value is computed once per body (a memo keyed
by tensor and index): the generated code is straight-line scalar code per loop level, which
LLVM vectorizes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rvm.errors import RVMError
from rvm.jit.cond import Cond

# The intrinsic telling LLVM an index is at least 0, as a kernel module imports it.
AT_LEAST_ZERO = ("rvm.kernels.loopsplit", "at_least_zero", "ls_at_least_zero")


class Unsupported(RVMError):
    """The function uses something the jit does not lower (it falls back to numpy)."""


@dataclass(frozen=True, slots=True)
class Scalar:
    """A scalar in generated code: its source, the loop variables it uses, and its dtype."""

    code: str
    deps: frozenset[str] = frozenset()
    dtype: str = "int64"


def idx(code: str | int, *deps: Scalar | str) -> Scalar:
    """An int64 index expression depending on the given scalars or loop variables."""
    out: set[str] = set()
    for d in deps:
        out |= d.deps if isinstance(d, Scalar) else {d}
    return Scalar(str(code), frozenset(out), "int64")


def deps_of(*scalars: Scalar) -> frozenset[str]:
    """The union of the scalars' loop dependencies."""
    out: frozenset[str] = frozenset()
    for s in scalars:
        out |= s.deps
    return out


@dataclass(frozen=True)
class Loop:
    """A loop closed into its parent body: its lines' span in the parent's (``at`` its
    header's index, ``end`` past its last line), the variable it binds, its start and extent
    (source), and whether a loop runs inside it."""

    at: int
    end: int
    var: str
    start: str
    extent: str
    nested: bool


class Body:
    """One loop level: its statements, the variable it binds, its memo of computed loads, and
    the loops closed into it (`Loop`, in order)."""

    def __init__(
        self,
        parent: Body | None,
        var: str | None,
        header: str = "",
        start: str = "0",
        extent: str = "",
    ) -> None:
        self.parent = parent
        self.var = var
        self.header = header
        self.start, self.extent = start, extent
        self.lines: list[str] = []
        self.memo: dict[tuple, Scalar] = {}
        self.loops: list[Loop] = []

    def chain(self) -> list[Body]:
        """This body and its ancestors, innermost first."""
        out: list[Body] = []
        b: Body | None = self
        while b is not None:
            out.append(b)
            b = b.parent
        return out

    def home(self, deps: frozenset[str]) -> Body:
        """The deepest body in this chain that binds a variable in ``deps`` (else the root)."""
        chain = self.chain()
        for b in chain:
            if b.var is not None and b.var in deps:
                return b
        return chain[-1]

    def lookup(self, key: tuple) -> Scalar | None:
        for b in self.chain():
            hit = b.memo.get(key)
            if hit is not None:
                return hit
        return None

    def render(self, indent: int) -> list[str]:
        pad = "    " * indent
        return [pad + line for line in self.lines]


Loader = Callable[[Body, Sequence[Scalar]], Scalar]


@dataclass(eq=False)
class Tensor:
    """A lowered value: dims (int source each), dtype, how to load an element.

    ``array`` names a C-contiguous array holding the value (a parameter or a filled buffer),
    when there is one; ``fill`` is the stage that fills it, run once before its first load.
    """

    dims: tuple[str, ...]
    dtype: str
    loader: Loader | None = None
    array: str | None = None
    fill: Callable[[], None] | None = None
    kind: str = "lazy"
    info: dict = field(default_factory=dict)

    @property
    def ndim(self) -> int:
        return len(self.dims)


class Emitter:
    """Owns the names and the root body of one kernel; renders statements and loops."""

    def __init__(self, kernel: str) -> None:
        self.kernel = kernel
        self.root = Body(None, None)
        self._names = itertools.count()
        self.globals: list[str] = []
        self.filled: set[int] = set()
        self._dims: dict[str, str] = {}  # code -> the local already holding it
        self._checks: set[tuple[str, str]] = set()
        self.loops = 0  # loops opened (the kernel's compile cost, `rvm.jit.lower`)
        # What the kernel module imports besides its header: (module, name, alias or None).
        self.imports: set[tuple[str, str, str | None]] = set()

    def fresh(self, prefix: str = "v") -> str:
        return f"{prefix}{next(self._names)}"

    def ref(self, name: str | None, index: Sequence[Scalar]) -> str:
        """Source of ``name[index]`` (``name[()]`` for 0-d arrays), to load or store.

        Every index the lowerings compute is in bounds by construction (a data index is
        checked first, `rvm.jit.layout.checked_index`), so one that is not a literal or a
        loop's own variable is told to LLVM to be at least 0 (`AT_LEAST_ZERO`). Else Numba
        checks a signed index for a negative one to wrap around, which LLVM keeps where it
        cannot prove the sum non-negative (a slice's ``d5 + i9``, ``d5`` read from a shape):
        the loop then loaded and stored element by element.
        """
        if name is None:
            raise Unsupported("a tensor without a loader or an array")
        if not index:
            return f"{name}[()]"
        parts = []
        for i in index:
            if _is_literal(i.code) or i.code in i.deps:
                parts.append(i.code)
            else:
                self.imports.add(AT_LEAST_ZERO)
                parts.append(f"{AT_LEAST_ZERO[2]}({i.code})")
        return f"{name}[{', '.join(parts)}]"

    # -- statements ----------------------------------------------------------------------

    def let(self, body: Body, value: Scalar, prefix: str = "v") -> Scalar:
        """Bind ``value`` to a new local in its home body; names and literals pass through."""
        if value.code.isidentifier() or _is_literal(value.code):
            return value
        home = body.home(value.deps)
        name = self.fresh(prefix)
        home.lines.append(f"{name} = {value.code}")
        return Scalar(name, value.deps, value.dtype)

    def stmt(self, body: Body, line: str, deps: frozenset[str] = frozenset()) -> None:
        body.home(deps).lines.append(line)

    def check(self, cond: Cond, message: str) -> None:
        """At the kernel's start: raise ValueError(message) when ``cond`` holds.

        A condition decided false at lowering time (`rvm.jit.cond`), or a check made before,
        adds nothing: every statement costs Numba compile time.
        """
        known = cond.known()
        if known is False:
            return
        line = "True" if known else cond.source()
        if (line, message) in self._checks:
            return
        self._checks.add((line, message))
        self.root.lines.append(f"if {line}:")
        self.root.lines.append(f"    raise ValueError({message!r})")

    def dim(self, code: str, prefix: str = "d") -> str:
        """An int computed at the kernel's start (literals stay literals; the same code
        twice is one local)."""
        if _is_literal(code) or code.isidentifier():
            return code
        name = self._dims.get(code)
        if name is None:
            name = self._dims[code] = self.fresh(prefix)
            self.root.lines.append(f"{name} = {code}")
        return name

    # -- loads ---------------------------------------------------------------------------

    def load(self, t: Tensor, body: Body, index: Sequence[Scalar]) -> Scalar:
        """Element ``index`` of ``t`` as a local (computed once per body and index)."""
        key = (id(t), tuple(i.code for i in index))
        hit = body.lookup(key)
        if hit is not None:
            return hit
        if t.fill is not None and id(t) not in self.filled:
            self.filled.add(id(t))
            t.fill()
        if t.loader is not None:
            value = t.loader(body, index)
        else:
            value = Scalar(self.ref(t.array, index), deps_of(*index), t.dtype)
        value = self.let(body, value)
        body.home(value.deps).memo[key] = value
        return value

    # -- loops ---------------------------------------------------------------------------

    def open_loop(self, parent: Body, extent: str, start: str = "0") -> Body:
        var = self.fresh("i")
        self.loops += 1
        rng = extent if start == "0" else f"{start}, {extent}"
        return Body(parent, var, f"for {var} in range({rng}):", start, extent)

    def close_loop(self, loop: Body) -> None:
        assert loop.parent is not None and loop.var is not None
        if not loop.lines:
            loop.lines.append("pass")
        parent = loop.parent
        at = len(parent.lines)
        parent.lines.append(loop.header)
        parent.lines.extend(loop.render(1))
        nested = bool(loop.loops)
        parent.loops.append(Loop(at, len(parent.lines), loop.var, loop.start, loop.extent, nested))

    def loop_nest(
        self, parent: Body, dims: Sequence[str], emit: Callable[[Body, list[Scalar]], None]
    ) -> None:
        """Loops over ``dims`` (outermost first) with ``emit(innermost, index)`` inside."""
        bodies: list[Body] = []
        index: list[Scalar] = []
        body = parent
        for d in dims:
            if d == "1":
                index.append(idx(0))
                continue
            body = self.open_loop(body, d)
            bodies.append(body)
            index.append(idx(body.var, body.var))
        emit(body, index)
        for b in reversed(bodies):
            self.close_loop(b)


def _is_literal(code: str) -> bool:
    try:
        int(code)
        return True
    except ValueError:
        return code in ("True", "False")


def int_args(*values: object) -> str:
    """Source of int arguments to a library function (`rvm.kernels.conv`, `.pool`):
    each literal as ``np.int64(v)``, since Numba compiles a jit callee again for every literal
    value it is passed, and a kernel's attributes would each cost a library compile."""
    return ", ".join(f"np.int64({v})" if is_int(str(v)) else str(v) for v in values)


def is_int(code: str) -> bool:
    """Whether a dim's source is an integer literal."""
    try:
        int(code)
        return True
    except ValueError:
        return False


def shape_tuple(dims: Sequence[str]) -> str:
    """Source of a shape tuple."""
    return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"


def product(dims: Sequence[str]) -> str:
    """Source of the product of dims (folded when all are literals)."""
    if all(is_int(d) for d in dims):
        p = 1
        for d in dims:
            p *= int(d)
        return str(p)
    lits = [d for d in dims if is_int(d)]
    p = 1
    for d in lits:
        p *= int(d)
    names = [d for d in dims if not is_int(d)]
    parts = names + ([str(p)] if p != 1 else [])
    return " * ".join(parts) if parts else "1"
