"""The safe wire format: round trips, refusals, and a short fuzz of the decoder."""

from __future__ import annotations

import contextlib
import re
import struct
import subprocess
import sys
import tracemalloc
import zlib
from collections import OrderedDict, namedtuple
from pathlib import Path
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
    # a shape whose product overflows 64 bits is refused the same way
    _expect_refusal(
        _message([0, None, "x", [6, "float32", [1 << 40, 1 << 40, 0]]]), "claims at least"
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
        (_message([0, None, "a", [7, "9" * 5000]]), "a big-int node must be [7, digits]"),
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
