"""The safe wire format: round trips, refusals, and a short fuzz of the decoder."""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import re
import signal
import struct
import subprocess
import sys
import time
import tracemalloc
import zlib
from collections import OrderedDict, namedtuple
from collections.abc import Iterator
from pathlib import Path
from random import Random
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlightning import MultiAgentPolicyResponse, PerEnv, PolicyResponse, WireFormatError, wire
from rlightning._wire_spec import _NUMPY_DTYPES

CORE_SRC = Path(__file__).resolve().parents[2] / "packages" / "core" / "src"
HAS_TORCH = importlib.util.find_spec("torch") is not None


def _message(header: list[Any], payload: bytes = b"", *, crc: bool = False) -> bytes:
    """Hand-build a message (for hostile inputs the encoder would never write)."""
    packed = msgpack.packb(header, use_bin_type=True)
    pad = (-(16 + len(packed))) % 8
    body = packed + bytes(pad) + payload
    checksum = zlib.crc32(body) if crc else 0
    return struct.pack("<4sBBHII", b"RLWF", 1, int(crc), 0, len(packed), checksum) + body


def _round_trip(response: PolicyResponse, **kwargs: Any) -> PolicyResponse:
    return type(response).from_bytes(response.to_bytes(), **kwargs)


# ------------------------------------------------------------------------------- round trips
def test_round_trip_of_every_supported_python_and_numpy_type() -> None:
    response = PolicyResponse(
        "env-7",
        action=np.arange(6, dtype=np.int64).reshape(2, 3),
        none=None,
        flag=True,
        small=-3,
        unsigned=2**64 - 1,
        big=-(2**200),
        real=float("nan"),
        cplx=1 + 2j,
        text="héllo",
        raw=b"\x00\xff",
        nested={"list": [1, (2.0, "x"), []], 3: {"deep": np.zeros((0, 2))}, (1, "k"): None},
        np_scalar=np.float32(1.5),
        np_bool=np.bool_(True),
        zero_d=np.array(4, dtype=np.uint16),
        transposed=np.arange(12.0).reshape(3, 4).T,
        big_endian=np.arange(3, dtype=">i4"),
        per_env=PerEnv([1, "a"]),
        ts_env_sent_ns=123,
    )
    back = _round_trip(response)
    assert type(back) is PolicyResponse
    expected = vars(response).copy()
    expected["big_endian"] = np.arange(3, dtype="<i4")  # documented: sent little-endian
    assert back == PolicyResponse(**expected)
    assert type(back.np_scalar) is np.float32
    assert type(back.per_env) is PerEnv
    assert list(back.nested) == ["list", 3, (1, "k")]


@pytest.mark.parametrize("dtype", ["|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8",
                                   "<f2", "<f4", "<f8", "<c8", "<c16"])  # fmt: skip
def test_every_numpy_dtype_round_trips(dtype: str) -> None:
    array = (np.arange(7) % 2).astype(dtype)
    assert _round_trip(PolicyResponse(None, a=array, s=array[3])) == PolicyResponse(
        None, a=array, s=array[3]
    )


def test_arrays_are_read_only_views_into_the_message_unless_copied() -> None:
    response = PolicyResponse(None, action=np.arange(1000, dtype=np.float64))
    data = response.to_bytes()
    view = PolicyResponse.from_bytes(data).action
    assert not view.flags.writeable
    start = np.frombuffer(data, np.uint8).ctypes.data
    assert start <= view.ctypes.data < start + len(data)  # no copy: it lives in `data`
    assert view.ctypes.data % 8 == 0  # buffers are 8-byte aligned
    copied = PolicyResponse.from_bytes(data, copy=True).action
    assert copied.flags.writeable
    assert not np.shares_memory(copied, view)
    writable = PolicyResponse.from_bytes(bytearray(data)).action
    assert writable.flags.writeable


def test_stacked_and_multi_agent_responses_round_trip() -> None:
    stacked = MultiAgentPolicyResponse.stack(
        [
            MultiAgentPolicyResponse(f"e{i}", action={"a": np.int64(i), "b": np.array(i)})
            for i in range(3)
        ]
    )
    back = MultiAgentPolicyResponse.from_bytes(stacked.to_bytes())
    assert back == stacked
    assert back.env_ids.array_rows == (("action", "b"),)
    assert back.unbind() == stacked.unbind()
    assert type(PolicyResponse.from_bytes(stacked.to_bytes())) is MultiAgentPolicyResponse


