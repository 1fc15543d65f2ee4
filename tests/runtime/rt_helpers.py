"""Hand-built executables shared by the runtime tests."""

from __future__ import annotations

import numpy as np

from rvm.runtime import ExecBuilder, Executable, KernelRecord, Opcode, ParamSpec

O = Opcode

ADD = KernelRecord("add", "numpy", "def k(a, b, out):\n    np.add(a, b, out=out)\n", "k")
EXP = KernelRecord("exp", "numpy", "def k(a, out):\n    np.exp(a, out=out)\n", "k")
ADD_RET = KernelRecord("add_ret", "numpy", "def k(a, b):\n    return a + b\n", "k", "return")
SUB_RET = KernelRecord("sub_ret", "numpy", "def k(a, b):\n    return a - b\n", "k", "return")
BAD = KernelRecord(
    "fused_add_exp",
    "numpy",
    "def k(a, b, out):\n    x = a + b\n    raise ValueError('kernel exploded')\n",
    "k",
)


def tensor(name: str, shape: tuple, dtype: str = "float32") -> ParamSpec:
    return ParamSpec(name, "tensor", dtype, shape)


def alloc(f, shape: tuple, dtype: str = "float32") -> int:
    """Emits storage + tensor for a fixed shape; returns the tensor's register."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    size, st, t = f.new_register(), f.new_register(), f.new_register()
    f.emit(O.LOAD_CONSTI, size, nbytes)
    f.emit(O.ALLOC_STORAGE, st, size, 64, dtype)
    f.emit(O.ALLOC_TENSOR, t, st, 0, shape, dtype)
    return t


def straight_line(bad: bool = False, n: int = 4) -> Executable:
    """main(x, y) = exp(x + y) on float32[n]."""
    b = ExecBuilder()
    add = b.add_kernel(BAD if bad else ADD)
    exp = b.add_kernel(EXP)
    f = b.function("main", ("x", "y"), (tensor("x", (n,)), tensor("y", (n,))))
    t1 = alloc(f, (n,))
    f.emit(O.INVOKE_PACKED, add, 3, 1, (0, 1, t1))
    t2 = alloc(f, (n,))
    f.emit(O.INVOKE_PACKED, exp, 2, 1, (t1, t2))
    f.emit(O.KILL_REGISTER, t1)
    f.emit(O.RET, t2)
    return b.build()


def counting_loop(old_style: bool = False) -> Executable:
    """loop(i, n, acc): while i != n: acc += 1.5; i += 1 — as tail recursion (`old_style`:
    the tail call as formats 1.0 and 1.1 wrote it, INVOKE then RET of its result)."""
    b = ExecBuilder()
    add = b.add_kernel(ADD_RET)
    b.add_constant(np.float32(1.5))
    specs = (tensor("i", (), "int64"), tensor("n", (), "int64"), tensor("acc", (), "float32"))
    f = b.function("loop", ("i", "n", "acc"), specs)
    done, body = f.label("done"), f.label("body")
    f.emit(O.IF, 0, 1, done, body)
    f.place(body)
    one, step, i2, acc2, r = (f.new_register() for _ in range(5))
    f.emit(O.LOAD_CONSTI, one, 1)
    f.emit(O.CALL_PACKED, i2, add, (0, one))
    f.emit(O.LOAD_CONST, step, 0)
    f.emit(O.CALL_PACKED, acc2, add, (2, step))
    if old_style:
        f.emit(O.INVOKE, r, "loop", (i2, 1, acc2))
        f.emit(O.RET, r)
    else:
        f.emit(O.TAIL_INVOKE, "loop", (i2, 1, acc2))
    f.place(done)
    f.emit(O.RET, 2)
    return b.build()


def recursive_sum() -> Executable:
    """total(n) = 0 if n == 0 else n + total(n - 1), not a tail call."""
    b = ExecBuilder()
    add, sub = b.add_kernel(ADD_RET), b.add_kernel(SUB_RET)
    f = b.function("total", ("n",), (tensor("n", (), "int64"),))
    zero, one, m, r, s = (f.new_register() for _ in range(5))
    base, rec = f.label(), f.label()
    f.emit(O.IF_IMM, 0, 0, base, rec)
    f.place(base)
    f.emit(O.LOAD_CONSTI, zero, 0)
    f.emit(O.RET, zero)
    f.place(rec)
    f.emit(O.LOAD_CONSTI, one, 1)
    f.emit(O.CALL_PACKED, m, sub, (0, one))
    f.emit(O.INVOKE, r, "total", (m,))
    f.emit(O.CALL_PACKED, s, add, (r, 0))
    f.emit(O.RET, s)
    return b.build()


def count_down() -> Executable:
    """count(x, acc) = acc + x by a backward GOTO to an IF against a loaded constant
    (unstructured for the compiled mode)."""
    b = ExecBuilder()
    add, sub = b.add_kernel(ADD_RET), b.add_kernel(SUB_RET)
    scalar = tensor("x", (), "int64")
    f = b.function("count", ("x", "acc"), (scalar, tensor("acc", (), "int64")))
    one, zero = f.new_register(), f.new_register()
    f.emit(O.LOAD_CONSTI, one, 1)
    f.emit(O.LOAD_CONSTI, zero, 0)
    test, done, body = f.label(), f.label(), f.label()
    f.place(test)
    f.emit(O.IF, 0, zero, done, body)
    f.place(body)
    f.emit(O.CALL_PACKED, 0, sub, (0, one))
    f.emit(O.CALL_PACKED, 1, add, (1, one))
    f.emit(O.GOTO, test)
    f.place(done)
    f.emit(O.RET, 1)
    return b.build()


def list_program() -> Executable:
    """make(x, y) = Cons(x, Cons(y, Nil)); total(xs, acc) sums a list; pair(x, y) = (x, y)[1]."""
    b = ExecBuilder()
    nil, cons = b.add_adt("List", [("Nil", 0), ("Cons", 2)])
    add = b.add_kernel(ADD_RET)
    f = b.function("make", ("x", "y"))
    n, c1, c2 = f.new_register(), f.new_register(), f.new_register()
    f.emit(O.ALLOC_ADT, n, nil, ())
    f.emit(O.ALLOC_ADT, c1, cons, (1, n))
    f.emit(O.ALLOC_ADT, c2, cons, (0, c1))
    f.emit(O.RET, c2)

    f = b.function("total", ("xs", "acc"), (ParamSpec("xs", "adt"), ParamSpec("acc")))
    tag, h, t, acc2 = (f.new_register() for _ in range(4))
    is_cons, is_nil = f.label(), f.label()
    f.emit(O.GET_TAG, tag, 0)
    f.emit(O.IF_IMM, tag, cons, is_cons, is_nil)
    f.place(is_cons)
    f.emit(O.GET_FIELD, h, 0, 0)
    f.emit(O.GET_FIELD, t, 0, 1)
    f.emit(O.CALL_PACKED, acc2, add, (1, h))
    f.emit(O.TAIL_INVOKE, "total", (t, acc2))
    f.place(is_nil)
    f.emit(O.RET, 1)

    f = b.function("pair", ("x", "y"))
    tup, second = f.new_register(), f.new_register()
    f.emit(O.ALLOC_ADT, tup, -1, (0, 1))
    f.emit(O.GET_FIELD, second, tup, 1)
    f.emit(O.ALLOC_ADT, tup, -1, (second, 0))
    f.emit(O.RET, tup)
    return b.build()


def closure_program() -> Executable:
    """main(x, k) = (lambda y: y + k)(x); add_k(k, y) takes the free var first."""
    b = ExecBuilder()
    add = b.add_kernel(ADD_RET)
    f = b.function("add_k", ("k", "y"))
    r = f.new_register()
    f.emit(O.CALL_PACKED, r, add, (1, 0))
    f.emit(O.RET, r)
    f = b.function("main", ("x", "k"))
    c = f.new_register()
    f.emit(O.ALLOC_CLOSURE, c, "add_k", (1,))
    f.emit(O.TAIL_INVOKE_CLOSURE, c, (0,))
    f = b.function("make", ("k",))
    c = f.new_register()
    f.emit(O.ALLOC_CLOSURE, c, "add_k", (0,))
    f.emit(O.RET, c)
    f = b.function("apply", ("c", "x"))
    f.emit(O.TAIL_INVOKE_CLOSURE, 0, (1,))
    return b.build()


def symbolic_program() -> Executable:
    """main(x: (n, 4), y: (n, 4)) = exp(x) with the output shape built from the shape heap."""
    b = ExecBuilder()
    exp = b.add_kernel(EXP)
    pat = b.add_constant(np.array([1, 0, 0, 4], dtype=np.int64))
    mk = b.add_constant(np.array([1, 0, 0, 4], dtype=np.int64))
    ctx = b.add_constant(np.array("main: x"))
    specs = (tensor("x", ("n", 4)), tensor("y", ("n", 4)))
    f = b.function("main", ("x", "y"), specs, result=tensor("result", ("n", 4)))
    heap, shape, t = (f.new_register() for _ in range(3))
    f.emit(O.ALLOC_SHAPE_HEAP, heap, 1)
    f.emit(O.MATCH_SHAPE, 0, heap, pat, ctx)
    f.emit(O.MAKE_SHAPE, shape, heap, mk)
    f.emit(O.NEW_TENSOR_REG, t, shape, "float32", 64)
    f.emit(O.INVOKE_PACKED, exp, 2, 1, (0, t))
    f.emit(O.RET, t)
    return b.build()


def checked_add(y_pattern: tuple = (2, 0, 0, 4), out: str = "sum") -> Executable:
    """main(x, y) = x + y with x: (n, 4) and y checked against `y_pattern` by match_shape only
    (the parameters have no entry specs, so the bytecode checks every shape).

    `out` picks the result: "sum", "shape" (the make_shape value), "heap", "reshaped" (the sum
    viewed as (4, n))."""
    b = ExecBuilder()
    add = b.add_kernel(ADD)
    consts = [
        b.add_constant(np.array(v, np.int64))
        for v in ([1, 0, 0, 4], y_pattern, [1, 0, 0, 4], [0, 4, 1, 0])
    ]
    contexts = [b.add_constant(np.array(f"main: argument {i} '{p}'")) for i, p in enumerate("xy")]
    f = b.function("main", ("x", "y"))
    r = [f.new_register() for _ in range(16)]
    f.emit(O.ALLOC_SHAPE_HEAP, r[1], 1)
    for i, (pattern, context) in enumerate(zip(consts[:2], contexts)):
        f.emit(O.MATCH_SHAPE, i, r[1], pattern, context)
    f.emit(O.MAKE_SHAPE, r[8], r[1], consts[2])
    f.emit(O.NEW_TENSOR_REG, r[12], r[8], "float32", 64)
    f.emit(O.INVOKE_PACKED, add, 3, 1, (0, 1, r[12]))
    if out == "reshaped":
        f.emit(O.MAKE_SHAPE, r[14], r[1], consts[3])
        f.emit(O.RESHAPE_TENSOR, r[15], r[12], r[14])
    result = {"sum": r[12], "shape": r[8], "heap": r[1], "reshaped": r[15]}[out]
    f.emit(O.RET, result)
    return b.build()


def triangle() -> Executable:
    """tri(n) = 1 + ... + n by a backward GOTO loop with an explicit counter (no tail call:
    unstructured for the compiled mode)."""
    b = ExecBuilder()
    add, sub = b.add_kernel(ADD_RET), b.add_kernel(SUB_RET)
    f = b.function("tri", ("n",))
    acc, zero, one = f.new_register(), f.new_register(), f.new_register()
    head, body, done = f.label(), f.label(), f.label()
    f.emit(O.LOAD_CONSTI, acc, 0)
    f.emit(O.LOAD_CONSTI, zero, 0)
    f.emit(O.LOAD_CONSTI, one, 1)
    f.place(head)
    f.emit(O.IF, 0, zero, done, body)
    f.place(body)
    f.emit(O.CALL_PACKED, acc, add, (acc, 0))
    f.emit(O.CALL_PACKED, 0, sub, (0, one))
    f.emit(O.GOTO, head)
    f.place(done)
    f.emit(O.RET, acc)
    return b.build()


def every_opcode_program() -> Executable:
    """A program that executes every opcode at least once (FATAL in `boom`)."""
    b = ExecBuilder()
    exp = b.add_kernel(EXP)
    b.add_constant(np.array("boom!"))
    f = b.function("boom", ())
    f.emit(O.FATAL, 0)
    f = b.function("ident", ("v",))
    f.emit(O.RET, 0)
    f = b.function("tail_ident", ("v",))
    f.emit(O.TAIL_INVOKE, "ident", (0,))
    f = b.function("tail_closure", ("c", "v"))
    f.emit(O.TAIL_INVOKE_CLOSURE, 0, (1,))
    match = b.add_constant(np.array([0, 2, 1, 0], np.int64))  # (2, d0)
    make = b.add_constant(np.array([1, 0, 0, 2], np.int64))  # (d0, 2)
    context = b.add_constant(np.array("main: x"))
    f = b.function("main", ("x",), (tensor("x", (2, 3)),))
    regs = [f.new_register() for _ in range(19)]
    shp, flat, tup, clo, tag_src, tag, size, st, t, r, one, moved, tr = regs[:13]
    heap, kept, dyn_shape, dyn, tiny, big = regs[13:]
    f.emit(O.ALLOC_SHAPE_HEAP, heap, 1)
    f.emit(O.MATCH_SHAPE, 0, heap, match, context)
    f.emit(O.MOVE, kept, heap)  # a heap read as a value: no mode may turn it into locals
    f.emit(O.MAKE_SHAPE, dyn_shape, heap, make)
    f.emit(O.NEW_TENSOR_REG, dyn, dyn_shape, "float32", 64)
    f.emit(O.NEW_TENSOR, tiny, (2, 3), "float32", 64)
    f.emit(O.NEW_TENSOR, big, (64,), "float32", 64)
    f.emit(O.SHAPE_OF, shp, 0)
    f.emit(O.LOAD_CONSTI, one, 6)
    f.emit(O.CALL_PACKED, flat, "vm.builtin.tuple", (one,))
    f.emit(O.GET_FIELD, flat, flat, 0)
    f.emit(O.LOAD_CONST, flat, 0)
    f.emit(O.LOAD_CONSTI, size, 24)
    f.emit(O.ALLOC_STORAGE, st, size, 64, "float32")
    f.emit(O.ALLOC_TENSOR, t, st, 0, (2, 3), "float32")
    f.emit(O.ALLOC_TENSOR_REG, tr, st, 0, shp, "float32")
    f.emit(O.INVOKE_PACKED, exp, 2, 1, (0, t))
    f.emit(O.RESHAPE_TENSOR, r, t, shp)
    f.emit(O.MOVE, moved, r)
    f.emit(O.ALLOC_ADT, tup, 7, (moved,))
    f.emit(O.GET_TAG, tag, tup)
    f.emit(O.ALLOC_CLOSURE, clo, "ident", ())
    f.emit(O.INVOKE_CLOSURE, tag_src, clo, (tag,))
    f.emit(O.INVOKE, tag_src, "ident", (tag_src,))
    f.emit(O.INVOKE, tag_src, "tail_ident", (tag_src,))
    f.emit(O.INVOKE, tag_src, "tail_closure", (clo, tag_src))
    f.emit(O.KILL_REGISTER, clo)
    skip = f.label()
    f.emit(O.IF, tag_src, tag, skip, skip)
    f.place(skip)
    skip = f.label()
    f.emit(O.IF_IMM, tag_src, 7, skip, skip)
    f.place(skip)
    end = f.label()
    f.emit(O.GOTO, end)
    f.place(end)
    f.emit(O.ALLOC_ADT, tup, -1, (moved, tag_src, tr))
    f.emit(O.RET, tup)
    return b.build()


def packed_then_exp(global_name: str, n: int = 4) -> Executable:
    """main(x) = exp(g(x)) on float32[n], `g` the registered function `global_name` (called
    with CALL_PACKED) and exp a kernel named "exp<&>"."""
    b = ExecBuilder()
    exp = b.add_kernel(KernelRecord("exp<&>", "numpy", EXP.source, EXP.entry))
    f = b.function("main", ("x",), (tensor("x", (n,)),))
    g = f.new_register()
    f.emit(O.CALL_PACKED, g, global_name, (0,))
    out = alloc(f, (n,))
    f.emit(O.INVOKE_PACKED, exp, 2, 1, (g, out))
    f.emit(O.RET, out)
    return b.build()


def narrow_constant_program(dtype: str = "bfloat16") -> Executable:
    """main(x: dtype[4]) = x + c, with c a constant of the narrow ``dtype`` (ml_dtypes')."""
    import ml_dtypes

    b = ExecBuilder()
    add = b.add_kernel(ADD)
    values = np.array([0.5, -1.0, 3.0, 1e3], np.float32)
    c = b.add_constant(values.astype(getattr(ml_dtypes, dtype)))  # int4 wraps 1000 to -8
    f = b.function("main", ("x",), (tensor("x", (4,), dtype),))
    k, t = f.new_register(), alloc(f, (4,), dtype)
    f.emit(O.LOAD_CONST, k, c)
    f.emit(O.INVOKE_PACKED, add, 3, 1, (0, k, t))
    f.emit(O.RET, t)
    return b.build()
