"""The executable: function table, constant pool, primitive names, bytecode and kernels.

An `Executable` is immutable once built and is shared by many `VirtualMachine`s and threads. It
validates itself on construction (whether built by `ExecBuilder` or decoded from a file), so
the VM can trust every index in the bytecode. It is data: it holds no caches and knows nothing
of what is built from it; each module that derives something from it once (decoded code,
loaded kernels, the modes' functions) declares that as a `rvm.runtime.derived.Derived`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from rvm.dtypes import numpy_dtype
from rvm.errors import ExecutableFormatError, FunctionNotFoundError
from rvm.runtime.bytecode import OPCODE_INFO, Opcode
from rvm.runtime.weights import aligned

__all__ = ["SCALAR_META", "ParamSpec", "VMFunction", "KernelRecord", "ADTInfo", "Executable"]

MAX_REGISTERS = 1 << 20
_KINDS = ("tensor", "tuple", "adt", "any")
_BACKENDS = ("numpy", "jit")
_STYLES = ("dps", "return")
EXEC_MODES = ("bytecode", "compiled", "native")
PRECISIONS = ("fp32", "bf16", "int8")
"""What an executable's products compute in (`rvm.compile`'s ``precision``)."""
_TERMINATORS = (
    Opcode.RET,
    Opcode.GOTO,
    Opcode.FATAL,
    Opcode.IF,
    Opcode.IF_IMM,
    Opcode.TAIL_INVOKE,
    Opcode.TAIL_INVOKE_CLOSURE,
)
MAX_SHAPE_HEAP = 1 << 16


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """What a function expects of one parameter, checked when Python calls the function.

    Attributes:
        name: The parameter's name.
        kind: "tensor", "tuple", "adt" or "any".
        dtype: The tensor's dtype name, or None for any.
        shape: Per dimension an int (fixed), a str (a symbolic dimension shared by name across
            the function's parameters) or None (unknown); None for any rank.
        fields: For a tuple whose field types are known, a spec per field; None otherwise.
        adt: For a data type value, the data type's name when known (it says how a Python
            value crosses the boundary: `ADTInfo.python`); None otherwise.
    """

    name: str
    kind: str = "any"
    dtype: str | None = None
    shape: tuple[int | str | None, ...] | None = None
    fields: tuple[ParamSpec, ...] | None = None
    adt: str | None = None


DimRange = tuple[str, "int | None", "int | None"]
"""A symbolic dimension's allowed sizes, checked at entry: (name, min, max); None is no bound."""


@dataclass(frozen=True, slots=True)
class VMFunction:
    """A function of the executable: its signature, register count and bytecode.

    `result` is what the function returns as the compiler typed it (a `ParamSpec` named
    "result"; its symbolic dims are the parameters' ones), or None where unknown (built by
    hand, or saved before format 1.3). It is information for callers (`rvm.dask` plans its
    output blocks from it); the VM does not check it. `dim_ranges` bound the sizes of
    symbolic dimensions of the parameters (from ``Function.attrs["dim_ranges"]``, which
    `rvm.from_torch` sets from ``torch.export.Dim`` ranges); the entry checks them.
    """

    name: str
    params: tuple[str, ...]
    param_specs: tuple[ParamSpec, ...]
    register_file_size: int
    instructions: tuple[tuple, ...]
    kind: str = "vm"
    result: ParamSpec | None = None
    dim_ranges: tuple[DimRange, ...] = ()


SCALAR_META = "scalar"
"""The `KernelRecord.meta` key of a jit kernel of 0-d tensors naming its scalar form: a
function of the same source taking and returning scalars (``fused_add__scalar(p0)``), which
the kernel itself calls, so its computation is written once; the native exec mode calls it on
scalar locals (`rvm.runtime.modes.native_codegen`)."""


