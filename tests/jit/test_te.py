"""The tensor-expression layer (`rvm.jit.te`): loop nests, hoisting, memoised loads, checks.

Kernels are assembled from an `Emitter`'s root body and run as plain Python on numpy arrays,
so each test checks what the generated code computes and where its statements live, not how
its text reads.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import rvm
from rvm import script
from rvm.jit import cond, split, te


def _at_least_zero(value: int) -> int:
    """The intrinsic's contract, checked: an index it marks is never negative."""
    assert value >= 0, value
    return value


def _kernel(em: te.Emitter, params: str) -> Any:
    """The function `k(params)` whose body is the emitter's root."""
    source = f"def k({params}):\n" + "\n".join(em.root.render(1) or ["    pass"]) + "\n"
    ns: dict[str, Any] = {"np": np, te.AT_LEAST_ZERO[2]: _at_least_zero}
    exec(compile(source, "<te test>", "exec"), ns)
    return ns["k"]


def _array(name: str, dims: tuple[str, ...]) -> te.Tensor:
    return te.Tensor(dims, "float32", array=name)


def _add(em: te.Emitter, a: te.Tensor, b: te.Tensor) -> te.Tensor:
    def load(body: te.Body, index: Any) -> te.Scalar:
        x, y = em.load(a, body, index), em.load(b, body, index)
        return te.Scalar(f"{x.code} + {y.code}", te.deps_of(x, y), "float32")

    return te.Tensor(a.dims, "float32", load)


def _store(em: te.Emitter, t: te.Tensor, out: str) -> None:
    def emit(body: te.Body, index: list[te.Scalar]) -> None:
        value = em.load(t, body, index)
        em.stmt(body, f"{em.ref(out, index)} = {value.code}", te.deps_of(*index))

    em.loop_nest(em.root, t.dims, emit)


def test_loop_nest_computes_an_elementwise_sum():
    em = te.Emitter("add")
    _store(em, _add(em, _array("a", ("n", "m")), _array("b", ("n", "m"))), "out")
    k = _kernel(em, "a, b, out, n, m")
    a, b = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    out = np.zeros((2, 3))
    k(a, b, out, 2, 3)
    np.testing.assert_array_equal(out, a + b)


def test_unit_dims_get_no_loop_and_index_zero():
    em = te.Emitter("copy")
    _store(em, _array("a", ("1", "m")), "out")
    k = _kernel(em, "a, out, m")
    out = np.zeros((1, 4))
    k(np.arange(4.0).reshape(1, 4), out, 4)
    np.testing.assert_array_equal(out, [[0, 1, 2, 3]])
    assert sum(line.lstrip().startswith("for ") for line in em.root.lines) == 1


def test_a_load_is_hoisted_to_the_loop_it_depends_on_and_computed_once():
    """out[i, j] = rowsum[i] * 2 + rowsum[i]: the row's value lives in the outer loop and is
    loaded once per row however often the inner body asks for it."""
    em = te.Emitter("rows")
    row = _array("r", ("n",))
    inner_bodies: list[te.Body] = []

    def emit(body: te.Body, index: list[te.Scalar]) -> None:
        inner_bodies.append(body)
        first = em.load(row, body, index[:1])
        again = em.load(row, body, index[:1])
        assert again is first  # memoised
        em.stmt(
            body, f"out[{index[0].code}, {index[1].code}] = {first.code} * 3", te.deps_of(*index)
        )

    em.loop_nest(em.root, ("n", "m"), emit)
    (inner,) = inner_bodies
    outer = inner.parent
    assert outer is not None and outer.var is not None
    # the load depends on the outer variable only: it was bound there, not in the inner body
    assert any(line.endswith(f"r[{outer.var}]") for line in outer.lines)
    assert not any(f"r[{outer.var}]" in line for line in inner.lines)
    k = _kernel(em, "r, out, n, m")
    out = np.zeros((2, 3))
    k(np.array([1.0, 2.0]), out, 2, 3)
    np.testing.assert_array_equal(out, [[3, 3, 3], [6, 6, 6]])


def test_check_raises_at_run_time_and_drops_conditions_that_never_hold():
    em = te.Emitter("checked")
    em.check(cond.gt(1, 2), "never")
    em.check(cond.ne("n", "n"), "never either")
    em.check(cond.ne(cond.mul("3", 2), "6"), "never: folded")
    em.check(cond.any_of(cond.eq(4, 0), cond.ne(cond.mod("n", 4), 0)), "n divides by 4")
    em.check(cond.ne("n", 4), "n must be 4")
    em.check(cond.ne("n", 4), "n must be 4")  # the same check twice is one
    k = _kernel(em, "n")
    k(4)
    with pytest.raises(ValueError, match="n divides by 4"):
        k(3)
    with pytest.raises(ValueError, match="n must be 4"):
        k(8)
    assert sum(line.startswith("if ") for line in em.root.lines) == 2


