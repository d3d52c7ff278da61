"""What a local runner's fragment costs to serialise, per step against column-wise (issue 20).

The fragment is real: one local-mode ``EnvRunner`` (the actor's class built in this process, as
:mod:`benchmarks.ray_runner_cost` builds it) over 8 CartPole-v1 envs seeded ``0..7``, the bench's
PPO ``MlpPolicy``, a fragment of 64 steps after one of warm-up. Three ways to pickle it:

* ``per-step``: its field dict as a plain dict (each answer through
  ``PolicyResponse.__reduce_ex__``, each observation batch by numpy): what a ``Fragment``
  pickled as before ``Fragment.__reduce_ex__``;
* ``columns``: answers one stacked array per field, observations one per key
  (``rlightning.batch.pack_responses`` / ``pack_steps``), the state saved by the caller's
  pickler: what ``Fragment.__reduce_ex__`` did before ``reduce_in_band``;
* ``one pickle``: the fragment itself (the columns, and the whole state one standard pickle:
  ``rlightning.batch.reduce_in_band``).

Timed (medians of ``--repeats``, ``time.perf_counter``): ``pickle.dumps`` (protocol 5),
``pickle.loads``, a round trip through Ray's serializer (``ray.cloudpickle.dumps`` with a
``buffer_callback``, then ``pickle.loads`` of the buffers), ``ray.get(ray.put(...))`` in a
local cluster (``ray.init(address="local", num_cpus=1, include_dashboard=False)``), and a
return from an actor (what a runner's ``sample`` does), next to the return of the pickled
fragment as a ``bytes`` object (row ``bytes``). Counted with
callgrind (``--callgrind``; the markers of :mod:`benchmarks.callgrind`): the instructions of one
cloudpickle round trip, a region of 20 round trips minus a region of none, over 20, each counted
twice.

Usage (from the repository root)::

    python -m benchmarks.fragment_pickle             # times, 200 repeats
    python -m benchmarks.fragment_pickle --callgrind # instructions (needs valgrind)
"""

from __future__ import annotations

import json
import operator
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

K = 8
N_STEPS = 64
ROUNDS = 20


def build_fragment() -> Any:
    """The fragment of the module docstring (``rlightning_ray.groups.Fragment``)."""
    from benchmarks.ray_bench import cartpole, make_model
    from rlightning_ray.runner import EnvRunner
    from rlightning_ray.sb3 import SB3BatchPolicy, policy_weights

    class InProcessRunner(EnvRunner):
        """The actor's class, built in this process: no Ray actor context to read."""

        def _actor_identity(self) -> tuple[bool, str]:
            return False, "in-process"

    runner = InProcessRunner(
        "runner-0",
        [cartpole] * K,
        None,
        seeds=list(range(K)),
        policy=partial(SB3BatchPolicy, partial(make_model, K)),
    )
    local = runner._local
    assert local is not None
    local.policy.set_weights(policy_weights(make_model(K)))
    runner.sample(N_STEPS)
    return runner.sample(N_STEPS)


class _ColumnsOnly:
    """The fragment as ``Fragment.__reduce_ex__`` pickled it before one pickle (``columns``)."""

    def __init__(self, fragment: Any) -> None:
        self.fragment = fragment

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        from rlightning.batch import pack_responses, pack_steps

        state = dict(vars(self.fragment))
        state["answers"] = pack_responses(state["answers"])
        state["observations"] = pack_steps(state["observations"])
        state["action_masks"] = pack_steps(state["action_masks"])
        return (dict, (), None, None, iter(state.items()))


def subjects(fragment: Any) -> dict[str, Any]:
    """The three ways of the module docstring, by name, on one fragment."""
    return {
        "per-step": dict(vars(fragment)),
        "columns": _ColumnsOnly(fragment),
        "one pickle": fragment,
    }


def _cloudpickle_round_trip(obj: Any) -> Any:
    """What Ray's serializer runs on a value: cloudpickle (protocol 5, out-of-band buffers)."""
    from ray import cloudpickle

    buffers: list[pickle.PickleBuffer] = []
    blob = cloudpickle.dumps(obj, protocol=5, buffer_callback=buffers.append)  # type: ignore[no-untyped-call]
    return pickle.loads(blob, buffers=[b.raw() for b in buffers])


class _HolderClass:
    """An actor holding one subject: ``get`` returns it, ``get_bytes`` its protocol-5 pickle."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.blob = pickle.dumps(obj, protocol=5)

    def get(self) -> Any:
        """The subject, pickled by Ray into the reply."""
        return self.obj

    def get_bytes(self) -> bytes:
        """The subject's pickle, a bytes object (what Ray ships cheapest)."""
        return self.blob