def test_layout_matches_the_documentation() -> None:
    data = PolicyResponse("e", a=np.array([1.0])).to_bytes(checksum=True)
    magic, version, flags, reserved, header_len, crc = struct.unpack_from("<4sBBHII", data)
    assert (magic, version, flags, reserved) == (b"RLWF", 1, 1, 0)
    assert crc == zlib.crc32(data[16:])
    header = msgpack.unpackb(data[16 : 16 + header_len])
    assert header == [0, "e", "a", [4, "<f8", [1]]]
    assert data[-8:] == np.array([1.0]).tobytes()
    assert len(data) % 8 == 0
    assert struct.unpack_from("<4sBBHII", PolicyResponse(None).to_bytes(checksum=False))[5] == 0


# -------------------------------------------------------------------------- encode refusals
Point = namedtuple("Point", ["x", "y"])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (object(), "to_bytes(): field 'f'['k'][1]: type builtins.object is not supported"),
        (Point(1, 2), "convert the namedtuple to a dict (._asdict()) or a tuple"),
        (OrderedDict(a=1), "type collections.OrderedDict is not supported by the wire format"),
        (np.array([object()]), "numpy arrays of dtype object are not supported"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "dtype datetime64[D] are not"),
        # the class is named "longdouble" under numpy 2 and "float128" under numpy 1.x (x86-64)
        (np.longdouble(1), f"type numpy.{np.longdouble.__name__} is not supported"),
    ],
)
def test_unsupported_values_raise_type_error_naming_the_field(value: Any, message: str) -> None:
    response = PolicyResponse(None, f={"k": [0, value]})
    with pytest.raises(TypeError, match=re.escape(message)):
        response.to_bytes()


def test_other_encode_refusals() -> None:
    with pytest.raises(
        TypeError,
        match=re.escape(
            "field 'f'[frozenset()]: dict key frozenset() of type frozenset is not supported"
        ),
    ):
        PolicyResponse(None, f={frozenset(): 1}).to_bytes()

    class Custom(PolicyResponse):
        pass

    with pytest.raises(
        TypeError, match=re.escape("Custom: the decoder only builds those two classes")
    ):
        Custom(None).to_bytes()
    deep: Any = 0
    for _ in range(wire.MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(ValueError, match=re.escape("nesting deeper than MAX_DEPTH=64")):
        PolicyResponse(None, deep=deep).to_bytes()


# -------------------------------------------------------------------------- decode refusals
def _expect_refusal(data: bytes, message: str, **kwargs: Any) -> None:
    with pytest.raises(WireFormatError, match=re.escape(message)):
        PolicyResponse.from_bytes(data, **kwargs)


def test_a_small_message_claiming_a_terabyte_is_refused_before_allocating() -> None:
    data = _message([0, None, "x", [4, "<f8", [1 << 37]]])  # 2**37 float64 = 1 TiB
    data += bytes(100 - len(data))
    assert len(data) == 100
    tracemalloc.start()
    try:
        _expect_refusal(
            data,
            "field 'x': an array of shape [137438953472] claims at least 1099511627776 bytes "
            "but the message has only 100",
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    # a zero-size shape whose other dimensions overflow 64 bits is refused too
    _expect_refusal(
        _message([0, None, "x", [6, "float32", [1 << 40, 1 << 40, 0]]]),
        "tensors to 1208925819614629174706176 rows, more than 65536",
    )
    _expect_refusal(
        _message([0, None, "x", [6, "float32", [0, 1 << 40, 1 << 40]]]), "claims at least"
    )


def test_empty_arrays_with_large_other_dimensions() -> None:
    # found by the fuzzer: an empty array's other dimensions may multiply past the message size
    response = PolicyResponse(None, a=np.zeros((4, 3, 3, 0), dtype=np.complex128))
    assert _round_trip(response) == response
    _expect_refusal(_message([0, None, "x", [4, "<f8", [0, 1 << 62, 1 << 62]]]), "claims at least")


def test_max_bytes_limit() -> None:
    data = PolicyResponse(None, a=np.zeros(100)).to_bytes()
    _expect_refusal(data, f"message of {len(data)} bytes exceeds max_bytes=500", max_bytes=500)
    assert PolicyResponse.from_bytes(data, max_bytes=len(data)).a.shape == (100,)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "message of 0 bytes is shorter than the 16-byte header"),
        (b"XXXX" + bytes(12), "bad magic b'XXXX', expected b'RLWF': not an rlightning message"),
        (
            struct.pack("<4sBBHII", b"RLWF", 2, 0, 0, 0, 0),
            "format version 2; this rlightning reads version 1",
        ),
        (struct.pack("<4sBBHII", b"RLWF", 1, 2, 0, 0, 0), "unknown flags 0x02"),
        (struct.pack("<4sBBHII", b"RLWF", 1, 0, 0, 99, 0), "header claims 99 bytes"),
        (struct.pack("<4sBBHII", b"RLWF", 1, 1, 0, 0, 5), "checksum mismatch"),
        (_message([0, None]) + bytes(8), "8 trailing bytes after the last buffer"),
        (_message([0, None, "a", [4, "<f8", [1]]]) + bytes(7), "a buffer claims 8 bytes at offset"),
        (_message([2, None]), "unknown response class code 2"),
        (_message([0, 5]), "env_id must be a str or nil, got int"),
        (_message([0, None, "a", 1, "a", 2]), "bad or duplicate field name 'a'"),
        (_message([0, None, "env_id", 1]), "bad or duplicate field name 'env_id'"),
        (_message([0, None, "to_dict", 1]), "refused by PolicyResponse: field name(s) 'to_dict'"),
        (_message([1, None, "action", 1]), "refused by MultiAgentPolicyResponse"),
        (_message([0, None, "a", [99]]), "field 'a': unknown tag 99"),
        (_message([0, None, "a", []]), "must start with an int tag"),
        (_message([0, None, "a", {"k": 1}]), "unexpected msgpack object of type dict"),
        (
            _message([0, None, "a", msgpack.ExtType(1, b"")]),
            "unexpected msgpack object of type ExtType",
        ),
        (_message([0, None, "a", [4, "|O", [1]]]), "unsupported numpy dtype '|O'"),
        (_message([0, None, "a", [6, "qint8", [1]]]), "unsupported torch dtype 'qint8'"),
        (_message([0, None, "a", [4, "<f8", [-1]]]), "an array dimension must be an int >= 0"),
        (_message([0, None, "a", [4, "<f8", [1] * 33]]), "a list of at most 32 ints"),
        (_message([0, None, "a", [2, [0, 1], 2]]), "a dict key must be a str"),
        (_message([0, None, "a", [2, "k", 1, "k", 2]]), "duplicate dict key 'k'"),
        (_message([0, None, "a", [7, "12a"]]), "not decimal digits"),
        (_message([0, None, "a", [7, "9" * 5000]]), "ints of at most 4300 decimal digits"),
        (_message([0, None, "a", [7, "9" * 4301]]), "holds 4301 digits"),
        (_message([0, None, "a", [2, float("nan"), 1]]), "a dict key is NaN"),
        (_message([0, None, "a", [2, [1, 1, float("nan")], 1]]), "a dict key is NaN"),
        (_message([0, None, "a", [8, 1.0]]), "a complex node must be [8, real, imag]"),
        (_message([0, None, "a", [9, [0, 5], [0]]]), "env ids must be a list of str or nil"),
        (_message(["x"]), "the header must be a msgpack array"),
        (
            struct.pack("<4sBBHII", b"RLWF", 1, 0, 0, 1, 0) + b"\xc1" + bytes(7),
            "invalid msgpack header",
        ),
    ],
)
def test_bad_messages_raise_wire_format_error(data: bytes, message: str) -> None:
    _expect_refusal(data, message)


