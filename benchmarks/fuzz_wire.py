"""Long fuzz run of the wire decoder (``PolicyResponse.from_bytes``).

The property: for any bytes, ``from_bytes`` returns a response or raises ``WireFormatError``;
never another exception, a crash, a hang or a large allocation. A short version of this runs in
the test suite (``tests/core/test_wire.py``); this script runs it for minutes.

Engines:

* ``hypothesis`` (default): structure-aware. Hypothesis draws a random response (nested
  containers, numpy arrays of every carried dtype, torch tensors when torch is installed), encodes
  it without checksum (so mutations reach the parser), applies 1-6 random mutations (bit flips,
  byte sets, cuts, inserts, deletes, length-field edits) and decodes; it also round-trips the
  unmutated message. Runs batches of examples until the time is up.
* ``hostile``: structure-aware generators of hand-built messages the encoder never writes, for
  the decoder's three bounds: a deeply nested msgpack node (up to 1,000 levels, msgpack's own
  limit is about 1,024) in every place the decoder may quote in an error message (a shape
  dimension, a field name, the class code, a dict key, a tag); arrays and tensors of a huge shape
  with a zero-size dimension (a 40-byte message), whose ``repr`` must stay bounded; and dicts of
  keys that share a hash value, of every key kind (see :func:`colliding_keys`). Checks: only
  ``WireFormatError``, its message at most 1,000 characters, ``repr`` of what decodes at most
  2,000 characters with a bounded peak memory (``tracemalloc``).
* ``keys``: decode time per byte of messages whose dicts hold colliding keys, next to random keys
  of the same kind and size, for message sizes from 40 kB to 1.4 MB (the linear-time bound).
* ``memory``: peak RSS per header byte of decoding a 4 MiB header made of one kind of node
  (:data:`NODE_KINDS`), for ``bytes``, ``bytearray`` and ``copy=True``, each in a forked child.
* ``unbind``: time and peak memory of ``unbind()`` of the decoded messages that come nearest its
  bounds, and of the hostile ones it refuses (:func:`unbind_cases`).

Both the ``hypothesis`` and the ``hostile`` engines decode every message as ``bytes`` and as one
other kind of buffer (:data:`BUFFER_KINDS`: ctypes arrays, ``RawArray``, numpy ``S1``/``V1``
views, ``memoryview.cast("c")``, ``mmap``, ...), which must give the same response or the same
refusal, and put what decodes through :func:`check_decoded`: ``repr``, ``unbind()`` (``hostile``
also traces its peak against :data:`UNBIND_PEAK_PER_BYTE`), ``stack``, and re-encoding to an
equal response. The ``hostile`` engine also builds stacked-looking messages aimed at ``unbind()``
(:func:`stacked_hostile_message`).
* ``atheris``: coverage-guided (libFuzzer through atheris, if installed), seeded with valid
  messages, with a per-input timeout of 5 s and an RSS limit of 2 GiB (a decoder that allocated
  what a hostile header claims would trip it).

Usage::

    nice python benchmarks/fuzz_wire.py --engine hypothesis --seconds 300
    nice python benchmarks/fuzz_wire.py --engine hostile --seconds 120
    nice python benchmarks/fuzz_wire.py --engine keys
    nice python benchmarks/fuzz_wire.py --engine atheris --seconds 300
    nice python benchmarks/fuzz_wire.py --engine memory
    nice python benchmarks/fuzz_wire.py --engine unbind

It prints iterations, elapsed time, slowest single decode and failures found.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import ctypes
import functools
import json
import math
import mmap
import os
import random
import struct
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from multiprocessing import sharedctypes
from typing import Any

import numpy as np


def _one_input(data: bytes) -> None:
    """atheris' target: decode as bytes and as one other buffer kind (alike); check what decodes
    (:func:`check_decoded`, without tracing: repr, unbind, stack, re-encoding)."""
    expected = decode_outcome(data)
    kinds = sorted(BUFFER_KINDS)
    check_buffer_kind(kinds[len(data) % len(kinds)], data, expected)
    if expected[0] is not None:
        check_decoded(expected[0], len(data), trace=False)


def _seed_messages() -> list[bytes]:
    from rlightning import MultiAgentPolicyResponse, PerEnv, PolicyResponse

    responses: list[Any] = [
        PolicyResponse(None),
        PolicyResponse("env-0", action=np.arange(4.0), value=np.float32(0.5), ts_env_sent_ns=1),
        PolicyResponse(
            "e",
            obs={"a": [1, (2.0, "x"), None], 3: b"raw", (1, "k"): 1 + 2j},
            big=2**100,
            col=PerEnv([1, 2]),
            arr=np.zeros((2, 0, 3), dtype=np.int8),
        ),
        MultiAgentPolicyResponse.stack(
            [MultiAgentPolicyResponse(f"e{i}", action={"a": np.array(i)}) for i in range(2)]
        ),
    ]
    try:
        import torch
    except ImportError:
        pass
    else:
        responses.append(
            PolicyResponse(
                "t",
                t=torch.randn(3, dtype=torch.bfloat16),
                u=torch.zeros(2, 2, dtype=torch.float8_e4m3fn),
            )
        )
    return [r.to_bytes(checksum=False) for r in responses] + [responses[1].to_bytes()]


# ------------------------------------------------------------------ hostile-message generators
_P61 = (1 << 61) - 1  # CPython hashes ints and floats modulo this prime
_M64 = (1 << 64) - 1
_XX1, _XX2, _XX5 = 11400714785074694791, 14029467366897019727, 2870177450012600261  # tuplehash


def message(header: list[Any], payload: bytes = b"") -> bytes:
    """Hand-build a version-1 message without checksum (docs/transport.md's layout)."""
    packed = _pack(header)
    pad = (-(16 + len(packed))) % 8
    return struct.pack("<4sBBHII", b"RLWF", 1, 0, 0, len(packed), 0) + packed + bytes(pad) + payload


def _pack(obj: Any) -> bytes:
    """msgpack bytes of ``obj`` (lists, tuples and dicts walked without recursion).

    ``msgpack.packb`` refuses nesting deeper than its recursion limit (512 in msgpack 1.0.x,
    the lowest version we support), and the hostile messages nest up to 1000 deep.
    """
    import msgpack

    out = bytearray()
    todo: list[Any] = [obj]
    while todo:
        item = todo.pop()
        if isinstance(item, (list, tuple)):
            out += _container_header(len(item), 0x90, b"\xdc", b"\xdd")
            todo.extend(reversed(item))
        elif isinstance(item, dict):
            out += _container_header(len(item), 0x80, b"\xde", b"\xdf")
            for key, value in reversed(list(item.items())):
                todo.extend((value, key))
        else:
            out += msgpack.packb(item, use_bin_type=True)
    return bytes(out)


def _container_header(n: int, fix: int, wide16: bytes, wide32: bytes) -> bytes:
    """msgpack's header of an array or map of ``n`` items: fix form, 16-bit or 32-bit length."""
    if n < 16:
        return bytes([fix | n])
    if n < 2**16:
        return wide16 + struct.pack(">H", n)
    return wide32 + struct.pack(">I", n)


def nested(depth: int, leaf: Any = 0) -> Any:
    """A msgpack list nested ``depth`` levels deep around ``leaf``."""
    node = leaf
    for _ in range(depth):
        node = [node]
    return node


def deep_node_messages(depth: int) -> dict[str, bytes]:
    """Messages with a node nested ``depth`` deep where the decoder may quote it in an error."""
    deep = nested(depth)
    return {
        "dimension": message([0, None, "a", [4, "<f8", [deep]]]),
        "field name": message([0, None, deep, 1]),
        "class code": message([deep, None]),
        "dict key": message([0, None, "a", [2, deep, 1]]),
        "tuple key": message([0, None, "a", [2, nested(depth, [1, 0]), 1]]),
        "tag": message([0, None, "a", [deep]]),
        "env_id": message([0, deep]),
        "dtype": message([0, None, "a", [4, deep, [1]]]),
    }


def huge_empty_shape_message(torch_tensor: bool, dims: list[int]) -> bytes:
    """A tiny valid message holding a zero-size array (or tensor) of shape ``dims``."""
    node = [6, "bool", dims] if torch_tensor else [4, "|b1", dims]
    return message([0, None, "x", node])


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _rotr(x: int, r: int) -> int:
    return ((x >> r) | (x << (64 - r))) & _M64


def _int_with_hash(h: int) -> int | None:
    """A 64-bit int whose ``hash`` is ``h`` (read as an unsigned 64-bit value), if one exists."""
    if h < _P61:
        return h
    if h > _M64 - _P61 + 1 and h != _M64:  # negative hashes; hash() never returns -1
        return h - (1 << 64)
    return None


def _colliding_pairs(target: int, n: int, rng: random.Random) -> list[tuple[int, int]]:
    """``n`` 2-tuples of 64-bit ints whose tuple hash is ``target`` (CPython >= 3.8 tuplehash).

    The xxHash-style tuple hash is invertible in its last item: pick ``a``, solve for the hash
    of ``b``, keep it when some int has that hash (about one try in four).
    """
    inv1, inv2 = pow(_XX1, -1, 1 << 64), pow(_XX2, -1, 1 << 64)
    need = _rotr(((target - (2 ^ _XX5 ^ 3527539)) * inv1) & _M64, 31)
    out: list[tuple[int, int]] = []
    seen: set[int] = set()  # of first items: the pairs share a hash, their first items do not
    while len(out) < n:
        a = rng.getrandbits(60)
        acc = (_rotl((_XX5 + a * _XX2) & _M64, 31) * _XX1) & _M64
        b = _int_with_hash(((need - acc) * inv2) & _M64)
        if b is not None and a not in seen:  # b follows from a: distinct a, distinct pairs
            seen.add(a)
            out.append((a, b))
    return out


def _float_group(m: int) -> list[float]:
    """Floats ``m * 2**(61k)`` (``m`` odd): all hash like ``m``, about 34 of them."""
    out = []
    for k in range(-20, 20):
        with contextlib.suppress(OverflowError):
            v = math.ldexp(m, 61 * k)
            if v != 0 and not math.isinf(v) and math.ldexp(v, -61 * k) == m:
                out.append(v)
    return out


KEY_KINDS = ("int", "float", "float+int", "str+bytes", "tuple", "nan")


def colliding_keys(kind: str, group_size: int, n_keys: int, rng: random.Random) -> list[Any]:
    """``n_keys`` distinct dict keys of ``kind`` in groups of up to ``group_size`` sharing a hash.

    Kinds: ``int`` (``h + k * (2**61 - 1)``, at most 9 per hash in 64 bits), ``float``
    (``m * 2**(61k)``, about 34 per hash), ``float+int`` (both, about 42), ``str+bytes`` (a
    latin-1 str, the bytes of the same data and the UCS-2 str of the same data hash alike: at most
    3), ``tuple`` (any number: the tuple hash is inverted), ``nan`` (NaN keys: distinct objects,
    hashed by identity, so they never collide: a control). ``kind + "-random"`` gives random keys
    of the same kind and encoded size.
    """
    keys: list[Any] = []
    if kind.endswith("-random"):
        base = kind.removesuffix("-random")
        for _ in range(n_keys):
            if base == "int":
                keys.append(rng.getrandbits(63))
            elif base in ("float", "float+int", "nan"):
                keys.append(rng.uniform(-1e300, 1e300))
            elif base == "str+bytes":
                keys.append(bytes(rng.getrandbits(8) for _ in range(8)).decode("latin-1"))
            elif base == "tuple":
                keys.append((rng.getrandbits(60), rng.getrandbits(63)))
        return keys
    while len(keys) < n_keys:
        group: list[Any]
        if kind == "int":
            h = rng.getrandbits(60)
            group = [h + k * _P61 for k in range(9) if h + k * _P61 <= _M64]
        elif kind in ("float", "float+int"):
            m = rng.getrandbits(52) | 1
            group = _float_group(m)
            if kind == "float+int":
                group += [m + k * _P61 for k in range(1, 9) if m + k * _P61 <= _M64]
        elif kind == "str+bytes":
            raw = bytes(rng.getrandbits(8) for _ in range(8))
            group = [raw.decode("latin-1"), raw]
            with contextlib.suppress(UnicodeDecodeError):
                wide = raw.decode("utf-16-le")
                if max(map(ord, wide)) > 255 and hash(wide) == hash(raw):
                    group.append(wide)
        elif kind == "tuple":
            group = list(_colliding_pairs(rng.getrandbits(64), group_size, rng))
        elif kind == "nan":
            group = [math.nan] * group_size
        else:
            raise ValueError(f"unknown key kind {kind!r}; expected one of {KEY_KINDS}")
        keys.extend(group[:group_size])
    return keys[:n_keys]


def key_node(key: Any) -> Any:
    """The wire node of a dict key (tuples are ``[1, *items]``)."""
    return [1, *map(key_node, key)] if type(key) is tuple else key


def keys_message(keys: list[Any], per_dict: int = 1024) -> bytes:
    """A message whose field ``obs`` is a list of dicts of ``per_dict`` of ``keys`` each."""
    dicts = []
    for i in range(0, len(keys), per_dict):
        node: list[Any] = [2]
        for key in keys[i : i + per_dict]:
            node += [key_node(key), None]
        dicts.append(node)
    return message([0, None, "obs", [0, *dicts]])


# ------------------------------------------------------------- memory: per header byte, unbind
#: Tiny nodes of every kind, for the memory-per-header-byte bound: ``(node, payload bytes each,
#: needs torch)``. A header made of one kind only (``header_message``) is the worst case of it.
NODE_KINDS: dict[str, tuple[Any, int, bool]] = {
    "nil": (None, 0, False),
    "float": (0.5, 0, False),
    "2-character str": ("ab", 0, False),
    "big int": ([7, "1"], 0, False),
    "complex": ([8, 0.0, 0.0], 0, False),
    "empty list": ([0], 0, False),
    "one-item list": ([0, None], 0, False),
    "empty tuple": ([1], 0, False),
    "empty PerEnv": ([3], 0, False),
    "one-item PerEnv": ([3, None], 0, False),
    "empty dict": ([2], 0, False),
    "one-key dict": ([2, 0, None], 0, False),
    "tuple-key dict": ([2, [1, 0], None], 0, False),
    "empty env_ids": ([9, [0], [0]], 0, False),
    "env_ids with a path": ([9, [0], [0, [1, "a"]]], 0, False),
    "empty array": ([4, "|b1", [0]], 0, False),
    "one-element array": ([4, "|b1", [1]], 1, False),
    "numpy scalar": ([5, "|b1"], 1, False),
    "zero-size tensor": ([6, "bool", [0]], 0, True),
    "one-element tensor": ([6, "bool", [1]], 1, True),
    "one-element 2-D tensor": ([6, "bool", [1, 1]], 1, True),
    "one-element bfloat16 tensor": ([6, "bfloat16", [1]], 2, True),
}


def header_message(kind: str, header_bytes: int) -> bytes:
    """A valid message whose header (about ``header_bytes``) is one list of ``kind`` nodes."""
    node, per, _ = NODE_KINDS[kind]
    count = (header_bytes - 64) // len(_pack(node))
    payload = b""
    if per:  # each buffer at the next multiple of 8, none after the last
        one = b"\x01" * per + bytes(-per % 8)
        payload = (one * count)[: len(one) * (count - 1) + per]
    return message([0, None, "f", [0] + [node] * count], payload)


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"no {field} in /proc/self/status")


