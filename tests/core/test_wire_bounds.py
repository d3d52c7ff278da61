"""The wire format's promises hold after decoding too (issue 21 and item 6 of issue 18).

Every C-contiguous buffer of bytes decodes as ``bytes``; ``unbind()`` of a decoded message stays
proportional to its size (env-ids paths that share a hash, zero-size rows counted per message, a
shared value written into every row); the encoder refuses everything the decoder refuses (and
every int the decoder accepts re-encodes); NaN dict keys are refused both ways; decoding memory
per header byte stays under the bound docs/transport.md states, for every kind of node.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from random import Random
from typing import Any

import numpy as np
import pytest
from benchmarks.fuzz_wire import (
    BUFFER_KINDS,
    NODE_KINDS,
    _colliding_pairs,
    check_buffer_kind,
    check_decoded,
    decode_outcome,
    message,
    unbind_cases,
)

import rlightning
from rlightning import EnvIds, PerEnv, PolicyResponse, WireFormatError, wire

HAS_TORCH = importlib.util.find_spec("torch") is not None
ROOT = Path(__file__).resolve().parents[2]
#: Where the rlightning under test comes from (a checkout's src or site-packages): the subprocess
#: below measures that one.
CORE_SRC = Path(rlightning.__file__).resolve().parents[1]

#: docs/transport.md: decoding makes the process hold at most this many bytes per header byte
#: (besides the message), plus a few MiB once (torch's first tensor, numpy's caches).
BYTES_PER_HEADER_BYTE = 100
ONCE = 8 << 20


class _BudgetError(Exception):
    """Raised by the alarm when a call runs past its time budget."""


@contextlib.contextmanager
def _time_budget(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` (unbind's and the decoder's loops are Python)."""

    def _on_alarm(signum: int, frame: Any) -> None:
        raise _BudgetError

    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _round_trip(response: PolicyResponse) -> PolicyResponse:
    return PolicyResponse.from_bytes(response.to_bytes())


# ----------------------------------------------------------------------------- buffer kinds
@pytest.mark.parametrize("kind", sorted(BUFFER_KINDS))
def test_every_c_contiguous_buffer_of_bytes_decodes_as_bytes(kind: str) -> None:
    # RawArray('B'), ctypes c_uint8/c_char arrays and numpy 'S1'/'V1' views raised
    # NotImplementedError, and memoryview.cast('c') a false "non-zero padding" error
    response = PolicyResponse(
        "e",
        a=np.arange(6, dtype=np.float32).reshape(2, 3),
        s="x",
        z=np.zeros((3, 0)),
        k={"n": [1, None, 2**70]},
    )
    data = response.to_bytes()
    buffer = BUFFER_KINDS[kind](data)
    back = PolicyResponse.from_bytes(buffer)
    assert back == response
    writable = not memoryview(buffer).readonly
    assert back.a.flags.writeable == writable  # a view of the buffer, read-only where it is
    for bad in (data[:-8], data[:20] + b"\xff" + data[21:], data + bytes(8)):
        check_buffer_kind(kind, bad, decode_outcome(bad))  # the same refusal, word for word


@pytest.mark.torch
def test_a_shared_memory_buffer_gives_tensors_and_arrays_that_alias_it() -> None:
    import torch

    response = PolicyResponse("e", t=torch.arange(4, dtype=torch.int32), a=np.arange(3.0))
    shared = BUFFER_KINDS["RawArray B"](response.to_bytes(checksum=False))  # written below
    back = PolicyResponse.from_bytes(shared)
    back.t.add_(10)
    back.a[0] = 7.0  # writable buffer: both alias it
    again = PolicyResponse.from_bytes(shared)
    assert torch.equal(again.t, torch.arange(10, 14, dtype=torch.int32))
    assert again.a[0] == 7.0


def test_a_strided_buffer_is_still_a_type_error() -> None:
    data = PolicyResponse("e", a=1).to_bytes()
    with pytest.raises(TypeError, match="C-contiguous"):
        PolicyResponse.from_bytes(np.frombuffer(data * 2, np.uint8)[::2])


