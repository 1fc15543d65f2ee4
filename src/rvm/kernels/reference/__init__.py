"""NumPy reference implementations of every rvm op: the executable spec.

Each function is named after its op and called as ``f(*input_arrays, **attrs)`` with the
call's attributes (tuples, ints, floats, dtype names). Shapes in attributes arrive as concrete
ints: the caller resolves symbolic names first. ``concat`` and ``stack`` receive their tensors
as one sequence; ``split`` returns a tuple. Results are arrays (never NumPy scalars) of the
dtype the op's type rule promises: float32 in, float32 out.

One module per category of ops (`elemwise`, `reduce`, `nn`, `conv`, `pool`, `manipulate`,
`index`, `image`, `search`, `transformer`, `checks`, `create`, `dynamic`, `bf16`, `packed`,
`quantized`; `common` holds what they share), and this package holds them all under the op
names. Numpy kernels (`rvm.jit.numpy_kernel`) import it by name, as ``ref``, the way jit
kernels import the kernel library: a saved executable names this package and carries none of
its source. The modules import only ``math``, ``numpy`` (and ``ml_dtypes``, on first use of a
narrow dtype such as bfloat16) and each other. Function names shadow builtins (``sum``,
``max``, ``abs``...) so that every op maps to the function of its name; the modules never use
those builtins.
"""

from rvm.kernels.reference.bf16 import *  # noqa: F403 (its ops, listed in its __all__)
from rvm.kernels.reference.checks import *  # noqa: F403
from rvm.kernels.reference.common import _contiguous, _store_exact  # noqa: F401 (kernels call them)
from rvm.kernels.reference.conv import *  # noqa: F403
from rvm.kernels.reference.create import *  # noqa: F403
from rvm.kernels.reference.dynamic import *  # noqa: F403
from rvm.kernels.reference.elemwise import *  # noqa: F403
from rvm.kernels.reference.image import *  # noqa: F403
from rvm.kernels.reference.index import *  # noqa: F403
from rvm.kernels.reference.manipulate import *  # noqa: F403
from rvm.kernels.reference.nn import *  # noqa: F403
from rvm.kernels.reference.packed import *  # noqa: F403
from rvm.kernels.reference.pool import *  # noqa: F403
from rvm.kernels.reference.quantized import *  # noqa: F403
from rvm.kernels.reference.reduce import *  # noqa: F403
from rvm.kernels.reference.search import *  # noqa: F403
from rvm.kernels.reference.transformer import *  # noqa: F403
