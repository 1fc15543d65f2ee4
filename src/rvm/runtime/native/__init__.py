"""Old import paths of the kernel library and of native loading, kept as aliases.

Until the runtime's layout split, the kernel library lived here (``rvm.runtime.native.blas``,
``.mathlib``, ``.entry``...) and so did loading and caching (``.loader``, ``.cache``...). Jit
kernels saved in executables import the library by those paths, so each old module name is
a shim: importing it imports the module's new home (`rvm.kernels`, `rvm.runtime.loading`)
and binds the old name to that very module object in ``sys.modules``. Old and new names are
one module (one Numba dispatcher per function, one cache, one thread pool), and new code
never imports from here.
"""