def in_child(
    fn: Callable[[], dict[str, Any]], warm_up: Callable[[], object] | None = None
) -> dict[str, Any]:
    """Run ``fn`` in a forked child (Linux) and return its result, with ``rss_growth`` added.

    The child first runs ``warm_up`` (when given: the same code path on a tiny input, so that
    the pages of the libraries' code it runs -- file-backed pages a forked child faults in
    lazily, counted in its RSS -- are mapped before the measurement), then resets its peak RSS
    (``/proc/self/clear_refs``) just before ``fn`` and reports the peak's growth over its RSS
    then, in bytes: what ``fn`` made the process hold at its peak.
    """
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            if warm_up is not None:
                warm_up()
            with open("/proc/self/clear_refs", "w") as clear:
                clear.write("5")  # peak RSS := RSS now
            before = _status_kb("VmRSS")
            if _status_kb("VmHWM") > before + 1024:  # the reset did not take: say so
                raise OSError("/proc/self/clear_refs did not reset the peak RSS (VmHWM)")
            measured = fn()
            measured["rss_growth"] = (_status_kb("VmHWM") - before) * 1024
            os.write(write, json.dumps(measured).encode())
        except BaseException as exc:  # report, never run the parent's code in the child
            os.write(write, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 1 << 16):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    result: dict[str, Any] = json.loads(b"".join(chunks) or b'{"error": "no result"}')
    return result