def test_deep_nesting_and_class_mismatch_are_refused() -> None:
    node: Any = [0]
    for _ in range(wire.MAX_DEPTH + 5):
        node = [0, node]
    _expect_refusal(_message([0, None, "a", node]), "nesting deeper than MAX_DEPTH=64")
    raw_deep = b"\x91" * 100_000 + b"\xc0"  # 100k nested msgpack arrays
    data = struct.pack("<4sBBHII", b"RLWF", 1, 0, 0, len(raw_deep), 0) + raw_deep
    data += bytes(-len(data) % 8)
    _expect_refusal(data, "invalid msgpack header")
    single = PolicyResponse("e", action=1).to_bytes()
    with pytest.raises(
        WireFormatError,
        match=re.escape("the message holds a PolicyResponse, not a MultiAgentPolicyResponse"),
    ):
        MultiAgentPolicyResponse.from_bytes(single)
    with pytest.raises(
        TypeError, match=re.escape("from_bytes() takes bytes, bytearray or memoryview, got str")
    ):
        PolicyResponse.from_bytes("not bytes")


def test_every_truncation_and_every_bit_flip_is_caught() -> None:
    data = PolicyResponse("e", a=np.arange(5.0), b={"k": [1, "x"]}).to_bytes()
    for cut in range(len(data)):
        with pytest.raises(WireFormatError):
            PolicyResponse.from_bytes(data[:cut])
    original = PolicyResponse.from_bytes(data)
    for bit in range(len(data) * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        try:
            decoded = PolicyResponse.from_bytes(bytes(flipped))
        except WireFormatError:
            continue
        # only clearing the checksum flag leaves a valid message, and then the data is intact
        assert bit == 5 * 8
        assert decoded == original


# --------------------------------------------------------------------------------- torch
_TORCH_DTYPES = [
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128", "complex32",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
]  # fmt: skip


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("dtype_name", _TORCH_DTYPES)
def test_every_torch_dtype_round_trips_bit_exact(dtype_name: str) -> None:
    import torch

    dtype = getattr(torch, dtype_name)
    bits = torch.randint(0, 255, (3, 4, dtype.itemsize), dtype=torch.uint8)
    tensor = bits.view(dtype).reshape(3, 4)  # any bit pattern, NaNs included
    back = _round_trip(PolicyResponse(None, t=tensor, nested=[{"x": tensor.t()}]))
    assert back.t.dtype == dtype
    assert back.t.shape == (3, 4)
    assert back.t.device.type == "cpu"
    assert torch.equal(back.t.view(torch.uint8), tensor.view(torch.uint8))
    assert torch.equal(
        back.nested[0]["x"].contiguous().view(torch.uint8),
        tensor.t().contiguous().view(torch.uint8),
    )


@pytest.mark.torch
def test_tensor_decode_semantics(device: str) -> None:
    import torch

    tensor = torch.randn(4, 2, requires_grad=True, device=device)
    data = PolicyResponse(None, t=tensor, c=torch.tensor([1 + 1j]).conj()).to_bytes(checksum=False)
    back = PolicyResponse.from_bytes(data)
    assert back.t.device.type == "cpu"
    assert not back.t.requires_grad
    assert torch.equal(back.t, tensor.detach().cpu())
    assert torch.equal(back.c, torch.tensor([1 - 1j]))
    back.t.add_(1)  # read-only bytes: the tensor is a private copy, `data` is untouched
    assert torch.equal(PolicyResponse.from_bytes(data).t, tensor.detach().cpu())
    shared = bytearray(data)
    view = PolicyResponse.from_bytes(shared).t  # writable buffer: the tensor aliases it
    view.zero_()
    assert not torch.equal(PolicyResponse.from_bytes(shared).t, tensor.detach().cpu())


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_unsupported_tensors_raise_type_error_naming_the_field() -> None:
    import torch

    cases = [
        (
            torch.nn.Parameter(torch.ones(1)),
            "field 'p': tensor subclass Parameter is not supported",
        ),
        (torch.ones(2).to_sparse(), "field 'p': torch.sparse_coo / quantized / nested tensors"),
        (torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8), "quantized"),
    ]
    for value, message in cases:
        with pytest.raises(TypeError, match=re.escape(message)):
            PolicyResponse(None, p=value).to_bytes()


