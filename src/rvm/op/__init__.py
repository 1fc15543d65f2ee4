"""The operator set of rvm.

``rvm.op.NAME(...)`` builds a call of the op NAME: tensor inputs are positional, static
parameters are keyword attributes stored under the same names in ``Call.attrs``, so the script
printer's ``op.NAME(arg0, attr=value)`` calls the builder back to an equal call. The `Op`
objects live in `rvm.op.ops` (``rvm.op.ops.relu``; or ``rvm.ir.get_op("relu")``); each op's
type rule is in `rvm.ir.op.infer`, its NumPy reference in `reference` (the functions of the
package `rvm.kernels.reference`). Each category module registers its ops (`rvm.op.core.define_op`)
and lists its builders in its ``__all__``, which this package exports.
"""

from __future__ import annotations

from rvm import _hooks
from rvm.ir.expr import const
from rvm.op import bf16 as _bf16
from rvm.op import bf16planes as _bf16planes
from rvm.op import checks as _checks
from rvm.op import conv as _conv
from rvm.op import create as _create
from rvm.op import dynamic as _dynamic
from rvm.op import effects as _effects
from rvm.op import einsum as _einsum
from rvm.op import elemwise as _elemwise
from rvm.op import image as _image
from rvm.op import index as _index
from rvm.op import manipulate as _manipulate
from rvm.op import nn as _nn
from rvm.op import ops
from rvm.op import packed as _packed
from rvm.op import pool as _pool
from rvm.op import quantized as _quantized
from rvm.op import reduce as _reduce
from rvm.op import search as _search
from rvm.op import transformer as _transformer
from rvm.op.bf16 import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.bf16planes import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.checks import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.conv import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.core import ExprLike, as_expr, reference
from rvm.op.create import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.dynamic import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.effects import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.einsum import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.elemwise import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.image import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.index import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.manipulate import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.nn import *  # noqa: F403
from rvm.op.packed import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.pool import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.quantized import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.reduce import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.search import *  # noqa: F403 (its builders, listed in its __all__)
from rvm.op.transformer import *  # noqa: F403 (its builders, listed in its __all__)

# The IR builds ``x + y`` on its values from this op set (see rvm._hooks).
_hooks.supply("ops", ops)

__all__ = ["ExprLike", "as_expr", "const", "ops", "reference"]
__all__ += _bf16.__all__
__all__ += _bf16planes.__all__
__all__ += _checks.__all__
__all__ += _conv.__all__
__all__ += _create.__all__
__all__ += _dynamic.__all__
__all__ += _effects.__all__
__all__ += _einsum.__all__
__all__ += _elemwise.__all__
__all__ += _image.__all__
__all__ += _index.__all__
__all__ += _manipulate.__all__
__all__ += _nn.__all__
__all__ += _packed.__all__
__all__ += _pool.__all__
__all__ += _quantized.__all__
__all__ += _reduce.__all__
__all__ += _search.__all__
__all__ += _transformer.__all__
