"""A safe, versioned byte format for responses: ``to_bytes`` / ``from_bytes``.

Use it where a response crosses a trust boundary (a socket from an env worker you do not fully
trust, a file, another language). Decoding never runs code: there is no pickle, no import and no
attribute lookup driven by the message. The structure is msgpack (https://msgpack.org), a
well-kept, language-neutral format; array and tensor data are raw little-endian buffers after it.
The layout is specified in ``docs/transport.md``; in short (version 1)::

    offset  size  content
    0       4     magic b"RLWF"
    4       1     version (1)
    5       1     flags: bit 0 set = the CRC-32 below is checked; other bits must be 0
    6       2     reserved, must be 0
    8       4     H, length of the msgpack header (uint32, little-endian)
    12      4     CRC-32 (zlib.crc32) of every byte from offset 16 to the end, or 0
    16      H     msgpack header: [class, env_id, name_0, node_0, name_1, node_1, ...]
    16+H    ..    zero padding to a multiple of 8
    P       ..    payload: the array/tensor buffers in header order, each starting at a
                  multiple of 8 from the message start, zero padding between them, no trailing
                  bytes

A node is a msgpack nil, bool, int (64-bit), float, str or bin for the Python value of that type,
or a msgpack array whose first item is a tag: ``[0, *items]`` list, ``[1, *items]`` tuple,
``[2, k0, v0, k1, v1, ...]`` dict, ``[3, *items]`` :class:`~rlightning.PerEnv`,
``[4, dtype, shape]`` numpy array, ``[5, dtype]`` numpy scalar, ``[6, torch_dtype, shape]`` torch
tensor, ``[7, digits]`` int beyond 64 bits, ``[8, real, imag]`` complex, ``[9, ids, paths]`` the
``env_ids`` of a stacked response (:class:`~rlightning._stack.EnvIds`).

Decoding checks everything against the bytes actually present and against ``max_bytes`` before it
creates anything, so truncated, corrupted or hostile input raises :class:`WireFormatError` (and
only that), never a crash, a hang or an allocation larger than the message.
"""

from __future__ import annotations

import struct
import sys
import zlib
from typing import Any, TypeVar

import msgpack
import numpy as np

from rlightning._stack import EnvIds, PerEnv
from rlightning._torch import tensor_type, torch_if_imported

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_BYTES_DEFAULT",
    "MAX_DEPTH",
    "TorchUnavailableError",
    "WireFormatError",
    "decode",
    "encode",
]

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
_MAX_BIGINT_DIGITS = 4300  # Python's own default limit for int(str)
_MAX_EMPTY_PRODUCT = 1 << 40  # bound on the non-zero dimensions of an empty array, in bytes

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

_R = TypeVar("_R")


class WireFormatError(ValueError):
    """The bytes given to ``from_bytes`` are not a valid message.

    Raised for every truncated, corrupted, oversized or hostile input (and only for those): bad
    magic or version, a failed checksum, invalid msgpack, an unknown tag or dtype, a shape that
    claims more bytes than the message holds or than ``max_bytes`` allows, nesting deeper than
    :data:`MAX_DEPTH`, trailing bytes, or fields the response class refuses. A subclass of
    ``ValueError``.
    """


class TorchUnavailableError(WireFormatError, ImportError):
    """A valid message holds a torch tensor but torch is not installed.

    Both a :class:`WireFormatError` (so one ``except WireFormatError`` covers every message a
    process cannot decode) and an ``ImportError``. Install torch
    (``pip install rlightning-core[torch]``) to decode tensors.
    """


