"""Decoding side of the wire format: ``PolicyResponse.from_bytes`` (see :mod:`rlightning.wire`).

Every check runs against the bytes actually present before anything is built; every refusal is a
:class:`~rlightning.wire.WireFormatError`.
"""

from __future__ import annotations

import sys
import zlib
from pickle import PickleBuffer
from typing import Any, TypeVar

import msgpack
import numpy as np

from rlightning._stack import EnvIds, PerEnv
from rlightning._torch import torch_if_imported
from rlightning._tree import short_repr
from rlightning._wire_spec import (
    _FLAG_CRC,
    _HEADER,
    _KEY_TYPES,
    _KINDS,
    _LEAF_NODE_TYPES,
    _MAX_EMPTY_PRODUCT,
    _MAX_INT_DIGITS,
    _MAX_NDIM,
    _NUMPY_DTYPES,
    _T_ARRAY,
    _T_BIGINT,
    _T_COMPLEX,
    _T_DICT,
    _T_ENVIDS,
    _T_LIST,
    _T_NPSCALAR,
    _T_PERENV,
    _T_TENSOR,
    _T_TUPLE,
    _TORCH_DTYPES,
    _TORCH_RAW,
    FORMAT_VERSION,
    MAGIC,
    MAX_BYTES_DEFAULT,
    MAX_DEPTH,
    MAX_EMPTY_ROWS,
    MAX_HEADER_BYTES_DEFAULT,
    MAX_KEYS_PER_HASH,
    TorchUnavailableError,
    WireFormatError,
    _align,
    _empty_rows,
)

__all__ = ["decode"]

_R = TypeVar("_R")


