"""Train one shared SB3 PPO policy for all agents of mpe2 simple_spread_v3; beat random play.

Parameter sharing, as in PettingZoo's Stable-Baselines3 tutorials: the three agents are
homogeneous, so one policy acts for all of them. Training is ``learn()``'s loop with
``SharedRolloutCollector``: each rollout fills the model's own ``RolloutBuffer`` with each
agent's own trajectory (one buffer column per agent of each copy here, since simple_spread's
agents all stay: exactly what ``PPO.learn`` collects over a VecEnv of the agents), every step's
actions checked by ``to_parallel_actions`` against ``env.agents`` and the action spaces; then
``model.train()``. The model's VecEnv (``AgentSlot``) only sizes the buffer.

Evaluation uses the adapter's own loop: ``SharedPolicyAdapter.act`` (one batched forward pass
for the three agents) against ``sample_response`` (uniform random actions), on the same seeds.
It prints both mean episode returns (per agent, averaged over agents and episodes) and saves a
PNG with the learning curve and the two evaluation levels.

    python examples/pettingzoo_shared_policy.py           # minutes (examples/README.md)
    python examples/pettingzoo_shared_policy.py --smoke   # seconds (used by the tests)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import (
    SharedPolicyAdapter,
    SharedRolloutCollector,
    sample_response,
    to_parallel_actions,
)
from rlightning_sb3 import finish_training, start_training

try:
    from mpe2 import simple_spread_v3
except ImportError:  # PettingZoo before MPE moved to mpe2
    from pettingzoo.mpe import simple_spread_v3


class AgentSlot(gym.Env[Any, Any]):
    """One agent's spaces, for the shared model's VecEnv: it sizes the buffer, never stepped."""

    def __init__(self, observation_space: Any, action_space: Any) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        shape, dtype = self.observation_space.shape, self.observation_space.dtype
        assert shape is not None  # an agent's Box observation space
        assert dtype is not None
        return np.zeros(shape, dtype), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("AgentSlot only sizes the shared model's buffer; it is never stepped")


def evaluate(make_env: Any, adapter: SharedPolicyAdapter | None, episodes: int, seed: int) -> float:
    """Mean per-agent episode return: the shared policy (deterministic), or random if None."""
    env = make_env()
    returns = []
    for episode in range(episodes):
        observations, infos = env.reset(seed=seed + episode)
        for i, agent in enumerate(env.possible_agents):
            env.action_space(agent).seed(seed + 1000 * episode + i)
        totals = dict.fromkeys(env.possible_agents, 0.0)
        while env.agents:
            if adapter is None:
                response = sample_response(env, "eval", observations, infos)
            else:
                response = adapter.act(env, observations, "eval", infos=infos, deterministic=True)
            observations, rewards, _, _, infos = env.step(to_parallel_actions(response, env))
            for agent, reward in rewards.items():
                totals[agent] += float(reward)
        returns.append(float(np.mean(list(totals.values()))))
    env.close()
    return float(np.mean(returns))


def plot(
    curve: list[tuple[int, float]], random_mean: float, trained_mean: float, path: Path
) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    if curve:
        steps, values = np.array(curve).T
        window = max(1, len(values) // 20)
        smooth = np.convolve(values, np.ones(window) / window, mode="valid")
        ax.plot(steps, values, color="tab:blue", alpha=0.25, lw=0.8, label="rollout/ep_rew_mean")
        ax.plot(steps[window - 1 :], smooth, color="tab:blue", label=f"moving mean ({window})")
    ax.axhline(random_mean, color="tab:red", ls="--", label=f"random (eval) {random_mean:.1f}")
    ax.axhline(trained_mean, color="tab:green", ls="--", label=f"trained (eval) {trained_mean:.1f}")
    ax.set_xlabel("environment steps (agent-steps)")
    ax.set_ylabel("mean per-agent episode return")
    ax.set_title("simple_spread_v3: shared PPO policy vs random")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=150_000)
    parser.add_argument(
        "--copies", type=int, default=8, help="env copies (x3 agents = buffer columns)"
    )
    parser.add_argument("--eval-episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=Path("pettingzoo_shared_policy.png"))
    parser.add_argument("--smoke", action="store_true", help="a tiny run to check the wiring")
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar (SB3's, needs tqdm and rich)"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.timesteps, args.copies, args.eval_episodes = 768, 2, 2
    torch.set_num_threads(1)  # small MLPs: one thread is fastest on a small shared CPU

    def make_env() -> Any:
        return simple_spread_v3.parallel_env(max_cycles=25)

    spaces = make_env()
    agents = list(spaces.possible_agents)
    obs_space, act_space = spaces.observation_space(agents[0]), spaces.action_space(agents[0])
    n_columns = args.copies * len(agents)  # one buffer column per agent of each copy
    slots = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * n_columns)
    model = PPO(
        "MlpPolicy",
        slots,
        n_steps=128,
        batch_size=256,
        n_epochs=5,
        learning_rate=1e-3,
        gamma=0.95,
        ent_coef=0.01,
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    # copy c's first reset is seeded as SB3 seeds VecEnv slot c * n_agents (learn()'s seeds)
    seeds = [args.seed + c * len(agents) for c in range(args.copies)]
    collector = SharedRolloutCollector(model, [make_env] * args.copies, seeds=seeds)
    curve: list[tuple[int, float]] = []  # (agent-steps, mean of the last 100 agent episodes)
    start = time.perf_counter()
    start_training(model, args.timesteps, progress_bar=not args.no_progress)
    while model.num_timesteps < args.timesteps:  # learn()'s loop
        collector.collect()
        if model.ep_info_buffer:
            curve.append(
                (model.num_timesteps, float(np.mean([e["r"] for e in model.ep_info_buffer])))
            )
        model.train()
    finish_training(model)
    train_s = time.perf_counter() - start

    random_mean = evaluate(make_env, None, args.eval_episodes, seed=10_000)
    trained_mean = evaluate(make_env, SharedPolicyAdapter(model), args.eval_episodes, seed=10_000)
    plot(curve, random_mean, trained_mean, args.plot)
    print(f"trained {args.timesteps} agent-steps in {train_s:.1f} s")
    print(f"mean per-agent episode return over {args.eval_episodes} episodes:")
    print(f"  random : {random_mean:8.2f}")
    verdict = "beats" if trained_mean > random_mean else "does NOT beat"
    print(f"  trained: {trained_mean:8.2f}  ({verdict} random)")
    print(f"plot saved to {args.plot}")
    return {"random": random_mean, "trained": trained_mean, "train_s": train_s}


if __name__ == "__main__":
    figures = main()
    if figures["trained"] <= figures["random"] and "--smoke" not in sys.argv:
        sys.exit(1)  # the trained policy must beat random play
