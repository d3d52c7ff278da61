"""rlightning-ray side by side: steps per second against SB3's VecEnvs and RLlib's env runners.

One run measures, on this machine and under its current load:

* steps per second of the same total number of envs (``--envs``, default 8) stepped with the
  same policy (an SB3 PPO ``MlpPolicy`` answering through ``SB3PolicyAdapter.act``, one batched
  forward pass per step) by SB3's ``DummyVecEnv`` (one process), SB3's ``SubprocVecEnv`` (one
  process per env, the policy in the driver), rlightning-ray in the server mode (1, 2 and 4
  ``EnvRunner`` actors and one ``PolicyServer``), in the pipelined server mode (the same, each
  runner's two halves alternating: ``start_runners(..., pipeline=True)``) and in the local
  mode (the same runners, each acting with its own replica of the model:
  ``start_runners(..., policy=...)``; and its floor, the same actors running a bare loop of
  ``env.step`` and ``SB3PolicyAdapter.act``), and RLlib's ``SingleAgentEnvRunner`` actors (1,
  2 and 4, its own PPO module with the same 64x64 tanh MLP), for CartPole-v1 and a costly env
  (CartPole-v1 spending ``--busy-ms`` of CPU per step in a busy loop);
* the batch size vs latency trade-off of the server's ``max_wait_us`` (4 runners x 2 envs);
* the per-hop latency (p50/p99) of one run, plotted to ``docs/_static/ray/latency.png``.

Each row's contenders are measured in ``--repeats`` interleaved rounds (every contender once per
round, the order rotated by one place each round: :func:`interleaved`): the steps per second
reported are medians over the rounds, and each ratio is the median of the ratios measured in the
same round, so that a change of the machine's load between rounds moves both sides of a ratio.

The results go to stdout and, with ``--write-docs``, into ``docs/ray.md`` between the
``bench-ray`` markers. ``tox -e bench-ray`` runs it.

    python benchmarks/ray_bench.py --seconds 3 --repeats 3 --write-docs
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import ray
from ray.actor import ActorHandle
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

import rlightning_ray
from rlightning_ray.sb3 import SB3BatchPolicy, policy_weights
from rlightning_sb3 import SB3PolicyAdapter

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "ray.md"
PLOT = ROOT / "docs" / "_static" / "ray" / "latency.png"
START, END = "<!-- bench-ray:start -->", "<!-- bench-ray:end -->"


class BusyStep(gym.Wrapper[Any, Any, Any, Any]):
    """Spends ``busy_s`` seconds of CPU (a busy loop, not a sleep) in every ``step``."""

    def __init__(self, env: gym.Env[Any, Any], busy_s: float) -> None:
        super().__init__(env)
        self.busy_s = busy_s

    def step(self, action: Any) -> Any:
        end = time.perf_counter() + self.busy_s
        while time.perf_counter() < end:
            pass
        return self.env.step(action)


def cartpole() -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1")


def costly(busy_s: float) -> gym.Env[Any, Any]:
    return BusyStep(gym.make("CartPole-v1"), busy_s)


def make_model(n_envs: int) -> PPO:
    """The policy every contender uses (SB3's default MlpPolicy: 64x64 tanh)."""
    return PPO("MlpPolicy", DummyVecEnv([cartpole] * n_envs), seed=0, device="cpu")


def bench_vecenv(vec_cls: type, env_fn: Callable[[], Any], n_envs: int, seconds: float) -> float:
    """Steps per second of an SB3 VecEnv stepped with ``SB3PolicyAdapter.act`` per step."""
    venv = vec_cls([env_fn] * n_envs)
    adapter = SB3PolicyAdapter(make_model(n_envs))
    ids = [f"env-{i}" for i in range(n_envs)]
    obs, starts = venv.reset(), np.ones(n_envs, dtype=bool)

    def step() -> None:
        nonlocal obs, starts
        stacked = adapter.act(obs, ids, episode_start=starts).stacked
        assert stacked is not None  # act's batch, not yet split
        obs, _, starts, _ = venv.step(stacked.action)

    for _ in range(20):
        step()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        steps += n_envs
    rate = steps / (time.perf_counter() - start)
    venv.close()
    return rate


def bench_ours(
    env_fn: Callable[[], Any],
    n_runners: int,
    k: int,
    seconds: float,
    *,
    chunk: int,
    max_wait_us: int = 1000,
    pipeline: bool = False,
) -> dict[str, Any]:
    """Steps per second of ``n_runners`` EnvRunners x ``k`` envs and one PolicyServer.

    ``pipeline``: the pipelined server mode (each runner's two halves alternate).
    """
    n_envs = n_runners * k
    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, partial(make_model, n_envs)),
        max_batch=n_envs,
        max_wait_us=max_wait_us,
        num_cpus=0,
    )
    runners = rlightning_ray.start_runners(
        env_fn,
        server,
        n_runners=n_runners,
        envs_per_runner=k,
        seed=0,
        num_cpus=0,
        pipeline=pipeline,
    )
    rlightning_ray.publish_weights(server, registry, 0, policy_weights(make_model(n_envs)))
    collector = rlightning_ray.Collector(runners)
    collector.sample(8)
    collector.latency(reset=True)
    before = len(ray.get(server.info.remote())["batch_rows"])
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        collector.sample(chunk)
        steps += chunk * n_envs
    rate = steps / (time.perf_counter() - start)
    rows = ray.get(server.info.remote())["batch_rows"][before:]
    report = collector.latency()
    for actor in [*runners, server, registry]:
        ray.kill(actor)
    return {"rate": rate, "batch": float(np.mean(rows)), "report": report}