class _Decoder:
    """One decoding pass over a validated header: builds values, consumes payload buffers.

    The header comes from ``msgpack.unpackb(..., use_list=False)``: every msgpack array is a
    tuple (about half the memory of a list, and the header is alive while the values are built).
    """

    __slots__ = ("copy", "data", "empty_rows", "end", "offset", "torch", "writable")

    def __init__(self, data: memoryview, start: int, copy: bool) -> None:
        self.data = data
        self.offset = start
        self.end = len(data)
        self.copy = copy
        self.writable = not data.readonly
        self.torch: Any = None
        self.empty_rows = 0  # rows of the zero-size arrays and tensors so far (whole message)

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
        if type(node) is not tuple or len(node) > _MAX_NDIM:
            raise self.fail(f"an array shape must be a list of at most {_MAX_NDIM} ints")
        for dim in node:
            if type(dim) is not int or dim < 0:
                raise self.fail(f"an array dimension must be an int >= 0, got {short_repr(dim)}")
        empty = 0 in node
        if empty:
            self.count_empty_rows(node)
        # An empty array holds no bytes, but numpy still needs its other dimensions' product to
        # fit in an index: bound it by the same limit as for a non-empty array, in bytes.
        limit = _MAX_EMPTY_PRODUCT if empty else self.end
        count = 1
        for dim in node:
            if dim:
                count *= dim
                if count * itemsize > limit:  # checked per dimension: never a huge product
                    raise self.fail(
                        f"an array of shape {list(node)} claims at least {count * itemsize} "
                        f"bytes but the message has only {self.end} (truncated or hostile)"
                    )
        return node, 0 if empty else count

    def count_empty_rows(self, node: tuple[int, ...]) -> None:
        """Add a zero-size shape's rows to the message's; refuse past the message's bound."""
        limit = max(MAX_EMPTY_ROWS, self.end)
        rows = _empty_rows(node)
        total = self.empty_rows = self.empty_rows + rows
        if total > limit:
            raise self.fail(
                f"a zero-size array of shape {list(node)} has {rows} rows before its first "
                f"zero-size dimension, which brings the message's zero-size arrays and tensors "
                f"to {total} rows, more than {limit} (at most MAX_EMPTY_ROWS={MAX_EMPTY_ROWS} "
                f"or the message size, {self.end} bytes, in all)"
            )

    def value(self, node: Any, depth: int) -> Any:
        kind = type(node)
        if kind is not tuple:
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
            return PerEnv([self.value(item, depth + 1) for item in node[1:]])
        if tag == _T_DICT:
            return self.dict(node, depth)
        if tag == _T_ARRAY:
            return self.array(node)
        if tag == _T_NPSCALAR:
            if len(node) != 2:
                raise self.fail("a numpy scalar node must be [5, dtype]")
            return self.array((_T_ARRAY, node[1], ()))[()]
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
        raise self.fail(f"unknown tag {short_repr(tag)}")

    def dict(self, node: tuple[Any, ...], depth: int) -> dict[Any, Any]:
        size = len(node)
        if size % 2 != 1:
            raise self.fail("a dict node must hold key/value pairs")
        out: dict[Any, Any] = {}
        # Up to MAX_KEYS_PER_HASH keys, no hash can be shared by more: the plain loop.
        if size <= 2 * MAX_KEYS_PER_HASH + 1:
            for i in range(1, size, 2):
                key = self.key(node[i], depth + 1)
                if key in out:
                    raise self.fail(f"duplicate dict key {short_repr(key)}")
                out[key] = self.value(node[i + 1], depth + 1)
            return out
        # Count the float and tuple keys per hash value *before* inserting: keys that share a
        # hash make each insertion compare against every earlier one (quadratic decoding).
        # Only these two kinds need it: floats m * 2**(61k) all hash alike (~34 per value) and
        # the tuple hash can be inverted (any number), while at most 9 64-bit ints share a hash
        # and str/bytes hashes are randomised.
        shared: dict[int, int] = {}
        for i in range(1, size, 2):
            key = self.key(node[i], depth + 1)
            kind = type(key)
            if kind is float or kind is tuple:
                digest = hash(key)
                seen = shared.get(digest, 0)
                if seen >= MAX_KEYS_PER_HASH:
                    raise self.fail(
                        f"more than MAX_KEYS_PER_HASH={MAX_KEYS_PER_HASH} {kind.__name__} keys "
                        f"of one dict share a hash value (e.g. {short_repr(key)}): refused, "
                        "they would make decoding quadratic"
                    )
                shared[digest] = seen + 1
            if key in out:
                raise self.fail(f"duplicate dict key {short_repr(key)}")
            out[key] = self.value(node[i + 1], depth + 1)
        return out

    def key(self, node: Any, depth: int) -> Any:
        kind = type(node)
        if kind in _KEY_TYPES:
            if kind is float and node != node:
                # NaN: hashed by identity and unequal to itself, so the dict would never equal
                # its own decoded copy, nor a second decode of the same bytes.
                raise self.fail("a dict key is NaN; NaN keys are refused (never equal to a copy)")
            return node
        if kind is tuple and node and node[0] == _T_TUPLE and type(node[0]) is int:
            if depth > MAX_DEPTH:
                raise self.fail(f"nesting deeper than MAX_DEPTH={MAX_DEPTH}")
            return tuple(self.key(item, depth + 1) for item in node[1:])
        # ints beyond 64 bits are refused as keys: they hash without randomisation, so a
        # hostile message could make them all collide (quadratic decoding).
        raise self.fail(
            "a dict key must be a str, a 64-bit int, float, bool, None, bytes or a tuple of them"
        )

    def env_ids(self, node: tuple[Any, ...], depth: int) -> EnvIds:
        if len(node) != 3:
            raise self.fail("an env-ids node must be [9, ids, paths]")
        ids = self.value(node[1], depth + 1)
        if type(ids) is not list or not all(i is None or type(i) is str for i in ids):
            raise self.fail("env ids must be a list of str or nil")
        paths = node[2]
        if type(paths) is not tuple or not paths or type(paths[0]) is not int or paths[0]:
            raise self.fail("env-ids paths must be a list node")
        # unbind() looks paths up in a frozenset: count them per hash value, as dict keys are
        # (the tuple hash can be inverted, so any number of paths could share one).
        shared: dict[int, int] | None = {} if len(paths) > MAX_KEYS_PER_HASH + 1 else None
        rows = []
        for item in paths[1:]:
            path = self.key(item, depth + 2)
            if type(path) is not tuple:
                raise self.fail("env-ids paths must be tuples")
            if shared is not None:
                digest = hash(path)
                seen = shared.get(digest, 0)
                if seen >= MAX_KEYS_PER_HASH:
                    raise self.fail(
                        f"more than MAX_KEYS_PER_HASH={MAX_KEYS_PER_HASH} env-ids paths share a "
                        f"hash value (e.g. {short_repr(path)}): refused, they would make "
                        "unbind() quadratic"
                    )
                shared[digest] = seen + 1
            rows.append(path)
        return EnvIds(ids, rows)

    def bigint(self, node: tuple[Any, ...]) -> int:
        if len(node) != 2 or type(node[1]) is not str:
            raise self.fail("a big-int node must be [7, digits]")
        digits = node[1]
        if len(digits) > _MAX_INT_DIGITS + 1:
            raise self.fail(
                f"a big-int node holds {len(digits)} characters; the format carries ints of at "
                f"most {_MAX_INT_DIGITS} decimal digits"
            )
        body = digits[1:] if digits.startswith("-") else digits
        if len(body) > _MAX_INT_DIGITS:
            raise self.fail(
                f"a big-int node holds {len(body)} digits; the format carries ints of at most "
                f"{_MAX_INT_DIGITS} decimal digits"
            )
        if not body.isascii() or not body.isdigit():
            raise self.fail(f"a big-int node holds {short_repr(digits[:40])}, not decimal digits")
        return int(digits)

    def array(self, node: tuple[Any, ...]) -> np.ndarray[Any, Any]:
        if len(node) != 3 or type(node[1]) is not str:
            raise self.fail("an array node must be [4, dtype, shape]")
        dtype = _NUMPY_DTYPES.get(node[1])
        if dtype is None:
            raise self.fail(f"unsupported numpy dtype {short_repr(node[1][:40])}")
        shape, count = self.shape(node[2], dtype.itemsize)
        start = self.take(count * dtype.itemsize)
        # One array object on the message's memory (frombuffer + reshape made two).
        array: np.ndarray[Any, Any] = np.ndarray(shape, dtype, self.data, start)
        return array.copy() if self.copy else array

    def torch_tensor(self, node: tuple[Any, ...]) -> Any:
        if len(node) != 3 or type(node[1]) is not str:
            raise self.fail("a tensor node must be [6, dtype, shape]")
        name = node[1]
        spec = _TORCH_DTYPES.get(name)
        if spec is None:
            raise self.fail(f"unsupported torch dtype {short_repr(name[:40])}")
        itemsize, wire_dtype = spec
        shape, count = self.shape(node[2], itemsize)
        start = self.take(count * itemsize)
        torch = self.torch
        if torch is None:
            torch = self.torch = _import_torch(name, shape)
        if not count:  # no data to alias or copy: the cheapest tensor (a third of a view's RSS)
            return torch.empty(shape, dtype=getattr(torch, name))
        bits: np.ndarray[Any, Any] = np.ndarray(shape, np.dtype(wire_dtype), self.data, start)
        if sys.byteorder == "big":
            bits = bits.astype(bits.dtype.newbyteorder("="))
        elif self.copy or not self.writable:
            bits = bits.copy()  # torch has no read-only tensors: never alias immutable bytes
        tensor = torch.from_numpy(bits)
        if name in _TORCH_RAW:
            tensor = tensor.view(getattr(torch, name))
        return tensor


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


