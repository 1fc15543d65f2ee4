"""Text views of an executable: the disassembly, rebuilding Python source, statistics, and the
summary as HTML for notebooks.

`as_text` follows TVM's column layout (pc, opcode, operands), renders each operand by its kind
from `OPCODE_INFO` (registers as `$3`, jumps as `-> target`, packed functions and constants by
name and value summary), and lists the constant pool and kernels after the functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rvm import _html
from rvm.runtime.bytecode import OPCODE_INFO, Opcode
from rvm.runtime.storage_stats import planned_storage

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable, ParamSpec, VMFunction

__all__ = [
    "as_text",
    "as_python",
    "as_html",
    "stats",
    "signature",
    "describe_value",
    "describe_instruction",
]


def describe_value(arr: np.ndarray, limit: int = 6) -> str:
    """A short summary of a constant: a string, a few values, or dtype and shape."""
    if arr.dtype.kind == "U" and arr.ndim == 0:
        text = str(arr.item())
        return repr(text if len(text) <= 60 else text[:57] + "...")
    if arr.size <= limit:
        body = np.array2string(arr, separator=", ") if arr.ndim else repr(arr.item())
        return f"{arr.dtype}{list(arr.shape)} {body}".replace("\n", "")
    return f"{arr.dtype}{list(arr.shape)}"


def _operand(ex: Executable, kind: str, v: Any, pc: int) -> str:
    if kind == "reg":
        return f"${v}"
    if kind == "regs":
        return ", ".join(f"${r}" for r in v)
    if kind == "offset":
        return f"-> {pc + v}"
    if kind == "func":
        return f"@{ex.functions[v].name}"
    if kind == "packed":
        return ex.primitive_names[v]
    if kind == "const":
        return f"c{v} ({describe_value(ex.constants[v])})"
    if kind == "shape":
        return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"
    return str(v)


def format_instruction(ex: Executable, ins: tuple, pc: int) -> str:
    """The operands of one instruction rendered by the opcode's template."""
    info = OPCODE_INFO[Opcode(ins[0])]
    fields = {fname: _operand(ex, kind, v, pc) for (fname, kind), v in zip(info.operands, ins[1:])}
    return info.text.format(**fields)


def describe_instruction(ex: Executable, ins: tuple) -> str:
    """A short label for VM stack traces: `invoke_packed fused_add_exp`, `invoke @f`."""
    op = Opcode(ins[0])
    name = OPCODE_INFO[op].name
    if op == Opcode.INVOKE_PACKED:
        return f"{name} {ex.primitive_names[ins[1]]}"
    if op == Opcode.CALL_PACKED:
        return f"{name} {ex.primitive_names[ins[2]]}"
    if op in (Opcode.INVOKE, Opcode.ALLOC_CLOSURE):
        return f"{name} @{ex.functions[ins[2]].name}"
    if op == Opcode.TAIL_INVOKE:
        return f"{name} @{ex.functions[ins[1]].name}"
    return name


def _spec_text(spec: ParamSpec) -> str:
    if spec.kind == "tuple" and spec.fields is not None:
        inner = ", ".join(_spec_text(f) for f in spec.fields)
        return f"Tuple({inner}{',' if len(spec.fields) == 1 else ''})"
    if spec.kind != "tensor":
        return spec.kind
    if spec.shape is None:
        return f"Tensor(?, {spec.dtype or '?'})"
    dims = ", ".join("?" if d is None else str(d) for d in spec.shape)
    return f"Tensor(({dims}{',' if len(spec.shape) == 1 else ''}), {spec.dtype or '?'})"


def signature(fn: VMFunction, result: bool = False) -> str:
    """`@name(param: Tensor((n, 784), float32), ...)`: what the function expects; with
    `result`, followed by ` -> Tensor((n, 10), float32)` (`?` where the result is unknown)."""
    params = ", ".join(f"{p}: {_spec_text(s)}" for p, s in zip(fn.params, fn.param_specs))
    if not result:
        return f"@{fn.name}({params})"
    ret = "?" if fn.result is None else _spec_text(fn.result)
    return f"@{fn.name}({params}) -> {ret}"


def as_text(ex: Executable) -> str:
    """The disassembly of `ex` (see the module docstring)."""
    lines: list[str] = []
    for fi, fn in enumerate(ex.functions):
        lines.append(f"func {fi} {signature(fn)}")
        lines.append(
            f"  # {len(fn.params)} params, {fn.register_file_size} registers, "
            f"{len(fn.instructions)} instructions"
        )
        for pc, ins in enumerate(fn.instructions):
            name = OPCODE_INFO[Opcode(ins[0])].name
            lines.append(f"  {pc:>4}  {name:<17} {format_instruction(ex, ins, pc)}")
        lines.append("")
    if ex.constants:
        lines.append("constants:")
        for i, c in enumerate(ex.constants):
            lines.append(f"  c{i:<4} {describe_value(c)}  ({c.nbytes} bytes)")
        lines.append("")
    if ex.primitive_names:
        lines.append("primitives:")
        for i, p in enumerate(ex.primitive_names):
            where = f"kernel ({ex.kernels[p].backend})" if p in ex.kernels else "global"
            lines.append(f"  {i:<4} {p}  [{where}]")
        lines.append("")
    if ex.kernels:
        lines.append("kernels:")
        for rec in ex.kernels.values():
            lines.append(
                f"  {rec.name}: backend={rec.backend} style={rec.style} "
                f"entry={rec.entry} ({len(rec.source.splitlines())} lines)"
            )
        lines.append("")
    if ex.libraries:
        lines.append("libraries: " + ", ".join(ex.libraries))
    return "\n".join(lines).rstrip() + "\n"


