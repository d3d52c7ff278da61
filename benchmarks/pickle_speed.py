"""Pickling speed of a response holding CPU tensors, against torch's pickling of the same tensors.

Measures, in one process, medians over repeats of ``pickle.dumps`` + ``pickle.loads`` (protocol
5) for the per-step payload of the performance issue (action int64[1], log_prob float32[1],
value float32[1], hidden float32[256]):

* ``dict of tensors``: a plain dict of the four CPU tensors (torch's own tensor pickling);
* ``dict of arrays``: the same data as numpy arrays (the floor numpy sets);
* ``response (in band)``: ``PolicyResponse`` holding the four tensors, no ``buffer_callback``;
* ``response (out of band)``: the same with ``buffer_callback`` (what Ray and shared-memory
  transports do): no tensor data is copied.

and prints the ratio ``dict of tensors / response``; the target is at least 5x. With ``--ray``
it also puts one 64 MiB tensor through a local Ray object store, as a dict of tensors and as a
response, and reports ``ray.get`` times and whether two reads share memory (zero copy), with
``RAY_ENABLE_ZERO_COPY_TORCH_TENSORS`` unset.

Usage::

    python benchmarks/pickle_speed.py [--quick] [--ray] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from rlightning import PolicyResponse


def _median_us(fn: Callable[[], Any], number: int, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times) * 1e6


def _round_trip(obj: Any, out_of_band: bool) -> Callable[[], Any]:
    if out_of_band:

        def run() -> Any:
            buffers: list[pickle.PickleBuffer] = []
            data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
            return pickle.loads(data, buffers=buffers)

        return run
    return lambda: pickle.loads(pickle.dumps(obj, protocol=5))


def measure_pickle(quick: bool) -> dict[str, Any]:
    """Return the dumps+loads medians (µs) and sizes of the four payloads."""
    number, repeat = (200, 5) if quick else (2000, 15)
    tensors = {
        "action": torch.zeros(1, dtype=torch.int64),
        "log_prob": torch.zeros(1),
        "value": torch.zeros(1),
        "hidden": torch.zeros(256),
    }
    arrays = {key: value.numpy() for key, value in tensors.items()}
    response = PolicyResponse("env-0", **tensors)
    payload = sum(a.nbytes for a in arrays.values())
    rows = {
        "dict of tensors": (tensors, False),
        "dict of arrays": (arrays, False),
        "response (in band)": (response, False),
        "response (out of band)": (response, True),
    }
    result: dict[str, Any] = {"payload_bytes": payload, "rows": {}}
    for name, (obj, oob) in rows.items():
        buffers: list[pickle.PickleBuffer] = []
        if oob:

            def dumps_oob(obj: Any = obj) -> bytes:
                sink: list[pickle.PickleBuffer] = []
                return pickle.dumps(obj, protocol=5, buffer_callback=sink.append)

            dumps = _median_us(dumps_oob, number, repeat)
            data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        else:

            def dumps_in_band(obj: Any = obj) -> bytes:
                return pickle.dumps(obj, protocol=5)

            dumps = _median_us(dumps_in_band, number, repeat)
            data = pickle.dumps(obj, protocol=5)

        def loads_(d: bytes = data, b: list[pickle.PickleBuffer] = buffers) -> Any:
            return pickle.loads(d, buffers=b)

        loads = _median_us(loads_, number, repeat)
        total = _median_us(_round_trip(obj, oob), number, repeat)
        result["rows"][name] = {
            "dumps_us": round(dumps, 2),
            "loads_us": round(loads, 2),
            "dumps_loads_us": round(total, 2),
            "in_band_bytes": len(data),
        }
    base = result["rows"]["dict of tensors"]["dumps_loads_us"]
    in_band = result["rows"]["response (in band)"]["dumps_loads_us"]
    result["ratio_in_band"] = round(base / in_band, 2)
    result["ratio_out_of_band"] = round(
        base / result["rows"]["response (out of band)"]["dumps_loads_us"], 2
    )
    return result


def measure_ray(quick: bool) -> dict[str, Any]:
    """Put one 64 MiB tensor through a local Ray object store, as a dict and as a response."""
    import ray

    os.environ.pop("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", None)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=400 * 1024 * 1024,
    )
    try:
        big = torch.randn(16 * 1024 * 1024)
        out: dict[str, Any] = {"tensor_bytes": big.numel() * big.element_size()}
        payloads: dict[str, Any] = {
            "dict of tensors": {"x": big},
            "response": PolicyResponse("e", x=big),
        }
        for name, obj in payloads.items():
            ref = ray.put(obj)
            first, second = ray.get(ref), ray.get(ref)
            x1 = first["x"] if isinstance(first, dict) else first.x
            x2 = second["x"] if isinstance(second, dict) else second.x
            repeat = 3 if quick else 10

            def get(ref: Any = ref) -> Any:
                return ray.get(ref)

            def put_get(obj: Any = obj) -> Any:
                return ray.get(ray.put(obj))

            get_ms = _median_us(get, 1, repeat) / 1e3
            put_get_ms = _median_us(put_get, 1, repeat) / 1e3
            out[name] = {
                "get_ms": round(get_ms, 3),
                "put_get_ms": round(put_get_ms, 2),
                "two_gets_share_memory": x1.data_ptr() == x2.data_ptr(),
                "values_equal": bool(torch.equal(x1, big)),
            }
        return out
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description="pickle speed: response vs dict of tensors")
    parser.add_argument("--quick", action="store_true", help="few repeats (smoke mode)")
    parser.add_argument("--ray", action="store_true", help="also measure a Ray object store")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    result = measure_pickle(args.quick)
    print(f"payload: {result['payload_bytes']} bytes; dumps / loads / dumps+loads in µs")
    for name, row in result["rows"].items():
        print(
            f"  {name:24s} {row['dumps_us']:8.2f} {row['loads_us']:8.2f} "
            f"{row['dumps_loads_us']:8.2f}   ({row['in_band_bytes']} bytes in band)"
        )
    print(f"ratio dict-of-tensors / response (in band): {result['ratio_in_band']}x")
    print(f"ratio dict-of-tensors / response (out of band): {result['ratio_out_of_band']}x")
    if args.ray:
        result["ray"] = measure_ray(args.quick)
        print(f"ray, one {result['ray']['tensor_bytes']} byte tensor:")
        for name in ("dict of tensors", "response"):
            print(f"  {name:16s} {result['ray'][name]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
