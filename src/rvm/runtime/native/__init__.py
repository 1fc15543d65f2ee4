"""Native code the runtime runs: jit kernels and what they call.

- `loader`: a jit kernel record to its Numba dispatcher (imported from rvm's on-disk cache).
- `cache`: the on-disk kernel cache (the file a kernel's source lives in, keyed by a hash).
- `mathlib`: vectorizable float32 ``exp``/``tanh`` that generated kernels import.
- `cblas`: the raw binding to NumPy's CBLAS; `blas`: GEMM and the matmul anchor kernels
  call, large products split over the pool.
- `conv`, `pool`, `lrn`: float convolution, pooling and lrn, compiled once and called by
  every kernel through C entry points (`entry`); `planes`: the padded window planes they
  share; `parfor`: their large loops split into chunks on the pool.
- `workpool`: rvm's thread pool (the caller claims pieces of a job beside its helpers);
  `threads`: how many threads it has (`rvm.set_num_threads`).

The compiler (`rvm.jit`) writes kernel source that imports these from here, so
a process that only loads and runs a saved executable never imports the compiler. Numba and
llvmlite load with the first kernel, not with this package.
"""
