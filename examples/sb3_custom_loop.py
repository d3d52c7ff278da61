"""Train SB3 PPO on CartPole-v1 with a loop built only from PolicyResponses, with SB3's tooling.

No ``model.learn()``: every step goes ``SB3PolicyAdapter.act`` -> ``env_actions`` -> ``VecEnv.step``
-> ``add_rollout_step``; every rollout ends with ``finish_rollout`` and ``model.train()``. Because
the adapter and the helpers reproduce SB3's ``collect_rollouts`` exactly, this is the same
training as ``model.learn(100_000, callback=...)`` with rl-baselines3-zoo's tuned CartPole-v1
hyperparameters, and it uses the same step budget (1e5 env steps).

SB3's own callbacks run unchanged in the loop, called where ``learn()`` calls them
(``start_training(callback=...)``, ``finish_training``):

* ``EvalCallback`` evaluates 10 deterministic episodes every 25 rollouts (``eval_freq`` counts
  ``on_step`` calls, one per loop step), saves the best model and ``evaluations.npz``;
* ``StopTrainingOnRewardThreshold`` (EvalCallback's ``callback_on_new_best``) stops training when
  an evaluation reaches 475 -- ``add_rollout_step`` then raises ``StopTraining``;
* ``CheckpointCallback`` saves the model every 25 rollouts;
* ``LearningCurve``, a user's ``BaseCallback``, records the mean return of the last 100 training
  episodes (what SB3 logs as ``rollout/ep_rew_mean``) at each ``on_rollout_end``.

SB3's logger writes ``rollout/ep_rew_mean``, ``time/fps``, ``train/loss``, ... after every
rollout to ``sb3_log/progress.csv``, and ``--progress-bar`` shows SB3's progress bar (tqdm and
rich). At the end the script evaluates 20 episodes through the adapter and exits with status 1 if
their mean return is below 475.

Output, in ``--out`` (default ``examples/output/sb3_custom_loop``): ``learning_curve.csv``,
``learning_curve.png`` (matplotlib) and ``summary.json``; in ``--run-dir`` (default
``examples/output/sb3_custom_loop/run``) what SB3's callbacks and logger write:
``sb3_log/progress.csv``, ``checkpoints/``, ``best_model/best_model.zip`` and
``eval/evaluations.npz``.

Run: ``python examples/sb3_custom_loop.py`` (1e5 steps at most; with seed 0 an evaluation reaches
475 at 19,200 steps and training stops there: 65 s of training, 100 s in all, measured on a
loaded 2-core CPU machine with torch 2.13.0 and SB3 2.9.2); ``--smoke`` trains 512 steps,
evaluates 2 episodes and checks no threshold (7 s of training there).
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
from stable_baselines3.common.callbacks import (
    BaseCallback,
    CheckpointCallback,
    EvalCallback,
    StopTrainingOnRewardThreshold,
)
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure

from rlightning_sb3 import (
    SB3PolicyAdapter,
    StopTraining,
    add_rollout_step,
    finish_rollout,
    finish_training,
    start_training,
)

THRESHOLD = 475.0  # CartPole-v1's reward_threshold
BUDGET = 100_000  # rl-baselines3-zoo's n_timesteps for PPO on CartPole-v1
DEFAULT_OUT = Path(__file__).resolve().parent / "output" / "sb3_custom_loop"
DEFAULT_RUN_DIR = DEFAULT_OUT / "run"


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


class LearningCurve(BaseCallback):
    """A user's callback: one row per rollout, read from the model and the EvalCallback."""

    def __init__(self, evaluation: EvalCallback) -> None:
        super().__init__()
        self.evaluation = evaluation
        self.rows: list[dict[str, float]] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self._record()

    def _on_training_end(self) -> None:
        if not self.rows or self.rows[-1]["timesteps"] != self.model.num_timesteps:
            self._record()  # a rollout a callback stopped (on_rollout_end is not called then)

    def _record(self) -> None:
        episodes = [info["r"] for info in self.model.ep_info_buffer or []]
        evaluated = self.evaluation.evaluations_timesteps
        self.rows.append(
            {
                "timesteps": self.model.num_timesteps,
                "train_return_mean100": float(np.mean(episodes)) if episodes else float("nan"),
                "eval_return": (
                    self.evaluation.last_mean_reward
                    if evaluated and evaluated[-1] == self.model.num_timesteps
                    else float("nan")
                ),
            }
        )


