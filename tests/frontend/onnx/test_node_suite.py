"""ONNX's backend node suite through ``onnx.backend.test.BackendTest`` and rvm's backend.

Every case runs with numpy kernels, integer graph inputs that rvm needs at import (axes,
shapes...) bound to the case's values (`RvmSpecializingBackend`). The cases listed in
``node_suite_expected_failures.txt`` are expected failures (pytest's strict ``xfail``): one
that starts passing fails the run, so the list only shrinks; a case failing while not listed
fails as usual, so the pass count cannot regress silently. A sample of varied cases also runs
with jit kernels. The tests are collected from the cases' names (``node_suite_cases.txt``);
ONNX generates their models and data when the first runs.

Counts per failure reason, and both files regenerated: ``python -m rvm.testing.onnx_backend
--report [--write]``.
"""

from __future__ import annotations

import functools
import re
import unittest

import pytest

pytest.importorskip("onnx")

import onnx.backend.test  # noqa: E402

from rvm.testing.onnx_backend import (  # noqa: E402
    CASE_NAMES,
    RvmJitBackend,
    RvmSpecializingBackend,
    node_cases,
    read_expected_failures,
    run_case,
)

EXPECTED_FAILURES = read_expected_failures()
with open(CASE_NAMES, encoding="utf-8") as _f:
    CASES = _f.read().split()


@functools.cache
def _onnx_tests() -> type[unittest.TestCase]:
    """ONNX's test class for the node suite on rvm's backend. ONNX's generators build every
    case's model and data (~8 CPU-s): at the first test that needs them, in the worker that
    runs this module (one pytest-xdist scope: every test here is a module-level function), not
    at collection in every worker."""
    backend_test = onnx.backend.test.BackendTest(RvmSpecializingBackend, __name__)
    backend_test.include(r"_cpu$")
    return backend_test.test_cases["OnnxBackendNodeModelTest"]


def _param(case: str):  # type: ignore[no-untyped-def]
    if case not in EXPECTED_FAILURES:
        return case
    return pytest.param(case, marks=pytest.mark.xfail(strict=True, reason=EXPECTED_FAILURES[case]))


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_node_case(case: str) -> None:
    """ONNX's own test of the case (its ``test_<case>_cpu``), on rvm's backend."""
    tests = _onnx_tests()
    name = f"{case}_cpu"
    getattr(tests, name)(tests(name))


JIT_SAMPLE = (
    "test_abs",
    "test_add_bcast",
    "test_argmax_keepdims_example",
    "test_averagepool_2d_pads",
    "test_batchnorm_example",
    "test_clip",
    "test_concat_3d_axis_1",
    "test_conv_with_strides_padding",
    "test_sum_two_inputs",
    "test_div_bcast",
    "test_flatten_axis2",
    "test_gather_1",
    "test_if",
    "test_scan9_sum",
    "test_range_float_type_positive_delta_expanded",
    "test_reduce_sum_keepdims_example",
    "test_gemm_all_attributes",
    "test_globalaveragepool",
    "test_leakyrelu",
    "test_matmul_3d",
    "test_maxpool_2d_strides",
    "test_pow",
    "test_reduce_max_default_axes_keepdim_example",
    "test_relu",
    "test_sigmoid",
    "test_softmax_axis_1",
    "test_split_equal_parts_1d_opset18",
    "test_tanh",
    "test_transpose_all_permutations_3",
    "test_where_example",
    "test_bitshift_right_int8_negative_input",
    "test_bitwise_xor_ui8_bcast_4v3d",
    "test_gathernd_example_int32_batch_dim1",
    "test_scatter_elements_with_reduction_max",
    "test_scatternd_multiply",
    "test_top_k_smallest",
    "test_nonzero_example",
    "test_unique_sorted_with_axis",
    "test_compress_1",
    "test_tril_neg",
    "test_resize_downsample_scales_cubic_antialias",
    "test_depthtospace_crd_mode_example",
    "test_onehot_with_axis",
    "test_convtranspose_group_2",
    "test_col2im_pads",
    "test_maxpool_3d_dilations",
    "test_averagepool_1d_default",
    "test_maxpool_with_argmax_2d_precomputed_strides",
    "test_lppool_2d_same_upper",
    "test_maxunpool_export_without_output_shape",
    "test_reflect_pad",
    "test_constant_pad_axes",
    "test_cast_FLOAT_to_FLOAT8E4M3FN",
    "test_castlike_BFLOAT16_to_FLOAT",
    "test_celu_bfloat16_expanded",
    "test_quantizelinear_int4",
    "test_quantizelinear_blocked_asymmetric",
    "test_dequantizelinear_e4m3fn",
    "test_qlinearmatmul_3D_uint8_float16",
    "test_bitcast_float32_to_int32",
)


def test_expected_failures_name_real_cases() -> None:
    names = {c.name for c in node_cases()}
    stale = sorted(set(EXPECTED_FAILURES) - names)
    assert not stale, f"expected failures that are not node-suite cases: {stale}"


def test_the_tests_are_every_case_of_onnx() -> None:
    """node_suite_cases.txt lists ONNX's cases (``python -m rvm.testing.onnx_backend --write``
    rewrites it), and each test runs ONNX's own test of its case."""
    assert CASES == sorted(c.name for c in node_cases())
    generated = {n for n in vars(_onnx_tests()) if n.startswith("test_") and n.endswith("_cpu")}
    assert generated == {f"{case}_cpu" for case in CASES}


@pytest.mark.parametrize("name", JIT_SAMPLE)
def test_jit_sample(name: str) -> None:
    assert name not in EXPECTED_FAILURES
    (case,) = node_cases(f"^{re.escape(name)}$")
    outcome = run_case(case, RvmJitBackend)
    assert outcome.passed, outcome.reason
