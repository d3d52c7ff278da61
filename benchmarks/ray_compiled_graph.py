"""Ray compiled graphs for the server mode's per-step hop, measured against today's server mode.

Issue 20 lists Ray compiled graphs (``dag.experimental_compile()``: static actor channels in
shared memory instead of one task submission per call) as an option for the server mode's
per-step round trip, to be measured. This runs, side by side and interleaved, on this machine:

* ``hop``: the round trip of one tiny request (a ``(4, 4)`` float32 array) to an actor, as a
  plain actor call (``ray.get(actor.act.remote(x))``) and through a compiled graph
  (``ray.get(compiled.execute(x))``), p50 over many calls;
* ``steps/s``: 2 runners x 4 envs and one policy actor (SB3's PPO ``MlpPolicy`` through
  ``SB3PolicyAdapter.act``), on CartPole-v1 and on CartPole spending 1 ms of CPU per step:
  today's server mode (``EnvRunner`` actors asking a ``PolicyServer``, with fragments, stamps and
  checks: ``ray_bench.bench_ours``) against a bare compiled-graph prototype (per step one
  ``execute``: every runner's observation to the policy actor, its actions back to each runner,
  which steps its ``DummyVecEnv``; no fragments, stamps, checks or weights: an upper bound of
  what compiled graphs could give the server mode).

    python benchmarks/ray_compiled_graph.py --seconds 3 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import ray
from ray.dag import InputNode, MultiOutputNode
from stable_baselines3.common.vec_env import DummyVecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs

from benchmarks.ray_bench import bench_ours, cartpole, costly, make_model
from rlightning_sb3 import SB3PolicyAdapter


class Echo:
    """The hop's far end: returns its input doubled."""

    def act(self, x: np.ndarray) -> np.ndarray:
        return x * 2.0


class GraphRunner:
    """``k`` envs in a ``DummyVecEnv``: hands out its observation, steps with its actions."""

    def __init__(self, env_fn: Callable[[], Any], k: int, seed: int) -> None:
        self.venv = DummyVecEnv([env_fn] * k)
        self.venv.seed(seed)
        self.obs = self.venv.reset()

    @ray.method
    def observe(self, _: Any) -> VecEnvObs:
        return self.obs

    @ray.method
    def step(self, actions: list[np.ndarray], index: int) -> int:
        self.obs, _, _, _ = self.venv.step(actions[index])
        return len(actions[index])


class GraphPolicy:
    """One batched ``SB3PolicyAdapter.act`` over every runner's observations."""

    def __init__(self, n_runners: int, k: int) -> None:
        self.adapter = SB3PolicyAdapter(make_model(n_runners * k))
        self.ids = [f"env-{i}" for i in range(n_runners * k)]
        self.k = k
        self.starts = np.zeros(n_runners * k, dtype=bool)

    def act(self, *observations: np.ndarray) -> list[np.ndarray]:
        batch = np.concatenate(observations)
        stacked = self.adapter.act(batch, self.ids, episode_start=self.starts).stacked
        assert stacked is not None  # act's batch, not yet split
        actions = stacked.action
        return [actions[r * self.k : (r + 1) * self.k] for r in range(len(observations))]


def hop(n: int) -> tuple[float, float]:
    """p50 microseconds of a plain actor call and of a compiled graph's execute."""
    actor: Any = ray.remote(num_cpus=0)(Echo).remote()
    x = np.zeros((4, 4), np.float32)
    ray.get(actor.act.remote(x))

    def p50(call: Callable[[], Any]) -> float:
        times = []
        for _ in range(n):
            start = time.perf_counter_ns()
            call()
            times.append(time.perf_counter_ns() - start)
        return statistics.median(times) / 1e3

    plain = p50(lambda: ray.get(actor.act.remote(x)))
    with InputNode() as inp:
        dag = actor.act.bind(inp)
    compiled = dag.experimental_compile()
    try:
        graph = p50(lambda: ray.get(compiled.execute(x)))
    finally:
        compiled.teardown()
        ray.kill(actor)
    return plain, graph


def bench_graph(env_fn: Callable[[], Any], n_runners: int, k: int, seconds: float) -> float:
    """Steps per second of the compiled-graph prototype (module docstring)."""
    runners = [
        ray.remote(num_cpus=0)(GraphRunner).remote(env_fn, k, 1000 * r) for r in range(n_runners)
    ]
    policy: Any = ray.remote(num_cpus=0)(GraphPolicy).remote(n_runners, k)
    with InputNode() as inp:
        observations = [r.observe.bind(inp) for r in runners]
        actions = policy.act.bind(*observations)
        dag = MultiOutputNode([r.step.bind(actions, i) for i, r in enumerate(runners)])
    compiled = dag.experimental_compile()
    try:
        for _ in range(20):
            ray.get(compiled.execute(0))
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            steps += sum(ray.get(compiled.execute(0)))
        return steps / (time.perf_counter() - start)
    finally:
        compiled.teardown()
        for actor in [*runners, policy]:
            ray.kill(actor)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy-ms", type=float, default=1.0)
    args = parser.parse_args()
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    plains, graphs = zip(*(hop(300) for _ in range(args.repeats)), strict=True)
    plain, graph = statistics.median(plains), statistics.median(graphs)
    print(
        f"hop p50: plain actor call {plain:.0f} us, compiled graph {graph:.0f} us "
        f"({plain / graph:.2f}x faster)"
    )
    envs: dict[str, Callable[[], Any]] = {
        "CartPole-v1": cartpole,
        f"CartPole + {args.busy_ms:g} ms": partial(costly, args.busy_ms / 1e3),
    }
    for name, env_fn in envs.items():
        ours, proto = [], []
        for _ in range(args.repeats):  # interleaved
            ours.append(bench_ours(env_fn, 2, 4, args.seconds, chunk=64)["rate"])
            proto.append(bench_graph(env_fn, 2, 4, args.seconds))
        a, b = statistics.median(ours), statistics.median(proto)
        print(
            f"{name}, 2 runners x 4 envs: server mode {a:,.0f} steps/s, compiled-graph "
            f"prototype {b:,.0f} steps/s ({b / a:.2f}x)"
        )
    ray.shutdown()


if __name__ == "__main__":
    main()