def header_memory(kind: str, header_bytes: int = 1 << 22, mode: str = "bytes") -> dict[str, Any]:
    """Peak RSS growth of decoding a header of ``kind`` nodes, per header byte (forked child).

    ``mode``: ``bytes`` (read-only message: tensors are copies), ``bytearray`` (writable: arrays
    and tensors are views) or ``copy`` (``copy=True``).
    """
    from rlightning import PolicyResponse

    if NODE_KINDS[kind][2]:
        import torch  # noqa: F401  (imported before the child: its import is not the decoder's)
    data = header_message(kind, header_bytes)
    header = struct.unpack_from("<I", data, 8)[0]
    buffer: Any = bytearray(data) if mode == "bytearray" else data

    def decode() -> dict[str, Any]:
        start = time.perf_counter()
        response = PolicyResponse.from_bytes(buffer, copy=mode == "copy")
        seconds = time.perf_counter() - start
        return {"decode_s": round(seconds, 3), "nodes": len(response.f)}

    small = header_message(kind, 4096)
    small_buffer: Any = bytearray(small) if mode == "bytearray" else small

    def warm_up() -> object:
        return PolicyResponse.from_bytes(small_buffer, copy=mode == "copy")

    result = in_child(decode, warm_up)
    result.update(kind=kind, mode=mode, header_bytes=header, message_bytes=len(data))
    if "rss_growth" in result:
        result["per_header_byte"] = round(result["rss_growth"] / header, 1)
    return result