# ------------------------------------------------------------------ env-ids paths sharing a hash
def _paths_message(count: int) -> bytes:
    pairs = _colliding_pairs(Random(0).getrandbits(64), count, Random(1))
    assert len({hash(pair) for pair in pairs}) == 1
    paths = [[1, a, b] for a, b in pairs]
    return message([0, None, "env_ids", [9, [0, "a"], [0, *paths]], "x", [3, 1]])


def test_env_ids_paths_sharing_a_hash_are_refused_past_max_keys_per_hash() -> None:
    # unbind() puts the paths in a frozenset: 20,000 sharing a hash (400 KB) took ~19 s, about
    # 2,000x a same-size message of random paths, and grew quadratically
    data = _paths_message(20_000)
    assert len(data) > 400_000
    with _time_budget(10), pytest.raises(WireFormatError) as info:
        PolicyResponse.from_bytes(data)
    assert "more than MAX_KEYS_PER_HASH=16 env-ids paths share a hash value" in str(info.value)
    with pytest.raises(WireFormatError, match="MAX_KEYS_PER_HASH=16 env-ids paths"):
        PolicyResponse.from_bytes(_paths_message(wire.MAX_KEYS_PER_HASH + 1))
    fits = PolicyResponse.from_bytes(_paths_message(wire.MAX_KEYS_PER_HASH))
    assert len(fits.env_ids.array_rows) == 16
    assert [row.x for row in fits.unbind()] == [1]


def test_to_bytes_refuses_env_ids_paths_the_decoder_refuses() -> None:
    pairs = _colliding_pairs(Random(0).getrandbits(64), 17, Random(1))
    response = PolicyResponse(None, env_ids=EnvIds(["a"], pairs), x=PerEnv([1]))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "to_bytes(): field 'env_ids'['array_rows']: more than MAX_KEYS_PER_HASH=16 "
            "env-ids paths share a hash value"
        ),
    ):
        response.to_bytes()
    fits = PolicyResponse(None, env_ids=EnvIds(["a"], pairs[:16]), x=PerEnv([1]))
    assert _round_trip(fits).env_ids.array_rows == tuple(pairs[:16])


# ----------------------------------------------------------- zero-size rows, per message
@pytest.mark.parametrize(
    "node", [[4, "|b1", [65536, 0]], pytest.param([6, "bool", [65536, 0]], marks=pytest.mark.torch)]
)
def test_zero_size_rows_are_counted_per_message_not_per_array(node: list[Any]) -> None:
    # sixty (65536, 0) tensors in a 1 KB message passed one by one; unbind() then took 13-21 s
    # and grew peak RSS by 2.3 GB
    sixty = message([0, None] + [x for k in range(60) for x in (f"t{k}", node)])
    assert len(sixty) < 1200
    with pytest.raises(WireFormatError) as info:
        PolicyResponse.from_bytes(sixty)
    assert str(info.value).startswith(
        "field 't1': a zero-size array of shape [65536, 0] has 65536 rows before its first "
        "zero-size dimension, which brings the message's zero-size arrays and tensors to 131072 "
        "rows, more than 65536"
    )
    two = message([0, None, "a", [4, "|b1", [40_000, 0]], "b", [4, "<f8", [40_000, 0, 3]]])
    with pytest.raises(WireFormatError, match="to 80000 rows, more than 65536"):
        PolicyResponse.from_bytes(two)
    one = PolicyResponse.from_bytes(message([0, None, "a", [4, "|b1", [40_000, 0]]]))
    assert one.a.shape == (40_000, 0)
    # rows before a leading 0 are none: (0, 2**30) arrays cost nothing to iterate
    many = message([0, None] + [x for k in range(100) for x in (f"e{k}", [4, "|b1", [0, 1 << 30]])])
    assert len(vars(PolicyResponse.from_bytes(many))) == 101


