"""Native code the runtime runs: jit kernels and what they call.

- `loader`: a jit kernel record to its Numba dispatcher (imported from rvm's on-disk cache).
- `cache`: the on-disk kernel cache (the file a kernel's source lives in, keyed by a hash).
- `mathlib`: vectorizable float32 ``exp``/``tanh`` that generated kernels import.
- `blas`: NumPy's BLAS called from inside kernels (GEMM, the matmul anchor).
- `conv`, `pool`: float convolution and pooling, compiled once and called by every kernel
  through C entry points (`entry`); `planes`: the padded window planes they share.
- `threads`: how many threads the BLAS and Numba use (`rvm.set_num_threads`).

The compiler (`rvm.jit`) writes kernel source that imports these from here, so
a process that only loads and runs a saved executable never imports the compiler. Numba and
llvmlite load with the first kernel, not with this package.
"""