def _py_const(arr: np.ndarray) -> str:
    if arr.dtype.kind == "U" and arr.ndim == 0:
        return f"np.array({str(arr.item())!r})"
    return (
        f"np.frombuffer(bytes.fromhex({arr.tobytes().hex()!r}), "
        f"dtype={arr.dtype.str!r}).reshape({tuple(arr.shape)!r})"
    )


def as_python(ex: Executable) -> str:
    """Python source that rebuilds an equal executable; it binds it to `executable`."""
    out = [
        "import numpy as np",
        "",
        "from rvm.runtime import ExecBuilder, KernelRecord, Opcode, ParamSpec",
        "",
        "b = ExecBuilder()",
    ]
    for c in ex.constants:
        out.append(f"b.add_constant({_py_const(c)})")
    for p in ex.primitive_names:
        out.append(f"b.add_primitive({p!r})")
    for rec in ex.kernels.values():
        out.append(
            f"b.add_kernel(KernelRecord({rec.name!r}, {rec.backend!r}, {rec.source!r}, "
            f"{rec.entry!r}, {rec.style!r}, {dict(rec.meta)!r}, {rec.requires!r}, "
            f"{rec.imports!r}, {rec.cost!r}))"
        )
    for name, src in ex.libraries.items():
        out.append(f"b.add_library({name!r}, {src!r})")
    for info in ex.adts:
        out.append(
            f"b.add_adt({info.name!r}, {list(info.constructors)!r}, {info.python!r}, "
            f"{info.fields!r})"
        )
    for fn in ex.functions:
        out.append("")
        out.append(
            f"f = b.function({fn.name!r}, {fn.params!r}, {fn.param_specs!r}, "
            f"register_file_size={fn.register_file_size}"
            + ("" if fn.result is None else f", result={fn.result!r}")
            + ")"
        )
        for ins in fn.instructions:
            op = Opcode(ins[0])
            args = "".join(f", {v!r}" for v in ins[1:])
            out.append(f"f.emit(Opcode.{op.name}{args})")
    out += ["", "executable = b.build()", ""]
    return "\n".join(out)


def stats(ex: Executable) -> str:
    """A summary table of functions, constants, primitives and kernels."""
    lines = [f"functions: {len(ex.functions)}"]
    width = max([len(f.name) for f in ex.functions] + [8])
    lines.append(
        f"  {'name':<{width}}  {'params':>6}  {'registers':>9}  {'instructions':>12}  "
        "planned storage"
    )
    for fn in ex.functions:
        lines.append(
            f"  {fn.name:<{width}}  {len(fn.params):>6}  "
            f"{fn.register_file_size:>9}  {len(fn.instructions):>12}  {_storage(fn)}"
        )
    total = sum(c.nbytes for c in ex.constants)
    lines.append(f"constants: {len(ex.constants)} ({_bytes(total)})")
    for i, c in sorted(enumerate(ex.constants), key=lambda ic: -ic[1].nbytes)[:10]:
        lines.append(f"  c{i:<4} {describe_value(c, limit=0):<30} {_bytes(c.nbytes):>10}")
    nglob = sum(1 for p in ex.primitive_names if p not in ex.kernels)
    lines.append(
        f"primitives: {len(ex.primitive_names)} "
        f"({len(ex.primitive_names) - nglob} kernels, {nglob} global functions)"
    )
    by_backend: dict[str, int] = {}
    for rec in ex.kernels.values():
        by_backend[rec.backend] = by_backend.get(rec.backend, 0) + 1
    detail = ", ".join(f"{n} {b}" for b, n in sorted(by_backend.items()))
    lines.append(f"kernels: {len(ex.kernels)}" + (f" ({detail})" if detail else ""))
    lines.append(f"precision: {ex.precision}")
    return "\n".join(lines) + "\n"


def as_html(ex: Executable) -> str:
    """The summary of `stats` as HTML tables, and the disassembly in a collapsed `<details>`."""
    ninstr = sum(len(fn.instructions) for fn in ex.functions)
    nbytes = sum(c.nbytes for c in ex.constants)
    nglob = sum(1 for p in ex.primitive_names if p not in ex.kernels)
    backends = sorted({rec.backend for rec in ex.kernels.values()})
    facts = _html.table(
        (),
        [
            ("functions", len(ex.functions)),
            ("instructions", ninstr),
            ("constants", f"{len(ex.constants)} ({_bytes(nbytes)})"),
            ("kernels", len(ex.kernels)),
            ("primitives", f"{len(ex.primitive_names)} ({nglob} global functions)"),
            ("default exec mode", ex.default_exec_mode),
            ("precision", ex.precision),
            ("kernels backend", ", ".join(backends) or "none"),
        ],
    )
    functions = _html.table(
        ("function", "arity", "params", "registers", "instructions"),
        [
            (
                f"@{fn.name}",
                len(fn.params),
                ", ".join(fn.params),
                fn.register_file_size,
                len(fn.instructions),
            )
            for fn in ex.functions
        ],
        numeric=(1, 3, 4),
    )
    primitives = _html.table(
        ("primitive", "kind"),
        [
            (p, f"kernel ({ex.kernels[p].backend})" if p in ex.kernels else "global function")
            for p in ex.primitive_names
        ],
    )
    return _html.box(
        "Executable",
        facts,
        functions,
        _html.details(f"primitives ({len(ex.primitive_names)})", primitives),
        _html.details(f"bytecode ({ninstr} instructions)", _html.code_block(as_text(ex))),
    )


def _storage(fn: VMFunction) -> str:
    """The planned storage column: constant bytes, and allocations sized at run time."""
    plan = planned_storage(fn)
    dynamic = f" + {plan.dynamic} sized at run time" if plan.dynamic else ""
    return _bytes(plan.nbytes) + dynamic


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"