@dataclass(frozen=True, slots=True)
class KernelRecord:
    """Everything needed to rebuild a kernel in a fresh process.

    Attributes:
        name: The packed-function name the bytecode calls.
        backend: "numpy" (Python source run with numpy) or "jit" (compiled by `rvm.jit`).
        source: The kernel's source.
        entry: The function to call in `source`.
        style: "dps" (outputs passed last, returns None; INVOKE_PACKED) or "return"
            (returns its result; CALL_PACKED).
        meta: Free string metadata (e.g. the fused ops, the jit signature).
        requires: The kernel library's entry points the kernel requires when it is imported,
            as (entry point, dtype) pairs (`rvm.kernels.entry`), set by the generator.
        imports: The rvm modules the kernel's source imports (by import path; the cache key
            covers them and what they import), set by the generator.
        cost: An estimate of the kernel's compile time (arbitrary units; `rvm.jit.parallel`
            compiles the costliest first), set by the generator.
    """

    name: str
    backend: str
    source: str
    entry: str
    style: str = "dps"
    meta: Mapping[str, str] = field(default_factory=dict)
    requires: tuple[tuple[str, str], ...] = ()
    imports: tuple[str, ...] = ()
    cost: int = 0


@dataclass(frozen=True, slots=True)
class ADTInfo:
    """An algebraic data type: its name and constructors as (name, tag, arity).

    ``python`` is the Python form its values take at the VM's boundary (`rvm.runtime.entry`),
    or None (they stay `ADT` objects): ``"list"`` for ``Nil | Cons(head, tail)`` (a Python
    list of the heads), ``"optional"`` for ``Nothing | Some(value)`` (None, or the value), and
    ``"optional:<name>"`` when that value is of data type ``<name>``, itself converted.

    ``fields`` gives, per constructor in the order of ``constructors``, the types of its
    fields as specs (a tensor's dtype and shape, a tuple's fields, a data type's name), from
    the compiler's type data; None where unknown (built by hand, or saved without them). The
    native exec mode lays out a value from them (`rvm.runtime.modes.native_adts`).
    """

    name: str
    constructors: tuple[tuple[str, int, int], ...]
    python: str | None = None
    fields: tuple[tuple[ParamSpec, ...], ...] | None = None


