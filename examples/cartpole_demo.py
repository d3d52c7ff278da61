"""Train SB3 PPO on CartPole-v1, then evaluate it with every action passing through PolicyResponses.

1. ``PPO.learn`` with rl-baselines3-zoo's tuned CartPole-v1 hyperparameters (8 envs, 1e5 steps,
   linear learning-rate and clip-range schedules), SB3's progress bar on.
2. 20 evaluation episodes on a VecEnv: each observation is stamped ``ts_env_sent_ns``
   (``time.time_ns()``) when it is "sent" to the policy, ``SB3PolicyAdapter.predict`` answers with
   one ``PolicyResponse`` per env, each response is stamped ``mark_policy_sent()``, and
   ``compute_sent_latency()`` measures the env->policy hop.

Prints the mean evaluation return and the p50/p99 env->policy latency, and exits with status 1 if
the mean return is below 450 (``--smoke``: a tiny budget and no threshold, for the test suite).

Run: ``python examples/cartpole_demo.py`` (SB3's progress bar shows the training; measured times
are in ``examples/README.md``).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch as th
from _cartpole_ppo import make_model  # the examples' shared model (same folder)
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from rlightning_sb3 import SB3PolicyAdapter

THRESHOLD = 450.0
N_EVAL_EPISODES = 20


def evaluate(model: PPO, n_episodes: int, seed: int) -> tuple[list[float], list[float]]:
    """Run episodes on a VecEnv, every action through SB3PolicyAdapter responses.

    Returns the finished episodes' returns and every response's env->policy latency (seconds).
    """
    n_envs = 4
    env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed + 1000)
    env_ids = [f"cartpole-{i}" for i in range(n_envs)]
    adapter = SB3PolicyAdapter(model)
    returns: list[float] = []
    latencies: list[float] = []
    episode_return = np.zeros(n_envs)
    obs = env.reset()
    while len(returns) < n_episodes:
        sent_ns = time.time_ns()  # the env worker "sends" the observation
        responses = adapter.predict(
            obs, env_ids=env_ids, deterministic=True, ts_env_sent_ns=sent_ns
        )
        for response in responses:
            response.mark_policy_sent()
            latencies.append(response.compute_sent_latency())
        obs, rewards, dones, _ = env.step(adapter.env_actions(responses, env_ids))
        episode_return += rewards
        for i in np.flatnonzero(dones):
            returns.append(float(episode_return[i]))
            episode_return[i] = 0.0
    return returns[:n_episodes], latencies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny budget, no threshold")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timesteps", type=int, default=100_000)
    args = parser.parse_args(argv)

    th.set_num_threads(1)  # tiny networks: threads cost more than they give on a small CPU
    total = 512 if args.smoke else args.timesteps
    n_episodes = 2 if args.smoke else N_EVAL_EPISODES
    model = make_model(args.seed)
    start = time.perf_counter()
    model.learn(total_timesteps=total, progress_bar=True)
    train_s = time.perf_counter() - start

    returns, latencies = evaluate(model, n_episodes, args.seed)
    mean_return = float(np.mean(returns))
    p50, p99 = np.percentile(np.array(latencies) * 1e6, [50, 99])
    print(f"trained PPO on CartPole-v1 for {total} steps in {train_s:.1f} s")
    print(f"mean return over {len(returns)} episodes: {mean_return:.1f} (min {min(returns):.0f})")
    print(
        f"env->policy latency over {len(latencies)} responses: p50 {p50:.1f} us, p99 {p99:.1f} us"
    )
    if not args.smoke and mean_return < THRESHOLD:
        print(f"FAIL: mean return {mean_return:.1f} < {THRESHOLD}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
