"""Train one shared SB3 PPO policy for all agents of mpe2 simple_spread_v3; beat random play.

Parameter sharing, as in PettingZoo's Stable-Baselines3 tutorials: the three agents are
homogeneous, so one policy acts for all of them. Training runs SB3's own ``PPO.learn`` on
``AgentsVecEnv``, a small vectorising wrapper written here (what SuperSuit's
``pettingzoo_env_to_vec_env_v1`` does): each agent of each env copy is one slot of an SB3
``VecEnv``, and every step's actions travel as a ``MultiAgentPolicyResponse`` through
``to_parallel_actions``, so they are checked against ``env.agents`` and the action spaces.

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

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecEnv

from rlightning_pettingzoo import (
    SharedPolicyAdapter,
    from_parallel_actions,
    sample_response,
    to_parallel_actions,
)

try:
    from mpe2 import simple_spread_v3
except ImportError:  # PettingZoo before MPE moved to mpe2
    from pettingzoo.mpe import simple_spread_v3


class AgentsVecEnv(VecEnv):
    """``n_copies`` parallel envs whose agents are the slots of one SB3 VecEnv.

    Slot ``c * n_agents + i`` is agent ``possible_agents[i]`` of copy ``c``. For envs whose agents
    all stay until the episode ends (simple_spread: every agent is truncated at ``max_cycles``);
    an agent leaving early is an error, since a VecEnv slot cannot disappear. When a copy's
    episode ends it is reset, and each of its slots reports ``terminal_observation`` and
    ``TimeLimit.truncated`` the way SB3's ``DummyVecEnv`` does, so ``PPO`` bootstraps truncated
    episodes correctly. Finished episodes' per-agent returns are kept in ``episode_returns``.
    """

    def __init__(self, make_env: Any, n_copies: int) -> None:
        self.envs = [make_env() for _ in range(n_copies)]
        first = self.envs[0]
        self.agents = list(first.possible_agents)
        agent = self.agents[0]
        super().__init__(
            n_copies * len(self.agents), first.observation_space(agent), first.action_space(agent)
        )
        self._actions = np.zeros(0)
        self._totals = np.zeros(self.num_envs)
        self.episode_returns: list[tuple[int, float]] = []  # (timestep, mean agent return)
        self.timesteps = 0

    def _obs_rows(self, copy: int, observations: dict[str, Any]) -> list[np.ndarray]:
        return [np.asarray(observations[agent]) for agent in self.agents]

    def reset(self) -> np.ndarray:
        rows = []
        for c, env in enumerate(self.envs):
            observations, _ = env.reset(seed=self._seeds[c * len(self.agents)])
            rows.extend(self._obs_rows(c, observations))
        self._reset_seeds()
        self._totals[:] = 0.0
        return np.stack(rows)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        n = len(self.agents)
        rows, rewards, dones, infos = [], [], [], []
        for c, env in enumerate(self.envs):
            response = from_parallel_actions(
                {agent: self._actions[c * n + i] for i, agent in enumerate(self.agents)},
                env_id=f"copy-{c}",
            )
            observations, reward, terminated, truncated, _ = env.step(
                to_parallel_actions(response, env)
            )
            if env.agents and len(env.agents) != n:
                raise RuntimeError("AgentsVecEnv needs agents that stay until the episode ends")
            done = not env.agents
            copy_rows = self._obs_rows(c, observations)
            copy_infos: list[dict[str, Any]] = [{} for _ in self.agents]
            for i, agent in enumerate(self.agents):
                rewards.append(float(reward[agent]))
                self._totals[c * n + i] += float(reward[agent])
            if done:
                for i, agent in enumerate(self.agents):
                    copy_infos[i]["terminal_observation"] = copy_rows[i]
                    copy_infos[i]["TimeLimit.truncated"] = bool(
                        truncated[agent] and not terminated[agent]
                    )
                self.episode_returns.append(
                    (self.timesteps, float(np.mean(self._totals[c * n : c * n + n])))
                )
                self._totals[c * n : c * n + n] = 0.0
                observations, _ = env.reset()
                copy_rows = self._obs_rows(c, observations)
            rows.extend(copy_rows)
            dones.extend([done] * n)
            infos.extend(copy_infos)
        self.timesteps += self.num_envs
        return np.stack(rows), np.array(rewards, np.float32), np.array(dones), infos

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        # Attributes of the wrapped PettingZoo envs (SB3 asks for "render_mode").
        return [getattr(self.envs[0], attr_name, None)] * self.num_envs

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self, attr_name, value)

    def env_method(
        self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any
    ) -> list[Any]:
        return [None] * self.num_envs

    def env_is_wrapped(self, wrapper_class: Any, indices: Any = None) -> list[bool]:
        return [False] * self.num_envs


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
        ax.plot(steps, values, color="tab:blue", alpha=0.25, lw=0.8, label="training episodes")
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
        "--copies", type=int, default=8, help="env copies (x3 agents = VecEnv slots)"
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

    venv = AgentsVecEnv(make_env, args.copies)
    venv.seed(args.seed)
    model = PPO(
        "MlpPolicy",
        venv,
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
    start = time.perf_counter()
    model.learn(total_timesteps=args.timesteps, progress_bar=not args.no_progress)
    train_s = time.perf_counter() - start

    random_mean = evaluate(make_env, None, args.eval_episodes, seed=10_000)
    trained_mean = evaluate(make_env, SharedPolicyAdapter(model), args.eval_episodes, seed=10_000)
    plot(venv.episode_returns, random_mean, trained_mean, args.plot)
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