class Executable:
    """The compiled program, immutable and shared.

    Attributes:
        functions: The function table, a tuple of `VMFunction`.
        constants: The constant pool, a tuple of read-only numpy arrays.
        primitive_names: Every packed function the bytecode calls, by index.
        kernels: Kernel records by name (read-only mapping).
        libraries: Python sources shared by numpy kernels, by name (read-only mapping).
        adts: The algebraic data types, for printing values with constructor names.
        default_exec_mode: The exec mode of `VirtualMachine(ex)` without one: "bytecode" or
            "compiled" (recorded by `rvm.compile(..., exec_mode=...)`, saved with the file).
        precision: What its products (GEMMs, convolutions) compute in: "fp32", "bf16" or
            "int8" (recorded by `rvm.compile(..., precision=...)`, saved with the file); its
            inputs and outputs keep their declared types whatever it is.

    This module holds the record and its validation only. The methods that need the modules
    above it (``save``, ``to_bytes``, ``from_bytes``, ``native_code``, ``as_text``,
    ``as_python``, ``stats``, ``kernel_source``/``kernel_llvm``/``kernel_asm``) are functions
    of those modules (`rvm.runtime.serialize`, `rvm.runtime.text`, `rvm.runtime.loading`),
    bound onto this class by `rvm.runtime.methods`, which `rvm.runtime` imports first: so
    they are there whenever any runtime module is, and no module imports one above it.
    """

    def __init__(
        self,
        functions: Iterable[VMFunction],
        constants: Iterable[np.ndarray] = (),
        primitive_names: Iterable[str] = (),
        kernels: Mapping[str, KernelRecord] | None = None,
        libraries: Mapping[str, str] | None = None,
        adts: Iterable[ADTInfo] = (),
        default_exec_mode: str = "bytecode",
        precision: str = "fp32",
    ) -> None:
        self.functions: tuple[VMFunction, ...] = tuple(functions)
        consts = []
        for c in constants:
            # Read-only contiguous arrays (decoded from a file, or an IR constant's view of the
            # user's weights) are shared, not copied: a model's weights are held once. Others
            # are copied (on a cache line: `weights.aligned`) so that nobody can write the
            # constants through this array.
            if not (isinstance(c, np.ndarray) and not c.flags.writeable and c.flags.c_contiguous):
                c = aligned(np.asarray(c))
            consts.append(c)
        self.constants: tuple[np.ndarray, ...] = tuple(consts)
        self.primitive_names: tuple[str, ...] = tuple(primitive_names)
        self.kernels: Mapping[str, KernelRecord] = MappingProxyType(dict(kernels or {}))
        self.libraries: Mapping[str, str] = MappingProxyType(dict(libraries or {}))
        self.adts: tuple[ADTInfo, ...] = tuple(adts)
        self.default_exec_mode = default_exec_mode
        self.precision = precision
        validate(self)
        self._index = {f.name: i for i, f in enumerate(self.functions)}
        self.constructor_names: dict[int, str] = {
            tag: cname for info in self.adts for cname, tag, _ in info.constructors
        }
        self._trusted = True
        self._untrusted_reason = ""
        self._signed_by: str | None = None
        # Content digests of constants by index (`rvm.runtime.weights.constant_digest`).
        self.constant_digests: dict[int, str] = {}
        self._native_entries: dict[str, Any] = {}

    @property
    def trusted(self) -> bool:
        """Whether code the executable carries (kernel source, native code) may run: True
        for an executable built in this process, and for a file that was signed with a
        trusted key or loaded with ``trusted=True`` (`rvm.runtime.loading.trust`)."""
        return self._trusted

    @property
    def signed_by(self) -> str | None:
        """The id of the key whose signature of the loaded file was verified
        (`rvm.runtime.loading.trust.key_id`), or None: built in this process, unsigned, not
        verified, or loaded with ``trusted=True`` (which checks no signature)."""
        return self._signed_by

    # -- lookup ---------------------------------------------------------------------------

    def function_index(self, name: str) -> int:
        """Returns the index of function `name`.

        Raises:
            FunctionNotFoundError: No function is called `name` (the message names those that
                are; it is also a KeyError).
        """
        try:
            return self._index[name]
        except (KeyError, TypeError):
            raise FunctionNotFoundError.missing(name, "the executable", self._index) from None

    def __contains__(self, name: object) -> bool:
        """Whether the executable has a function called `name` (`"main" in ex`)."""
        try:
            return name in self._index
        except TypeError:  # an unhashable name
            return False

    def get_function(self, name: str) -> VMFunction:
        """Returns the `VMFunction` called `name`."""
        return self.functions[self.function_index(name)]

    def with_exec_mode(self, exec_mode: str) -> Executable:
        """This executable with another `default_exec_mode` (a copy: nothing derived from
        this one is shared)."""
        if exec_mode not in EXEC_MODES:
            raise ValueError(f"exec_mode must be one of {EXEC_MODES}, got {exec_mode!r}")
        other = copy.copy(self)
        other.default_exec_mode = exec_mode
        return other

    def __repr__(self) -> str:
        names = ", ".join(f.name for f in self.functions)
        return f"<Executable functions=[{names}] constants={len(self.constants)}>"

    def __reduce__(self) -> tuple[Callable[[bytes], Executable], tuple[bytes]]:
        """Pickles through the RVMX bytes of `save` (so whatever a saved file carries, a
        pickle carries, and unpickling validates as loading does: signed with this user's
        local key, it unpickles trusted where that key is trusted, and as untrusted data
        elsewhere); what was derived from it stays behind."""
        return Executable.from_bytes, (self.to_bytes(),)


# -- validation -----------------------------------------------------------------------------


def _fail(msg: str) -> None:
    raise ExecutableFormatError(f"invalid executable: {msg}")


def _is_int(x: Any) -> bool:
    return type(x) is int