def header_memory_table(
    header_bytes: int = 1 << 22, modes: tuple[str, ...] = ("bytes",)
) -> list[dict[str, Any]]:
    """:func:`header_memory` of every node kind (torch kinds only where torch is installed)."""
    torch_ok = _has_torch()
    return [
        header_memory(kind, header_bytes, mode)
        for kind, (node, _, needs_torch) in NODE_KINDS.items()
        if torch_ok or not needs_torch
        for mode in modes
        # only arrays and tensors read a writable buffer (or copy=True) differently
        if mode == "bytes" or (type(node) is list and node[0] in (4, 5, 6))
    ]


@functools.lru_cache(maxsize=4)
def unbind_cases(n: int = 1 << 18) -> dict[str, bytes]:
    """Messages that come nearest ``unbind()``'s bounds, and the issue's hostile ones.

    Each is a valid message; the hostile ones are refused, by the decoder or by ``unbind``.
    ``n`` is the number of rows of the large messages (rows that cost a byte each).
    """
    free = [4, "|b1", [65536, 0]]  # 65,536 rows for a few bytes: the most a message gets free
    free_tensor = [6, "bool", [65536, 0]]
    cases = {
        # nearest the floor: 65,536 free rows, as many shared values per row as unbind allows
        "(65536, 0) array": message([0, None, "e", free]),
        "(65536, 0) tensor": message([0, None, "e", free_tensor]),
        "(65536, 0) array + 13-key shared dict": message(
            [0, None, "e", free, "d", [2] + [x for k in range(13) for x in (f"k{k}", None)]]
        ),
        "(65536, 0) array + 13 shared fields": message(
            [0, None, "e", free] + [x for k in range(13) for x in (f"s{k}", None)]
        ),
        # large messages: rows that cost bytes
        f"{n} nil env ids": message([0, None, "env_ids", [9, [0] + [None] * n, [0]]]),
        f"({n},) uint8 array": message([0, None, "a", [4, "|u1", [n]]], bytes(n)),
        f"({n}, 1) bool tensor": message([0, None, "t", [6, "bool", [n, 1]]], bytes(n)),
        f"PerEnv of {n} nils": message([0, None, "p", [3] + [None] * n]),
        f"({n},) array + PerEnv of {n} + 14 shared fields": message(
            [0, None, "a", [4, "|u1", [n]], "p", [3] + [None] * n]
            + [x for k in range(14) for x in (f"s{k}", None)],
            bytes(n),
        ),
        # the hostile messages (refused)
        "60 (65536, 0) tensors": message(
            [0, None] + [x for k in range(60) for x in (f"t{k}", free_tensor)]
        ),
        "(65536, 0) array + 1,000-item shared list": message(
            [0, None, "e", free, "l", [0] + [None] * 1000]
        ),
        "20,000-byte array + 10,000-item shared list": message(
            [0, None, "a", [4, "|u1", [20000]], "l", [0] + [None] * 10000], bytes(20000)
        ),
    }
    pairs = _colliding_pairs(random.Random(0).getrandbits(64), 20000, random.Random(1))
    cases["20,000 env-ids paths sharing a hash"] = message(
        [0, None, "env_ids", [9, [0, "a"], [0] + [[1, a, b] for a, b in pairs]], "x", [3, 1]]
    )
    return cases


