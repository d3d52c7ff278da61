"""A shared PPO for the three agents of mpe2 simple_spread_v3, with rollouts from Ray runners.

The PettingZoo twin of ``ray_ppo_cartpole.py`` and the Ray twin of
``pettingzoo_shared_policy.py`` (same env, hyperparameters and evaluation): ``ParallelEnvRunner``
actors host the parallel envs, a ``PolicyServer`` answers each env through
``SharedPolicyAdapter`` (``SharedBatchPolicy``), and the learner fills its PPO's
``RolloutBuffer`` with one row per agent and env step
(``rlightning_ray.pettingzoo.collect_shared_rollout``), then ``model.train()``. Afterwards the
policy is evaluated (deterministic) against uniform random play on the same 50 seeds; the run
fails unless it beats random by --margin (default 4.0, half the gap
``pettingzoo_shared_policy.py`` measured: -19.5 trained vs -27.5 random).

    python examples/ray_pettingzoo_shared.py           # minutes (examples/README.md)
    python examples/ray_pettingzoo_shared.py --smoke   # seconds: the wiring, no margin
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import ray
import torch
from pettingzoo_shared_policy import evaluate as evaluate_on  # the sibling example's loop
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

import rlightning_ray
from rlightning_pettingzoo import SharedPolicyAdapter
from rlightning_ray.pettingzoo import ParallelEnvRunner, SharedBatchPolicy, collect_shared_rollout
from rlightning_ray.sb3 import policy_weights
from rlightning_sb3 import start_training

try:
    from mpe2 import simple_spread_v3
except ImportError:  # PettingZoo before MPE moved to mpe2
    from pettingzoo.mpe import simple_spread_v3


def make_env() -> Any:
    return simple_spread_v3.parallel_env(max_cycles=25)


class AgentSlot(gym.Env[Any, Any]):
    """One agent's spaces: the slots of the shared model's VecEnv (sizes its buffer; never
    stepped, the runners step the real envs)."""

    def __init__(self) -> None:
        env = make_env()
        self.observation_space = env.observation_space(env.possible_agents[0])
        self.action_space = env.action_space(env.possible_agents[0])

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, self.observation_space.dtype), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("the runners step the envs")


def make_model(n_slots: int, seed: int) -> PPO:
    # pettingzoo_shared_policy.py's hyperparameters
    return PPO(
        "MlpPolicy",
        DummyVecEnv([AgentSlot] * n_slots),
        n_steps=128,
        batch_size=256,
        n_epochs=5,
        learning_rate=1e-3,
        gamma=0.95,
        ent_coef=0.01,
        seed=seed,
        device="cpu",
    )


def evaluate(adapter: SharedPolicyAdapter | None, episodes: int, seed: int) -> float:
    """Mean per-agent episode return: the shared policy (deterministic), or random if None.

    ``pettingzoo_shared_policy.py``'s ``evaluate`` (same loop, same seeds) on this script's env.
    """
    return evaluate_on(make_env, adapter, episodes, seed)


def episode_returns(fragments: list[Any], totals: dict[str, float], out: list[float]) -> None:
    """Add each step's rewards to its env's running total; an ended episode's mean goes to out."""
    for frag in fragments:
        for t in range(len(frag.rewards)):
            for i, env_id in enumerate(frag.env_ids):
                totals[env_id] = totals.get(env_id, 0.0) + float(
                    np.mean(list(frag.rewards[t][i].values()))
                )
                if frag.resets[t, i]:
                    out.append(totals.pop(env_id))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--envs-per-runner", type=int, default=4)
    parser.add_argument("--timesteps", type=int, default=150_000, help="agent-steps")
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--margin", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--address", default=None, help="ray.init address (default: local)")
    parser.add_argument("--smoke", action="store_true", help="one rollout, 2 episodes, no margin")
    args = parser.parse_args()
    if args.smoke:
        args.timesteps, args.eval_episodes, args.margin = 1, 2, float("-inf")
    torch.set_num_threads(1)  # small MLPs: one thread is fastest on a small shared CPU
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    agents = list(make_env().possible_agents)
    n_envs = args.runners * args.envs_per_runner
    model = make_model(n_envs * len(agents), args.seed)
    start_training(model, args.timesteps)
    server, registry = rlightning_ray.start_server(
        partial(SharedBatchPolicy, partial(make_model, 1, args.seed), make_env, seed=args.seed),
        max_batch=n_envs,
        max_wait_us=2000,
        num_cpus=0.5,
    )
    runners = rlightning_ray.start_runners(
        make_env,
        server,
        n_runners=args.runners,
        envs_per_runner=args.envs_per_runner,
        seed=args.seed,
        num_cpus=0.5,
        runner_class=ParallelEnvRunner,
    )
    collector = rlightning_ray.Collector(runners)
    version, start = 0, time.perf_counter()
    totals: dict[str, float] = {}
    finished: list[float] = []
    while model.num_timesteps < args.timesteps:
        rlightning_ray.publish_weights(server, registry, version, policy_weights(model))
        fragments = collect_shared_rollout(model, collector, agents, current_version=version)
        episode_returns(fragments, totals, finished)
        model.train()
        version += 1
        if version % 10 == 0:
            rate = model.num_timesteps / (time.perf_counter() - start)
            recent = float(np.mean(finished[-50:])) if finished else float("nan")
            print(
                f"{model.num_timesteps:>7} agent-steps  mean per-agent return (last 50 "
                f"episodes) {recent:6.1f}  {rate:,.0f} agent-steps/s"
            )
    train_s = time.perf_counter() - start
    print(f"trained {model.num_timesteps} agent-steps in {train_s:.1f} s ({version} rollouts)")
    print(collector.latency().table())
    ray.shutdown()
    random_mean = evaluate(None, args.eval_episodes, seed=10_000)
    trained_mean = evaluate(SharedPolicyAdapter(model), args.eval_episodes, seed=10_000)
    print(f"mean per-agent episode return over {args.eval_episodes} episodes:")
    print(f"  random : {random_mean:8.2f}")
    print(f"  trained: {trained_mean:8.2f}  (margin {trained_mean - random_mean:+.2f})")
    if not trained_mean - random_mean >= args.margin:
        raise SystemExit(
            f"the trained policy beats random by {trained_mean - random_mean:.2f}, "
            f"less than --margin {args.margin}"
        )


if __name__ == "__main__":
    main()
