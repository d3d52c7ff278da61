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
* ``atheris``: coverage-guided (libFuzzer through atheris, if installed), seeded with valid
  messages, with a per-input timeout of 5 s and an RSS limit of 2 GiB (a decoder that allocated
  what a hostile header claims would trip it).

Usage::

    nice python benchmarks/fuzz_wire.py --engine hypothesis --seconds 300
    nice python benchmarks/fuzz_wire.py --engine atheris --seconds 300

It prints iterations, elapsed time, slowest single decode and failures found.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
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
    keys = st.one_of(st.text(max_size=4), st.integers(-9, 9), st.tuples(st.integers(), st.text()))
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
    parser.add_argument("--engine", choices=["hypothesis", "atheris"], default="hypothesis")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    if args.engine == "atheris":
        run_atheris(args.seconds)
        return
    result = run_hypothesis(args.seconds)
    for key, value in result.items():
        print(f"{key}: {value}")
    if result["failures"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
