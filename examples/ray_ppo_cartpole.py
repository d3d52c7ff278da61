"""PPO on CartPole-v1 with rollouts from Ray env runners (2 runners x 4 envs by default).

The learner (this process) holds the SB3 model and trains it; the runners step their envs. In
the local mode (``--mode local``, the default for a CPU policy) each runner acts with its own
replica of the policy, loading the newest published weights between fragments; in the server
mode (``--mode server``) a PolicyServer actor answers the runners' observations in batches with
the last published weights. Each iteration: publish the weights (one ray.put), collect one
rollout into the model's RolloutBuffer (rlightning_ray.sb3.collect_rollout, SB3's exact
semantics), model.train().
Prints the mean episode return and the per-hop latency; stops at --target (default 475) and
exits with an error when --steps run out before the target is reached. Writes the learning curve
(mean return of the last 100 episodes vs steps) to --out (default
docs/_static/ray/learning_curve.png; --out "" writes none).

    python examples/ray_ppo_cartpole.py --runners 2 --envs-per-runner 4 --steps 200000
    python examples/ray_ppo_cartpole.py --mode server    # a central PolicyServer instead
    python examples/ray_ppo_cartpole.py --address auto   # an existing cluster (ray start)
    python examples/ray_ppo_cartpole.py --smoke          # 512 steps, no target: the wiring
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import ray
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor

import rlightning_ray
from rlightning_ray.sb3 import SB3BatchPolicy, collect_rollout, policy_weights
from rlightning_sb3 import start_training


def cartpole() -> Any:
    return Monitor(gym.make("CartPole-v1"))


def make_model(n_envs: int, seed: int) -> PPO:
    # SB3's tuned CartPole hyperparameters (rl-zoo): n_steps=32 over 8 envs, 20 epochs, linear
    # schedules are left out for simplicity.
    env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed)
    return PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=1e-3,
        clip_range=0.2,
        seed=seed,
        device="cpu",
    )


def plot_curve(
    curve: list[tuple[int, float]], target: float, runners: int, k: int, out: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([c[0] for c in curve], [c[1] for c in curve], label="mean return (last 100 episodes)")
    ax.axhline(target, color="gray", linestyle="--", label=f"target {target:g}")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return")
    ax.set_title(f"PPO on CartPole-v1, rollouts from {runners} Ray runners x {k} envs")
    ax.legend(loc="lower right")
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    print(f"learning curve written to {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--envs-per-runner", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--target", type=float, default=475.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--address", default=None, help="ray.init address (default: local)")
    parser.add_argument(
        "--mode",
        choices=("local", "server"),
        default="local",
        help="local: a policy replica in each runner (default); server: one PolicyServer",
    )
    parser.add_argument(
        "--out",
        default=str(Path(__file__).resolve().parents[1] / "docs/_static/ray/learning_curve.png"),
        help='learning-curve PNG (needs matplotlib; "" writes none)',
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a few rollouts (512 steps), no target, no PNG: checks the wiring in seconds",
    )
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.target, args.out = 512, float("-inf"), ""
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    n_envs = args.runners * args.envs_per_runner
    model = make_model(n_envs, args.seed)
    start_training(model, args.steps)
    factory = partial(SB3BatchPolicy, partial(make_model, n_envs, args.seed))
    if args.mode == "local":
        server = registry = None
        runners = rlightning_ray.start_runners(
            cartpole,
            policy=factory,
            n_runners=args.runners,
            envs_per_runner=args.envs_per_runner,
            seed=args.seed,
            num_cpus=0.5,
        )
    else:
        server, registry = rlightning_ray.start_server(
            factory, max_batch=n_envs, max_wait_us=2000, num_cpus=0.5
        )
        runners = rlightning_ray.start_runners(
            cartpole,
            server,
            n_runners=args.runners,
            envs_per_runner=args.envs_per_runner,
            seed=args.seed,
            num_cpus=0.5,
        )
    collector = rlightning_ray.Collector(runners)
    version, start, mean = 0, time.perf_counter(), float("nan")
    curve: list[tuple[int, float]] = []
    while model.num_timesteps < args.steps:
        if server is None:
            collector.publish(version, policy_weights(model))
        else:
            rlightning_ray.publish_weights(server, registry, version, policy_weights(model))
        collect_rollout(model, collector, current_version=version)
        model.train()
        version += 1
        assert model.ep_info_buffer is not None  # start_training made it, as learn() does
        returns = [ep["r"] for ep in model.ep_info_buffer]
        mean = float(np.mean(returns)) if returns else float("nan")
        if returns:
            curve.append((model.num_timesteps, mean))
        if version % 20 == 0:
            rate = model.num_timesteps / (time.perf_counter() - start)
            print(f"{model.num_timesteps:>7} steps  mean return {mean:6.1f}  {rate:,.0f} steps/s")
        if len(returns) >= 20 and mean >= args.target and not args.smoke:
            break
    print(f"finished at {model.num_timesteps} steps, mean return {mean:.1f}")
    print(collector.latency().table())
    ray.shutdown()
    if args.out and curve:
        plot_curve(curve, args.target, args.runners, args.envs_per_runner, args.out)
    if not args.smoke and not mean >= args.target:  # NaN too
        raise SystemExit(f"mean return {mean:.1f} is below the target {args.target}")


if __name__ == "__main__":
    main()
