"""What a local runner's fragment costs to serialise, per step against column-wise (issue 20).

The fragment is real: one local-mode ``EnvRunner`` (the actor's class built in this process, as
:mod:`benchmarks.ray_runner_cost` builds it) over 8 CartPole-v1 envs seeded ``0..7``, the bench's
PPO ``MlpPolicy``, a fragment of 64 steps after one of warm-up. Two ways to pickle it:

* ``per-step``: its field dict as a plain dict (each answer through
  ``PolicyResponse.__reduce_ex__``, each observation batch by numpy): what a ``Fragment``
  pickled as before ``Fragment.__reduce_ex__``;
* ``columns``: the fragment itself (``Fragment.__reduce_ex__``: answers one stacked array per
  field, observations one per key).

Timed (medians of ``--repeats``, ``time.perf_counter``): ``pickle.dumps`` (protocol 5),
``pickle.loads``, and ``ray.get(ray.put(...))`` in a local cluster (``ray.init(address="local",
num_cpus=1, include_dashboard=False)``). Counted with callgrind (``--callgrind``; the markers of
:mod:`benchmarks.callgrind`): the instructions of one ``pickle.loads(pickle.dumps(x, protocol=5))``
round trip, a region of 20 round trips minus a region of none, over 20, each counted twice.

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


def subjects(fragment: Any) -> dict[str, Any]:
    """``{"per-step": the field dict, "columns": the fragment}`` (module docstring)."""
    return {"per-step": dict(vars(fragment)), "columns": fragment}


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def timed(repeats: int) -> dict[str, dict[str, float]]:
    """Median milliseconds of dumps, loads and ray put+get for both ways (interleaved)."""
    import ray

    fragment = build_fragment()
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        out: dict[str, dict[str, float]] = {}
        for name, obj in subjects(fragment).items():
            blob = pickle.dumps(obj, protocol=5)

            def dumps(obj: Any = obj) -> bytes:
                return pickle.dumps(obj, protocol=5)

            def loads(blob: bytes = blob) -> Any:
                return pickle.loads(blob)

            def put_get(obj: Any = obj) -> Any:
                return ray.get(ray.put(obj))

            out[name] = {
                "bytes": len(blob),
                "dumps_ms": _median_ms(dumps, repeats),
                "loads_ms": _median_ms(loads, repeats),
                "ray_put_get_ms": _median_ms(put_get, max(repeats // 2, 1)),
            }
        return out
    finally:
        ray.shutdown()


def _worker(out: Path) -> None:
    """Run inside callgrind: two rounds of each way's regions (20 round trips, then none)."""
    from benchmarks.callgrind import _dump, _instrumentation_on

    items = subjects(build_fragment())

    def loop(obj: Any, n: int) -> None:
        for _ in range(n):
            pickle.loads(pickle.dumps(obj, protocol=5))

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