class _FieldError(Exception):
    """Internal: an encode error on its way up, collecting the path to the bad value."""

    def __init__(self, error: type[Exception], message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message
        self.path: list[Any] = []


def _align(offset: int) -> int:
    return (offset + _ALIGN - 1) & -_ALIGN


# ------------------------------------------------------------------------------------- encode
class _Encoder:
    """One encoding pass: turns values into msgpack nodes and collects the payload buffers."""

    __slots__ = ("offset", "parts", "tensor")

    def __init__(self, start: int) -> None:
        self.parts: list[Any] = []
        self.offset = start  # absolute offset of the next payload byte
        self.tensor = tensor_type()

    def add_buffer(self, buffer: Any, nbytes: int) -> None:
        aligned = _align(self.offset)
        if aligned != self.offset:
            self.parts.append(bytes(aligned - self.offset))
        self.parts.append(buffer)
        self.offset = aligned + nbytes

    def node(self, value: Any, depth: int) -> Any:
        kind = type(value)
        if kind is str or kind is float or kind is bool or value is None or kind is bytes:
            return value
        if kind is int and _INT64_MIN <= value <= _UINT64_MAX:
            return value
        if depth > MAX_DEPTH:
            raise _FieldError(ValueError, f"nesting deeper than MAX_DEPTH={MAX_DEPTH}")
        if kind is int:
            return [_T_BIGINT, str(value)]
        if kind is np.ndarray:
            return self.array(value)
        if kind is list or kind is tuple or kind is PerEnv:
            tag = _T_LIST if kind is list else _T_TUPLE if kind is tuple else _T_PERENV
            out = [tag]
            for index, item in enumerate(value):
                try:
                    out.append(self.node(item, depth + 1))
                except _FieldError as exc:
                    exc.path.append(index)
                    raise
            return out
        if kind is dict:
            out = [_T_DICT]
            for key, item in value.items():
                try:
                    out.append(self.key(key, depth + 1))
                    out.append(self.node(item, depth + 1))
                except _FieldError as exc:
                    exc.path.append(key)
                    raise
            return out
        if kind is complex:
            return [_T_COMPLEX, value.real, value.imag]
        if kind is EnvIds:
            try:
                paths = [self.key(path, depth + 1) for path in value.array_rows]
            except _FieldError as exc:
                exc.path.append("array_rows")
                raise
            return [_T_ENVIDS, self.node(list(value), depth + 1), [_T_LIST, *paths]]
        if isinstance(value, np.generic) and kind in _SCALAR_TYPES:
            array = self.array(np.asarray(value))
            return [_T_NPSCALAR, array[1]]
        if self.tensor is not None and isinstance(value, self.tensor):
            return self.torch_tensor(value)
        raise _FieldError(TypeError, _unsupported(value))

    def key(self, key: Any, depth: int) -> Any:
        kind = type(key)
        if kind in _KEY_TYPES:
            return self.node(key, depth)
        if kind is tuple:
            if depth > MAX_DEPTH:
                raise _FieldError(ValueError, f"nesting deeper than MAX_DEPTH={MAX_DEPTH}")
            out: list[Any] = [_T_TUPLE]
            out.extend(self.key(item, depth + 1) for item in key)
            return out
        raise _FieldError(
            TypeError,
            f"dict key {key!r} of type {kind.__name__} is not supported (keys may be str, int, "
            "float, bool, None, bytes or tuples of those)",
        )

    def array(self, array: np.ndarray[Any, Any]) -> list[Any]:
        dtype = array.dtype
        name = dtype.str
        if name not in _NUMPY_DTYPES:
            swapped = dtype.newbyteorder("<")
            if dtype.byteorder == ">" and swapped.str in _NUMPY_DTYPES:
                array = array.astype(swapped)  # documented: sent little-endian
                name = swapped.str
            else:
                raise _FieldError(
                    TypeError,
                    f"numpy arrays of dtype {dtype} are not supported (bool, integer, float and "
                    "complex dtypes are)",
                )
        elif sys.byteorder == "big" and dtype.byteorder == "=" and dtype.itemsize > 1:
            array = array.astype(dtype.newbyteorder("<"))
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self.add_buffer(array.reshape(-1).view(np.uint8) if array.size else b"", array.nbytes)
        return [_T_ARRAY, name, list(array.shape)]

    def torch_tensor(self, tensor: Any) -> list[Any]:
        torch = torch_if_imported()
        assert torch is not None
        if type(tensor) is not self.tensor:
            raise _FieldError(
                TypeError,
                f"tensor subclass {type(tensor).__name__} is not supported; pass a plain tensor "
                "(e.g. .detach())",
            )
        if tensor.layout is not torch.strided or tensor.is_quantized or tensor.is_nested:
            raise _FieldError(
                TypeError,
                f"{tensor.layout} / quantized / nested tensors are not supported; pass a dense "
                "tensor (e.g. .to_dense() or .dequantize())",
            )
        name = str(tensor.dtype).removeprefix("torch.")
        spec = _TORCH_DTYPES.get(name)
        if spec is None:
            raise _FieldError(TypeError, f"tensors of dtype {tensor.dtype} are not supported")
        data = tensor.detach()
        if data.device.type != "cpu":
            data = data.cpu()
        data = data.resolve_conj().resolve_neg().contiguous()
        itemsize, wire_dtype = spec
        bits = data.view(getattr(torch, _TORCH_BITS[itemsize])) if name in _TORCH_RAW else data
        array = bits.numpy().reshape(-1)
        if sys.byteorder == "big" and itemsize > 1:
            array = array.astype(np.dtype(wire_dtype))
        self.add_buffer(array.view(np.uint8) if array.size else b"", array.nbytes)
        return [_T_TENSOR, name, list(data.shape)]


_SCALAR_TYPES = frozenset(np.dtype(name).type for name in _NUMPY_DTYPES)
_KEY_TYPES = frozenset({str, int, float, bool, bytes, type(None)})
#: torch dtypes sent as raw bits (numpy lacks them) and the integer dtype viewing those bits.
_TORCH_RAW = frozenset(
    {"bfloat16", "complex32", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
     "float8_e5m2fnuz", "float8_e8m0fnu"}
)  # fmt: skip
_TORCH_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _unsupported(value: Any) -> str:
    kind = type(value)
    if isinstance(value, tuple) and hasattr(kind, "_fields"):
        hint = "; convert the namedtuple to a dict (._asdict()) or a tuple"
    elif isinstance(value, (dict, list, tuple)):
        hint = f"; convert the {kind.__name__} to a plain {kind.__mro__[1].__name__}"
    else:
        hint = ""
    return (
        f"type {kind.__module__}.{kind.__qualname__} is not supported by the wire format (it "
        "carries dict, list, tuple, numpy arrays and scalars, torch tensors, int, float, complex, "
        f"bool, str, bytes and None){hint}"
    )


def _path_str(name: str, path: list[Any]) -> str:
    return repr(name) + "".join(f"[{key!r}]" for key in reversed(path))


def encode(response: Any, *, checksum: bool = True) -> bytes:
    """Encode a response as bytes (``response.to_bytes()``); see the module docstring.

    Args:
        response: A :class:`~rlightning.PolicyResponse` or
            :class:`~rlightning.MultiAgentPolicyResponse` (exactly; user subclasses are refused,
            since the decoder can only build the two known classes).
        checksum: Store a CRC-32 of the message that :func:`decode` verifies (about 0.25 ms per
            MB here). Turn off when the transport already checks integrity.

    Returns:
        The message. Tensors on any device are copied to the CPU for it; nothing is mutated.

    Raises:
        TypeError: a value (or dict key) has a type the format does not carry, e.g. a custom
            object, a namedtuple, a dict/list subclass, an object or datetime array, a sparse
            tensor; the message names the field, e.g. ``field 'obs'['rgb'][0]``.
        ValueError: nesting is deeper than :data:`MAX_DEPTH`.
    """
    kind_name = type(response).__name__
    if kind_name not in _KINDS or type(response).__module__ != _RESPONSE_MODULE:
        raise TypeError(
            f"to_bytes() encodes PolicyResponse and MultiAgentPolicyResponse, not "
            f"{type(response).__qualname__}: the decoder only builds those two classes"
        )
    fields = response.__dict__
    encoder = _Encoder(0)
    header: list[Any] = [_KINDS.index(kind_name), fields["env_id"]]
    for name, value in fields.items():
        if name == "env_id":
            continue
        try:
            node = encoder.node(value, 1)
        except _FieldError as exc:
            raise exc.error(
                f"to_bytes(): field {_path_str(name, exc.path)}: {exc.message}"
            ) from None
        header.append(name)
        header.append(node)
    packed = msgpack.packb(header, use_bin_type=True)
    start = _align(_HEADER.size + len(packed))
    # Buffer offsets were counted from 0: shift them by the payload start (a multiple of 8).
    parts: list[Any] = [packed, bytes(start - _HEADER.size - len(packed)), *encoder.parts]
    crc = 0
    flags = 0
    if checksum:
        flags = _FLAG_CRC
        for part in parts:
            crc = zlib.crc32(part, crc)
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, flags, 0, len(packed), crc)
    return b"".join([head, *parts])


