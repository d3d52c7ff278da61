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
    _INT_LIMIT,
    _KEY_TYPES,
    _KINDS,
    _MAX_EMPTY_PRODUCT,
    _MAX_INT_DIGITS,
    _MAX_NDIM,
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
    _empty_rows,
    _FieldError,
)

__all__ = ["encode"]


class _Encoder:
    """One encoding pass: turns values into msgpack nodes and collects the payload buffers."""

    __slots__ = ("empty_fields", "empty_rows", "field", "offset", "parts", "tensor")

    def __init__(self, start: int) -> None:
        self.parts: list[Any] = []
        self.offset = start  # absolute offset of the next payload byte
        self.tensor = tensor_type()
        self.field = ""  # the field being encoded
        # Rows of the zero-size arrays and tensors (before their first 0), in all and per field:
        # the message may hold MAX_EMPTY_ROWS or its size, known once everything is encoded.
        self.empty_rows = 0
        self.empty_fields: dict[str, int] = {}

    def note_empty(self, shape: tuple[int, ...], itemsize: int) -> None:
        """Refuse what the decoder refuses of a zero-size shape; count its rows."""
        nbytes = itemsize
        for dim in shape:
            if dim:
                nbytes *= dim
        if nbytes > _MAX_EMPTY_PRODUCT:
            raise _FieldError(
                ValueError,
                f"a zero-size array or tensor of shape {shape}: its non-zero dimensions hold "
                f"{nbytes} bytes, more than 2**40 (numpy's index bound; the decoder refuses it)",
            )
        rows = _empty_rows(shape)
        if rows:
            self.empty_rows += rows
            self.empty_fields[self.field] = self.empty_fields.get(self.field, 0) + rows

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
            if not -_INT_LIMIT < value < _INT_LIMIT:
                raise _FieldError(
                    ValueError,
                    f"int of {value.bit_length()} bits has more than {_MAX_INT_DIGITS} decimal "
                    f"digits, the most the format carries (Python's own limit for int(str))",
                )
            try:
                digits = str(value)
            except ValueError as exc:  # sys.set_int_max_str_digits() below the format's bound
                raise _FieldError(ValueError, f"int cannot be written in decimal: {exc}") from None
            return [_T_BIGINT, digits]
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
            return self.env_ids(value, depth)
        if isinstance(value, np.generic) and kind in _SCALAR_TYPES:
            array = self.array(np.asarray(value))
            return [_T_NPSCALAR, array[1]]
        if self.tensor is not None and isinstance(value, self.tensor):
            return self.torch_tensor(value)
        raise _FieldError(TypeError, _unsupported(value))

    def env_ids(self, value: EnvIds, depth: int) -> list[Any]:
        """An ``[9, ids, paths]`` node; refuses what the decoder refuses of one."""
        if not set(map(type, value)) <= _ID_TYPES:
            index, bad = next((i, e) for i, e in enumerate(value) if type(e) not in _ID_TYPES)
            raise _FieldError(
                TypeError,
                f"env id {short_repr(bad)} (row {index}) is a {type(bad).__name__}; env ids must "
                "be str (exactly: a subclass would decode as an unequal plain str) or None",
            )
        rows = value.array_rows
        paths: list[Any] = [_T_LIST]
        try:
            if len(rows) > MAX_KEYS_PER_HASH:
                _check_shared_hashes(rows, "env-ids paths", "unbind() quadratic")
            for path in rows:
                try:
                    # depth + 2: each path sits in the paths list node, as the decoder counts it
                    paths.append(self.key(path, depth + 2))
                except _FieldError as exc:  # name the field the path is of, too
                    of = f" (of field {short_repr(path[0], 80)})" if path else ""
                    exc.message = f"path {short_repr(path, 120)}{of}: {exc.message}"
                    exc.path.clear()
                    raise
        except _FieldError as exc:
            exc.path.append("array_rows")
            raise
        return [_T_ENVIDS, [_T_LIST, *value], paths]

    def key(self, key: Any, depth: int) -> Any:
        kind = type(key)
        if kind is float and key != key:
            raise _FieldError(
                ValueError,
                "dict key nan: NaN keys are refused (a NaN is unequal to itself, so the dict "
                "would never equal its decoded copy); use another key, e.g. None or a str",
            )
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
        if array.ndim > _MAX_NDIM:  # numpy 2 allows 64
            raise _FieldError(ValueError, _too_many_dims(array.shape))
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        if not array.size:
            self.note_empty(array.shape, dtype.itemsize)
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
        shape = tensor.shape
        if len(shape) > _MAX_NDIM:
            raise _FieldError(ValueError, _too_many_dims(tuple(shape)))
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
            self.note_empty(tuple(shape), itemsize)
        self.add_buffer(array.view(np.uint8) if array.size else b"", array.nbytes)
        return [_T_TENSOR, name, list(shape)]