def test_conditions_decide_at_lowering_time_only_on_known_values():
    assert cond.lt(-1, 0).known() is True
    assert cond.ne("d0", 3).known() is None
    assert cond.all_of(cond.ne("d", 1), cond.ne(1, 1)).known() is False
    assert cond.any_of(cond.eq("d", 0), cond.eq(2, 2)).known() is True
    both = cond.all_of(cond.ne("d", 1), cond.ne("d", "t"))
    assert both.known() is None
    assert eval(both.source(), {}, {"d": 2, "t": 3})  # noqa: S307 - our own generated source
    assert not eval(both.source(), {}, {"d": 1, "t": 3})  # noqa: S307
    assert cond.mod("a + b", "c").code == "(a + b) % c"


def test_dim_binds_an_expression_once_and_passes_literals_and_names():
    em = te.Emitter("dims")
    assert em.dim("8") == "8" and em.dim("n") == "n"
    first = em.dim("n * m")
    assert em.dim("n * m") == first
    em.root.lines.append(f"return {first}")
    assert _kernel(em, "n, m")(3, 5) == 15


@pytest.mark.parametrize(
    ("dims", "env", "value"),
    [(["2", "3"], {}, 6), (["2", "n", "3"], {"n": 5}, 30), (["n"], {"n": 7}, 7), ([], {}, 1)],
)
def test_product_folds_literals_and_keeps_the_value(dims, env, value):
    assert eval(te.product(dims), {}, env) == value  # noqa: S307 - our own generated source


def test_shape_tuple_and_ref_are_valid_python():
    em = te.Emitter("refs")
    assert eval(te.shape_tuple(["3"])) == (3,)  # noqa: S307
    a = np.arange(6).reshape(2, 3)
    index = [te.idx(1), te.idx(2)]
    assert eval(em.ref("a", index), {"a": a}) == 5  # noqa: S307
    assert eval(em.ref("z", []), {"z": np.array(9)}) == 9  # noqa: S307
    with pytest.raises(te.Unsupported):
        em.ref(None, index)
    assert not em.imports  # literals only: nothing to tell LLVM


def test_ref_marks_computed_indices_and_leaves_loop_variables_and_literals():
    em = te.Emitter("marks")
    i, j = te.idx("i", "i"), te.idx("j", "j")
    shifted = te.idx("(d5 + j)", j)
    mark = te.AT_LEAST_ZERO[2]
    assert em.ref("a", [i, te.idx(0)]) == "a[i, 0]" and not em.imports
    assert em.ref("a", [i, shifted]) == f"a[i, {mark}((d5 + j))]"
    assert em.imports == {te.AT_LEAST_ZERO}
    env = {"a": np.arange(12).reshape(3, 4), "i": 2, "j": 1, "d5": 2, mark: _at_least_zero}
    assert eval(em.ref("a", [i, shifted]), env) == 11  # noqa: S307


def test_the_mark_is_the_split_forms_own_import():
    assert te.AT_LEAST_ZERO in split.IMPORTS


SLICE = """
@module
class Slice:
    @func
    def f(x: T[(64, 256), "float32"]):
        return op.strided_slice(x, begin=[0, 128], end=[64, 256]) * 2.0
"""


def test_a_slice_kernel_loads_and_stores_whole_vectors():
    """A slice's column index is the slice's start plus the loop's: marked, LLVM vectorizes
    the row (unmarked, Numba's check of each index for a negative one to wrap around kept
    the loads and stores element by element)."""
    exe = rvm.compile(script.parse(SLICE), progress=False)
    (record,) = exe.kernels.values()
    assert f"{te.AT_LEAST_ZERO[2]}(" in record.source
    namespace: dict[str, Any] = {}
    source = record.source.replace("CACHE = True", "CACHE = False")
    exec(compile(source, "<slice kernel>", "exec"), namespace)  # noqa: S102 - rvm's own kernel
    kernel = namespace[record.entry]
    x = np.arange(64 * 256, dtype=np.float32).reshape(64, 256)
    out = np.empty((64, 128), np.float32)
    kernel(x, out)
    np.testing.assert_array_equal(out, x[:, 128:] * 2)
    llvm = kernel.inspect_llvm(kernel.signatures[0])
    assert re.search(r"load <\d+ x float>", llvm) and re.search(r"store <\d+ x float>", llvm)