def bench_local(
    env_fn: Callable[[], Any], n_runners: int, k: int, seconds: float, *, chunk: int
) -> float:
    """Steps per second of ``n_runners`` EnvRunners x ``k`` envs, each with its own policy."""
    n_envs = n_runners * k
    runners = rlightning_ray.start_runners(
        env_fn,
        n_runners=n_runners,
        envs_per_runner=k,
        seed=0,
        num_cpus=0,
        policy=partial(SB3BatchPolicy, partial(make_model, k)),
    )
    collector = rlightning_ray.Collector(runners)
    collector.publish(0, policy_weights(make_model(k)))
    collector.sample(8)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        collector.sample(chunk)
        steps += chunk * n_envs
    rate = steps / (time.perf_counter() - start)
    for actor in runners:
        ray.kill(actor)
    return rate


class FloorRunner:
    """The local mode's floor: a bare loop of ``venv.step`` and ``SB3PolicyAdapter.act``.

    A Ray actor holding ``k`` envs (SB3's ``DummyVecEnv``) and the same policy, with no
    fragments, stamps, checks or weights: what any runner-local design costs at least.
    """

    def __init__(self, env_fn: Callable[[], Any], k: int) -> None:
        self.venv = DummyVecEnv([env_fn] * k)
        self.adapter = SB3PolicyAdapter(make_model(k))
        self.ids = [f"env-{i}" for i in range(k)]
        self.obs, self.starts = self.venv.reset(), np.ones(k, dtype=bool)

    def steps(self, n_steps: int) -> int:
        """Step every env ``n_steps`` times; return the steps (``n_steps * k``)."""
        for _ in range(n_steps):
            stacked = self.adapter.act(self.obs, self.ids, episode_start=self.starts).stacked
            assert stacked is not None  # act's batch, not yet split
            self.obs, _, self.starts, _ = self.venv.step(stacked.action)
        return n_steps * len(self.ids)

    @ray.method
    def run(self, n_steps: int) -> int:
        """:meth:`steps`, called on the actor (``runner.run.remote(n_steps)``)."""
        return self.steps(n_steps)


def bench_floor(
    env_fn: Callable[[], Any], n_runners: int, k: int, seconds: float, *, chunk: int
) -> float:
    """Steps per second of ``n_runners`` :class:`FloorRunner` actors, ``chunk`` steps a call."""
    actor = ray.remote(num_cpus=0)(FloorRunner)
    runners = [actor.remote(env_fn, k) for _ in range(n_runners)]
    ray.get([r.run.remote(8) for r in runners])
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += sum(ray.get([r.run.remote(chunk) for r in runners]))
    rate = steps / (time.perf_counter() - start)
    for r in runners:
        assert isinstance(r, ActorHandle)  # (ActorClass.remote's stub also admits the class)
        ray.kill(r)
    return rate