_RESPONSE_MODULE = "rlightning.types.policy_response"


# ------------------------------------------------------------------------------------- decode
class _Decoder:
    """One decoding pass over a validated header: builds values, consumes payload buffers."""

    __slots__ = ("copy", "data", "end", "offset", "torch", "writable")

    def __init__(self, data: memoryview, start: int, copy: bool) -> None:
        self.data = data
        self.offset = start
        self.end = len(data)
        self.copy = copy
        self.writable = not data.readonly
        self.torch: Any = None

    def fail(self, message: str) -> WireFormatError:
        return WireFormatError(message)

    def take(self, nbytes: int) -> int:
        """Reserve ``nbytes`` at the next aligned offset; return that offset."""
        start = _align(self.offset)
        if start + nbytes > self.end:
            raise self.fail(
                f"a buffer claims {nbytes} bytes at offset {start} but the message has only "
                f"{max(self.end - start, 0)} left (truncated or hostile)"
            )
        if any(self.data[self.offset : start]):
            raise self.fail(f"non-zero padding bytes at offset {self.offset}")
        self.offset = start + nbytes
        return start

    def shape(self, node: Any, itemsize: int) -> tuple[tuple[int, ...], int]:
        if type(node) is not list or len(node) > _MAX_NDIM:
            raise self.fail(f"an array shape must be a list of at most {_MAX_NDIM} ints")
        for dim in node:
            if type(dim) is not int or dim < 0:
                raise self.fail(f"an array dimension must be an int >= 0, got {dim!r}")
        empty = 0 in node
        # An empty array holds no bytes, but numpy still needs its other dimensions' product to
        # fit in an index: bound it by the same limit as for a non-empty array, in bytes.
        limit = _MAX_EMPTY_PRODUCT if empty else self.end
        count = 1
        for dim in node:
            if dim:
                count *= dim
                if count * itemsize > limit:  # checked per dimension: never a huge product
                    raise self.fail(
                        f"an array of shape {node} claims at least {count * itemsize} bytes but "
                        f"the message has only {self.end} (truncated or hostile)"
                    )
        return tuple(node), 0 if empty else count

    def value(self, node: Any, depth: int) -> Any:
        kind = type(node)
        if kind is not list:
            if kind in _LEAF_NODE_TYPES:
                return node
            raise self.fail(f"unexpected msgpack object of type {kind.__name__}")
        if depth > MAX_DEPTH:
            raise self.fail(f"nesting deeper than MAX_DEPTH={MAX_DEPTH}")
        if not node or type(node[0]) is not int:
            raise self.fail("a msgpack array must start with an int tag")
        tag = node[0]
        if tag == _T_LIST:
            return [self.value(item, depth + 1) for item in node[1:]]
        if tag == _T_TUPLE:
            return tuple(self.value(item, depth + 1) for item in node[1:])
        if tag == _T_PERENV:
            return PerEnv(self.value(item, depth + 1) for item in node[1:])
        if tag == _T_DICT:
            if len(node) % 2 != 1:
                raise self.fail("a dict node must hold key/value pairs")
            out = {}
            for i in range(1, len(node), 2):
                key = self.key(node[i], depth + 1)
                if key in out:
                    raise self.fail(f"duplicate dict key {key!r}")
                out[key] = self.value(node[i + 1], depth + 1)
            return out
        if tag == _T_ARRAY:
            return self.array(node)
        if tag == _T_NPSCALAR:
            if len(node) != 2:
                raise self.fail("a numpy scalar node must be [5, dtype]")
            return self.array([_T_ARRAY, node[1], []])[()]
        if tag == _T_TENSOR:
            return self.torch_tensor(node)
        if tag == _T_BIGINT:
            return self.bigint(node)
        if tag == _T_ENVIDS:
            return self.env_ids(node, depth)
        if tag == _T_COMPLEX:
            if len(node) != 3 or type(node[1]) is not float or type(node[2]) is not float:
                raise self.fail("a complex node must be [8, real, imag] with two floats")
            return complex(node[1], node[2])
        raise self.fail(f"unknown tag {tag!r}")

    def key(self, node: Any, depth: int) -> Any:
        kind = type(node)
        if kind in _KEY_TYPES:
            return node
        if kind is list and node and node[0] in (_T_TUPLE, _T_BIGINT) and type(node[0]) is int:
            if depth > MAX_DEPTH:
                raise self.fail(f"nesting deeper than MAX_DEPTH={MAX_DEPTH}")
            if node[0] == _T_BIGINT:
                return self.bigint(node)
            return tuple(self.key(item, depth + 1) for item in node[1:])
        raise self.fail("a dict key must be a str, int, float, bool, None, bytes or tuple")

    def env_ids(self, node: list[Any], depth: int) -> EnvIds:
        if len(node) != 3:
            raise self.fail("an env-ids node must be [9, ids, paths]")
        ids = self.value(node[1], depth + 1)
        if type(ids) is not list or not all(i is None or type(i) is str for i in ids):
            raise self.fail("env ids must be a list of str or nil")
        paths = node[2]
        if type(paths) is not list or not paths or paths[0] != _T_LIST:
            raise self.fail("env-ids paths must be a list node")
        rows = [self.key(path, depth + 2) for path in paths[1:]]
        if not all(type(path) is tuple for path in rows):
            raise self.fail("env-ids paths must be tuples")
        return EnvIds(ids, rows)

    def bigint(self, node: list[Any]) -> int:
        if len(node) != 2 or type(node[1]) is not str or len(node[1]) > _MAX_BIGINT_DIGITS:
            raise self.fail(f"a big-int node must be [7, digits] with <= {_MAX_BIGINT_DIGITS}")
        digits = node[1]
        body = digits[1:] if digits.startswith("-") else digits
        if not body.isascii() or not body.isdigit():
            raise self.fail(f"a big-int node holds {digits[:40]!r}, not decimal digits")
        return int(digits)

    def array(self, node: list[Any]) -> np.ndarray[Any, Any]:
        if len(node) != 3 or type(node[1]) is not str:
            raise self.fail("an array node must be [4, dtype, shape]")
        dtype = _NUMPY_DTYPES.get(node[1])
        if dtype is None:
            raise self.fail(f"unsupported numpy dtype {node[1][:40]!r}")
        shape, count = self.shape(node[2], dtype.itemsize)
        start = self.take(count * dtype.itemsize)
        array = np.frombuffer(self.data, dtype, count, start).reshape(shape)
        return array.copy() if self.copy else array

    def torch_tensor(self, node: list[Any]) -> Any:
        if len(node) != 3 or type(node[1]) is not str:
            raise self.fail("a tensor node must be [6, dtype, shape]")
        name = node[1]
        spec = _TORCH_DTYPES.get(name)
        if spec is None:
            raise self.fail(f"unsupported torch dtype {name[:40]!r}")
        itemsize, wire_dtype = spec
        shape, count = self.shape(node[2], itemsize)
        start = self.take(count * itemsize)
        torch = self.torch
        if torch is None:
            torch = self.torch = _import_torch(name, shape)
        bits = np.frombuffer(self.data, np.dtype(wire_dtype), count, start)
        if sys.byteorder == "big":
            bits = bits.astype(bits.dtype.newbyteorder("="))
        elif self.copy or not self.writable:
            bits = bits.copy()  # torch has no read-only tensors: never alias immutable bytes
        tensor = torch.from_numpy(bits)
        if name in _TORCH_RAW:
            tensor = tensor.view(getattr(torch, name))
        return tensor.reshape(shape)


