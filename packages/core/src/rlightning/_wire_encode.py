"""Encoding side of the wire format: ``PolicyResponse.to_bytes`` (see :mod:`rlightning.wire`)."""

from __future__ import annotations

import sys
import zlib
from typing import Any

import msgpack
import numpy as np

from rlightning._stack import EnvIds, PerEnv
from rlightning._torch import tensor_type, torch_if_imported
from rlightning._tree import short_repr
from rlightning._wire_spec import (
    _FLAG_CRC,
    _HEADER,
    _INT64_MIN,
    _KEY_TYPES,
    _KINDS,
    _MAX_BIGINT_BITS,
    _MAX_BIGINT_DIGITS,
    _NUMPY_DTYPES,
    _RESPONSE_MODULE,
    _SCALAR_TYPES,
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
    _TORCH_BITS,
    _TORCH_DTYPES,
    _TORCH_RAW,
    _UINT64_MAX,
    FORMAT_VERSION,
    MAGIC,
    MAX_DEPTH,
    MAX_EMPTY_ROWS,
    MAX_KEYS_PER_HASH,
    _align,
    _FieldError,
)

__all__ = ["encode"]


class _Encoder:
    """One encoding pass: turns values into msgpack nodes and collects the payload buffers."""

    __slots__ = ("empty_rows", "field", "offset", "parts", "tensor")

    def __init__(self, start: int) -> None:
        self.parts: list[Any] = []
        self.offset = start  # absolute offset of the next payload byte
        self.tensor = tensor_type()
        self.field = ""  # the field being encoded
        # (rows, field) of zero-size arrays with more than MAX_EMPTY_ROWS rows before their
        # first 0: allowed only up to the message size, known once everything is encoded.
        self.empty_rows: list[tuple[int, str]] = []

    def note_empty(self, shape: tuple[int, ...]) -> None:
        rows = 1
        for dim in shape:
            if not dim:
                break
            rows *= dim
        if rows > MAX_EMPTY_ROWS:
            self.empty_rows.append((rows, self.field))

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
            if value.bit_length() > _MAX_BIGINT_BITS:
                raise _FieldError(
                    ValueError,
                    f"int of {value.bit_length()} bits is larger than the format carries "
                    f"(at most {_MAX_BIGINT_BITS} bits, about {_MAX_BIGINT_DIGITS} decimal digits)",
                )
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
            if len(value) > MAX_KEYS_PER_HASH:
                _check_shared_hashes(value)
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
        if kind is int and not _INT64_MIN <= key <= _UINT64_MAX:
            raise _FieldError(
                TypeError,
                f"dict key {key} does not fit in 64 bits; keys beyond 64 bits are refused (the "
                "decoder guards against hash-colliding keys)",
            )
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
            f"dict key {short_repr(key)} of type {kind.__name__} is not supported (keys may be "
            "str, int, float, bool, None, bytes or tuples of those)",
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
        if not array.size:
            self.note_empty(array.shape)
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
        if tensor.device.type == "meta":
            raise _FieldError(TypeError, "a meta tensor has no data to send")
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
        if not array.size:
            self.note_empty(tuple(data.shape))
        self.add_buffer(array.view(np.uint8) if array.size else b"", array.nbytes)
        return [_T_TENSOR, name, list(data.shape)]


def _check_shared_hashes(value: dict[Any, Any]) -> None:
    """Refuse what the decoder refuses: over MAX_KEYS_PER_HASH float or tuple keys per hash."""
    shared: dict[int, int] = {}
    for key in value:
        kind = type(key)
        if kind is not float and kind is not tuple:
            continue
        digest = hash(key)
        seen = shared[digest] = shared.get(digest, 0) + 1
        if seen > MAX_KEYS_PER_HASH:
            raise _FieldError(
                ValueError,
                f"more than MAX_KEYS_PER_HASH={MAX_KEYS_PER_HASH} {kind.__name__} keys of one "
                f"dict share a hash value (e.g. {short_repr(key)}); the decoder refuses them "
                "(keys that collide would make decoding quadratic): split the dict or use other "
                "keys",
            )


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
        "carries dict, list, tuple, rlightning's PerEnv and EnvIds lists, numpy arrays and "
        f"scalars, torch tensors, int, float, complex, bool, str, bytes and None){hint}"
    )


def _path_str(name: str, path: list[Any]) -> str:
    return repr(name) + "".join(f"[{short_repr(key, 80)}]" for key in reversed(path))


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
            tensor, a tensor subclass, a meta tensor, an int dict key beyond 64 bits; the message
            names the field, e.g. ``field 'obs'['rgb'][0]``. Also raised when ``response`` is not
            exactly a PolicyResponse or MultiAgentPolicyResponse, or when its ``env_id`` is a
            str subclass (``numpy.str_``: it would decode as a plain, unequal str).
        ValueError: nesting is deeper than :data:`MAX_DEPTH`, an int needs more than 14,000
            bits (Python's own limit for decimal conversion, about 4,300 digits), or more than
            :data:`MAX_KEYS_PER_HASH` float (or tuple) keys of one dict share a hash value, or a
            zero-size array has more than :data:`MAX_EMPTY_ROWS` rows before its first zero-size
            dimension (and more than the message has bytes).
    """
    kind_name = type(response).__name__
    if kind_name not in _KINDS or type(response).__module__ != _RESPONSE_MODULE:
        raise TypeError(
            f"to_bytes() encodes PolicyResponse and MultiAgentPolicyResponse, not "
            f"{type(response).__qualname__}: the decoder only builds those two classes"
        )
    fields = response.__dict__
    env_id = fields["env_id"]
    if env_id is not None and type(env_id) is not str:
        raise TypeError(
            f"to_bytes(): env_id {env_id!r} is a {type(env_id).__name__}, a str subclass; the "
            "format carries a plain str, which would not equal it when decoded: pass "
            "str(env_id) to the constructor"
        )
    encoder = _Encoder(0)
    header: list[Any] = [_KINDS.index(kind_name), env_id]
    for name, value in fields.items():
        if name == "env_id":
            continue
        encoder.field = name
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
    for rows, name in encoder.empty_rows:
        if rows > max(MAX_EMPTY_ROWS, start + encoder.offset):
            raise ValueError(
                f"to_bytes(): field {name!r}: a zero-size array or tensor with {rows} rows before "
                f"its first zero-size dimension; the format carries at most "
                f"MAX_EMPTY_ROWS={MAX_EMPTY_ROWS} or the message size in bytes "
                f"({start + encoder.offset}) (the decoder refuses more: such an array costs "
                "nothing to send but its rows cost a reader who iterates them)"
            )
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