def validate(ex: Executable) -> None:
    """Checks every table and instruction so the VM can trust every index.

    Raises:
        ExecutableFormatError: naming the function, pc and operand at fault.
    """
    if ex.default_exec_mode not in EXEC_MODES:
        _fail(f"default exec mode {ex.default_exec_mode!r} is not one of {EXEC_MODES}")
    if ex.precision not in PRECISIONS:
        _fail(f"precision {ex.precision!r} is not one of {PRECISIONS}")
    names = [f.name for f in ex.functions]
    if len(set(names)) != len(names):
        _fail(f"duplicate function names in {names}")
    for i, c in enumerate(ex.constants):
        if c.dtype.hasobject:
            _fail(f"constant {i} has object dtype")
    for p in ex.primitive_names:
        if not isinstance(p, str) or not p:
            _fail(f"primitive name {p!r} is not a non-empty string")
    if len(set(ex.primitive_names)) != len(ex.primitive_names):
        _fail("duplicate primitive names")
    for key, rec in ex.kernels.items():
        if not isinstance(rec, KernelRecord) or rec.name != key:
            _fail(f"kernel entry {key!r} is not a KernelRecord named {key!r}")
        if rec.backend not in _BACKENDS:
            _fail(f"kernel {key!r}: backend {rec.backend!r} is not one of {_BACKENDS}")
        if rec.style not in _STYLES:
            _fail(f"kernel {key!r}: style {rec.style!r} is not one of {_STYLES}")
    tags: dict[int, int] = {}
    for info in ex.adts:
        for cname, tag, arity in info.constructors:
            if not _is_int(tag) or tag < 0 or tag in tags:
                _fail(f"ADT {info.name}: constructor {cname} has a bad or duplicate tag {tag!r}")
            tags[tag] = arity
        if info.fields is not None and (
            len(info.fields) != len(info.constructors)
            or any(len(f) != c[2] for f, c in zip(info.fields, info.constructors))
        ):
            _fail(f"ADT {info.name}: field types do not match its constructors' arities")
    for fn in ex.functions:
        _validate_function(ex, fn, tags)


def _validate_function(ex: Executable, fn: VMFunction, tags: dict[int, int]) -> None:
    where = f"function {fn.name!r}"
    if fn.kind != "vm":
        _fail(f"{where}: kind {fn.kind!r} is not 'vm'")
    if len(fn.param_specs) != len(fn.params):
        _fail(f"{where}: {len(fn.params)} params but {len(fn.param_specs)} param specs")
    for spec in fn.param_specs:
        if spec.kind not in _KINDS:
            _fail(f"{where}: parameter {spec.name!r} has kind {spec.kind!r}, not one of {_KINDS}")
    if fn.result is not None:
        _validate_result(where, fn.result, 0)
    nregs = fn.register_file_size
    if not _is_int(nregs) or not len(fn.params) <= nregs <= MAX_REGISTERS or nregs < 1:
        _fail(f"{where}: register file size {nregs!r} is not in [max(1, params), {MAX_REGISTERS}]")
    code = fn.instructions
    if not code:
        _fail(f"{where}: no instructions")
    if code[-1][0] not in _TERMINATORS:
        _fail(f"{where}: the last instruction can fall off the end of the function")
    for pc, ins in enumerate(code):
        _validate_instruction(ex, fn, pc, ins, tags)


MAX_RESULT_DEPTH = 32


def _validate_result(where: str, spec: ParamSpec, depth: int) -> None:
    if not isinstance(spec, ParamSpec) or spec.kind not in _KINDS:
        _fail(f"{where}: result spec {spec!r} is not a ParamSpec of a kind in {_KINDS}")
    if depth > MAX_RESULT_DEPTH:
        _fail(f"{where}: result tuples nest deeper than {MAX_RESULT_DEPTH}")
    if spec.fields is not None:
        if spec.kind != "tuple":
            _fail(f"{where}: a result of kind {spec.kind!r} has tuple fields")
        for field in spec.fields:
            _validate_result(where, field, depth + 1)


def _validate_instruction(
    ex: Executable, fn: VMFunction, pc: int, ins: tuple, tags: dict[int, int]
) -> None:
    where = f"@{fn.name} pc={pc}"
    if not isinstance(ins, tuple) or not ins or ins[0] not in OPCODE_INFO:
        _fail(f"{where}: {ins!r} is not an instruction tuple with a known opcode")
    op = Opcode(ins[0])
    info = OPCODE_INFO[op]
    if len(ins) != 1 + len(info.operands):
        _fail(f"{where}: {info.name} takes {len(info.operands)} operands, got {len(ins) - 1}")
    nregs = fn.register_file_size
    for (fname, kind), v in zip(info.operands, ins[1:]):
        bad = f"{where}: {info.name} operand {fname}={v!r}"
        if kind == "reg":
            if not _is_int(v) or not 0 <= v < nregs:
                _fail(f"{bad} is not a register below {nregs}")
        elif kind == "regs":
            if not isinstance(v, tuple) or not all(_is_int(r) and 0 <= r < nregs for r in v):
                _fail(f"{bad} is not a tuple of registers below {nregs}")
        elif kind == "imm":
            if not _is_int(v) or not -(2**63) <= v < 2**63:
                _fail(f"{bad} is not a 64-bit integer")
        elif kind == "shape":
            if not isinstance(v, tuple) or not all(_is_int(d) and 0 <= d < 2**63 for d in v):
                _fail(f"{bad} is not a tuple of non-negative ints")
        elif kind in ("dtype", "str"):
            if not isinstance(v, str):
                _fail(f"{bad} is not a string")
            if kind == "dtype":
                _check_dtype(v, bad)
        else:
            size = {
                "const": len(ex.constants),
                "func": len(ex.functions),
                "packed": len(ex.primitive_names),
                "offset": None,
            }[kind]
            if not _is_int(v):
                _fail(f"{bad} is not an int")
            if kind == "offset":
                if not 0 <= pc + v < len(fn.instructions):
                    _fail(f"{bad} jumps to {pc + v}, outside 0..{len(fn.instructions) - 1}")
            elif not 0 <= v < size:
                _fail(f"{bad} is out of range (the table has {size} entries)")
    _validate_semantics(ex, op, ins, where, tags)