_LEAF_NODE_TYPES = frozenset({str, int, float, bool, bytes, type(None)})


def _import_torch(dtype: str, shape: tuple[int, ...]) -> Any:
    torch = torch_if_imported()
    if torch is not None:
        return torch
    try:
        import torch
    except ImportError:
        raise TorchUnavailableError(
            f"the message holds a torch tensor (dtype {dtype}, shape {shape}) and torch is not "
            "installed: install it with `pip install rlightning-core[torch]`"
        ) from None
    return torch


def decode(
    data: Any, expected: type[_R], *, max_bytes: int | None = None, copy: bool = False
) -> _R:
    """Decode a message made by :func:`encode` (``Class.from_bytes(data)``).

    Args:
        data: The message: ``bytes``, ``bytearray``, ``memoryview`` or any C-contiguous buffer.
        expected: The class ``from_bytes`` was called on; the message's class must be it or a
            subclass of it (``PolicyResponse.from_bytes`` accepts both kinds).
        max_bytes: Largest message accepted, in bytes; None means :data:`MAX_BYTES_DEFAULT`
            (1 GiB). Checked before anything is decoded; since every array must fit in the
            message, nothing larger than the message is ever allocated.
        copy: False (default): numpy arrays are views into ``data`` (read-only when ``data`` is
            ``bytes``; no copy), and tensors are views too when ``data`` is writable, copies
            otherwise (torch has no read-only tensors). True: every array and tensor is a fresh
            copy, independent of ``data``.

    Returns:
        A new response of the class stored in the message. Tensors are CPU tensors with the
        stored dtype (bfloat16 included) and ``requires_grad=False``.

    Raises:
        TypeError: ``data`` is not a bytes-like object.
        WireFormatError: the bytes are truncated, corrupted, too large, hostile, or of another
            class than ``expected``.
        TorchUnavailableError: the message holds a tensor and torch is not installed (a
            WireFormatError and an ImportError).
    """
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(
            f"from_bytes() takes bytes, bytearray or memoryview, got {type(data).__name__}"
        ) from None
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B") if view.c_contiguous else view
        if view.ndim != 1 or view.itemsize != 1:
            raise TypeError("from_bytes() needs a C-contiguous buffer")
    limit = MAX_BYTES_DEFAULT if max_bytes is None else max_bytes
    size = len(view)
    if size > limit:
        raise WireFormatError(
            f"message of {size} bytes exceeds max_bytes={limit}; raise max_bytes to accept it"
        )
    if size < _HEADER.size:
        raise WireFormatError(f"message of {size} bytes is shorter than the 16-byte header")
    magic, version, flags, reserved, header_len, crc = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise WireFormatError(
            f"bad magic {bytes(magic)!r}, expected {MAGIC!r}: not an rlightning message"
        )
    if version != FORMAT_VERSION:
        raise WireFormatError(
            f"format version {version}; this rlightning reads version {FORMAT_VERSION}"
        )
    if flags & ~_FLAG_CRC or reserved:
        raise WireFormatError(f"unknown flags {flags:#04x} / reserved bytes {reserved:#06x}")
    body_end = _HEADER.size + header_len
    start = _align(body_end)
    if start > size:
        raise WireFormatError(
            f"header claims {header_len} bytes but the message has {size - _HEADER.size} after "
            "the fixed header (truncated)"
        )
    if flags & _FLAG_CRC and zlib.crc32(view[_HEADER.size :]) != crc:
        raise WireFormatError("checksum mismatch: the message is corrupted")
    try:
        header = msgpack.unpackb(view[_HEADER.size : body_end], raw=False, use_list=True)
    except Exception as exc:  # msgpack raises ValueError, FormatError, StackError, ...
        raise WireFormatError(f"invalid msgpack header: {type(exc).__name__}: {exc}") from None
    decoder = _Decoder(view, start, copy)
    if any(view[body_end:start]):
        raise WireFormatError(f"non-zero padding bytes after the header at offset {body_end}")
    cls, env_id, fields = _decode_header(header, decoder, expected)
    if decoder.offset != size:
        raise WireFormatError(
            f"{size - decoder.offset} trailing bytes after the last buffer (offset "
            f"{decoder.offset})"
        )
    try:
        return cls(env_id, **fields)  # type: ignore[no-any-return]
    except (TypeError, ValueError) as exc:
        raise WireFormatError(f"the decoded fields are refused by {cls.__name__}: {exc}") from None


