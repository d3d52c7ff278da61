"""Adversarial inputs for batched responses and the wire format (issue 6).

Each test states what a careful user wants. Tests marked ``xfail(strict=True)`` record a defect
found by this review (the reason says which); the others are edge cases that already behave.
"""

from __future__ import annotations

import re
import signal
import struct
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import msgpack
import numpy as np
import pytest

from rlightning import MultiAgentPolicyResponse, PerEnv, PolicyResponse, WireFormatError


def _message(header: list[Any], payload: bytes = b"") -> bytes:
    """Hand-build a version-1 message (layout of docs/transport.md) without a checksum."""
    packed: bytes = msgpack.packb(header, use_bin_type=True)
    body = packed + bytes((-(16 + len(packed))) % 8) + payload
    return struct.pack("<4sBBHII", b"RLWF", 1, 0, 0, len(packed), 0) + body


def _round_trip(response: PolicyResponse) -> PolicyResponse:
    return type(response).from_bytes(response.to_bytes())


class _BudgetError(Exception):
    """Raised by the alarm when a decode runs past its time budget."""


@contextmanager
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


# ------------------------------------------------------------------------------ decoder: DoS


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
        with suppress(WireFormatError):
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


# ------------------------------------------------------------------------- decoder: arguments


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


# ---------------------------------------------------------------------------------- encoder


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


# -------------------------------------------------------------------------- stack / unbind


def test_stack_of_an_empty_list_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="at least one response"):
        PolicyResponse.stack([])


def test_stack_of_mixed_classes_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="one class"):
        PolicyResponse.stack(
            [PolicyResponse("a", action=1), MultiAgentPolicyResponse("b", action={"x": 1})]
        )


def test_stack_keeps_none_and_str_env_ids_in_order() -> None:
    batch = PolicyResponse.stack([PolicyResponse("a", action=1), PolicyResponse(None, action=2)])
    assert list(batch.env_ids) == ["a", None]
    assert [r.env_id for r in batch.unbind()] == ["a", None]


def test_stack_refuses_arrays_of_different_byte_order_naming_the_env() -> None:
    with pytest.raises(ValueError, match=re.escape("field 'v' has dtype >i4 for env 'a'")):
        PolicyResponse.stack(
            [
                PolicyResponse("a", v=np.arange(2, dtype=">i4")),
                PolicyResponse("b", v=np.arange(2, dtype="<i4")),
            ]
        )


def test_stack_of_a_stacked_response_is_refused() -> None:
    batch = PolicyResponse.stack([PolicyResponse("a", action=1)])
    with pytest.raises(ValueError, match="already has a field 'env_ids'"):
        PolicyResponse.stack([batch, batch])


def test_stack_of_a_self_referencing_field_is_a_value_error() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="'x'"):
        PolicyResponse.stack([PolicyResponse("a", x=cycle), PolicyResponse("b", x=cycle)])


def test_unbind_of_a_self_referencing_field_is_a_value_error() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="'x'"):
        PolicyResponse(None, env_ids=["a"], x=cycle).unbind()


def test_unbind_of_a_response_that_was_never_stacked_is_refused() -> None:
    response = PolicyResponse("env-7", action=np.arange(3))
    with pytest.raises(ValueError, match="env-7"):
        response.unbind()


def test_unbind_with_env_ids_of_the_wrong_length_names_the_field() -> None:
    with pytest.raises(ValueError, match=re.escape("field 'x'")):
        PolicyResponse(None, env_ids=["a", "b"], x=np.arange(3)).unbind()


def test_unbind_with_non_str_env_ids_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="env_ids"):
        PolicyResponse(None, env_ids=[1, 2], x=np.arange(2)).unbind()


def test_multi_agent_stack_with_other_agents_names_the_field() -> None:
    with pytest.raises(ValueError, match=re.escape("field 'action' has keys ['x']")):
        MultiAgentPolicyResponse.stack(
            [
                MultiAgentPolicyResponse("a", action={"x": 1}),
                MultiAgentPolicyResponse("b", action={"y": 1}),
            ]
        )


def test_stacked_response_survives_the_wire_and_unbinds() -> None:
    responses = [PolicyResponse(f"e{i}", action=np.int64(i), t=PerEnv([i])) for i in range(3)]
    batch = PolicyResponse.stack(responses)
    assert PolicyResponse.from_bytes(batch.to_bytes()).unbind() == responses