def _check_limit(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int number of bytes (or None), got {short_repr(value)}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")


def decode(
    data: Any,
    expected: type[_R],
    *,
    max_bytes: int | None = None,
    copy: bool = False,
    max_header_bytes: int | None = None,
) -> _R:
    """Decode a message made by :func:`encode` (``Class.from_bytes(data)``).

    Args:
        data: The message: ``bytes``, ``bytearray``, ``memoryview`` or any C-contiguous buffer,
            read as its bytes whatever its item format (ctypes arrays, ``RawArray``, numpy
            arrays of any dtype, ``mmap``, ``array.array``): each decodes as ``bytes`` does.
        expected: The class ``from_bytes`` was called on; the message's class must be it or a
            subclass of it (``PolicyResponse.from_bytes`` accepts both kinds).
        max_bytes: Largest message accepted, in bytes; None means :data:`MAX_BYTES_DEFAULT`
            (1 GiB). Checked before anything is decoded; every array and tensor must fit in
            the message, so their buffers never exceed it.
        max_header_bytes: Largest msgpack header (the structure: everything but array and
            tensor buffers) accepted; None means :data:`MAX_HEADER_BYTES_DEFAULT` (4 MiB).
            Checked before the header is unpacked. Unpacking builds Python objects, at most
            100 bytes of peak RSS per header byte for every kind of node, so this bounds what a
            hostile message can make the decoder hold besides the message itself.
        copy: False (default): numpy arrays are views into ``data`` (read-only when ``data`` is
            ``bytes``; no copy), and tensors are views too when ``data`` is writable, copies
            otherwise (torch has no read-only tensors). True: every array and tensor is a fresh
            copy, independent of ``data``.

    Returns:
        A new response of the class stored in the message. Tensors are CPU tensors with the
        stored dtype (bfloat16 included) and ``requires_grad=False``.

    Raises:
        TypeError: ``data`` is not a C-contiguous bytes-like object, or a limit is not an int.
        ValueError: a limit is negative.
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
    if not view.c_contiguous:
        raise TypeError("from_bytes() needs a C-contiguous buffer (copy it with bytes(...))")
    if view.format != "B" or view.ndim != 1:
        # Any C-contiguous buffer is read as its bytes, as bytes(data) would be: memoryview.cast
        # refuses formats it does not know (ctypes' '<B', numpy's 'S1'/'V1') and a 'c' view's
        # items are bytes objects, while PickleBuffer.raw() is always 1-D unsigned bytes.
        view = PickleBuffer(view).raw()
    if max_bytes is not None:
        _check_limit("max_bytes", max_bytes)
    if max_header_bytes is not None:
        _check_limit("max_header_bytes", max_header_bytes)
    limit = MAX_BYTES_DEFAULT if max_bytes is None else max_bytes
    header_limit = MAX_HEADER_BYTES_DEFAULT if max_header_bytes is None else max_header_bytes
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
    if header_len > header_limit:
        raise WireFormatError(
            f"header of {header_len} bytes exceeds max_header_bytes={header_limit}; raise "
            "max_header_bytes to accept it"
        )
    body_end = _HEADER.size + header_len
    start = _align(body_end)
    if start > size:
        raise WireFormatError(
            f"header claims {header_len} bytes but the message has {size - _HEADER.size} after "
            "the fixed header (truncated)"
        )
    if flags & _FLAG_CRC and zlib.crc32(view[_HEADER.size :]) != crc:
        raise WireFormatError(
            f"checksum mismatch: the message of {size} bytes is corrupted or truncated (cut "
            "inside its arrays' data)"
        )
    try:
        header = msgpack.unpackb(view[_HEADER.size : body_end], raw=False, use_list=False)
    except Exception as exc:  # msgpack raises ValueError, FormatError, StackError, ...
        raise WireFormatError(
            f"invalid msgpack header: {type(exc).__name__}: {_clip(str(exc))}"
        ) from None
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
    except Exception as exc:  # TypeError/ValueError for a refused field; any other: the same
        raise WireFormatError(
            f"the decoded fields are refused by {cls.__name__}: {_clip(str(exc))}"
        ) from None


def _clip(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters: a message built from hostile input stays short."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _decode_header(
    header: Any, decoder: _Decoder, expected: type[Any]
) -> tuple[type[Any], Any, dict[str, Any]]:
    from rlightning.types.policy_response import MultiAgentPolicyResponse, PolicyResponse

    if type(header) is not tuple or len(header) < 2 or len(header) % 2:
        raise WireFormatError("the header must be a msgpack array [class, env_id, name, node, ...]")
    kind, env_id = header[0], header[1]
    if type(kind) is not int or not 0 <= kind < len(_KINDS):
        raise WireFormatError(f"unknown response class code {short_repr(kind)}")
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
            raise WireFormatError(f"bad or duplicate field name {short_repr(name)}")
        try:
            fields[name] = decoder.value(header[i + 1], 1)
        except WireFormatError as exc:
            raise type(exc)(f"field {short_repr(name)}: {exc}") from None
        except Exception as exc:  # numpy's refusals (ValueError, MemoryError, ...) and any other
            raise WireFormatError(
                f"field {short_repr(name)}: {type(exc).__name__}: {_clip(str(exc))}"
            ) from exc
    return cls, env_id, fields
