"""The jit kernels of the ops whose shape is read from data at run time (`rvm.jit.dynamic`)
agree with their numpy kernels: values, shapes, dtypes, and a ShapeError where the shape
computed at run time contradicts the program."""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import Jit, check, prim, var

import rvm
from rvm import op


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def test_dynamic_reshape_infers_minus_one_and_keeps_zero() -> None:
    x, s = var("x", ("n", 6)), var("s", (3,), "int64")
    k = Jit(prim([x, s], op.dynamic_reshape(x, s, ("n", None, 2))))
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    for shape in ((0, -1, 2), (4, 3, 2), (-1, 3, 2)):
        check(k.func, data, _i64(*shape), kernel=k)
    with pytest.raises(rvm.ShapeError, match=r"cannot reshape a tensor of shape \(4, 6\)"):
        k(data, _i64(4, 5, -1))
    promised = r"promised, \(4, None, 2\) \(axis 0 is 2, expected 4:"
    with pytest.raises(rvm.ShapeError, match=promised):
        k(data, _i64(2, 6, 2))


def test_dynamic_expand_broadcasts_both_ways() -> None:
    x, s = var("x", ("a", 1)), var("s", (None,), "int64")
    k = Jit(prim([x, s], op.dynamic_expand(x, s, (None, None))))
    data = np.arange(3, dtype=np.float32).reshape(3, 1)
    for shape in ((3, 4), (1, 4), (4,), (3, 1)):
        check(k.func, data, _i64(*shape), kernel=k)
    with pytest.raises(rvm.ShapeError, match=r"cannot expand a tensor of shape \(3, 1\)"):
        k(data, _i64(2, 4))


def test_dynamic_full_arange_and_tile() -> None:
    s = var("s", (2,), "int64")
    full = Jit(prim([s], op.dynamic_full(s, 1.5, "float32", (None, None))))
    check(full.func, _i64(2, 3), kernel=full)
    with pytest.raises(rvm.ShapeError, match="negative dimension"):
        full(_i64(2, -3))
    a, b, c = var("a", (), "int64"), var("b", (), "int64"), var("c", (), "int64")
    arange = Jit(prim([a, b, c], op.dynamic_arange(a, b, c, "int64")))
    for bounds in ((0, 7, 1), (2, 11, 3), (5, -4, -2), (3, 3, 1), (4, 0, 1)):
        check(arange.func, *(np.array(v, np.int64) for v in bounds), kernel=arange)
    with pytest.raises(ValueError, match="step must not be 0"):
        arange(np.array(0), np.array(3), np.array(0))
    fa, fb, fc = var("a", (), "float32"), var("b", (), "float32"), var("c", (), "float32")
    farange = Jit(prim([fa, fb, fc], op.dynamic_arange(fa, fb, fc, "float32")))
    bounds = (np.float32(0.5), np.float32(3.0), np.float32(0.75))
    check(farange.func, *(np.array(v) for v in bounds), kernel=farange)
    x, r = var("x", (2, 3)), var("r", (2,), "int64")
    tile = Jit(prim([x, r], op.dynamic_tile(x, r, (None, None))))
    check(tile.func, np.arange(6, dtype=np.float32).reshape(2, 3), _i64(2, 3), kernel=tile)


def test_dynamic_slice_follows_python_slicing() -> None:
    x = var("x", ("n", 5))
    b, e = var("b", (2,), "int64"), var("e", (2,), "int64")
    for strides in ((1, 1), (2, -1), (-2, 3)):
        k = Jit(prim([x, b, e], op.dynamic_slice(x, b, e, axes=(0, 1), strides=strides)))
        data = np.arange(35, dtype=np.float32).reshape(7, 5)
        for begin, end in (((0, 0), (7, 5)), ((-3, 4), (100, -100)), ((5, -1), (-8, 1))):
            check(k.func, data, _i64(*begin), _i64(*end), kernel=k)


def test_check_raises_the_message_with_its_detail() -> None:
    x, cond, detail = var("x", (2,)), var("c", (), "bool"), var("d", (2,), "int64")
    message = "a prompt of {0} tokens is longer than the model's {1} positions"
    k = Jit(prim([x, cond, detail], op.check(x, cond, detail, message)))
    data = np.ones(2, np.float32)
    np.testing.assert_array_equal(k(data, np.array(True), _i64(3, 4)), data)
    with pytest.raises(ValueError, match="a prompt of 9 tokens is longer than the model's 4 "):
        k(data, np.array(False), _i64(9, 4))
    k = Jit(prim([x, cond, detail], op.check(x, cond, detail, "sizes {1} and {0}", "shape")))
    with pytest.raises(rvm.ShapeError, match="^sizes 4 and 9$"):
        k(data, np.array(False), _i64(9, 4))


