"""The sections of an RVMX image (`rvm.runtime.serialize`), each written and read by its pair
of functions here: GLOB (functions and data types), the format-1 CONS (constants inside the
section; format 2 keeps them in WGHT, `rvm.runtime.weights`), PRIM, CODE (with the upgrade of
format 1.0 / 1.1 tail calls), KERN, FACT, META, RSLT, PFLD, DIMR, ADTF and NATV.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from rvm.dtypes import NARROW_DTYPES
from rvm.errors import ExecutableFormatError
from rvm.runtime import shape_patterns as sp
from rvm.runtime import weights
from rvm.runtime.bytecode import OPCODE_INFO, Opcode
from rvm.runtime.executable import ADTInfo, Executable, KernelRecord, VMFunction
from rvm.runtime.loading.artifact import NativeCode, NativeGroup, check
from rvm.runtime.rvmx_fields import (
    VERSION,
    Reader,
    Writer,
    newer,
    read_result,
    read_spec,
    write_result,
    write_spec,
)

__all__ = [
    "read_code",
    "read_cons",
    "read_digests",
    "read_adtf",
    "read_dimr",
    "read_fact",
    "read_glob",
    "read_kern",
    "read_natv",
    "read_pfld",
    "upgrade_tail_calls",
    "uses_expressions",
    "write_code",
    "write_cons",
    "write_adtf",
    "write_dimr",
    "write_fact",
    "write_glob",
    "write_kern",
    "write_meta",
    "write_natv",
    "write_pfld",
    "write_prim",
    "write_rslt",
]


def uses_expressions(ex: Executable) -> bool:
    """Whether a signature or a shape pattern of ``ex`` has a dimension expression."""
    specs = [s for fn in ex.functions for s in (*fn.param_specs, fn.result) if s is not None]
    while specs:
        spec = specs.pop()
        if any(isinstance(d, sp.DimProgram) for d in spec.shape or ()):
            return True
        specs.extend(spec.fields or ())
    shapes = (Opcode.MATCH_SHAPE, Opcode.MAKE_SHAPE)
    patterns = {ins[3] for fn in ex.functions for ins in fn.instructions if ins[0] in shapes}
    return any(sp.EXPR in ex.constants[c][::2].tolist() for c in patterns)


def write_glob(ex: Executable) -> bytes:
    w = Writer()
    w.count(len(ex.functions))
    start = 0
    for fn in ex.functions:
        w.str(fn.name)
        w.str(fn.kind)
        w.int(fn.register_file_size)
        w.count(len(fn.params))
        for p, spec in zip(fn.params, fn.param_specs):
            w.str(p)
            write_spec(w, spec)
        w.int(start)
        w.int(len(fn.instructions))
        start += len(fn.instructions)
    w.count(len(ex.adts))
    for info in ex.adts:
        w.str(info.name)
        w.count(len(info.constructors))
        for cname, tag, arity in info.constructors:
            w.str(cname)
            w.int(tag)
            w.int(arity)
    return w.getvalue()


def read_glob(r: Reader) -> tuple[list[tuple], list[ADTInfo]]:
    heads = []
    for _ in range(r.count(4)):
        name, kind, nregs = r.str(), r.str(), r.int()
        params, specs = [], []
        for _ in range(r.count(4)):
            params.append(r.str())
            specs.append(read_spec(r))
        start, length = r.int(), r.int()
        heads.append((name, kind, nregs, tuple(params), tuple(specs), start, length))
    adts = []
    for _ in range(r.count(4)):
        aname = r.str()
        cons = tuple((r.str(), r.int(), r.int()) for _ in range(r.count(20)))
        adts.append(ADTInfo(aname, cons))
    r.end()
    return heads, adts


def write_rslt(ex: Executable) -> bytes:
    w = Writer()
    w.count(len(ex.functions))
    for fn in ex.functions:
        w.raw(b"\x00" if fn.result is None else b"\x01")
        if fn.result is not None:
            write_result(w, fn.result)
    return w.getvalue()


def write_pfld(ex: Executable) -> bytes:
    """Per function, per parameter: a flag, then its spec with its tuple fields (as RSLT)."""
    w = Writer()
    w.count(len(ex.functions))
    for fn in ex.functions:
        w.count(len(fn.param_specs))
        for spec in fn.param_specs:
            w.raw(b"\x00" if spec.fields is None else b"\x01")
            if spec.fields is not None:
                write_result(w, spec)
    return w.getvalue()


def read_pfld(r: Reader, functions: list[VMFunction]) -> list[VMFunction]:
    if r.count(1) != len(functions):
        r.fail(f"{len(functions)} functions but another count of parameter lists")
    out = []
    for fn in functions:
        if r.count(1) != len(fn.param_specs):
            r.fail(f"function {fn.name!r} has {len(fn.param_specs)} parameters, not this count")
        specs = [read_result(r, 0) if r.flag() else spec for spec in fn.param_specs]
        if any(new.name != old.name for new, old in zip(specs, fn.param_specs)):
            r.fail(f"function {fn.name!r}: parameter names differ from the globals section")
        out.append(replace(fn, param_specs=tuple(specs)))
    r.end()
    return out


def write_dimr(ex: Executable) -> bytes:
    """Per function: a count of (name, optional min, optional max)."""
    w = Writer()
    w.count(len(ex.functions))
    for fn in ex.functions:
        w.count(len(fn.dim_ranges))
        for name, lo, hi in fn.dim_ranges:
            w.str(name)
            for bound in (lo, hi):
                w.raw(b"\x00" if bound is None else b"\x01")
                if bound is not None:
                    w.int(bound)
    return w.getvalue()


def read_dimr(r: Reader, count: int) -> list[tuple]:
    if r.count(1) != count:
        r.fail(f"{count} functions but another count of dimension ranges")
    out = []
    for _ in range(count):
        ranges = []
        for _ in range(r.count(9)):
            name = r.str()
            lo = r.int() if r.flag() else None
            hi = r.int() if r.flag() else None
            ranges.append((name, lo, hi))
        out.append(tuple(ranges))
    r.end()
    return out


def write_adtf(ex: Executable) -> bytes:
    """Per data type (GLOB's order): a flag, then per constructor its fields' specs (as in
    RSLT): `ADTInfo.fields`."""
    w = Writer()
    w.count(len(ex.adts))
    for info in ex.adts:
        w.raw(b"\x00" if info.fields is None else b"\x01")
        for fields in info.fields or ():
            w.count(len(fields))
            for spec in fields:
                write_result(w, spec)
    return w.getvalue()


def read_adtf(r: Reader, adts: list[ADTInfo]) -> list[ADTInfo]:
    """`adts` with the field types of ADTF (`write_adtf`)."""
    if r.count(1) != len(adts):
        r.fail(f"{len(adts)} data types but another count of field types")
    out = []
    for info in adts:
        if not r.flag():
            out.append(info)
            continue
        fields = []
        for cname, _, arity in info.constructors:
            if r.count(4) != arity:
                r.fail(f"constructor {cname} has {arity} fields but another count of types")
            fields.append(tuple(read_result(r, 0) for _ in range(arity)))
        out.append(replace(info, fields=tuple(fields)))
    r.end()
    return out


def write_cons(ex: Executable) -> bytes:
    w = Writer()
    w.count(len(ex.constants))
    for c in ex.constants:
        # ml_dtypes' dtypes have no type code of their own (bfloat16's .str is "<V2"): by name
        w.str(c.dtype.name if c.dtype.name in NARROW_DTYPES else c.dtype.str)
        w.ints(tuple(int(d) for d in c.shape))
        data = np.ascontiguousarray(c).tobytes()
        w.int(len(data))
        w.raw(data)
    return w.getvalue()


def read_cons(r: Reader) -> list[np.ndarray]:
    """Format 1's constants: each one's bytes inside CONS (format 2: `weights.read_cons`)."""
    out = []
    for i in range(r.count(4)):
        dtype = weights.dtype_of(r, i, r.str())
        shape = r.ints()
        nbytes = r.int()
        expect = weights.nbytes_of(r, i, dtype, shape)
        if expect != nbytes:
            r.fail(f"constant {i} of shape {shape} {dtype} needs {expect} bytes, has {nbytes}")
        raw = r.take(nbytes)  # a view of the file's bytes, read-only as constants must be
        arr = np.frombuffer(raw, dtype=dtype)
        if not arr.flags.aligned:  # kernels take aligned arrays: copy the rare odd one
            arr = np.frombuffer(bytes(raw), dtype=dtype)
        out.append(arr.reshape(shape))
    r.end()
    return out


def write_prim(ex: Executable) -> bytes:
    w = Writer()
    w.count(len(ex.primitive_names))
    for name in ex.primitive_names:
        w.str(name)
    return w.getvalue()


def write_code(ex: Executable) -> bytes:
    w = Writer()
    w.count(sum(len(fn.instructions) for fn in ex.functions))
    for fn in ex.functions:
        for ins in fn.instructions:
            w.raw(bytes([ins[0]]))
            for kind, v in zip(OPCODE_INFO[Opcode(ins[0])].kinds, ins[1:]):
                if kind in ("regs", "shape"):
                    w.ints(v)
                elif kind in ("dtype", "str"):
                    w.str(v)
                else:
                    w.int(v)
    return w.getvalue()


def read_code(r: Reader, version: tuple[int, int]) -> list[tuple]:
    code = []
    for _ in range(r.count(1)):
        op = r.take(1)[0]
        if op not in OPCODE_INFO:
            if version > VERSION:
                raise ExecutableFormatError(newer(version, f"uses opcode {op}"))
            r.fail(f"unknown opcode {op}")
        ins: list[Any] = [op]
        for kind in OPCODE_INFO[Opcode(op)].kinds:
            if kind in ("regs", "shape"):
                ins.append(r.ints())
            elif kind in ("dtype", "str"):
                ins.append(r.str())
            else:
                ins.append(r.int())
        code.append(tuple(ins))
    r.end()
    return code


def upgrade_tail_calls(code: list[tuple]) -> list[tuple]:
    """A function of a format 1.0 / 1.1 file with its tail calls as the tail call opcodes: an
    INVOKE / INVOKE_CLOSURE directly followed by RET of its result (the rule of those
    versions) becomes TAIL_INVOKE / TAIL_INVOKE_CLOSURE; the RET stays, unreachable, so no pc
    moves."""
    tail = {Opcode.INVOKE: Opcode.TAIL_INVOKE, Opcode.INVOKE_CLOSURE: Opcode.TAIL_INVOKE_CLOSURE}
    out = list(code)
    for pc, ins in enumerate(code[:-1]):
        nxt = code[pc + 1]
        if ins[0] in tail and nxt[0] == Opcode.RET and nxt[1] == ins[1]:
            out[pc] = (tail[Opcode(ins[0])], *ins[2:])
    return out


def write_kern(ex: Executable) -> bytes:
    w = Writer()
    w.count(len(ex.kernels))
    for rec in ex.kernels.values():
        for s in (rec.name, rec.backend, rec.source, rec.entry, rec.style):
            w.str(s)
        w.count(len(rec.meta))
        for k, v in rec.meta.items():
            w.str(k)
            w.str(v)
    w.count(len(ex.libraries))
    for name, src in ex.libraries.items():
        w.str(name)
        w.str(src)
    return w.getvalue()


def read_kern(r: Reader) -> tuple[dict[str, KernelRecord], dict[str, str]]:
    kernels = {}
    for _ in range(r.count(24)):
        name, backend, source, entry, style = (r.str() for _ in range(5))
        meta = {r.str(): r.str() for _ in range(r.count(8))}
        kernels[name] = KernelRecord(name, backend, source, entry, style, meta)
    libraries = {r.str(): r.str() for _ in range(r.count(8))}
    r.end()
    return kernels, libraries


def write_fact(ex: Executable) -> bytes:
    w = Writer()
    w.count(len(ex.kernels))
    for rec in ex.kernels.values():
        w.count(len(rec.requires))
        for name, dtype in rec.requires:
            w.str(name)
            w.str(dtype)
        w.count(len(rec.imports))
        for module in rec.imports:
            w.str(module)
        w.int(rec.cost)
    return w.getvalue()


def read_fact(r: Reader, kernels: dict[str, KernelRecord]) -> dict[str, KernelRecord]:
    if r.count(1) != len(kernels):
        r.fail(f"{len(kernels)} kernels but another count of facts")
    out = {}
    for name, rec in kernels.items():
        requires = tuple((r.str(), r.str()) for _ in range(r.count(8)))
        imports = tuple(r.str() for _ in range(r.count(4)))
        out[name] = replace(rec, requires=requires, imports=imports, cost=r.int())
    r.end()
    return out


def write_natv(native: NativeCode) -> bytes:
    w = Writer()
    w.str(native.key)
    w.count(len(native.groups))
    for g in native.groups:
        w.str(g.kind)
        w.str(g.ident)
        w.int(g.mtime_ns)
        w.count(len(g.files))
        for name, data in g.files:
            w.str(name)
            w.int(len(data))
            w.raw(data)
    return w.getvalue()


def read_natv(r: Reader) -> NativeCode:
    key = r.str()
    groups = []
    for _ in range(r.count(17)):
        kind, ident, mtime = r.str(), r.str(), r.int()
        files = []
        for _ in range(r.count(12)):
            name = r.str()
            size = r.int()
            files.append((name, bytes(r.take(size))))
        groups.append(NativeGroup(kind, ident, mtime, tuple(files)))
    r.end()
    native = NativeCode(key, tuple(groups))
    problem = check(native)
    if problem is not None:
        r.fail(problem)
    return native


def write_meta(ex: Executable) -> bytes:
    w = Writer()
    items = {"default_exec_mode": ex.default_exec_mode}
    if ex.precision != "fp32":  # since 1.6: what its products compute in
        items["precision"] = ex.precision
    forms = ";".join(f"{info.name}={info.python}" for info in ex.adts if info.python)
    if forms:  # since 1.5: the data types' Python forms (`ADTInfo.python`)
        items["python_forms"] = forms
    big = [i for i, c in enumerate(ex.constants) if c.nbytes > weights.DIGESTED_BYTES]
    if big:  # since 2.0: big constants' digests, so that a load need not hash them
        items["constant_digests"] = ";".join(f"{i}={weights.constant_digest(ex, i)}" for i in big)
    w.count(len(items))
    for key, value in items.items():
        w.str(key)
        w.str(value)
    return w.getvalue()


def read_digests(text: str, count: int) -> dict[int, str]:
    """META's ``constant_digests`` (``index=hex;...``) as {index: hex digest}."""
    out: dict[int, str] = {}
    for item in text.split(";"):
        index, _, value = item.partition("=")
        hexed = len(value) == 64 and all(c in "0123456789abcdef" for c in value)
        if not (index.isdigit() and int(index) < count and hexed):
            raise ExecutableFormatError(f"corrupt executable: a constant digest {item[:80]!r}")
        out[int(index)] = value
    return out