def test_to_bytes_counts_zero_size_rows_per_message_too() -> None:
    response = PolicyResponse(None, a=np.zeros((40_000, 0)), b=np.zeros((30_000, 2, 0)))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "to_bytes(): field 'b': zero-size arrays and tensors with 100000 rows in all before "
            "their first zero-size dimension (60000 in this field)"
        ),
    ):
        response.to_bytes()
    # a message holding as many bytes as the rows carries them
    batch = PolicyResponse(
        None, a=np.zeros((40_000, 0)), b=np.zeros((40_000, 0)), c=np.zeros(80_000, np.uint8)
    )
    assert _round_trip(batch) == batch


# ------------------------------------------------------------ unbind(): proportional work
@pytest.mark.parametrize(
    "case",
    ["(65536, 0) array + 1,000-item shared list", "20,000-byte array + 10,000-item shared list"],
)
def test_unbind_of_a_small_message_refuses_to_write_a_shared_value_into_every_row(
    case: str,
) -> None:
    # a free (65536, 0) array beside a 1,000-item list rebuilt the list 65,536 times: ~7-10 s and
    # 1 GB from 1 KB; a 30 KB message of a 20,000-byte array and a 10,000-item list took 15 s and
    # 3.1 GB. The split is refused before anything is built.
    decoded = PolicyResponse.from_bytes(unbind_cases(1 << 16)[case])
    with (
        _time_budget(10),
        pytest.raises(
            ValueError,
            match=r"^unbind\(\): \d+ rows of \d+ values each \(\d+ values to write, field 'l'",
        ) as info,
    ):
        decoded.unbind()
    assert "UNBIND_WORK_FACTOR=16 values per item" in str(info.value)


def test_unbind_still_splits_batches_with_shared_values_and_free_rows() -> None:
    ids = [f"env-{i}" for i in range(4096)]
    shared = {f"s{k}": 0.5 for k in range(100)}
    batch = PolicyResponse(
        None,
        env_ids=ids,
        action=np.arange(4096, dtype=np.int64),
        config={f"k{k}": k for k in range(50)},
        **shared,
    )
    rows = _round_trip(batch).unbind()
    assert [row.env_id for row in rows] == ids
    assert rows[7].action == 7 and rows[7].config == batch.config and rows[7].s3 == 0.5
    # the most rows a message gets for free still split (65,536 responses)
    free = PolicyResponse.from_bytes(unbind_cases(1 << 16)["(65536, 0) array + 13-key shared dict"])
    rows = free.unbind()
    assert len(rows) == 65536 and rows[-1].e.shape == (0,) and len(rows[-1].d) == 13


@pytest.mark.parametrize(
    "case",
    [
        "(65536, 0) array",
        "(65536, 0) array + 13-key shared dict",
        "(65536, 0) array + 13 shared fields",
        "PerEnv of 65536 nils",
        "(65536,) uint8 array",
        "(65536,) array + PerEnv of 65536 + 14 shared fields",
    ],
)
def test_unbind_of_the_costliest_messages_it_accepts_stays_within_the_page_bound(
    case: str,
) -> None:
    # docs/transport.md: unbind()'s peak (tracemalloc) is at most 1.5 KiB per byte of
    # max(message size, 65536); these cases come nearest (benchmarks/fuzz_wire.py --engine unbind)
    data = unbind_cases(1 << 16)[case]
    figures = check_decoded(PolicyResponse.from_bytes(data), len(data))  # asserts the bound
    assert figures["unbind"].endswith(" rows")
    assert figures["reencode"] == "equal"


@pytest.mark.parametrize("kind", ["stack", "repr"])
def test_stack_and_repr_of_the_hostile_messages_are_bounded(kind: str) -> None:
    for name, data in unbind_cases(1 << 16).items():
        decoded, _ = decode_outcome(data)
        if decoded is None:
            continue
        start = time.perf_counter()
        if kind == "stack":
            with contextlib.suppress(ValueError, TypeError):
                PolicyResponse.stack([decoded, decoded])
        else:
            assert len(repr(decoded)) <= 2000 * (len(vars(decoded)) + 1)
        assert time.perf_counter() - start < 5.0, name  # O(message) work: milliseconds


