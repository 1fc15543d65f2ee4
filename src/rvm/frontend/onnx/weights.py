"""Weights read in place: a model file's initializer data as views of the file's bytes.

Parsing a model with protobuf copies every weight into the message, and reading a weight out
(``tensor.raw_data``) copies it again: a file of W bytes of weights then costs 3 W of memory
at its peak (the bytes, the message, the arrays). `split_weights` walks the protobuf wire
format of ``ModelProto.graph.initializer[*].raw_data`` instead and returns the model bytes
without those payloads, to parse, and where each payload lies in the file bytes; `weight_views`
makes each one a read-only NumPy view of them. The weights are then held once, in the bytes
read from the file, which the arrays keep alive.

Wire format (https://protobuf.dev/programming-guides/encoding/): a message is a sequence of
``key = field_number << 3 | wire_type`` varints, each followed by its value: a varint (type
0), 8 bytes (type 1), a varint length and that many bytes (type 2), or 4 bytes (type 5).
Anything else (groups, or bytes that do not parse) makes `split_weights` return None, and the
caller parses the whole file as usual, which reports the problem.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

_MODEL_GRAPH = 7  # ModelProto.graph
_GRAPH_INITIALIZER = 5  # GraphProto.initializer
_TENSOR_RAW_DATA = 9  # TensorProto.raw_data
_LENGTH_DELIMITED = 2


class _Malformed(Exception):
    """The bytes are not the wire format this module reads."""


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
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


def _fields(data: memoryview, start: int, end: int):
    """``(field number, wire type, field start, value start, value end)`` of each field."""
    pos = start
    while pos < end:
        key, value_start = _varint(data, pos)
        wire_type = key & 7
        if wire_type == 0:
            value_end = _varint(data, value_start)[1]
        elif wire_type == 1:
            value_end = value_start + 8
        elif wire_type == _LENGTH_DELIMITED:
            length, value_start = _varint(data, value_start)
            value_end = value_start + length
        elif wire_type == 5:
            value_end = value_start + 4
        else:
            raise _Malformed
        if value_end > end:
            raise _Malformed
        yield key >> 3, wire_type, pos, value_start, value_end
        pos = value_end


def _rewrite(
    data: memoryview, start: int, end: int, path: tuple[int, ...], cuts: list[Any]
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
            inner_cuts: list[Any] = []
            inner = _rewrite(data, value_start, value_end, path[1:], inner_cuts)
            if len(path) == 2:
                cuts.append(inner_cuts[-1] if inner_cuts else None)
            else:
                cuts += inner_cuts
            length = sum(len(p) for p in inner)
            pieces += [_encode_varint(number << 3 | _LENGTH_DELIMITED), _encode_varint(length)]
            pieces += inner
    return pieces


_PATH = (_MODEL_GRAPH, _GRAPH_INITIALIZER, _TENSOR_RAW_DATA)


def split_weights(data: bytes) -> tuple[bytes, list[tuple[int, int] | None]] | None:
    """The model bytes without the graph initializers' ``raw_data``, and per initializer where
    its ``raw_data`` lies in ``data`` (``(start, end)``, None for one without); None if the
    bytes do not parse."""
    if sys.byteorder != "little":  # raw_data is little-endian: views need no byte swap
        return None
    cuts: list[Any] = []
    view = memoryview(data)
    try:
        pieces = _rewrite(view, 0, len(view), _PATH, cuts)
    except _Malformed:
        return None
    return b"".join(pieces), cuts


def weight_views(
    data: bytes, cuts: list[tuple[int, int] | None], initializers: Any
) -> dict[str, np.ndarray] | None:
    """Each initializer whose ``raw_data`` was cut out, as a read-only view of ``data``; None
    when a cut does not fit its initializer (the regular reader then reports the problem)."""
    from onnx import helper

    if len(cuts) != len(initializers):
        return None
    out: dict[str, np.ndarray] = {}
    for tensor, cut in zip(initializers, cuts):
        if cut is None:
            continue
        start, end = cut
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
        except Exception:  # an element type NumPy lacks
            return None
        count = int(np.prod(tensor.dims, dtype=np.int64))
        if dtype.kind not in "biuf" or count * dtype.itemsize != end - start:
            return None
        if not _holds_no_data(tensor):  # raw_data and another data field: invalid
            return None
        out[tensor.name] = np.frombuffer(data, dtype, count, start).reshape(tuple(tensor.dims))
    return out


def _holds_no_data(tensor: Any) -> bool:
    fields = {f.name for f, _ in tensor.ListFields()}
    return not fields & _DATA_FIELDS


_DATA_FIELDS = {
    "raw_data",
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
    "external_data",
}