def test_kernels_raise_templates_python_fills() -> None:
    """A kernel raises its error as a template and ints (`rvm.errors.KernelShapeError`, a
    ShapeError; `KernelValueError`, read as a ValueError), not by building the string in
    Numba: the full message of a contradiction names only the axes that disagree, the same
    as the numpy kernel's in every exec mode, and the errors pickle with their message."""
    import pickle

    from rvm.errors import KernelShapeError, KernelValueError, filled, kind_of

    x, s = var("x", ("n", 6)), var("s", (3,), "int64")
    func = prim([x, s], op.dynamic_reshape(x, s, ("n", None, 2)))
    k = Jit(func)
    assert "str(" not in k.record.source and "KernelShapeError(" in k.record.source
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    want = (
        "dynamic_reshape: the shape computed at run time, (2, 6, 2), contradicts the shape the "
        "program promised, (4, None, 2) (axis 0 is 2, expected 4: the inputs' dimensions "
        "disagree with the sizes computed from them)"
    )
    with pytest.raises(rvm.ShapeError) as caught:
        k(data, _i64(2, 6, 2))
    assert str(caught.value) == want
    bb = rvm.ir.Builder()
    with bb.function("main", [x, s]):
        bb.emit_output(bb.emit(op.dynamic_reshape(x, s, ("n", None, 2))))
    mod = bb.get()
    for kernels in ("numpy", "jit"):
        for mode in rvm.runtime.executable.EXEC_MODES:
            vm = rvm.VirtualMachine(rvm.compile(mod, kernels=kernels), exec_mode=mode)
            with pytest.raises(rvm.ShapeError, match="failed: ShapeError: ") as caught:
                vm["main"](data, _i64(2, 6, 2))
            assert want in str(caught.value), (kernels, mode)
    assert (
        filled("{} and {}{{}} ({wrong})", (1, 2, 0, 3, 3, 1, 4, 5))
        == "1 and 2{} (axis 1 is 4, expected 5)"
    )
    for cls in (KernelShapeError, KernelValueError):
        err = pickle.loads(pickle.dumps(cls("sizes {} and {}", 4, 9)))
        assert type(err) is cls and str(err) == "sizes 4 and 9"
    assert kind_of(KernelValueError("x")) == "ValueError"
    assert kind_of(KernelShapeError("x")) == "ShapeError"


def test_gather_nd() -> None:
    x, ind = var("x", (3, 4, 2)), var("i", (5, 2), "int64")
    k = Jit(prim([x, ind], op.gather_nd(x, ind)))
    idx = np.array([[0, 1], [2, 3], [-1, 0], [1, -4], [0, 0]], np.int64)
    check(k.func, np.arange(24, dtype=np.float32).reshape(3, 4, 2), idx, kernel=k)


def test_a_reshape_to_a_name_no_input_has_reads_it_from_the_output() -> None:
    """A dps kernel reshaping (n, 4) to (n, m, 2), where only the output (the VM allocated it
    to the bound sizes) gives m: both backends read m from it, so an empty input (n = 0,
    where m cannot be inferred as a -1) still gives the output's shape; a "return" kernel,
    with nowhere to read m from, fails with numpy's error for the undetermined -1."""
    from jit_helpers import numpy_ref

    from rvm.jit.numpy_kernel import numpy_kernel

    x = var("x", ("n", 4))
    f = prim([x], op.reshape(x, ("n", "m", 2)))
    jit = Jit(f, style="dps")
    rec = numpy_kernel("ref_dps", f, "dps")
    namespace = {"np": np, "ref": numpy_ref}
    exec(compile(rec.source, "<ref>", "exec"), namespace)
    for n in (3, 0):
        data = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
        for kernel in (jit, namespace["ref_dps"]):
            out = np.full((n, 2, 2), np.nan, np.float32)
            kernel(data, out)
            np.testing.assert_array_equal(out, data.reshape(n, 2, 2))
    empty = np.zeros((0, 4), np.float32)
    with pytest.raises(ValueError, match=r"cannot infer 'm' \(no input or output gives it\)"):
        Jit(f, style="return")(empty)