# ------------------------------------------------------- the encoder refuses what the decoder does
_encode_refusals: list[Any] = [
    pytest.param(np.zeros((0, 2**38)), ValueError, "hold 2199023255552 bytes, more than 2**40",
                 id="zero-size-2**41-bytes"),
    pytest.param(np.zeros((3, 0, 2**31, 2**8), np.int8), ValueError, "more than 2**40",
                 id="zero-size-2**38-rows-wide"),
    pytest.param({float("nan"): 1}, ValueError, "dict key nan: NaN keys are refused",
                 id="nan-key"),
    pytest.param({(1, float("nan")): 1}, ValueError, "dict key nan", id="nan-in-tuple-key"),
    pytest.param({"k": "a\ud800b"}, ValueError, "holds a str that is not valid UTF-8",
                 id="lone-surrogate"),
    pytest.param(EnvIds(["a", 5]), TypeError, "env id 5 (row 1) is a int", id="int-env-id"),
    pytest.param(EnvIds([np.str_("a")]), TypeError, "is a str_; env ids must be str",
                 id="str-subclass-env-id"),
    pytest.param(10**4300, ValueError, "has more than 4300 decimal digits", id="4301-digit-int"),
    pytest.param(np.zeros([1] * 33) if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else None,
                 ValueError, "33 dimensions", id="33-dimensions",
                 marks=pytest.mark.skipif(np.lib.NumpyVersion(np.__version__) < "2.0.0",
                                          reason="numpy 1.x cannot make 33 dimensions")),
]  # fmt: skip


@pytest.mark.parametrize(("value", "error", "fragment"), _encode_refusals)
def test_to_bytes_refuses_what_from_bytes_refuses_naming_the_field(
    value: Any, error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match=re.escape(fragment)) as info:
        PolicyResponse("e", f={"x": [value]}).to_bytes()
    assert str(info.value).startswith("to_bytes(): field 'f'['x'][0]")


@pytest.mark.parametrize(
    ("node", "fragment"),
    [
        ([4, "<f8", [0, 2**38]], "claims at least 2199023255552 bytes"),
        ([6, "float64", [0, 2**38]], "claims at least 2199023255552 bytes"),
        ([4, "|b1", [1] * 33], "a list of at most 32 ints"),
        ([2, float("nan"), 1], "a dict key is NaN"),
        ([9, [0, "a", 5], [0]], "env ids must be a list of str or nil"),
        ([7, "1" + "0" * 4300], "holds 4301 digits"),
    ],
)
def test_from_bytes_refuses_those_values_in_a_hand_built_message(node: Any, fragment: str) -> None:
    with pytest.raises(WireFormatError, match=re.escape(fragment)):
        PolicyResponse.from_bytes(message([0, "e", "f", node]))


@pytest.mark.torch
def test_to_bytes_refuses_tensors_the_decoder_refuses() -> None:
    import torch

    for tensor, fragment in (
        (torch.zeros((0, 2**38), dtype=torch.float64), "more than 2**40"),
        (torch.zeros([1] * 33), "33 dimensions"),
    ):
        with pytest.raises(ValueError, match=re.escape(fragment)) as info:
            PolicyResponse("e", t=tensor).to_bytes()
        assert str(info.value).startswith("to_bytes(): field 't'")
    fits = PolicyResponse("e", t=torch.zeros((0, 2**37), dtype=torch.float64))
    assert _round_trip(fits).t.shape == (0, 2**37)


def test_a_refused_env_ids_path_names_the_field_it_is_of() -> None:
    # found by the property test: env_ids is encoded first, so a bad key recorded in a path was
    # reported as field 'env_ids' only
    rows = [PolicyResponse(f"e{i}", fld={-(2**63) - 1: np.array(False)}) for i in range(2)]
    with pytest.raises(
        TypeError, match=re.escape("path ('fld', -9223372036854775809) (of field 'fld')")
    ):
        PolicyResponse.stack(rows).to_bytes()