def _check_dtype(name: str, bad: str) -> None:
    try:
        dt = numpy_dtype(name)
    except (TypeError, ValueError):
        _fail(f"{bad} is not a numpy dtype")
    if dt.hasobject or dt.itemsize == 0:
        _fail(f"{bad} is not a fixed-size, non-object dtype")


def _validate_semantics(
    ex: Executable, op: Opcode, ins: tuple, where: str, tags: dict[int, int]
) -> None:
    if op == Opcode.INVOKE_PACKED:
        _, _, arity, nout, args = ins
        if arity != len(args) or not 0 <= nout <= arity:
            _fail(f"{where}: invoke_packed arity {arity} / outputs {nout} vs {len(args)} args")
    elif op == Opcode.INVOKE or op == Opcode.TAIL_INVOKE:
        callee, args = (
            (ex.functions[ins[2]], ins[3])
            if op == Opcode.INVOKE
            else (
                ex.functions[ins[1]],
                ins[2],
            )
        )
        if len(args) != len(callee.params):
            _fail(
                f"{where}: invoke @{callee.name} with {len(args)} args, "
                f"it takes {len(callee.params)}"
            )
    elif op == Opcode.ALLOC_CLOSURE:
        callee = ex.functions[ins[2]]
        if len(ins[3]) > len(callee.params):
            _fail(
                f"{where}: closure of @{callee.name} captures {len(ins[3])} values, "
                f"it takes {len(callee.params)} params"
            )
    elif op == Opcode.ALLOC_ADT:
        tag = ins[2]
        if tag < -1 or (tag in tags and tags[tag] != len(ins[3])):
            _fail(
                f"{where}: alloc_adt tag {tag} with {len(ins[3])} fields does not match "
                "its constructor"
            )
    elif op in (Opcode.ALLOC_STORAGE, Opcode.NEW_TENSOR, Opcode.NEW_TENSOR_REG):
        align = ins[3] if op == Opcode.ALLOC_STORAGE else ins[4]
        if align <= 0 or align & (align - 1) or align > 4096:
            _fail(f"{where}: alignment {align} is not a power of two up to 4096")
    elif op == Opcode.ALLOC_SHAPE_HEAP:
        if not 0 <= ins[2] <= MAX_SHAPE_HEAP:
            _fail(f"{where}: shape heap size {ins[2]} is not in [0, {MAX_SHAPE_HEAP}]")
    elif op in (Opcode.MATCH_SHAPE, Opcode.MAKE_SHAPE):
        pattern = ex.constants[ins[3]]
        if pattern.dtype.kind != "i" or pattern.ndim != 1 or len(pattern) % 2:
            _fail(f"{where}: the pattern constant is not a 1-d int array of (kind, value) pairs")
        if op == Opcode.MATCH_SHAPE and ex.constants[ins[4]].dtype.kind != "U":
            _fail(f"{where}: match_shape's context constant is not a string")
    elif op in (Opcode.ALLOC_TENSOR, Opcode.ALLOC_TENSOR_REG, Opcode.GET_FIELD):
        if ins[3] < 0:
            _fail(f"{where}: negative offset/index {ins[3]}")
    elif op == Opcode.FATAL:
        if ex.constants[ins[1]].dtype.kind != "U":
            _fail(f"{where}: fatal's message constant is not a string")
