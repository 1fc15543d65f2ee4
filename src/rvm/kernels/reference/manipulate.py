"""Layout: reshape, transpose, concat, split, stack, broadcast, pad, tile, trilu.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np


def reshape(x, shape):
    return np.reshape(x, shape)


def transpose(x, axes=None):
    return np.transpose(x, axes)


def expand_dims(x, axis):
    return np.expand_dims(x, axis)


def squeeze(x, axis=None):
    return np.squeeze(x, axis)


def flatten(x):
    """(N, d1, d2, ...) to (N, d1 * d2 * ...), as TVM's batch_flatten and ONNX Flatten(axis=1)."""
    rest = 1
    for d in x.shape[1:]:
        rest *= d
    return np.reshape(x, (x.shape[0], rest))


def concat(tensors, axis=0):
    return np.concatenate(tensors, axis=axis)


def split(x, indices_or_sections, axis=0):
    """A tuple of pieces: ``sections`` equal pieces, or cut before each of ``indices``."""
    return tuple(np.split(x, indices_or_sections, axis=axis))


def stack(tensors, axis=0):
    return np.stack(tensors, axis=axis)


def broadcast_to(x, shape):
    return np.array(np.broadcast_to(x, shape))


def pad(x, pad_width, pad_value=0.0, mode="constant"):
    """``x`` padded by a (before, after) pair per axis: with ``pad_value`` ("constant"), the
    edge value ("edge"), the mirror image without the edge ("reflect") or the other end
    ("wrap"), NumPy's modes of those names."""
    if mode == "constant":
        return np.pad(x, pad_width, constant_values=np.asarray(pad_value).astype(x.dtype))
    return np.pad(x, pad_width, mode=mode)


def tile(x, reps):
    return np.tile(x, reps)


def trilu(x, k=0, upper=True):
    """The upper (``np.triu``) or lower (``np.tril``) triangle of the last two axes, from the
    ``k``-th diagonal; the rest is zero."""
    return np.triu(x, k) if upper else np.tril(x, k)


__all__ = [
    "reshape",
    "transpose",
    "expand_dims",
    "squeeze",
    "flatten",
    "concat",
    "split",
    "stack",
    "broadcast_to",
    "pad",
    "tile",
    "trilu",
]
