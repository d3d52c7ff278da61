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
only that, with a message of bounded length), never a crash, a hang or an allocation larger than
the message. Decode time is linear in the message size: nesting is bounded by :data:`MAX_DEPTH`,
the structure by :data:`MAX_HEADER_BYTES_DEFAULT` (at most 100 bytes of memory per header byte
for every kind of node), and dict keys and ``env_ids`` paths that can be made to share a hash
value (floats, tuples) by :data:`MAX_KEYS_PER_HASH` per dict. A zero-size array holds no bytes,
so the rows of a message's zero-size arrays (the dimensions before each one's first 0), in all,
are bounded by :data:`MAX_EMPTY_ROWS` or the message size; the ``repr`` of anything decoded is
bounded too, and ``unbind()`` of it refuses work out of proportion to its size
(``docs/transport.md``). NaN dict keys are refused. Any C-contiguous buffer decodes as its bytes
do. :func:`encode` refuses, naming the field, everything :func:`decode` would refuse, and every
int :func:`decode` accepts (at most 4,300 decimal digits) re-encodes.
"""

from rlightning._wire_decode import decode
from rlightning._wire_encode import encode
from rlightning._wire_spec import (
    FORMAT_VERSION,
    MAGIC,
    MAX_BYTES_DEFAULT,
    MAX_DEPTH,
    MAX_EMPTY_ROWS,
    MAX_HEADER_BYTES_DEFAULT,
    MAX_KEYS_PER_HASH,
    TorchUnavailableError,
    WireFormatError,
)

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_BYTES_DEFAULT",
    "MAX_DEPTH",
    "MAX_EMPTY_ROWS",
    "MAX_HEADER_BYTES_DEFAULT",
    "MAX_KEYS_PER_HASH",
    "TorchUnavailableError",
    "WireFormatError",
    "decode",
    "encode",
]
