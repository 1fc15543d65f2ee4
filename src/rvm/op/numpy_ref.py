"""The old name of the NumPy reference kernels, kept as an alias: they live in
`rvm.kernels.reference`, one module per category of ops.

Importing this module binds ``rvm.op.numpy_ref`` to that very package object in
``sys.modules``, so ``numpy_ref.conv2d is rvm.kernels.reference.conv2d``. New code imports
`rvm.kernels.reference`. (Executables saved before the split carry their own copy of the old
module's source, as their library ``ref``; they never import this name.)
"""

import sys

from rvm.kernels import reference

sys.modules[__name__] = reference
