"""Train SB3 PPO on CartPole-v1 with a loop built only from PolicyResponses.

No ``model.learn()``: every step goes ``SB3PolicyAdapter.act`` -> ``env_actions`` -> ``VecEnv.step``
-> ``add_rollout_step``; every rollout ends with ``finish_rollout`` and ``model.train()``. Because
the adapter and the helpers reproduce SB3's ``collect_rollouts`` exactly, this is the same
training as ``model.learn(100_000)`` with rl-baselines3-zoo's tuned CartPole-v1 hyperparameters,
and it uses the same step budget (1e5 env steps).

Along the way it records the learning curve: the mean return of the last 100 training episodes
(what SB3 logs as ``rollout/ep_rew_mean``) after every rollout, and the mean return of 10
deterministic evaluation episodes every 25 rollouts. At the end it evaluates 20 episodes and
exits with status 1 if their mean return is below 475.

Output, in ``--out`` (default ``examples/output/sb3_custom_loop``): ``learning_curve.csv``,
``learning_curve.png`` (matplotlib) and ``summary.json``.

Run: ``python examples/sb3_custom_loop.py`` (about a minute on 2 CPU cores);
``--smoke`` trains 512 steps, evaluates 2 episodes and checks no threshold.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch as th
from _cartpole_ppo import make_model  # the examples' shared model (same folder)
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from rlightning_sb3 import (
    SB3PolicyAdapter,
    add_rollout_step,
    finish_rollout,
    start_training,
)

THRESHOLD = 475.0
BUDGET = 100_000  # rl-baselines3-zoo's n_timesteps for PPO on CartPole-v1
DEFAULT_OUT = Path(__file__).resolve().parent / "output" / "sb3_custom_loop"


def evaluate(adapter: SB3PolicyAdapter, n_episodes: int, seed: int) -> float:
    """Mean return of deterministic episodes, every action through adapter responses."""
    n_envs = 4
    env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed)
    ids = [f"eval-{i}" for i in range(n_envs)]
    obs = env.reset()
    running = np.zeros(n_envs)
    returns: list[float] = []
    while len(returns) < n_episodes:
        responses = adapter.predict(obs, env_ids=ids, deterministic=True)
        obs, rewards, dones, _ = env.step(adapter.env_actions(responses, ids))
        running += rewards
        for i in np.flatnonzero(dones):
            returns.append(float(running[i]))
            running[i] = 0.0
    env.close()
    return float(np.mean(returns[:n_episodes]))


def train(
    seed: int, total: int, eval_every: int, eval_episodes: int
) -> tuple[PPO, list[dict[str, float]]]:
    """The training loop. Returns the model and the learning-curve rows."""
    model = make_model(seed)
    adapter = SB3PolicyAdapter(model)
    env = model.get_env()
    env_ids = [f"cartpole-{i}" for i in range(env.num_envs)]
    obs = start_training(model, total)  # as learn() begins: counters, logger, env reset
    episode_starts = np.ones(env.num_envs, dtype=bool)
    curve: list[dict[str, float]] = []
    rollout = 0
    while model.num_timesteps < total:
        for _ in range(model.n_steps):
            responses = adapter.act(obs, env_ids, episode_start=episode_starts)
            new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, env_ids))
            add_rollout_step(model, obs, responses, rewards, dones, infos, env_ids=env_ids)
            obs, episode_starts = new_obs, dones
        finish_rollout(model, obs, dones)
        model.train()
        rollout += 1
        episodes = [info["r"] for info in model.ep_info_buffer or []]
        row = {
            "timesteps": model.num_timesteps,
            "train_return_mean100": float(np.mean(episodes)) if episodes else float("nan"),
            "eval_return": float("nan"),
        }
        if rollout % eval_every == 0:
            row["eval_return"] = evaluate(adapter, eval_episodes, seed + 10_000 + rollout)
        curve.append(row)
    return model, curve


def save(out: Path, curve: list[dict[str, float]], summary: dict[str, object]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "learning_curve.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(curve[0]))
        writer.writeheader()
        writer.writerows(curve)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    steps = [r["timesteps"] for r in curve]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, [r["train_return_mean100"] for r in curve], label="training (last 100 episodes)")
    evals = [(r["timesteps"], r["eval_return"]) for r in curve if not np.isnan(r["eval_return"])]
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", label="evaluation (deterministic)")
    ax.axhline(THRESHOLD, color="grey", linestyle="--", linewidth=1, label=f"{THRESHOLD:.0f}")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return")
    ax.set_title("PPO on CartPole-v1, trained through SB3PolicyAdapter responses")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png = out / "learning_curve.png"
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="512 steps, no threshold")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    th.set_num_threads(1)  # tiny networks: threads cost more than they give on a small CPU
    total = 512 if args.smoke else BUDGET
    final_episodes = 2 if args.smoke else 20
    start = time.perf_counter()
    model, curve = train(
        args.seed, total, eval_every=1 if args.smoke else 25, eval_episodes=2 if args.smoke else 10
    )
    train_s = time.perf_counter() - start
    adapter = SB3PolicyAdapter(model)
    final = evaluate(adapter, final_episodes, args.seed + 20_000)
    reached = next((r["timesteps"] for r in curve if r["eval_return"] >= THRESHOLD), None)
    summary = {
        "algorithm": "PPO (rl-baselines3-zoo CartPole-v1 hyperparameters)",
        "budget_timesteps": total,
        "trained_timesteps": model.num_timesteps,
        "seed": args.seed,
        "train_seconds": round(train_s, 1),
        "final_eval_episodes": final_episodes,
        "final_eval_mean_return": final,
        "first_eval_at_threshold_timesteps": reached,
        "threshold": None if args.smoke else THRESHOLD,
    }
    png = save(args.out, curve, summary)
    print(f"trained {model.num_timesteps} steps through the adapter loop in {train_s:.1f} s")
    print(f"final mean return over {final_episodes} deterministic episodes: {final:.1f}")
    print(f"learning curve: {png}")
    if not args.smoke and final < THRESHOLD:
        print(f"FAIL: mean return {final:.1f} < {THRESHOLD}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
