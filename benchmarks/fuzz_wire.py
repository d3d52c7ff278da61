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
* ``atheris``: coverage-guided (libFuzzer through atheris, if installed), seeded with valid
  messages, with a per-input timeout of 5 s and an RSS limit of 2 GiB (a decoder that allocated
  what a hostile header claims would trip it).

Usage::

    nice python benchmarks/fuzz_wire.py --engine hypothesis --seconds 300
    nice python benchmarks/fuzz_wire.py --engine hostile --seconds 120
    nice python benchmarks/fuzz_wire.py --engine keys
    nice python benchmarks/fuzz_wire.py --engine atheris --seconds 300

It prints iterations, elapsed time, slowest single decode and failures found.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import struct
import sys
import tempfile
import time
import tracemalloc
from typing import Any

import numpy as np


def _one_input(data: bytes) -> None:
    from rlightning import PolicyResponse, WireFormatError

    with contextlib.suppress(WireFormatError):
        PolicyResponse.from_bytes(data)


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
    while len(out) < n:
        a = rng.getrandbits(60)
        acc = (_rotl((_XX5 + a * _XX2) & _M64, 31) * _XX1) & _M64
        b = _int_with_hash(((need - acc) * inv2) & _M64)
        if b is not None and (a, b) not in out:
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


def check_hostile(data: bytes) -> dict[str, float]:
    """Decode ``data``; return decode/repr time and repr peak; raise AssertionError on a fault."""
    from rlightning import PolicyResponse, WireFormatError

    start = time.perf_counter()
    try:
        decoded = PolicyResponse.from_bytes(data)
    except WireFormatError as exc:
        if len(str(exc)) > 1000:
            raise AssertionError(f"error message of {len(str(exc))} characters") from exc
        return {"decode_s": time.perf_counter() - start, "repr_s": 0.0, "repr_peak": 0}
    decode_s = time.perf_counter() - start
    tracemalloc.start()
    start = time.perf_counter()
    try:
        text = repr(decoded)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    repr_s = time.perf_counter() - start
    assert len(text) <= 2000 * (len(vars(decoded)) + 1), f"repr of {len(text)} characters"
    assert peak < 8 << 20, f"repr peaked at {peak} bytes"
    return {"decode_s": decode_s, "repr_s": repr_s, "repr_peak": peak}


def run_hostile(seconds: float) -> dict[str, Any]:
    """Run the hostile-message generators for ``seconds``; return the figures."""
    rng = random.Random(0)
    counters: dict[str, Any] = {"iterations": 0, "failures": 0, "slowest_s": 0.0}
    counters.update(slowest_repr_s=0.0, largest_repr_peak=0, slowest_input="")
    first_failure: list[str] = []
    started = time.monotonic()
    has_torch = _has_torch()
    if has_torch:  # the first tensor decoded imports torch (seconds): not the decoder's time
        import torch  # noqa: F401
    while time.monotonic() - started < seconds:
        choice = rng.randrange(3)
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
        else:
            kind = rng.choice(KEY_KINDS)
            size, n_keys = rng.choice([8, 16, 17, 64, 1024]), rng.choice([64, 2048])
            messages = [keys_message(colliding_keys(kind, size, n_keys, rng))]
            what = f"{n_keys} {kind} keys, up to {size} per hash"
        for data in messages:
            try:
                figures = check_hostile(data)
            except Exception as exc:  # a finding: record it, keep fuzzing
                counters["failures"] += 1
                if not first_failure:
                    first_failure.append(f"{type(exc).__name__}: {str(exc)[:300]}")
                continue
            counters["iterations"] += 1
            if figures["decode_s"] > counters["slowest_s"]:
                counters["slowest_s"] = figures["decode_s"]
                counters["slowest_input"] = what
            counters["slowest_repr_s"] = max(counters["slowest_repr_s"], figures["repr_s"])
            counters["largest_repr_peak"] = max(counters["largest_repr_peak"], figures["repr_peak"])
    return {
        "engine": "hostile",
        "seconds": round(time.monotonic() - started, 1),
        **counters,
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
    responses = st.builds(
        lambda env_id, fields: PolicyResponse(env_id, **fields),
        st.one_of(st.none(), st.text(max_size=6)),
        st.dictionaries(names, values, max_size=5),
    )
    counters = {"iterations": 0, "failures": 0, "slowest_s": 0.0}
    first_failure: list[str] = []

    @settings(
        max_examples=2000,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(responses, st.data())
    def one(response: PolicyResponse, data: st.DataObject) -> None:
        clean = response.to_bytes(checksum=False)
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
        for candidate in (bytes(message), clean):
            start = time.perf_counter()
            try:
                decoded = PolicyResponse.from_bytes(candidate)
            except WireFormatError:
                decoded = None
            except Exception as exc:  # a finding: record it, keep fuzzing
                counters["failures"] += 1
                if not first_failure:
                    first_failure.append(f"{type(exc).__name__}: {exc} for {candidate[:200]!r}")
                decoded = None
            counters["slowest_s"] = max(counters["slowest_s"], time.perf_counter() - start)
            counters["iterations"] += 1
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
        "--engine", choices=["hypothesis", "hostile", "keys", "atheris"], default="hypothesis"
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
    result = run_hostile(args.seconds) if args.engine == "hostile" else run_hypothesis(args.seconds)
    for key, value in result.items():
        print(f"{key}: {value}")
    if result["failures"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
