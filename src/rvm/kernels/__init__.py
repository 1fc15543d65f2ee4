"""The kernel library that native code calls: the bottom floor of rvm's native side.

- `mathlib`: vectorizable float32 ``exp``/``tanh``/``sigmoid``/``erf`` that generated kernels
  import.
- `cblas`: the raw binding to NumPy's CBLAS; `blas`: GEMM and the matmul anchor kernels
  call, large products split over the pool; `sgemm`: rvm's own float32 micro-kernel GEMM;
  `segments`: the convolutions' GEMM on gathered rows and segmented columns.
- `attention`: the attention kernels' scores, softmax and product with V, per (batch, head)
  and band of query rows on the pool.
- `conv`, `pool`, `lrn`: float convolution, pooling and lrn, compiled once and called by
  every kernel through C entry points (`entry`); `planes`: the padded window planes they
  share; `parfor`: their large loops split into chunks on the pool.
- `reference`: the NumPy reference kernels of every op (a package, one module per category
  of ops), which numpy kernels import by name and the interpreter runs.
- `workpool`: rvm's thread pool (the caller claims pieces of a job beside its helpers);
  `threads`: how many threads it has (`rvm.set_num_threads`).

Jit kernels (`rvm.jit`) and native exec-mode functions import these by name. The package
imports numpy, Numba and llvmlite only, never the VM (`rvm.runtime`) or the compiler; Numba
and llvmlite load with the first module that needs them, not with this package. The old
paths (``rvm.runtime.native.<module>``) stay as aliases for executables saved before.
"""

DTYPES = ("float32", "float64")
"""The dtypes the library's entry points and parallel loops take (`entry`, `parfor`)."""