def test_env_ids_paths_are_nested_as_deep_as_the_decoder_counts_them() -> None:
    def nested(levels: int) -> Any:
        key: Any = 1
        for _ in range(levels):
            key = (key,)
        return key

    # the decoder counts a path two levels below the env-ids node (inside its paths list)
    fits = PolicyResponse(None, env_ids=EnvIds(["a"], [("x", nested(61))]), x=PerEnv([1]))
    assert _round_trip(fits).env_ids.array_rows == (("x", nested(61)),)
    deep = PolicyResponse(None, env_ids=EnvIds(["a"], [("x", nested(62))]), x=PerEnv([1]))
    with pytest.raises(ValueError, match=re.escape("'env_ids'['array_rows']")):
        deep.to_bytes()


def test_every_int_the_decoder_accepts_re_encodes_and_the_encoder_writes_decodes() -> None:
    # one bound, 4,300 decimal digits: the encoder refused ints past 14,000 bits (~4,214 digits)
    # that the decoder accepted
    for digits in (20, 4214, 4215, 4299, 4300):
        for value in (10**digits - 1, -(10**digits - 1)):
            response = PolicyResponse("e", v=value)
            assert _round_trip(response) == response
    decoded = PolicyResponse.from_bytes(message([0, "e", "v", [7, "-" + "9" * 4300]]))
    assert decoded.v == -(10**4300 - 1)
    assert _round_trip(decoded) == decoded
    with pytest.raises(ValueError, match="more than 4300 decimal digits"):
        PolicyResponse("e", v=-(10**4300)).to_bytes()


def test_nan_dict_keys_are_refused_both_ways() -> None:
    # {nan: 1} decoded, but never equalled its own round trip, nor a second decode of the bytes
    with pytest.raises(ValueError, match=re.escape("to_bytes(): field 'f'[nan]: dict key nan")):
        PolicyResponse("e", f={float("nan"): 1}).to_bytes()
    with pytest.raises(WireFormatError, match="field 'f': a dict key is NaN"):
        PolicyResponse.from_bytes(message([0, "e", "f", [2, float("nan"), 1]]))
    values = PolicyResponse("e", f={"k": float("nan")}, g=[float("nan")])  # NaN values are fine
    assert _round_trip(values) == values


def test_a_lone_surrogate_is_a_value_error_naming_the_field() -> None:
    cases = [
        (PolicyResponse("e", f={"k": [1, "a\ud800"]}), "field 'f'['k'][1]"),
        (PolicyResponse("e", f={"\udc80": 1}), "field 'f'['\\udc80']"),
        (PolicyResponse("e\ud800", f=1), "field env_id"),
        (PolicyResponse("e", **{"x\ud800": 1}), "field name 'x\\ud800'"),
        (PolicyResponse(None, env_ids=EnvIds(["\ud800"]), f=PerEnv([1])), "field 'env_ids'[0]"),
    ]
    for response, where in cases:
        with pytest.raises(ValueError, match=re.escape(f"to_bytes(): {where}: holds a str")):
            response.to_bytes()


# ------------------------------------------------------------------ memory per header byte
def test_decoding_memory_per_header_byte_is_bounded_for_every_node_kind() -> None:
    # a 4 MiB header of zero-size tensors grew peak RSS by ~680 MiB (162 bytes per header byte),
    # one of empty env_ids nodes by ~466 MiB (114); the page said ~80 (320 MiB)
    code = (
        "import json; from benchmarks.fuzz_wire import header_memory_table; "
        "print(json.dumps(header_memory_table(1 << 18, ('bytes', 'bytearray'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{CORE_SRC}:{ROOT}", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"},
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    measured = {(row["kind"], row["mode"]) for row in rows}
    expected_kinds = {
        k for k, (_, _, torch_only) in NODE_KINDS.items() if HAS_TORCH or not torch_only
    }
    assert {kind for kind, _ in measured} == expected_kinds
    for row in rows:
        assert "error" not in row, row
        bound = BYTES_PER_HEADER_BYTE * row["header_bytes"] + ONCE
        assert row["rss_growth"] <= bound, (
            f"{row['kind']} ({row['mode']}): peak RSS grew by {row['rss_growth']} bytes for a "
            f"{row['header_bytes']} byte header ({row['per_header_byte']} per header byte)"
        )