def test_tensor_message_without_torch_raises_torch_unavailable() -> None:
    data = _message([0, "e", "t", [6, "bfloat16", [2]]], payload=bytes(4))
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from rlightning import PolicyResponse, wire\n"
        "import numpy as np\n"
        f"data = {data!r}\n"
        "try:\n"
        "    PolicyResponse.from_bytes(data)\n"
        "except wire.TorchUnavailableError as exc:\n"
        "    assert isinstance(exc, wire.WireFormatError) and isinstance(exc, ImportError)\n"
        "    print('refused:', exc)\n"
        "r = PolicyResponse('e', a=np.arange(3))\n"
        "assert PolicyResponse.from_bytes(r.to_bytes()) == r\n"
        "assert 'torch' not in {k for k, v in sys.modules.items() if v is not None}\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(CORE_SRC)},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "refused: field 't': the message holds a torch tensor (dtype bfloat16, shape (2,))"
        in result.stdout
    )


# ------------------------------------------------------------------ property tests and fuzz
_DTYPES = st.sampled_from(sorted(_NUMPY_DTYPES))
_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**80), 2**80),
    st.floats(),
    st.complex_numbers(allow_nan=False),  # tree_equal does not treat complex NaN as equal
    st.text(max_size=6),
    st.binary(max_size=6),
    hnp.arrays(_DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)),
    _DTYPES.flatmap(lambda d: hnp.from_dtype(np.dtype(d))),
)
_keys = st.one_of(
    st.text(max_size=4), st.integers(-5, 5), st.tuples(st.integers(0, 3), st.text(max_size=2))
)
_values = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.lists(inner, max_size=3).map(PerEnv),
        st.dictionaries(_keys, inner, max_size=3),
    ),
    max_leaves=10,
)
_responses = st.builds(
    lambda env_id, fields: PolicyResponse(env_id, **fields),
    st.one_of(st.none(), st.text(max_size=5)),
    st.dictionaries(
        st.sampled_from(["action", "value", "obs", "state", "ts_env_sent_ns"]), _values
    ),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_responses)
def test_round_trip_any_structure(response: PolicyResponse) -> None:
    assert PolicyResponse.from_bytes(response.to_bytes()) == response
    assert PolicyResponse.from_bytes(response.to_bytes(checksum=False), copy=True) == response


def _decode_or_refuse(data: bytes) -> None:
    with contextlib.suppress(WireFormatError):
        PolicyResponse.from_bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_responses, st.data())