_ID_TYPES = frozenset({str, type(None)})


def _too_many_dims(shape: tuple[int, ...]) -> str:
    return (
        f"{len(shape)} dimensions (shape {shape}); the format carries at most {_MAX_NDIM} "
        "(numpy 1.x's limit; the decoder refuses more)"
    )


def _check_shared_hashes(
    keys: Any, what: str = "dict keys", cost: str = "decoding quadratic"
) -> None:
    """Refuse what the decoder refuses: over MAX_KEYS_PER_HASH float or tuple keys per hash."""
    shared: dict[int, int] = {}
    for key in keys:
        kind = type(key)
        if kind is not float and kind is not tuple:
            continue
        digest = hash(key)
        seen = shared[digest] = shared.get(digest, 0) + 1
        if seen > MAX_KEYS_PER_HASH:
            of = f"{kind.__name__} keys of one dict" if what == "dict keys" else what
            raise _FieldError(
                ValueError,
                f"more than MAX_KEYS_PER_HASH={MAX_KEYS_PER_HASH} {of} share a hash value (e.g. "
                f"{short_repr(key)}); the decoder refuses them (values that collide would make "
                f"{cost}): split the dict or use other keys",
            )


def _bad_str_path(value: Any) -> list[Any] | None:
    """The path to the first str in ``value`` that UTF-8 cannot encode (a lone surrogate)."""
    kind = type(value)
    if kind is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return []
        return None
    items: Any
    if kind is dict:
        for key, item in value.items():
            if _bad_str_path(key) is not None:
                return [key]
            found = _bad_str_path(item)
            if found is not None:
                return [key, *found]
        return None
    if kind is EnvIds:
        found = _bad_str_path(list(value)) or _bad_str_path(list(value.array_rows))
        return found
    if kind in (list, tuple, PerEnv):
        items = value
        for index, item in enumerate(items):
            found = _bad_str_path(item)
            if found is not None:
                return [index, *found]
    return None


def _bad_str_error(fields: dict[str, Any]) -> ValueError:
    """The error for a str msgpack could not write, naming where it is."""
    where = "a str"
    for name, value in fields.items():
        if _bad_str_path(name) is not None:
            where = f"field name {short_repr(name)}"
            break
        found = _bad_str_path(value)
        if found is not None:
            label = "env_id" if name == "env_id" else _path_str(name, list(reversed(found)))
            where = f"field {label}"
            break
    return ValueError(
        f"to_bytes(): {where}: holds a str that is not valid UTF-8 (a lone surrogate such as "
        "'\\ud800'); the format carries UTF-8 text: fix the text, or send it as bytes "
        "(s.encode('utf-8', 'surrogatepass'))"
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
        ValueError: everything the decoder would refuse of a value, naming the field: nesting
            deeper than :data:`MAX_DEPTH`; an int of more than 4,300 decimal digits (Python's own
            limit for decimal conversion; the decoder's too); more than
            :data:`MAX_KEYS_PER_HASH` float (or tuple) keys of one dict, or env-ids paths, that
            share a hash value; a NaN dict key; an array or tensor of more than 32 dimensions; a
            zero-size array or tensor whose non-zero dimensions hold more than ``2**40`` bytes;
            zero-size arrays and tensors with more than :data:`MAX_EMPTY_ROWS` rows (before
            their first zero-size dimension) in all, and more than the message has bytes; a str
            that is not valid UTF-8 (a lone surrogate).
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
    try:
        packed = msgpack.packb(header, use_bin_type=True)
    except UnicodeEncodeError:  # a lone surrogate: UTF-8 cannot carry it
        raise _bad_str_error(fields) from None
    start = _align(_HEADER.size + len(packed))
    size = start + encoder.offset
    if encoder.empty_rows > max(MAX_EMPTY_ROWS, size):
        name, rows = max(encoder.empty_fields.items(), key=lambda item: item[1])
        raise ValueError(
            f"to_bytes(): field {name!r}: zero-size arrays and tensors with {encoder.empty_rows} "
            f"rows in all before their first zero-size dimension ({rows} in this field); a "
            f"message carries at most MAX_EMPTY_ROWS={MAX_EMPTY_ROWS} or its size in bytes "
            f"({size}) (the decoder refuses more: such arrays cost nothing to send but their "
            "rows cost a reader who iterates or unbinds them)"
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