def bench_rllib(env_name: str, n_runners: int, k: int, seconds: float, chunk: int) -> float:
    """Steps per second of RLlib's SingleAgentEnvRunner actors sampling ``chunk`` steps per env."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    config = (
        PPOConfig()
        .environment(env_name)
        .env_runners(num_env_runners=n_runners, num_envs_per_env_runner=k)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="tanh"))
    )
    actor = ray.remote(num_cpus=0)(SingleAgentEnvRunner)
    # RLlib's methods are not @ray.method-decorated, so Ray's stub types a handle's `sample` as
    # the plain method (no `.remote`): the handles are ActorHandles, typed as such by nothing
    runners: list[Any] = [actor.remote(config=config, worker_index=i + 1) for i in range(n_runners)]
    ray.get([r.sample.remote(num_timesteps=8 * k) for r in runners])
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        episodes = ray.get([r.sample.remote(num_timesteps=chunk * k) for r in runners])
        steps += sum(len(e) for eps in episodes for e in eps)
    rate = steps / (time.perf_counter() - start)
    for r in runners:
        ray.kill(r)
    return rate


def plot_latency(report: rlightning_ray.LatencyReport, title: str, out: Path) -> None:
    """Grouped bars of p50 and p99 (ms, log scale) per hop."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report.hops)
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    ax.bar(x - 0.2, [report.hops[n].p50_ms for n in names], 0.4, label="p50")
    ax.bar(x + 0.2, [report.hops[n].p99_ms for n in names], 0.4, label="p99")
    ax.set_xticks(x, names)
    ax.set_yscale("log")
    ax.set_ylabel("ms per step")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)


def interleaved(
    contenders: dict[str, Callable[[], Any]], repeats: int
) -> tuple[dict[str, list[float]], dict[str, list[Any]]]:
    """Measure every contender ``repeats`` times, interleaved, the order rotated each round.

    Round ``r`` runs the contenders in their order rotated by ``r`` places, so that none is
    always measured first (after the driver's idle time) or last. A contender returns steps per
    second, or a :func:`bench_ours` dict (its ``rate`` kept; the rest in the second result).

    Returns:
        ``(rates, extras)``: per contender, its steps per second of each round in round order,
        and the dict results of the contenders that return one.
    """
    keys = list(contenders)
    rates: dict[str, list[float]] = {key: [] for key in keys}
    extras: dict[str, list[Any]] = {}
    for r in range(repeats):
        for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
            result = contenders[key]()
            if isinstance(result, dict):
                extras.setdefault(key, []).append(result)
                result = result["rate"]
            rates[key].append(float(result))
    return rates, extras