def test_fuzz_mutated_messages_never_raise_anything_else(
    response: PolicyResponse, data: st.DataObject
) -> None:
    message = bytearray(response.to_bytes(checksum=False))
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        at = data.draw(st.integers(0, max(len(message) - 1, 0)))
        if action == "flip" and message:
            message[at] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "set" and message:
            message[at] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del message[at:]
        elif action == "insert":
            message[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del message[at : at + data.draw(st.integers(1, 8))]
    _decode_or_refuse(bytes(message))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes_after_a_valid_prefix(tail: bytes) -> None:
    for prefix_len in (0, 4, 16):
        _decode_or_refuse(
            struct.pack("<4sBBHII", b"RLWF", 1, 0, 0, len(tail), 0)[:prefix_len] + tail
        )


# ------------------------------------------- hostile messages: errors, repr and key bounds
from benchmarks.fuzz_wire import (  # noqa: E402  (the generators the long fuzz run uses)
    BUFFER_KINDS,
    KEY_KINDS,
    check_hostile,
    colliding_keys,
    deep_node_messages,
    huge_empty_shape_message,
    keys_message,
    stacked_hostile_message,
)


@pytest.mark.parametrize("place", sorted(deep_node_messages(1)))
def test_a_node_nested_1000_deep_is_refused_with_a_short_wire_format_error(place: str) -> None:
    # the decoder quotes the bad node in its message: a repr of 1000 levels raised RecursionError
    with pytest.raises(WireFormatError) as info:
        PolicyResponse.from_bytes(deep_node_messages(1000)[place])
    assert len(str(info.value)) <= 400


def test_error_messages_quote_a_bounded_part_of_a_huge_value() -> None:
    name = "n" * 1_000_000
    for data in (
        _message([0, None, name, 1, name, 2]),  # duplicate field name
        _message([0, None, "a", [2, name, 1, name, 2]]),  # duplicate dict key
        _message([0, None, "a", [2, b"k" * 1_000_000, 1, b"k" * 1_000_000, 2]]),
        _message([0, None, "a", [4, "<f8", [[name]]]]),  # a dimension that is no int
    ):
        with pytest.raises(WireFormatError) as info:
            PolicyResponse.from_bytes(data, max_header_bytes=1 << 23)
        assert len(str(info.value)) <= 400


@pytest.mark.parametrize(
    ("tensor", "dims"),
    [
        (False, [0, 1 << 40]),
        (False, [1 << 16, 0]),
        (False, [1 << 8, 1 << 8, 0, 1 << 20]),
        pytest.param(True, [0, 1 << 30], marks=pytest.mark.torch),
        pytest.param(True, [1 << 8, 1 << 8, 0], marks=pytest.mark.torch),
    ],
)
def test_a_zero_size_array_with_huge_dimensions_decodes_with_a_bounded_repr(
    tensor: bool, dims: list[int]
) -> None:
    # a 40-byte message: the repr called tolist(), one empty list per row (for a (2**22, 0)
    # tensor: 9 s and 270 MiB)
    if tensor:
        pytest.importorskip("torch")
    data = huge_empty_shape_message(tensor, dims)
    assert len(data) <= 48
    decoded = PolicyResponse.from_bytes(data)
    assert tuple(decoded.x.shape) == tuple(dims)
    tracemalloc.start()
    try:
        text = repr(decoded)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 10
    assert f"shape={tuple(dims)}" in text and len(text) < 200


@pytest.mark.parametrize("tensor", [False, pytest.param(True, marks=pytest.mark.torch)])
def test_zero_size_arrays_with_more_rows_than_max_empty_rows_or_the_message_are_refused(
    tensor: bool,
) -> None:
    # rows before the first 0 cost whoever iterates or unbinds them, yet hold no bytes
    if tensor:
        torch = pytest.importorskip("torch")
    for dims in ([1 << 22, 0], [1 << 9, 1 << 9, 0, 5], [1 << 40, 0]):
        rows = dims[0] * (dims[1] or 1)
        _expect_refusal(
            huge_empty_shape_message(tensor, dims),
            f"a zero-size array of shape {dims} has {rows} rows before its first zero-size "
            f"dimension, which brings the message's zero-size arrays and tensors to {rows} rows, "
            "more than 65536 (at most MAX_EMPTY_ROWS=65536",
        )
    rows = wire.MAX_EMPTY_ROWS + 1
    empty = torch.zeros((rows, 0)) if tensor else np.zeros((rows, 0))
    with pytest.raises(
        ValueError,
        match=re.escape("to_bytes(): field 'empty': zero-size arrays and tensors with 65537 rows"),
    ):
        PolicyResponse(None, empty=empty).to_bytes()
    # a message with as many bytes as rows carries it (a batch of that many envs)
    response = PolicyResponse(None, empty=empty, flags=np.zeros(rows, dtype=np.uint8))
    back = _round_trip(response)
    assert tuple(back.empty.shape) == (rows, 0) and back.flags.shape == (rows,)


@pytest.mark.parametrize("kind", ["float", "float+int", "tuple"])
def test_more_than_max_keys_per_hash_colliding_keys_are_refused_both_ways(kind: str) -> None:
    keys = colliding_keys(kind, wire.MAX_KEYS_PER_HASH + 1, wire.MAX_KEYS_PER_HASH + 1, Random(0))
    assert len({hash(key) for key in keys}) == 1 and len(set(keys)) == len(keys)
    key_type = type(keys[0]).__name__
    _expect_refusal(
        keys_message(keys),
        f"more than MAX_KEYS_PER_HASH=16 {key_type} keys of one dict share a hash value",
    )
    with pytest.raises(ValueError, match=re.escape("to_bytes(): field 'obs': more than")):
        PolicyResponse(None, obs=dict.fromkeys(keys)).to_bytes()
    fits = PolicyResponse(None, obs=dict.fromkeys(keys[:-1]))
    assert _round_trip(fits) == fits


@pytest.mark.parametrize("kind", KEY_KINDS)
def test_the_largest_colliding_groups_of_each_key_kind_round_trip_or_are_refused(
    kind: str,
) -> None:
    # int keys (at most 9 share a hash in 64 bits) and str/bytes (at most 3) are not counted:
    # they cannot collide much; floats (~34) and tuples (any number) are refused past 16.
    keys = colliding_keys(kind, 1024, 256, Random(1))
    groups: dict[int, int] = {}
    for key in keys:
        groups[hash(key)] = groups.get(hash(key), 0) + 1
    data = keys_message(keys, per_dict=256)
    if kind == "nan":  # never collide (hashed by identity), but refused: unequal to themselves
        with pytest.raises(WireFormatError, match="a dict key is NaN"):
            PolicyResponse.from_bytes(data)
    elif kind in ("int", "str+bytes") or max(groups.values()) <= wire.MAX_KEYS_PER_HASH:
        assert len(PolicyResponse.from_bytes(data).obs[0]) == len(keys)
    else:
        with pytest.raises(
            WireFormatError, match=r"more than MAX_KEYS_PER_HASH=16 (float|tuple) keys"
        ):
            PolicyResponse.from_bytes(data)


def test_honest_hash_collisions_of_small_coordinates_round_trip() -> None:
    # hash(-1) == hash(-2): the 16 tuples of four coordinates in {-1, -2} share one hash
    grid = {key: i for i, key in enumerate(itertools.product((-1, -2), repeat=4))}
    assert len({hash(key) for key in grid}) == 1
    response = PolicyResponse(None, obs=grid)
    assert _round_trip(response) == response
    with pytest.raises(ValueError, match="MAX_KEYS_PER_HASH=16"):
        PolicyResponse(None, obs=dict.fromkeys(itertools.product((-1, -2), repeat=5))).to_bytes()


_hostile = st.one_of(
    st.builds(
        lambda depth, place: deep_node_messages(depth)[place],
        st.integers(60, 1000),
        st.sampled_from(sorted(deep_node_messages(1))),
    ),
    st.builds(
        huge_empty_shape_message,
        st.just(False),
        st.lists(st.sampled_from([0, 1, 3, 1 << 20, 1 << 40]), min_size=1, max_size=32).filter(
            lambda dims: 0 in dims
        ),
    ),
    st.builds(
        lambda kind, group, seed: keys_message(colliding_keys(kind, group, 64, Random(seed))),
        st.sampled_from(KEY_KINDS),
        st.integers(1, 40),
        st.integers(0, 2**16),
    ),
)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_hostile, st.sampled_from(sorted(BUFFER_KINDS)))
def test_fuzz_hostile_messages_decode_or_refuse_with_bounded_errors_and_reprs(
    data: bytes, kind: str
) -> None:
    # as bytes and as another buffer kind (alike); what decodes: repr, unbind (its peak within
    # the page's bound), stack and re-encoding checked (benchmarks/fuzz_wire.py::check_decoded)
    check_hostile(data, kind)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**32), st.sampled_from(sorted(BUFFER_KINDS)))