def callbacks(
    model: PPO, seed: int, eval_every: int, eval_episodes: int, out: Path | None
) -> tuple[list[BaseCallback], LearningCurve]:
    """SB3's callbacks, as a learn() user builds them; ``out`` None saves no files."""
    every = (
        eval_every * model.n_steps
    )  # on_step calls (steps of the VecEnv) per eval_every rollouts
    evaluation = EvalCallback(
        make_vec_env("CartPole-v1", n_envs=4, seed=seed + 10_000),
        callback_on_new_best=StopTrainingOnRewardThreshold(reward_threshold=THRESHOLD),
        n_eval_episodes=eval_episodes,
        eval_freq=every,
        best_model_save_path=None if out is None else str(out / "best_model"),
        log_path=None if out is None else str(out / "eval"),
        verbose=0,
    )
    curve = LearningCurve(evaluation)
    found: list[BaseCallback] = [evaluation, curve]
    if out is not None:
        found.append(CheckpointCallback(save_freq=every, save_path=str(out / "checkpoints")))
    return found, curve


def train(
    seed: int,
    total: int,
    eval_every: int,
    eval_episodes: int,
    *,
    out: Path | None = None,
    progress_bar: bool = False,
) -> tuple[PPO, list[dict[str, float]]]:
    """The training loop. Returns the model and the learning-curve rows (one per rollout)."""
    model = make_model(seed)
    if out is not None:  # SB3's logger, as learn() fills it: one row per rollout
        model.set_logger(configure(str(out / "sb3_log"), ["csv"]))
    adapter = SB3PolicyAdapter(model)
    env = model.get_env()
    assert env is not None
    env_ids = [f"cartpole-{i}" for i in range(env.num_envs)]
    found, curve = callbacks(model, seed, eval_every, eval_episodes, out)
    # as learn() begins: counters, logger, env reset, callbacks' on_training_start
    obs = start_training(model, total, callback=found, progress_bar=progress_bar)
    # where collect_rollouts continues from: every env at an episode start after the reset
    episode_starts = adapter.load_training_state(env_ids)
    try:
        while model.num_timesteps < total:
            for _ in range(model.n_steps):
                responses = adapter.act(obs, env_ids, episode_start=episode_starts)
                new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, env_ids))
                add_rollout_step(
                    model, obs, responses, rewards, dones, infos,
                    env_ids=env_ids, new_observation=new_obs,
                )  # fmt: skip
                obs, episode_starts = new_obs, dones
            finish_rollout(model, obs, dones)  # on_rollout_end, then the logger's dump
            model.train()
    except StopTraining:  # StopTrainingOnRewardThreshold: an evaluation reached THRESHOLD
        pass
    finish_training(model)  # on_training_end: the progress bar closes
    return model, curve.rows


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
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="curve and summary")
    parser.add_argument(
        "--run-dir", type=Path, default=DEFAULT_RUN_DIR, help="checkpoints, best model, SB3 logs"
    )
    parser.add_argument(
        "--progress-bar", action="store_true", help="SB3's progress bar (needs tqdm and rich)"
    )
    args = parser.parse_args(argv)

    th.set_num_threads(1)  # tiny networks: threads cost more than they give on a small CPU
    total = 512 if args.smoke else BUDGET
    final_episodes = 2 if args.smoke else 20
    start = time.perf_counter()
    model, curve = train(
        args.seed,
        total,
        eval_every=1 if args.smoke else 25,
        eval_episodes=2 if args.smoke else 10,
        out=args.run_dir,
        progress_bar=args.progress_bar,
    )
    train_s = time.perf_counter() - start
    adapter = SB3PolicyAdapter(model)
    final = evaluate(adapter, final_episodes, args.seed + 20_000)
    reached = next((r["timesteps"] for r in curve if r["eval_return"] >= THRESHOLD), None)
    summary = {
        "algorithm": "PPO (rl-baselines3-zoo CartPole-v1 hyperparameters)",
        "budget_timesteps": total,
        "trained_timesteps": model.num_timesteps,
        "stopped_at_threshold": model.num_timesteps < total,  # StopTrainingOnRewardThreshold
        "seed": args.seed,
        "train_seconds": round(train_s, 1),
        "final_eval_episodes": final_episodes,
        "final_eval_mean_return": final,
        "first_eval_at_threshold_timesteps": reached,
        "threshold": None if args.smoke else THRESHOLD,
    }
    png = save(args.out, curve, summary)
    stopped = (
        " (stopped: an evaluation reached the threshold)" if model.num_timesteps < total else ""
    )
    print(
        f"trained {model.num_timesteps} steps through the adapter loop in {train_s:.1f} s{stopped}"
    )
    print(f"final mean return over {final_episodes} deterministic episodes: {final:.1f}")
    print(f"learning curve: {png}")
    if not args.smoke and final < THRESHOLD:
        print(f"FAIL: mean return {final:.1f} < {THRESHOLD}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
