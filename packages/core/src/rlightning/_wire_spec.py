"""Constants, dtype tables and errors of the wire format (see :mod:`rlightning.wire`)."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

#: The first four bytes of every message.
MAGIC = b"RLWF"
#: The format version this module writes and reads.
FORMAT_VERSION = 1
#: Largest message :func:`decode` accepts unless told otherwise (1 GiB). Pass ``max_bytes``.
MAX_BYTES_DEFAULT = 1 << 30
#: Deepest nesting of containers encoded or decoded (a field's value is depth 1).
MAX_DEPTH = 64

_HEADER = struct.Struct("<4sBBHII")  # magic, version, flags, reserved, header length, crc32
_FLAG_CRC = 1
_ALIGN = 8
_MAX_NDIM = 32
#: The largest int carried has this many decimal digits (sign not counted): Python's own default
#: limit for ``int(str)`` and ``str(int)``. One bound for both sides: the decoder accepts a
#: big-int node of at most this many digits, and the encoder refuses an int of more, so every int
#: one side accepts the other does too.
_MAX_INT_DIGITS = 4300
_INT_LIMIT = 10**_MAX_INT_DIGITS  # ints carried: -_INT_LIMIT < value < _INT_LIMIT
#: Most float keys, and most tuple keys, of one dict that may share one hash value. Python's
#: hashes of floats and tuples are not randomised and can be made to collide (floats
#: ``m * 2**(61k)`` all hash alike, about 34 per value; the tuple hash can be inverted, so any
#: number of tuples), so a hostile message could make building the dict quadratic. Ints cannot
#: (at most 9 of 64 bits share a hash) and str/bytes hashes are randomised. With this bound a key
#: costs at most 16 + 9 + 1 extra comparisons: decode time stays linear in the message size for
#: every key kind. 16 leaves room for honest collisions (``hash(-1) == hash(-2)``, so the 2**4
#: tuples of four coordinates in ``{-1, -2}`` share one hash).
MAX_KEYS_PER_HASH = 16
#: Largest msgpack header (the structure, without array and tensor buffers) accepted by default.
#: Decoding the header builds Python objects, at most 100 bytes of peak RSS per header byte for
#: every kind of node (``docs/transport.md`` lists each): this bounds what a hostile message can
#: make the decoder hold (~400 MiB at this default).
MAX_HEADER_BYTES_DEFAULT = 4 << 20
_MAX_EMPTY_PRODUCT = 1 << 40  # bound on the non-zero dimensions of an empty array, in bytes
#: A zero-size array or tensor holds no bytes, so the message size cannot bound its shape: its
#: rows (the product of its dimensions before the first 0, none when the first is 0: what
#: iterating it, ``tolist()`` and ``unbind()`` visit; a ``(2**40, 0)`` array is 40 bytes on the
#: wire), summed over every zero-size array and tensor of a message, may be at most this or the
#: message size in bytes, whichever is larger.
MAX_EMPTY_ROWS = 1 << 16

_T_LIST, _T_TUPLE, _T_DICT, _T_PERENV = 0, 1, 2, 3
_T_ARRAY, _T_NPSCALAR, _T_TENSOR, _T_BIGINT, _T_COMPLEX, _T_ENVIDS = 4, 5, 6, 7, 8, 9

_INT64_MIN, _UINT64_MAX = -(1 << 63), (1 << 64) - 1

#: numpy dtypes carried (as ``dtype.str``, little-endian): bool, integers, floats, complex.
_NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(name)
    for name in (
        "|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8",
        "<f2", "<f4", "<f8", "<c8", "<c16",
    )
}  # fmt: skip

#: torch dtypes carried: name -> (item size, numpy dtype of the raw bits on the wire).
_TORCH_DTYPES: dict[str, tuple[int, str]] = {
    "bool": (1, "|b1"),
    "uint8": (1, "|u1"),
    "int8": (1, "|i1"),
    "int16": (2, "<i2"),
    "int32": (4, "<i4"),
    "int64": (8, "<i8"),
    "uint16": (2, "<u2"),
    "uint32": (4, "<u4"),
    "uint64": (8, "<u8"),
    "float16": (2, "<f2"),
    "float32": (4, "<f4"),
    "float64": (8, "<f8"),
    "complex64": (8, "<c8"),
    "complex128": (16, "<c16"),
    # numpy lacks these: their bits travel as unsigned integers of the same size.
    "bfloat16": (2, "<i2"),
    "complex32": (4, "<i4"),
    "float8_e4m3fn": (1, "|u1"),
    "float8_e4m3fnuz": (1, "|u1"),
    "float8_e5m2": (1, "|u1"),
    "float8_e5m2fnuz": (1, "|u1"),
    "float8_e8m0fnu": (1, "|u1"),
}

_KINDS = ("PolicyResponse", "MultiAgentPolicyResponse")

_SCALAR_TYPES = frozenset(np.dtype(name).type for name in _NUMPY_DTYPES)
_KEY_TYPES = frozenset({str, int, float, bool, bytes, type(None)})
#: torch dtypes sent as raw bits (numpy lacks them) and the integer dtype viewing those bits.
_TORCH_RAW = frozenset(
    {"bfloat16", "complex32", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
     "float8_e5m2fnuz", "float8_e8m0fnu"}
)  # fmt: skip
_TORCH_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}
_LEAF_NODE_TYPES = frozenset({str, int, float, bool, bytes, type(None)})
_RESPONSE_MODULE = "rlightning.types.policy_response"


class WireFormatError(ValueError):
    """The bytes given to ``from_bytes`` are not a valid message.

    Raised for every truncated, corrupted, oversized or hostile input (and only for those): bad
    magic or version, a failed checksum, invalid msgpack, an unknown tag or dtype, a shape that
    claims more bytes than the message holds or than ``max_bytes`` allows, nesting deeper than
    :data:`MAX_DEPTH`, trailing bytes, fields the response class refuses, or a message of
    another class than the one ``from_bytes`` was called on (a ``MultiAgentPolicyResponse``
    message given to ``PolicyResponse.from_bytes`` is accepted: it is a subclass). A subclass of
    ``ValueError``.
    """

    __module__ = "rlightning.wire"


class TorchUnavailableError(WireFormatError, ImportError):
    """A valid message holds a torch tensor but torch is not installed.

    Both a :class:`WireFormatError` (so one ``except WireFormatError`` covers every message a
    process cannot decode) and an ``ImportError``. Install torch
    (``pip install rlightning-core[torch]``) to decode tensors.
    """

    __module__ = "rlightning.wire"


class _FieldError(Exception):
    """Internal: an encode error on its way up, collecting the path to the bad value."""

    def __init__(self, error: type[Exception], message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message
        self.path: list[Any] = []


def _align(offset: int) -> int:
    return (offset + _ALIGN - 1) & -_ALIGN


def _empty_rows(shape: Any) -> int:
    """Rows of a zero-size shape: the product of the dimensions before its first 0 (0 if first).

    What iterating a zero-size array, ``tolist()`` and ``unbind()`` visit though it holds no
    bytes. Computed one dimension at a time and stopped past ``2**64``: never a huge product.
    """
    rows = 1
    for dim in shape:
        if not dim:
            break
        rows *= dim
        if rows > 1 << 64:
            break
    return rows if shape and shape[0] else 0