def _decode_header(
    header: Any, decoder: _Decoder, expected: type[Any]
) -> tuple[type[Any], Any, dict[str, Any]]:
    from rlightning.types.policy_response import MultiAgentPolicyResponse, PolicyResponse

    if type(header) is not list or len(header) < 2 or len(header) % 2:
        raise WireFormatError("the header must be a msgpack array [class, env_id, name, node, ...]")
    kind, env_id = header[0], header[1]
    if type(kind) is not int or not 0 <= kind < len(_KINDS):
        raise WireFormatError(f"unknown response class code {kind!r}")
    cls = (PolicyResponse, MultiAgentPolicyResponse)[kind]
    if not issubclass(cls, expected):
        raise WireFormatError(
            f"the message holds a {cls.__name__}, not a {expected.__name__}; decode it with "
            f"{cls.__name__}.from_bytes()"
        )
    if env_id is not None and type(env_id) is not str:
        raise WireFormatError(f"env_id must be a str or nil, got {type(env_id).__name__}")
    fields: dict[str, Any] = {}
    for i in range(2, len(header), 2):
        name = header[i]
        if type(name) is not str or name == "env_id" or name in fields:
            raise WireFormatError(f"bad or duplicate field name {name!r}")
        try:
            fields[name] = decoder.value(header[i + 1], 1)
        except WireFormatError as exc:
            raise type(exc)(f"field {name!r}: {exc}") from None
        except (ValueError, TypeError, OverflowError, MemoryError) as exc:  # numpy refusals
            raise WireFormatError(f"field {name!r}: {type(exc).__name__}: {exc}") from None
    return cls, env_id, fields