def test_fuzz_stacked_hostile_messages_unbind_within_the_page_bounds(seed: int, kind: str) -> None:
    # zero-size rows, shared values, PerEnv and arrays of n rows, env-ids paths sharing a hash
    check_hostile(stacked_hostile_message(Random(seed), HAS_TORCH, max_rows=4096), kind)


# ------------------------------------------------------- decoder: bounded time and memory
class _BudgetError(Exception):
    """Raised by the alarm when a decode runs past its time budget."""


@contextlib.contextmanager
def _time_budget(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` (the decoder's loops are Python, so this works)."""

    def _on_alarm(signum: int, frame: Any) -> None:
        raise _BudgetError

    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_colliding_big_int_dict_keys_decode_in_linear_time() -> None:
    modulus = (1 << 61) - 1  # CPython's int hash is k mod (2**61 - 1): these all hash to 0
    node: list[Any] = [2]
    for i in range(1, 20_001):
        node += [[7, str(i * modulus)], None]
    data = _message([0, "e", "f", node])
    assert len(data) < 600_000
    start = time.perf_counter()
    try:
        with _time_budget(2.0):  # ~100x what a linear decode of 20,000 keys needs
            PolicyResponse.from_bytes(data)
    except _BudgetError:
        pytest.fail(
            f"from_bytes of a {len(data)} byte message was still running after "
            f"{time.perf_counter() - start:.1f} s (colliding dict keys)"
        )
    except WireFormatError:
        pass  # refusing such keys is fine too


def test_decoding_memory_is_bounded_by_the_header_limit() -> None:
    # Unpacking a msgpack header builds Python objects (up to ~80 bytes per header byte for
    # tiny nodes): max_header_bytes, checked before unpacking, is what bounds that memory.
    data = _message([0, "e", "f", [0] + [[0]] * 50_000])
    header_len = struct.unpack_from("<I", data, 8)[0]
    with pytest.raises(WireFormatError, match=re.escape("exceeds max_header_bytes=1024")):
        PolicyResponse.from_bytes(data, max_header_bytes=1024)
    tracemalloc.start()
    try:
        PolicyResponse.from_bytes(data)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak <= 100 * header_len, f"peak {peak} bytes for a {header_len} byte header"


def test_a_deep_msgpack_nesting_bomb_is_refused_with_wire_format_error() -> None:
    header = b"\x91" * 100_000 + b"\xc0"  # [[[[...None...]]]] 100,000 deep, 100 kB
    data = struct.pack("<4sBBHII", b"RLWF", 1, 0, 0, len(header), 0) + header
    data += bytes((-len(data)) % 8)
    with pytest.raises(WireFormatError):
        PolicyResponse.from_bytes(data)


def test_many_tiny_empty_arrays_decode_or_refuse_cleanly() -> None:
    data = _message([0, "e", "f", [0] + [[4, "|b1", [0]]] * 2_000])
    back = PolicyResponse.from_bytes(data)
    assert len(back.f) == 2_000 and all(a.shape == (0,) for a in back.f)


def test_a_tiny_message_claiming_a_huge_array_is_refused() -> None:
    data = _message([0, "e", "f", [4, "<f8", [1 << 20, 1 << 20]]])
    assert len(data) < 100
    with pytest.raises(WireFormatError, match="claims"):
        PolicyResponse.from_bytes(data)


def test_truncations_and_bit_flips_raise_only_wire_format_error() -> None:
    data = PolicyResponse("e", a=np.arange(5, dtype=np.int16), b={"k": [1, 2.5, "s"]}).to_bytes()
    for cut in range(len(data)):
        with pytest.raises(WireFormatError):
            PolicyResponse.from_bytes(data[:cut])
    for bit in range(0, 8 * len(data), 7):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with contextlib.suppress(WireFormatError):
            PolicyResponse.from_bytes(bytes(flipped))


def test_oversized_message_is_refused_by_max_bytes_before_decoding() -> None:
    data = PolicyResponse("e", a=np.zeros(1000)).to_bytes()
    with pytest.raises(WireFormatError, match=re.escape(f"max_bytes={len(data) - 1}")):
        PolicyResponse.from_bytes(data, max_bytes=len(data) - 1)
    assert PolicyResponse.from_bytes(data, max_bytes=len(data)).a.shape == (1000,)


def test_hostile_env_ids_of_a_stacked_message_fail_cleanly_on_unbind() -> None:
    ids_node = [9, [0, "a", "b", "c"], [0]]
    data = _message([0, None, "env_ids", ids_node, "x", [4, "<i8", [2]]], bytes(16))
    batch = PolicyResponse.from_bytes(data)
    with pytest.raises(ValueError, match=re.escape("field 'x'")):
        batch.unbind()


# ---------------------------------------------------------------------- decoder: arguments
def test_non_contiguous_buffer_is_a_type_error() -> None:
    data = PolicyResponse("e", a=np.arange(3)).to_bytes()
    every_other: Any = np.frombuffer(data * 2, np.uint8)[::2]
    strided = memoryview(every_other)
    with pytest.raises(TypeError, match="contiguous"):
        PolicyResponse.from_bytes(strided)


@pytest.mark.parametrize("bad", [True, "4096"])
def test_max_bytes_of_the_wrong_kind_is_a_type_error_naming_it(bad: Any) -> None:
    data = PolicyResponse("e", a=1).to_bytes()
    with pytest.raises(TypeError, match="max_bytes"):
        PolicyResponse.from_bytes(data, max_bytes=bad)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_bytes_bytearray_and_memoryview_decode_alike(kind: type) -> None:
    response = PolicyResponse("e", a=np.arange(6, dtype=np.float32).reshape(2, 3), s="x")
    assert PolicyResponse.from_bytes(kind(response.to_bytes())) == response


@pytest.mark.parametrize("value", ["text", None, 12, [1, 2]])
def test_from_bytes_of_a_non_buffer_is_a_type_error(value: Any) -> None:
    with pytest.raises(TypeError, match="from_bytes"):
        PolicyResponse.from_bytes(value)


# ------------------------------------------------------------------------------- encoder
def test_huge_int_round_trips_or_is_refused_naming_the_field() -> None:
    response = PolicyResponse("e", a={"k": 10**5000})
    try:
        back = _round_trip(response)
    except (TypeError, ValueError) as exc:
        message = str(exc)
    else:
        assert back == response
        return
    assert "field 'a'" in message, message


@pytest.mark.torch
def test_meta_tensor_is_a_type_error_naming_the_field() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="field 'a'"):
        PolicyResponse("e", a=torch.empty(2, device="meta")).to_bytes()


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (np.array([1, "x"], dtype=object), "dtype object"),
        (np.zeros(2, dtype=[("x", "<i4")]), "not supported"),
        (np.array(["ab"]), "<U2"),
        (np.ma.array([1, 2], mask=[False, True]), "MaskedArray"),
        (np.str_("x"), "numpy.str_"),
        (bytearray(b"x"), "bytearray"),
    ],
)
def test_unsupported_values_are_type_errors_naming_the_field(value: Any, fragment: str) -> None:
    with pytest.raises(TypeError, match=re.escape(fragment)) as info:
        PolicyResponse("e", a={"k": [1, (2, value)]}).to_bytes()
    assert "field 'a'['k'][1][1]" in str(info.value)


def test_unsupported_dict_key_deep_inside_names_the_path() -> None:
    with pytest.raises(TypeError, match=re.escape("field 'a'[0]")):
        PolicyResponse("e", a=[{frozenset(): 1}]).to_bytes()


def test_self_referencing_field_is_refused_not_a_recursion_error() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="MAX_DEPTH"):
        PolicyResponse("e", a=cycle).to_bytes()


def test_non_contiguous_negative_stride_and_big_endian_arrays_keep_their_values() -> None:
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    strided = base[::-1, ::-2]
    big = np.arange(5, dtype=">i4")
    back = _round_trip(PolicyResponse("e", s=strided, b=big))
    np.testing.assert_array_equal(back.s, strided)
    np.testing.assert_array_equal(back.b, big)
    assert back.b.dtype == np.dtype("<i4")


def test_empty_array_with_huge_other_dimensions_round_trips_without_allocating() -> None:
    empty = np.zeros((0, 1 << 40), dtype=np.int8)
    assert _round_trip(PolicyResponse("e", a=empty)).a.shape == (0, 1 << 40)


def test_crc_detects_a_flipped_payload_bit() -> None:
    data = bytearray(PolicyResponse("e", a=np.arange(4)).to_bytes())
    data[-1] ^= 0x10
    with pytest.raises(WireFormatError, match="checksum"):
        PolicyResponse.from_bytes(bytes(data))
    assert zlib.crc32(bytes(data[16:])) != struct.unpack_from("<I", data, 12)[0]


def test_stacked_response_survives_the_wire_and_unbinds() -> None:
    responses = [PolicyResponse(f"e{i}", action=np.int64(i), t=PerEnv([i])) for i in range(3)]
    batch = PolicyResponse.stack(responses)
    assert PolicyResponse.from_bytes(batch.to_bytes()).unbind() == responses


def test_a_str_subclass_env_id_is_refused_not_decoded_as_an_unequal_str() -> None:
    response = PolicyResponse(np.str_("env-0"), action=1)
    with pytest.raises(TypeError, match=r"env_id .*env-0.* is a str_, a str subclass"):
        response.to_bytes()
    plain = PolicyResponse("env-0", action=1)
    assert PolicyResponse.from_bytes(plain.to_bytes()) == plain


def test_a_message_cut_inside_its_data_says_it_may_be_truncated() -> None:
    data = PolicyResponse("e0", action=np.arange(10.0)).to_bytes()
    for cut in (len(data) - 1, len(data) - 40):
        with pytest.raises(
            WireFormatError, match=f"message of {cut} bytes is corrupted or truncated"
        ):
            PolicyResponse.from_bytes(data[:cut])