def paired_ratio(rates: dict[str, list[float]], a: str, b: str) -> str:
    """The median over the rounds of ``rates[a] / rates[b]`` measured in the same round.

    Returns:
        The ratio with two decimals, or ``"nan"`` when either contender was not measured.
    """
    if a not in rates or b not in rates:
        return "nan"
    paired = [x / y for x, y in zip(rates[a], rates[b], strict=True)]
    return f"{statistics.median(paired):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument(
        "--repeats", type=int, default=3, help="interleaved rounds per configuration (medians)"
    )
    parser.add_argument("--envs", type=int, default=8, help="total envs of every contender")
    parser.add_argument("--busy-ms", type=float, default=1.0)
    parser.add_argument("--runners", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--max-wait-us", type=int, nargs="+", default=[0, 200, 1000, 5000])
    parser.add_argument("--no-rllib", action="store_true")
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name} and plot")
    args = parser.parse_args()
    load = os.getloadavg()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    ray.init(
        address="local", num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False
    )
    rllib_reason = None
    if not args.no_rllib:
        try:
            from ray.tune.registry import register_env

            register_env("bench-cartpole", lambda _: cartpole())
            register_env("bench-costly", lambda _: costly(args.busy_ms / 1e3))
        except ImportError as exc:
            rllib_reason = f"ray[rllib] is not installed ({exc})"
    else:
        rllib_reason = "--no-rllib"
    envs: dict[str, tuple[Callable[[], gym.Env[Any, Any]], str, int]] = {
        "CartPole-v1": (cartpole, "bench-cartpole", 64),
        f"CartPole-v1 + {args.busy_ms:g} ms CPU/step": (
            partial(costly, args.busy_ms / 1e3),
            "bench-costly",
            16,
        ),
    }
    rows: list[str] = []
    latency_run: tuple[Any, str] | None = None
    for name, (env_fn, rllib_name, chunk) in envs.items():
        for n_runners in args.runners:
            k = args.envs // n_runners
            contenders: dict[str, Callable[[], Any]] = {
                "dummy": partial(bench_vecenv, DummyVecEnv, env_fn, args.envs, args.seconds),
                "subproc": partial(bench_vecenv, SubprocVecEnv, env_fn, args.envs, args.seconds),
                "server": partial(bench_ours, env_fn, n_runners, k, args.seconds, chunk=chunk),
                "pipelined": partial(
                    bench_ours, env_fn, n_runners, k, args.seconds, chunk=chunk, pipeline=True
                ),
                "local": partial(bench_local, env_fn, n_runners, k, args.seconds, chunk=chunk),
                "floor": partial(bench_floor, env_fn, n_runners, k, args.seconds, chunk=chunk),
            }
            if rllib_reason is None:
                contenders["rllib"] = partial(
                    bench_rllib, rllib_name, n_runners, k, args.seconds, chunk
                )
            rates, reports = interleaved(contenders, args.repeats)
            med = {key: statistics.median(values) for key, values in rates.items()}
            med.setdefault("rllib", float("nan"))

            ratio = partial(paired_ratio, rates)

            print(
                f"{name}: {n_runners} runners x {k}: "
                + ", ".join(
                    f"{key} {statistics.median(v):,.0f}/s ({' '.join(f'{x:,.0f}' for x in v)})"
                    for key, v in rates.items()
                ),
                flush=True,
            )
            rows.append(
                f"| {name} | {n_runners} x {k} | {med['server']:,.0f} | {med['pipelined']:,.0f} | "
                f"{med['local']:,.0f} | {med['floor']:,.0f} | {med['dummy']:,.0f} | "
                f"{med['subproc']:,.0f} | {med['rllib']:,.0f} | "
                f"{ratio('server', 'subproc')} | {ratio('pipelined', 'subproc')} | "
                f"{ratio('pipelined', 'server')} | {ratio('local', 'subproc')} | "
                f"{ratio('local', 'dummy')} | {ratio('local', 'rllib')} | "
                f"{ratio('local', 'floor')} |"
            )
            if n_runners == 2 and name == "CartPole-v1":
                latency_run = (
                    reports["server"][-1]["report"],
                    f"{name}, {n_runners} runners x {k} envs",
                )
    waits: list[str] = []
    k = max(args.envs // 4, 1)
    for wait in args.max_wait_us:
        ours = bench_ours(cartpole, 4, k, args.seconds, chunk=64, max_wait_us=wait)
        report = ours["report"]
        queue = report.hops["queue"]
        round_trip = sum(s.p50_ms for s in report.hops.values())
        waits.append(
            f"| {wait} | {ours['batch']:.2f} | {queue.p50_ms:.3f} | {queue.p99_ms:.3f} | "
            f"{round_trip:.3f} | {ours['rate']:,.0f} |"
        )
        print(waits[-1], flush=True)
    ray.shutdown()
    header = (
        f"Measured {when} on {platform.machine()} with {os.cpu_count()} CPU cores "
        f"(`{platform.processor() or platform.platform()}`), load average "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min) at the start; "
        f"{args.seconds:g} s per measurement; {args.envs} envs in total everywhere; "
        f"{args.repeats} interleaved rounds per row (each round measures every contender, "
        "the order rotated by one each round): steps/s are medians over the rounds, each ratio "
        "the median over the rounds of the ratio measured in the same round."
    )
    table = "\n".join(
        [
            "| env | runners x envs | server mode steps/s | pipelined server steps/s | "
            "local mode steps/s | floor | DummyVecEnv | SubprocVecEnv | RLlib | "
            "server / Subproc | pipelined / Subproc | pipelined / server | local / Subproc | "
            "local / Dummy | local / RLlib | local / floor |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    wait_table = "\n".join(
        [
            f"`max_wait_us` with 4 runners x {k} envs on CartPole-v1 (`max_batch={4 * k}`):",
            "",
            "| max_wait_us | mean batch rows | queue p50 ms | queue p99 ms | "
            "round trip p50 ms (sum of hops) | steps/s |",
            "|---|---|---|---|---|---|",
            *waits,
        ]
    )
    rllib_note = (
        "RLlib: `SingleAgentEnvRunner` actors (ray[rllib] 2.60.0), `num_envs_per_env_runner` "
        "envs each, its PPO module with a 64x64 tanh MLP, `sample(num_timesteps=...)` on all "
        "runners at once."
        if rllib_reason is None
        else f"RLlib was not measured: {rllib_reason}."
    )
    text = "\n\n".join([header, table, rllib_note, wait_table])
    if latency_run is not None:
        text += (
            "\n\nPer-hop latency of the " + latency_run[1] + " run:\n\n" + latency_run[0].table()
        )
    print(text)
    if args.write_docs:
        if latency_run is not None:
            plot_latency(latency_run[0], f"per-hop latency, {latency_run[1]}", PLOT)
            text += f"\n\n![per-hop latency](_static/ray/{PLOT.name})"
        docs = DOCS.read_text()
        if START in docs and END in docs:
            head, rest = docs.split(START, 1)
            docs = head + START + "\n" + text + "\n" + END + rest.split(END, 1)[1]
        else:
            docs = docs.rstrip("\n") + f"\n\n{START}\n{text}\n{END}\n"
        DOCS.write_text(docs)
        print(f"written to {DOCS.relative_to(ROOT)} and {PLOT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
