"""rvm's dtypes: the narrow ones (ml_dtypes'), their lazy import, and the promotion rule."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

from rvm import op
from rvm.dtypes import NARROW_DTYPES, NARROW_FLOAT_DTYPES, dtype_kind, numpy_dtype
from rvm.errors import IRError
from rvm.ir import Var, infer_type, tensor
from rvm.ir.types import (
    DTYPES,
    FLOAT_DTYPES,
    INT_DTYPES,
    STORAGE_DTYPES,
    check_dtype,
    promote_dtypes,
)


def _run(code: str) -> str:
    """``code`` in a fresh interpreter (nothing imported yet); its stdout."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


@pytest.mark.parametrize("name", sorted(NARROW_DTYPES))
def test_narrow_dtypes_resolve_to_ml_dtypes(name):
    assert name in DTYPES
    assert numpy_dtype(name) == np.dtype(getattr(ml_dtypes, name))
    assert check_dtype(name) == name
    assert check_dtype(getattr(ml_dtypes, name)) == name  # the scalar type
    assert check_dtype(np.dtype(getattr(ml_dtypes, name))) == name
    assert tensor((2,), name).dtype == name


def test_kinds_and_classes():
    assert {dtype_kind(n) for n in NARROW_FLOAT_DTYPES} == {"f"}
    assert [dtype_kind(n) for n in ("int4", "uint4", "int2", "uint2")] == ["i", "u", "i", "u"]
    assert dtype_kind("float32") == "f" and dtype_kind("bool") == "b"
    assert set(NARROW_FLOAT_DTYPES) <= FLOAT_DTYPES
    assert STORAGE_DTYPES == {"int4", "uint4", "int2", "uint2"}
    assert not STORAGE_DTYPES & INT_DTYPES


def test_unknown_dtype_is_an_ir_error():
    with pytest.raises(IRError, match="unsupported dtype 'float7'"):
        check_dtype("float7")


def test_promotion_keeps_equal_narrow_dtypes_and_refuses_mixing():
    assert promote_dtypes("bfloat16", "bfloat16") == "bfloat16"
    assert promote_dtypes("int8", "float16") == "float16"  # numpy's rule, unchanged
    assert promote_dtypes("bfloat16", None) is None
    for a, b in [("bfloat16", "float32"), ("int8", "bfloat16"), ("float8_e4m3fn", "float8_e5m2")]:
        with pytest.raises(IRError, match=f"no implicit promotion between {a} and {b}.*op.cast"):
            promote_dtypes(a, b)


def test_scalars_take_the_narrow_dtype():
    x = Var("x", tensor((3,), "bfloat16"))
    assert infer_type(op.add(x, 0.1)) == tensor((3,), "bfloat16")
    assert infer_type(op.exp(x * 2.0)) == tensor((3,), "bfloat16")
    with pytest.raises(IRError, match="bfloat16 and float32"):
        infer_type(op.add(x, Var("y", tensor((3,), "float32"))))


def test_storage_dtypes_move_and_compare_but_do_not_compute():
    q = Var("q", tensor((2, 3), "int4"))
    assert infer_type(op.transpose(op.reshape(q, (3, 2)))) == tensor((2, 3), "int4")
    assert infer_type(op.concat([q, q], axis=0)) == tensor((4, 3), "int4")
    assert infer_type(op.less(q, q)) == tensor((2, 3), "bool")
    assert infer_type(op.cast(q, "float32")) == tensor((2, 3), "float32")
    with pytest.raises(IRError, match="add: input 0 is int4, a dtype rvm only stores"):
        infer_type(op.add(q, q))
    with pytest.raises(IRError, match="sum: input 0 is int4"):
        infer_type(op.sum(q))
    u = Var("u", tensor((2, 2), "uint2"))
    assert infer_type(op.stack([u, u])) == tensor((2, 2, 2), "uint2")
    with pytest.raises(IRError, match="matmul: input 1 is uint2"):
        infer_type(op.matmul(op.cast(u, "int8"), u))


def test_ml_dtypes_is_imported_only_when_a_narrow_dtype_is_used():
    out = _run(
        """
        import sys
        import numpy as np
        import rvm

        M = rvm.script.parse(
            "@module\\nclass M:\\n    @func\\n"
            "    def main(x: T[(3,), 'float32']):\\n        return op.exp(x)\\n"
        )
        rvm.VirtualMachine(rvm.compile(M, kernels="numpy"))["main"](np.ones(3, "float32"))
        print("ml_dtypes" in sys.modules)
        rvm.ir.tensor((3,), "bfloat16")
        print("ml_dtypes" in sys.modules)
        """
    )
    assert out.split() == ["False", "True"]


def test_missing_ml_dtypes_names_the_package():
    out = _run(
        """
        import sys
        sys.modules["ml_dtypes"] = None  # as if it were not installed
        import rvm
        try:
            rvm.ir.tensor((3,), "bfloat16")
        except rvm.DTypeError as err:
            print(err)
        """
    )
    assert "bfloat16" in out and "pip install ml_dtypes" in out