def unbind_figures(data: bytes, trace: bool = False) -> dict[str, Any]:
    """Decode ``data``, then time ``unbind()`` of it in a forked child: its RSS growth or, with
    ``trace``, its ``tracemalloc`` peak."""
    from rlightning import PolicyResponse, WireFormatError

    if b"\xa4bool" in data:
        if not _has_torch():
            return {"bytes": len(data), "outcome": "holds a tensor: torch is not installed"}
        import torch  # noqa: F401  (imported before the child)
    try:
        decoded = PolicyResponse.from_bytes(data)
    except WireFormatError as exc:
        return {"bytes": len(data), "outcome": f"from_bytes refuses: {str(exc)[:70]}..."}

    def split() -> dict[str, Any]:
        if trace:
            tracemalloc.start()
        start = time.perf_counter()
        try:
            rows = decoded.unbind()
            outcome = f"{len(rows)} rows"
        except ValueError as exc:
            outcome = f"unbind refuses: {str(exc)[:60]}..."
        out: dict[str, Any] = {"unbind_s": round(time.perf_counter() - start, 4)}
        if trace:
            out["trace_peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        out["outcome"] = outcome
        return out

    result = in_child(split)
    result["bytes"] = len(data)
    return result


def run_unbind() -> None:
    """Print ``unbind()``'s time and peak memory for :func:`unbind_cases`, per message byte."""
    from rlightning._stack import UNBIND_FLOOR

    for name, data in unbind_cases().items():
        rss = unbind_figures(data)
        traced = unbind_figures(data, trace=True)
        floor = max(len(data), UNBIND_FLOOR)
        line = f"{name:48} {len(data):9} B  {rss.get('outcome', rss.get('error'))}"
        if "unbind_s" in rss:
            line += (
                f"  {rss['unbind_s']:7.3f} s  RSS +{rss['rss_growth'] / 2**20:7.1f} MiB "
                f"({rss['rss_growth'] / floor:6.0f} B/B)  traced "
                f"{traced['trace_peak'] / 2**20:6.1f} MiB ({traced['trace_peak'] / floor:5.0f} B/B)"
            )
        print(line)


def _best_decode_time(data: bytes, reps: int = 3) -> tuple[float, str]:
    from rlightning import PolicyResponse, WireFormatError

    best, outcome = math.inf, ""
    for _ in range(reps):
        start = time.perf_counter()
        try:
            PolicyResponse.from_bytes(data, max_header_bytes=1 << 30)
            outcome = "decoded"
        except WireFormatError as exc:
            outcome = f"refused ({str(exc)[:48]}...)"
        best = min(best, time.perf_counter() - start)
    return best, outcome


def run_keys(sizes: tuple[int, ...] = (4096, 16384, 65536), group_size: int = 1024) -> None:
    """Print decode ns/byte of colliding keys next to random keys, per kind and size."""
    rng = random.Random(0)
    for kind in KEY_KINDS:
        for n_keys in sizes:
            bad = keys_message(colliding_keys(kind, group_size, n_keys, rng))
            good = keys_message(colliding_keys(kind + "-random", group_size, n_keys, rng))
            t_bad = t_good = math.inf
            for _ in range(5):  # alternate, so that load on a shared machine hits both alike
                t, outcome = _best_decode_time(bad, reps=1)
                t_bad = min(t_bad, t)
                t_good = min(t_good, _best_decode_time(good, reps=1)[0])
            ratio = (t_bad / len(bad)) / (t_good / len(good))
            print(
                f"{kind:10} keys={n_keys:6} bytes={len(bad):8} colliding "
                f"{t_bad * 1e9 / len(bad):7.1f} ns/B  random {t_good * 1e9 / len(good):7.1f} "
                f"ns/B  ratio {ratio:5.2f}  {outcome}"
            )


# ------------------------------------------------------------------------------ buffer kinds
def _raw_array(data: bytes) -> Any:
    buffer = sharedctypes.RawArray("B", len(data))
    ctypes.memmove(buffer, data, len(data))
    return buffer


def _mmap(data: bytes) -> Any:
    if not data:
        return bytearray()  # an anonymous mmap cannot be empty
    mapped = mmap.mmap(-1, len(data))
    mapped.write(data)
    return mapped


def _wide(data: bytes) -> Any:
    """The bytes as a ``<u8`` array (8-byte items) when the length allows, else ``<u2``/bytes."""
    for dtype in ("<u8", "<u4", "<u2"):
        if len(data) % np.dtype(dtype).itemsize == 0:
            return np.frombuffer(data, dtype)
    return np.frombuffer(data, np.uint8)


#: Every kind of C-contiguous buffer ``from_bytes`` must read as it reads ``bytes`` (the page's
#: promise): a function turning the message into that kind.
BUFFER_KINDS: dict[str, Callable[[bytes], Any]] = {
    "bytes": bytes,
    "bytearray": bytearray,
    "memoryview": memoryview,
    "memoryview cast c": lambda data: memoryview(data).cast("c"),
    "memoryview cast b": lambda data: memoryview(data).cast("b"),
    "numpy uint8": lambda data: np.frombuffer(data, np.uint8),
    "numpy uint8 2-D": lambda data: np.frombuffer(data, np.uint8).reshape(-1, 1),
    "numpy S1": lambda data: np.frombuffer(data, "S1"),
    "numpy V1": lambda data: np.frombuffer(data, "V1"),
    "numpy wide items": _wide,
    "array.array B": lambda data: array.array("B", data),
    "ctypes c_uint8": lambda data: (ctypes.c_uint8 * len(data)).from_buffer_copy(data),
    "ctypes c_char": lambda data: (ctypes.c_char * len(data)).from_buffer_copy(data),
    "RawArray B": _raw_array,
    "RawArray b": lambda data: _signed_raw_array(data),
    "mmap": _mmap,
}


def _signed_raw_array(data: bytes) -> Any:
    buffer = sharedctypes.RawArray("b", len(data))
    ctypes.memmove(buffer, data, len(data))
    return buffer


def decode_outcome(buffer: Any) -> tuple[Any, str | None]:
    """``(response, None)`` or ``(None, error message)`` of ``PolicyResponse.from_bytes``."""
    from rlightning import PolicyResponse, WireFormatError

    try:
        return PolicyResponse.from_bytes(buffer), None
    except WireFormatError as exc:
        return None, str(exc)


def check_buffer_kind(kind: str, data: bytes, expected: tuple[Any, str | None]) -> None:
    """Decode ``data`` as buffer ``kind``; raise AssertionError unless it decodes as bytes did."""
    response, error = decode_outcome(BUFFER_KINDS[kind](data))
    want, want_error = expected
    if error != want_error:
        raise AssertionError(f"as {kind}: {error!r}, as bytes: {want_error!r}")
    if want is not None and not response == want:
        raise AssertionError(f"as {kind} it decodes to {response!r}, as bytes to {want!r}")


# ------------------------------------------------------------- what a reader does with a message
#: Peak memory (``tracemalloc``, so numpy and Python objects but not torch's own allocations) of
#: ``unbind()`` of a decoded message, per byte of ``max(message size, UNBIND_FLOOR)``: the bound
#: docs/transport.md states (``run_unbind`` measures the cases that come nearest).
UNBIND_PEAK_PER_BYTE = 1536


def check_decoded(decoded: Any, size: int, *, trace: bool = True) -> dict[str, Any]:
    """What a reader does with a decoded response, each bounded; AssertionError on a fault.

    ``repr`` (at most 2,000 characters per field, a bounded peak), ``unbind()`` (a list of
    responses, or ValueError/TypeError: nothing else, and with ``trace`` a peak of at most
    :data:`UNBIND_PEAK_PER_BYTE` per byte of ``max(size, 65536)``), ``stack`` of two copies and of
    its rows (a response, or ValueError/TypeError), and ``to_bytes`` of it: it must re-encode and
    decode equal (only a message longer than the encoder writes may hold more zero-size rows than
    the re-encoded one may).
    """
    from rlightning import PolicyResponse
    from rlightning._stack import UNBIND_FLOOR

    figures: dict[str, Any] = {}
    tracemalloc.start()
    start = time.perf_counter()
    try:
        text = repr(decoded)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    figures["repr_s"] = time.perf_counter() - start
    figures["repr_peak"] = peak
    assert len(text) <= 2000 * (len(vars(decoded)) + 1), f"repr of {len(text)} characters"
    assert peak < 8 << 20, f"repr peaked at {peak} bytes"

    if trace:
        tracemalloc.start()
    start = time.perf_counter()
    rows: list[Any] | None
    try:
        rows = decoded.unbind()
        figures["unbind"] = f"{len(rows)} rows"
    except (ValueError, TypeError) as exc:
        rows = None
        why = "out of proportion" if "UNBIND_WORK_FACTOR" in str(exc) else "not stacked alike"
        figures["unbind"] = f"refused: {type(exc).__name__} ({why})"
    finally:
        figures["unbind_s"] = time.perf_counter() - start
        if trace:
            figures["unbind_peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    floor = max(size, UNBIND_FLOOR)
    if trace and figures["unbind_peak"] > UNBIND_PEAK_PER_BYTE * floor:
        raise AssertionError(
            f"unbind() of a {size} byte message peaked at {figures['unbind_peak']} bytes, more "
            f"than {UNBIND_PEAK_PER_BYTE} per byte of max(size, {UNBIND_FLOOR})"
        )
    if rows:
        text = repr(rows[0])
        assert len(text) <= 2000 * (len(vars(rows[0])) + 1), f"row repr of {len(text)} chars"
    for group in ([decoded, decoded], rows[:2] if rows else []):
        if group:
            start = time.perf_counter()
            with contextlib.suppress(ValueError, TypeError):
                PolicyResponse.stack(group)
            figures["stack_s"] = max(figures.get("stack_s", 0.0), time.perf_counter() - start)

    try:
        again = decoded.to_bytes()
    except ValueError as exc:
        if "zero-size arrays and tensors with" not in str(exc):
            raise AssertionError(f"decodes but does not re-encode: {exc}") from exc
        figures["reencode"] = "refused: zero-size rows (a message longer than the encoder's)"
    else:
        back = PolicyResponse.from_bytes(again)
        if not back == decoded:
            raise AssertionError(f"re-encoding changed {decoded!r} into {back!r}")
        figures["reencode"] = "equal"
    return figures


def check_hostile(data: bytes, kind: str = "bytes") -> dict[str, Any]:
    """Decode ``data`` (as buffer ``kind`` too); check what a reader does with it (see
    :func:`check_decoded`); return the figures; raise AssertionError on a fault."""
    from rlightning import PolicyResponse, WireFormatError

    start = time.perf_counter()
    try:
        decoded = PolicyResponse.from_bytes(data)
    except WireFormatError as exc:
        if len(str(exc)) > 1000:
            raise AssertionError(f"error message of {len(str(exc))} characters") from exc
        if kind != "bytes":
            check_buffer_kind(kind, data, (None, str(exc)))
        return {"decode_s": time.perf_counter() - start, "repr_s": 0.0, "repr_peak": 0}
    decode_s = time.perf_counter() - start
    if kind != "bytes":
        check_buffer_kind(kind, data, (decoded, None))
    return {"decode_s": decode_s, **check_decoded(decoded, len(data))}


def stacked_hostile_message(
    rng: random.Random, torch_ok: bool = False, max_rows: int = 65536
) -> bytes:
    """A hand-built message shaped like a stacked response, aimed at ``unbind()``'s bounds.

    ``n`` rows (at most ``max_rows``, up to 65,536: the most zero-size arrays bring for free),
    given by ``env_ids`` (whose paths may share a hash) or by the first batched field; fields
    mixing zero-size arrays (and tensors), batched arrays and PerEnv lists of ``n`` rows, and
    shared values: lists, dicts, nested containers of up to 2,000 values. Many are refused (by
    the decoder or by ``unbind``); the rest must unbind within the page's bounds.
    """
    n = rng.choice([rows for rows in (1, 2, 7, 64, 1000, 4096, 65536) if rows <= max_rows])
    header: list[Any] = [0, None]
    payload = bytearray()

    def add_buffer(nbytes: int) -> None:
        nonlocal payload
        if nbytes:
            payload += bytes(-len(payload) % 8)
            payload += bytes(rng.getrandbits(8) for _ in range(min(nbytes, 64)))
            payload += bytes(max(nbytes - 64, 0))

    if rng.random() < 0.5:
        ids = [0] + [None if rng.random() < 0.5 else f"e{i}" for i in range(min(n, 4096))]
        paths: list[Any] = [0]
        if rng.random() < 0.3:
            group = rng.choice([1, 8, 16, 17, 40])
            for a, b in _colliding_pairs(rng.getrandbits(64), group, rng):
                paths.append([1, a, b])
        header += ["env_ids", [9, ids, paths]]
        n = len(ids) - 1
    for index in range(rng.randint(1, 6)):
        choice = rng.randrange(6)
        if choice == 0:  # a zero-size array or tensor with n rows
            tensor = torch_ok and rng.random() < 0.5
            dims = [n, 0] + [rng.choice([1, 3]) for _ in range(rng.randint(0, 2))]
            node: Any = [6, "bool", dims] if tensor else [4, "|b1", dims]
        elif choice == 1:  # a batched array of n rows
            width = rng.choice([1, 2])
            node = [4, "|u1", [n, width]] if width > 1 else [4, "|u1", [n]]
            add_buffer(n * width)
        elif choice == 2:  # a PerEnv of n items
            node = [3] + [None] * n
        elif choice == 3:  # a shared list
            node = [0] + [rng.choice([None, 1, "x"]) for _ in range(rng.choice([1, 13, 100, 2000]))]
        elif choice == 4:  # a shared dict
            size = rng.choice([1, 13, 100, 1000])
            node = [2] + [item for k in range(size) for item in (f"k{k}", None)]
        else:  # a batched leaf inside a wide shared list
            node = [0, [3] + [1] * n] + [None] * rng.choice([1, 15, 500])
        header += [f"f{index}", node]
    return message(header, bytes(payload))


def run_hostile(seconds: float) -> dict[str, Any]:
    """Run the hostile-message generators for ``seconds``; return the figures.

    Each message is decoded as ``bytes`` and as one other buffer kind (in turn), and what decodes
    goes through :func:`check_decoded` (repr, unbind with its peak traced, stack, re-encoding).
    """
    rng = random.Random(0)
    counters: dict[str, Any] = {"iterations": 0, "failures": 0, "slowest_s": 0.0}
    counters.update(slowest_repr_s=0.0, largest_repr_peak=0, slowest_input="")
    counters.update(decoded=0, unbound=0, unbind_refused=0, unbind_out_of_proportion=0)
    counters.update(slowest_unbind_s=0.0, slowest_unbind_input="")
    counters.update(largest_unbind_peak_per_byte=0.0, reencode_refused=0)
    kinds: dict[str, int] = dict.fromkeys(BUFFER_KINDS, 0)
    first_failure: list[str] = []
    started = time.monotonic()
    has_torch = _has_torch()
    if has_torch:  # the first tensor decoded imports torch (seconds): not the decoder's time
        import torch  # noqa: F401
    from rlightning._stack import UNBIND_FLOOR

    kind_names = sorted(BUFFER_KINDS)
    while time.monotonic() - started < seconds:
        choice = rng.randrange(4)
        if choice == 0:
            depth = rng.choice([65, 200, 500, 900, 1000])
            messages = list(deep_node_messages(depth).values())
            what = f"nested {depth} deep"
        elif choice == 1:
            ndim = rng.randint(1, 32)
            dims = [rng.choice([0, 1, 7, 1 << rng.randint(1, 40)]) for _ in range(ndim)]
            dims[rng.randrange(ndim)] = 0
            tensor = has_torch and rng.random() < 0.5
            messages = [huge_empty_shape_message(tensor, dims)]
            what = f"{'tensor' if tensor else 'array'} of shape {dims}"
        elif choice == 2:
            key_kind = rng.choice(KEY_KINDS)
            size, n_keys = rng.choice([8, 16, 17, 64, 1024]), rng.choice([64, 2048])
            messages = [keys_message(colliding_keys(key_kind, size, n_keys, rng))]
            what = f"{n_keys} {key_kind} keys, up to {size} per hash"
        else:
            messages = [stacked_hostile_message(rng, has_torch)]
            what = "a stacked-looking message"
        for data in messages:
            kind = kind_names[counters["iterations"] % len(kind_names)]
            try:
                figures = check_hostile(data, kind)
            except Exception as exc:  # a finding: record it, keep fuzzing
                counters["failures"] += 1
                if not first_failure:
                    first_failure.append(f"{what}, as {kind}: {type(exc).__name__}: {exc}"[:400])
                continue
            counters["iterations"] += 1
            kinds[kind] += 1
            if figures["decode_s"] > counters["slowest_s"]:
                counters["slowest_s"] = figures["decode_s"]
                counters["slowest_input"] = what
            counters["slowest_repr_s"] = max(counters["slowest_repr_s"], figures["repr_s"])
            counters["largest_repr_peak"] = max(counters["largest_repr_peak"], figures["repr_peak"])
            if "unbind" in figures:
                counters["decoded"] += 1
                refused = figures["unbind"].startswith("refused")
                counters["unbind_refused" if refused else "unbound"] += 1
                counters["unbind_out_of_proportion"] += "out of proportion" in figures["unbind"]
                if figures["unbind_s"] > counters["slowest_unbind_s"]:
                    counters["slowest_unbind_s"] = figures["unbind_s"]
                    counters["slowest_unbind_input"] = f"{what}, {len(data)} bytes"
                per_byte = figures["unbind_peak"] / max(len(data), UNBIND_FLOOR)
                counters["largest_unbind_peak_per_byte"] = round(
                    max(counters["largest_unbind_peak_per_byte"], per_byte), 1
                )
                counters["reencode_refused"] += figures["reencode"] != "equal"
    return {
        "engine": "hostile",
        "seconds": round(time.monotonic() - started, 1),
        **counters,
        "per_buffer_kind": kinds,
        "first_failure": first_failure[0] if first_failure else None,
    }


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def run_hypothesis(seconds: float) -> dict[str, Any]:
    """Run the structure-aware mutation fuzz for ``seconds``; return the figures."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    from rlightning import PerEnv, PolicyResponse, WireFormatError
    from rlightning._wire_spec import _NUMPY_DTYPES

    dtypes = st.sampled_from(sorted(_NUMPY_DTYPES))
    leaf = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**90), 2**90),
        st.floats(),
        st.complex_numbers(allow_nan=False),  # tree_equal: complex NaN != itself
        st.text(max_size=8),
        st.binary(max_size=8),
        hnp.arrays(dtypes, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)),
        dtypes.flatmap(lambda d: hnp.from_dtype(np.dtype(d))),
    )
    keys = st.one_of(
        st.text(max_size=4),
        st.integers(-9, 9),
        st.tuples(st.integers(-(2**63), 2**64 - 1), st.text()),
    )
    values = st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.lists(inner, max_size=4).map(tuple),
            st.lists(inner, max_size=4).map(PerEnv),
            st.dictionaries(keys, inner, max_size=4),
        ),
        max_leaves=16,
    )
    names = st.sampled_from(["action", "value", "obs", "state", "log_prob", "ts_env_sent_ns"])
    fields = st.dictionaries(names, values, max_size=5)
    single = st.builds(
        lambda env_id, fields: PolicyResponse(env_id, **fields),
        st.one_of(st.none(), st.text(max_size=6)),
        fields,
    )
    # stacked responses (what unbind() splits): n copies of one structure, and hand-built ones
    # with zero-size arrays of up to 70,000 rows and shared values beside them
    stacked = st.builds(
        lambda fields, n: PolicyResponse.stack(
            [PolicyResponse(f"e{i}", **fields) for i in range(n)]
        ),
        fields,
        st.integers(1, 8),
    )
    hand_built = st.builds(
        lambda n, width, shared, ids: PolicyResponse(
            None,
            **({"env_ids": [f"e{i}" for i in range(n)]} if ids else {}),
            empty=np.zeros((n, 0, width)),
            shared=shared,
        ),
        st.sampled_from([1, 3, 64, 4096, 65536, 70000]),
        st.integers(0, 3),
        values,
        st.booleans(),
    )
    responses = st.one_of(single, single, stacked, hand_built)
    counters: dict[str, Any] = {"iterations": 0, "failures": 0, "slowest_s": 0.0}
    counters.update(refused_to_encode=0, unbound=0, unbind_refused=0, slowest_unbind_s=0.0)
    counters.update(unbind_out_of_proportion=0)
    kinds: dict[str, int] = dict.fromkeys(BUFFER_KINDS, 0)
    first_failure: list[str] = []

    @settings(
        max_examples=2000,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(responses, st.data())
    def one(response: PolicyResponse, data: st.DataObject) -> None:
        try:
            clean = response.to_bytes(checksum=False)
        except ValueError:  # e.g. more zero-size rows than the message has bytes
            counters["refused_to_encode"] += 1
            return
        message = bytearray(clean)
        for _ in range(data.draw(st.integers(1, 6))):
            op = data.draw(st.sampled_from(["flip", "set", "cut", "insert", "delete", "length"]))
            at = data.draw(st.integers(0, max(len(message) - 1, 0)))
            if op == "flip" and message:
                message[at] ^= 1 << data.draw(st.integers(0, 7))
            elif op == "set" and message:
                message[at] = data.draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xC1, 0xDD, 0xFF]))
            elif op == "cut":
                del message[at:]
            elif op == "insert":
                message[at:at] = data.draw(st.binary(min_size=1, max_size=16))
            elif op == "delete":
                del message[at : at + data.draw(st.integers(1, 16))]
            elif op == "length" and len(message) >= 12:
                message[8:12] = data.draw(st.integers(0, 2**32 - 1)).to_bytes(4, "little")
        kind = data.draw(st.sampled_from(sorted(BUFFER_KINDS)))
        for candidate in (bytes(message), clean):
            start = time.perf_counter()
            decoded = None
            try:
                decoded = PolicyResponse.from_bytes(candidate)
            except WireFormatError:
                pass
            except Exception as exc:  # a finding: record it, keep fuzzing
                counters["failures"] += 1
                if not first_failure:
                    first_failure.append(f"{type(exc).__name__}: {exc} for {candidate[:200]!r}")
            counters["slowest_s"] = max(counters["slowest_s"], time.perf_counter() - start)
            counters["iterations"] += 1
            try:
                check_buffer_kind(kind, candidate, decode_outcome(candidate))
                kinds[kind] += 1
                if decoded is not None:
                    figures = check_decoded(decoded, len(candidate), trace=False)
                    refused = figures["unbind"].startswith("refused")
                    counters["unbind_refused" if refused else "unbound"] += 1
                    counters["unbind_out_of_proportion"] += "out of proportion" in figures["unbind"]
                    counters["slowest_unbind_s"] = max(
                        counters["slowest_unbind_s"], figures["unbind_s"]
                    )
            except Exception as exc:  # a finding
                counters["failures"] += 1
                if not first_failure:
                    first_failure.append(f"as {kind}: {type(exc).__name__}: {exc}"[:400])
            # `==`, not `!=`: PolicyResponse defines __eq__ only, and SimpleNamespace's __ne__
            # compares the raw dicts (ambiguous for arrays).
            if candidate is clean and not decoded == response:  # noqa: SIM201
                counters["failures"] += 1
                if not first_failure:
                    first_failure.append(f"round trip changed {response!r}")

    started = time.monotonic()
    while time.monotonic() - started < seconds:
        one()
    return {
        "engine": "hypothesis",
        "seconds": round(time.monotonic() - started, 1),
        **counters,
        "per_buffer_kind": kinds,
        "first_failure": first_failure[0] if first_failure else None,
    }


def run_atheris(seconds: float) -> None:
    """Run libFuzzer through atheris for ``seconds`` (it prints its own statistics)."""
    import atheris

    with atheris.instrument_imports():
        import rlightning.wire  # noqa: F401

    corpus = tempfile.mkdtemp(prefix="rlw-corpus-")
    for i, message in enumerate(_seed_messages()):
        with open(os.path.join(corpus, f"seed{i}"), "wb") as f:
            f.write(message)
    argv = [
        sys.argv[0],
        corpus,
        f"-max_total_time={int(seconds)}",
        "-timeout=5",
        "-rss_limit_mb=2048",
        "-max_len=4096",
        "-print_final_stats=1",
    ]
    atheris.Setup(argv, _one_input)
    atheris.Fuzz()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--engine",
        choices=["hypothesis", "hostile", "keys", "atheris", "memory", "unbind"],
        default="hypothesis",
    )
    parser.add_argument(
        "--header-bytes",
        type=int,
        default=1 << 22,
        help="memory engine: header size of each message (the default limit, 4 MiB)",
    )
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--group-size",
        type=int,
        default=1024,
        help="keys engine: most keys per shared hash (16 = the most the decoder accepts)",
    )
    args = parser.parse_args()
    if args.engine == "atheris":
        run_atheris(args.seconds)
        return
    if args.engine == "keys":
        run_keys(group_size=args.group_size)
        return
    if args.engine == "memory":
        for row in header_memory_table(args.header_bytes, ("bytes", "bytearray", "copy")):
            print(
                f"{row['kind']:28} {row['mode']:9} node {len(_pack(NODE_KINDS[row['kind']][0])):2}"
                f" B  {row.get('per_header_byte', row.get('error'))} B per header byte  "
                f"(+{row.get('rss_growth', 0) / 2**20:.0f} MiB, decode {row.get('decode_s')} s)"
            )
        return
    if args.engine == "unbind":
        run_unbind()
        return
    result = run_hostile(args.seconds) if args.engine == "hostile" else run_hypothesis(args.seconds)
    for key, value in result.items():
        print(f"{key}: {value}")
    if result["failures"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