def _remote_holder() -> Any:
    import ray

    return ray.remote(num_cpus=0)(_HolderClass)


def _interleaved_ms(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median milliseconds of each function, the functions run in turn in every repeat."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e3 for name, values in times.items()}


def timed(repeats: int) -> dict[str, dict[str, float]]:
    """Median milliseconds of dumps, loads and the round trips for each way (interleaved)."""
    import ray

    fragment = build_fragment()
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        items = subjects(fragment)
        blobs = {name: pickle.dumps(obj, protocol=5) for name, obj in items.items()}
        out: dict[str, dict[str, float]] = {name: {"bytes": len(b)} for name, b in blobs.items()}
        metrics: dict[str, tuple[Callable[[Any, bytes], object], int]] = {
            "dumps_ms": (lambda obj, blob: pickle.dumps(obj, protocol=5), repeats),
            "loads_ms": (lambda obj, blob: pickle.loads(blob), repeats),
            "cloudpickle_round_trip_ms": (lambda obj, blob: _cloudpickle_round_trip(obj), repeats),
            "ray_put_get_ms": (lambda obj, blob: ray.get(ray.put(obj)), max(repeats // 2, 1)),
        }
        for metric, (fn, n) in metrics.items():
            fns: dict[str, Callable[[], object]] = {
                name: partial(fn, obj, blobs[name]) for name, obj in items.items()
            }
            for name, ms in _interleaved_ms(fns, n).items():
                out[name][metric] = ms
        # what a runner's ``sample`` does: return the fragment from an actor to the driver; the
        # pickled bytes of the fragment returned the same way are the row "bytes"
        holder_cls = _remote_holder()
        holders = {name: holder_cls.remote(obj) for name, obj in items.items()}
        ray.get([holder.get.remote() for holder in holders.values()])
        returns: dict[str, Callable[[], object]] = {
            name: partial(lambda h: ray.get(h.get.remote()), holder)
            for name, holder in holders.items()
        }
        returns["bytes"] = partial(lambda h: ray.get(h.get_bytes.remote()), holders["one pickle"])
        out["bytes"] = {"bytes": len(blobs["one pickle"])}
        for name, ms in _interleaved_ms(returns, max(repeats // 2, 1)).items():
            out[name]["actor_return_ms"] = ms
        return out
    finally:
        ray.shutdown()


def _worker(out: Path) -> None:
    """Run inside callgrind: two rounds of each way's regions (20 round trips, then none)."""
    from benchmarks.callgrind import _dump, _instrumentation_on

    items = subjects(build_fragment())

    def loop(obj: Any, n: int) -> None:
        for _ in range(n):
            _cloudpickle_round_trip(obj)

    for obj in items.values():  # warm-up (bytecode specialisation)
        loop(obj, 3)
    _instrumentation_on()
    order = []
    for _round in range(2):
        for name, obj in items.items():
            for n in (ROUNDS, 0):
                import gc

                gc.collect()
                gc.disable()
                operator.call(loop, obj, n)
                gc.enable()
                _dump()
                order.append((name, n))
    out.write_text(json.dumps(order))


def counted() -> dict[str, list[float]]:
    """Instructions per round trip for both ways, one figure per round (module docstring)."""
    from benchmarks.callgrind import _summary, _worker_env, callgrind_command

    with tempfile.TemporaryDirectory() as tmp:
        order_file = Path(tmp) / "order.json"
        out_file = Path(tmp) / "cg.out"
        command = [sys.executable, "-m", "benchmarks.fragment_pickle", "--worker", str(order_file)]
        subprocess.run(
            callgrind_command(out_file, command), check=True, env=_worker_env(), cwd=Path.cwd()
        )
        order = json.loads(order_file.read_text())
        dumps = sorted(Path(tmp).glob("cg.out.*"), key=lambda p: int(p.suffix[1:]))
        counts = [_summary(path) for path in dumps[-len(order) :]]
    result: dict[str, list[float]] = {}
    for i in range(0, len(order), 2):
        (name, _), full, empty = order[i], counts[i], counts[i + 1]
        result.setdefault(name, []).append((full - empty) / ROUNDS)
    return result


def main(argv: list[str] | None = None) -> int:
    """Print the times (or, with ``--callgrind``, the instruction counts) as JSON."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--worker" in args:
        _worker(Path(args[args.index("--worker") + 1]))
        return 0
    if "--callgrind" in args:
        print(json.dumps(counted(), indent=1))
        return 0
    repeats = int(args[args.index("--repeats") + 1]) if "--repeats" in args else 200
    print(json.dumps(timed(repeats), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
