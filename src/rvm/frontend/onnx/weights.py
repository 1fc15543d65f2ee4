"""Tensor data as NumPy arrays; a model file's weights read in place.

Parsing a model with protobuf copies every weight into the message, and reading a weight out
(``tensor.raw_data``) copies it again: a file of W bytes of weights then costs 3 W of memory
at its peak (the bytes, the message, the arrays). `split_weights` walks the protobuf wire
format of ``ModelProto.graph.initializer[*].raw_data`` instead and returns the model bytes
without those payloads, to parse, and where each payload lies in the file bytes; `weight_views`
makes each one a read-only NumPy view of them. The weights are then held once, in the bytes
read from the file, which the arrays keep alive. `external_weights` reads the initializers a
model keeps in files beside it (``onnx.save(..., save_as_external_data=True)``) straight into
arrays of their own. `tensor_to_array` reads any other tensor (a copy).

Wire format (https://protobuf.dev/programming-guides/encoding/): a message is a sequence of
``key = field_number << 3 | wire_type`` varints, each followed by its value: a varint (type
0), 8 bytes (type 1), a varint length and that many bytes (type 2), or 4 bytes (type 5).
Every position is checked against the end of its enclosing message before it is read.
Anything else (groups, or bytes that do not parse) makes `split_weights` return None, and the
caller parses the whole file as usual, which reports the problem.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from rvm.dtypes import numpy_dtype
from rvm.errors import OnnxImportError
from rvm.ir.types import DTYPES

_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_INITIALIZER = 5  # GraphProto.initializer
_TENSOR_RAW_DATA = 9  # TensorProto.raw_data
_LENGTH_DELIMITED = 2
_PATH = (_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA)

# The TensorProto fields that hold data: one tensor uses at most one of them.
_DATA_FIELDS = (
    "raw_data",
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
    "external_data",
)

Cut = tuple[int, int]  # where a payload lies: data[start:end]

# Element types that ONNX stores packed, several to a byte (bits per element), where NumPy
# (ml_dtypes) holds one per byte: their data is unpacked by onnx.numpy_helper, never viewed.
_PACKED_BITS = {
    "int4": 4,
    "uint4": 4,
    "float4_e2m1fn": 4,
    "int2": 2,
    "uint2": 2,
    "float6_e2m3fn": 6,
    "float6_e3m2fn": 6,
}


class _Malformed(Exception):
    """The bytes are not the wire format this module reads (never leaves this module)."""


def np_dtype(elem_type: int, what: str) -> str:
    """The rvm dtype of an ONNX element type; OnnxImportError for one rvm lacks."""
    import onnx

    try:
        name = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:
        name = None
    if name not in DTYPES:
        try:
            type_name = onnx.TensorProto.DataType.Name(elem_type) if elem_type else "undefined"
        except ValueError:  # a number no ONNX type has
            type_name = str(elem_type)
        raise OnnxImportError(
            f"{what} has ONNX element type {type_name}, which rvm does not support "
            f"(supported: {', '.join(DTYPES)})"
        )
    return name


def tensor_to_array(tensor: Any, what: str) -> np.ndarray:
    """An ONNX TensorProto whose data the message holds, as a NumPy array of an rvm dtype."""
    from onnx import external_data_helper, numpy_helper

    dtype = _layout(tensor, what)[0]
    if external_data_helper.uses_external_data(tensor):
        location = {e.key: e.value for e in tensor.external_data}.get("location", "?")
        raise OnnxImportError(
            f"{what} keeps its data in the external file {location!r}: pass rvm.from_onnx the "
            "model's path (it reads the file beside it), or load the data first "
            "(onnx.load(path) does)"
        )
    try:
        arr = numpy_helper.to_array(tensor)
    except Exception as err:
        raise OnnxImportError(f"{what}: cannot read the tensor data: {err}") from None
    return np.asarray(arr, dtype=dtype)


def split_weights(data: bytes) -> tuple[bytes, list[Cut | None]] | None:
    """The model bytes without the graph initializers' ``raw_data``, and per initializer where
    its ``raw_data`` lies in ``data`` (None for one without); None if the bytes do not parse."""
    if sys.byteorder != "little":  # raw_data is little-endian: views need no byte swap
        return None
    cuts: list[Cut | None] = []
    view = memoryview(data)
    try:
        pieces = _rewrite(view, 0, len(view), _PATH, cuts)
    except _Malformed:
        return None
    return b"".join(pieces), cuts


def weight_views(
    data: bytes, cuts: list[Cut | None], initializers: Any
) -> dict[str, np.ndarray] | None:
    """Each initializer whose ``raw_data`` was cut out, as a read-only view of ``data``.

    Raises OnnxImportError when a payload does not fit its initializer (size, element type,
    a second data field); None when the cuts do not line up with ``initializers``.
    """
    if len(cuts) != len(initializers):
        return None
    out: dict[str, np.ndarray] = {}
    for tensor, cut in zip(initializers, cuts):
        if cut is None:
            continue
        dtype, dims, count = _layout(tensor, f"initializer {tensor.name!r}", "raw_data")
        _check_size(tensor, dtype, count, cut[1] - cut[0], "its raw_data")
        out[tensor.name] = _from_bytes(data, cut[0], dtype, dims)
    return out


def external_weights(initializers: Any, base_dir: str) -> dict[str, np.ndarray]:
    """Each initializer stored in an external file under ``base_dir``, read into a read-only
    array of its own (the file is read once, nothing is copied); afterwards the messages
    describe no data, as after `weight_views`."""
    from onnx import TensorProto, external_data_helper

    out: dict[str, np.ndarray] = {}
    for tensor in initializers:
        if not external_data_helper.uses_external_data(tensor):
            continue
        dtype, dims, count = _layout(tensor, f"initializer {tensor.name!r}")
        try:
            info = external_data_helper.ExternalDataInfo(tensor)
        except ValueError as err:  # a negative offset or length
            raise OnnxImportError(f"initializer {tensor.name!r}: {err}") from None
        arr = _read_external(tensor, base_dir, info, dtype, count).reshape(dims)
        arr.flags.writeable = False
        out[tensor.name] = arr
        tensor.data_location = TensorProto.DEFAULT
        del tensor.external_data[:]
    return out


def _read_external(
    tensor: Any, base_dir: str, info: Any, dtype: np.dtype, count: int
) -> np.ndarray:
    """The ``count`` elements that ``info`` (location, offset, length) places in a file."""
    what = f"initializer {tensor.name!r}"
    base = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(base, info.location))
    if os.path.isabs(info.location) or os.path.commonpath([base, path]) != base:
        raise OnnxImportError(
            f"{what} keeps its data in {info.location!r}, outside the model's directory "
            f"{base_dir!r}: rvm reads external data only from files beside the model"
        )
    if not os.path.isfile(path):
        raise OnnxImportError(f"{what}: its external data file {path!r} does not exist")
    if os.stat(path).st_nlink > 1:  # a link could expose any file of the filesystem
        raise OnnxImportError(
            f"{what}: its external data file {path!r} is a hard link (it has "
            f"{os.stat(path).st_nlink} names); rvm, like onnx.load, refuses hard-linked data files"
        )
    offset = info.offset or 0
    if info.length is not None:
        _check_size(tensor, dtype, count, info.length, "its external data length")
    available = os.path.getsize(path) - offset
    nbytes = _nbytes(dtype, count)
    if available < nbytes:
        raise OnnxImportError(
            f"{what}: {nbytes} bytes are expected at offset {offset} of "
            f"{path!r}, which holds {max(available, 0)} from there"
        )
    with open(path, "rb") as f:
        f.seek(offset)
        if dtype.name in _PACKED_BITS:
            return _from_bytes(f.read(nbytes), 0, dtype, (count,))
        return np.fromfile(f, dtype, count)


def _layout(
    tensor: Any, what: str, cut_from: str | None = None
) -> tuple[np.dtype, tuple[int, ...], int]:
    """The dtype, dims and element count of a tensor, checked: an rvm element type, no
    negative dimension, at most one data field (counting ``cut_from``, the field its data
    was cut from)."""
    dtype = numpy_dtype(np_dtype(tensor.data_type, what))
    dims = tuple(tensor.dims)
    if any(d < 0 for d in dims):
        raise OnnxImportError(f"{what} has a negative dimension: dims {list(dims)}")
    fields = [f.name for f, _ in tensor.ListFields() if f.name in _DATA_FIELDS]
    if cut_from is not None:
        fields.insert(0, cut_from)
    if len(fields) > 1:
        raise OnnxImportError(f"{what} holds its data twice: in {fields[0]} and in {fields[1]}")
    return dtype, dims, math.prod(dims)  # Python ints: no overflow


def _check_size(tensor: Any, dtype: np.dtype, count: int, nbytes: int, where: str) -> None:
    if _nbytes(dtype, count) != nbytes:
        raise OnnxImportError(
            f"initializer {tensor.name!r}: a {dtype.name} tensor of dims {list(tensor.dims)} "
            f"takes {_nbytes(dtype, count)} bytes, but {where} holds {nbytes}"
        )


def _nbytes(dtype: np.dtype, count: int) -> int:
    """The bytes ``count`` elements take in ONNX's serialization (packed types packed)."""
    bits = _PACKED_BITS.get(dtype.name)
    return count * dtype.itemsize if bits is None else -(-count * bits // 8)


def _from_bytes(data: Any, offset: int, dtype: np.dtype, dims: tuple[int, ...]) -> np.ndarray:
    """The tensor of ``dtype`` and ``dims`` serialized at ``offset`` of ``data``: a view of
    the bytes, or for a packed type (int4...) its elements unpacked into an array of its own."""
    count = math.prod(dims)
    if dtype.name not in _PACKED_BITS:
        return np.frombuffer(data, dtype, count, offset).reshape(dims)
    from onnx import TensorProto, helper, numpy_helper

    tensor = TensorProto(data_type=helper.np_dtype_to_tensor_dtype(dtype), dims=dims)
    tensor.raw_data = bytes(data[offset : offset + _nbytes(dtype, count)])
    arr = numpy_helper.to_array(tensor)
    arr.flags.writeable = False
    return arr


# -- the wire-format walker --------------------------------------------------------------------
def _varint(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` (which must end before ``end``) and the position after it."""
    value, shift = 0, 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(data: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """``(field number, wire type, field start, value start, value end)`` of each field of the
    message in ``data[start:end]``; every one ends within it."""
    pos = start
    while pos < end:
        key, value_start = _varint(data, pos, end)
        wire_type = key & 7
        if wire_type == 0:
            value_end = _varint(data, value_start, end)[1]
        elif wire_type == 1:
            value_end = value_start + 8
        elif wire_type == _LENGTH_DELIMITED:
            length, value_start = _varint(data, value_start, end)
            value_end = value_start + length
        elif wire_type == 5:
            value_end = value_start + 4
        else:  # groups (3, 4) and the undefined 6, 7
            raise _Malformed
        if value_end > end:
            raise _Malformed
        yield key >> 3, wire_type, pos, value_start, value_end
        pos = value_end


def _rewrite(
    data: memoryview, start: int, end: int, path: tuple[int, ...], cuts: list[Cut | None]
) -> list[Any]:
    """The pieces of the message in ``data[start:end]`` without the fields at ``path``
    (field numbers, outermost first). ``cuts`` gets, per message one level above the cut
    field, the (start, end) of its last cut value (protobuf keeps the last), or None."""
    pieces: list[Any] = []
    for number, wire_type, field_start, value_start, value_end in _fields(data, start, end):
        if number != path[0] or wire_type != _LENGTH_DELIMITED:
            pieces.append(data[field_start:value_end])
        elif len(path) == 1:
            cuts.append((value_start, value_end))
        else:
            inner_cuts: list[Cut | None] = []
            inner = _rewrite(data, value_start, value_end, path[1:], inner_cuts)
            if len(path) == 2:
                cuts.append(inner_cuts[-1] if inner_cuts else None)
            else:
                cuts += inner_cuts
            length = sum(len(p) for p in inner)
            pieces += [_encode_varint(number << 3 | _LENGTH_DELIMITED), _encode_varint(length)]
            pieces += inner
    return pieces
