"""Envs and factories the Ray tests send to their actors (pickled by value, see conftest)."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor

from rlightning import PolicyResponse


def cartpole(max_episode_steps: int | None = None) -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1", max_episode_steps=max_episode_steps)


def monitored_cartpole(max_episode_steps: int | None = None) -> gym.Env[Any, Any]:
    return Monitor(cartpole(max_episode_steps))


def make_ppo(n_envs: int, n_steps: int, seed: int, max_episode_steps: int | None = None) -> PPO:
    env = make_vec_env(
        cartpole, n_envs=n_envs, seed=seed, env_kwargs={"max_episode_steps": max_episode_steps}
    )
    return PPO(
        "MlpPolicy",
        env,
        n_steps=n_steps,
        batch_size=n_envs * n_steps // 2,
        n_epochs=2,
        seed=seed,
        device="cpu",
    )


class CounterEnv(gym.Env[np.ndarray, np.int64]):
    """Observation ``[tag, t]`` (float32): which env it is and the step within the episode.

    Episodes end (terminated) after ``length`` steps; ``sleep_s`` makes each step slow.
    """

    observation_space = spaces.Box(0.0, 1e6, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, tag: int, length: int = 5, sleep_s: float = 0.0) -> None:
        self.tag, self.length, self.sleep_s, self.t = tag, length, sleep_s, 0

    def _obs(self) -> np.ndarray:
        return np.array([self.tag, self.t], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: Any = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        assert self.action_space.contains(action), action
        if self.sleep_s:
            time.sleep(self.sleep_s)
        self.t += 1
        return self._obs(), float(self.tag), self.t >= self.length, False, {"tag": self.tag}


def counter_ppo(n_envs: int, n_steps: int = 8) -> PPO:
    env = make_vec_env(lambda: CounterEnv(0), n_envs=n_envs)
    return PPO(
        "MlpPolicy",
        env,
        n_steps=n_steps,
        batch_size=n_envs * n_steps,
        n_epochs=1,
        seed=0,
        device="cpu",
    )


class EchoPolicy:
    """A BatchPolicy that is no SB3 model: action 0 for every row, its env id echoed."""

    def __call__(
        self, observation: Any, env_ids: list[str], episode_start: Any, ts: list[int]
    ) -> list[PolicyResponse]:
        return [
            PolicyResponse(e, action=np.int64(0), obs_seen=np.asarray(o))
            for e, o in zip(env_ids, observation, strict=True)
        ]

    def set_weights(self, weights: Any) -> None:
        self.weights = weights


class SwappingPolicy(EchoPolicy):
    """Answers each row with the env ids of the batch reversed (a routing bug)."""

    def __call__(
        self, observation: Any, env_ids: list[str], episode_start: Any, ts: list[int]
    ) -> list[PolicyResponse]:
        return super().__call__(observation, env_ids[::-1], episode_start, ts)


def spread(max_cycles: int = 6) -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=max_cycles)


def spread_ppo() -> PPO:
    env = spread()
    env.reset(seed=0)

    class AgentSpaces(gym.Env[Any, Any]):  # one agent's spaces, for SB3's constructor
        observation_space = env.observation_space("agent_0")
        action_space = env.action_space("agent_0")

    return PPO("MlpPolicy", AgentSpaces(), n_steps=8, batch_size=8, seed=0, device="cpu")


class AgentSlot(gym.Env[Any, Any]):
    """One agent's spaces as a gymnasium env, for a shared model's VecEnv (never stepped)."""

    def __init__(self, observation_space: Any, action_space: Any) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return self.observation_space.sample() * 0, {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("AgentSlot only sizes a shared model's buffer; it is never stepped")


def spread_slots_ppo(n_slots: int, n_steps: int = 8) -> PPO:
    """A shared PPO for simple_spread with a VecEnv of ``n_slots`` agent slots."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    env = spread()
    env.reset(seed=0)
    obs_space, act_space = env.observation_space("agent_0"), env.action_space("agent_0")
    venv = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * n_slots)
    return PPO(
        "MlpPolicy", venv, n_steps=n_steps, batch_size=n_slots * n_steps, seed=0, device="cpu"
    )


def pendulum(max_episode_steps: int | None = None) -> gym.Env[Any, Any]:
    return gym.make("Pendulum-v1", max_episode_steps=max_episode_steps)


def monitored_pendulum(max_episode_steps: int | None = None) -> gym.Env[Any, Any]:
    return Monitor(pendulum(max_episode_steps))


def make_td3(
    n_envs: int, seed: int, max_episode_steps: int, learning_starts: int, noise: str = "normal"
) -> Any:
    """TD3 on Pendulum; ``noise`` is ``"normal"`` or ``"ou"`` (Ornstein-Uhlenbeck)."""
    from stable_baselines3 import TD3
    from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

    kinds = {"normal": NormalActionNoise, "ou": OrnsteinUhlenbeckActionNoise}
    env = make_vec_env(
        pendulum, n_envs=n_envs, seed=seed, env_kwargs={"max_episode_steps": max_episode_steps}
    )
    return TD3(
        "MlpPolicy",
        env,
        learning_starts=learning_starts,
        batch_size=16,
        buffer_size=1_000,
        policy_kwargs={"net_arch": [32, 32]},
        action_noise=kinds[noise](np.zeros(1), 0.3 * np.ones(1)),
        seed=seed,
        device="cpu",
    )


def make_dqn(
    n_envs: int, seed: int, max_episode_steps: int, learning_starts: int, train_freq: int
) -> Any:
    """DQN on CartPole whose exploration rate falls from 1.0 to 0.05 over its whole run."""
    from stable_baselines3 import DQN

    env = make_vec_env(
        cartpole, n_envs=n_envs, seed=seed, env_kwargs={"max_episode_steps": max_episode_steps}
    )
    return DQN(
        "MlpPolicy",
        env,
        learning_starts=learning_starts,
        train_freq=train_freq,
        batch_size=16,
        buffer_size=1_000,
        exploration_fraction=1.0,
        target_update_interval=8,
        policy_kwargs={"net_arch": [32, 32]},
        seed=seed,
        device="cpu",
    )


def dwindle() -> Any:
    """A pettingzoo ``ParallelEnv`` whose agents leave and join mid-episode.

    ``a0``/``a1``/``a2`` terminate after steps 2, 4 and 6, ``a3`` joins after step 1 and
    terminates after step 5, so the episode ends after step 6. Observation ``[agent index, t]``
    (float32), action ``Discrete(2)``, reward 1 per agent in the step's results.
    """
    from pettingzoo import ParallelEnv

    obs_space = spaces.Box(0.0, 100.0, (2,), np.float32)
    act_space = spaces.Discrete(2)
    ends = {"a0": 2, "a1": 4, "a2": 6, "a3": 5}

    class Dwindle(ParallelEnv):  # type: ignore[misc]
        render_mode = None

        def __init__(self) -> None:
            self.metadata = {"name": "dwindle_v0", "render_modes": []}
            self.possible_agents = ["a0", "a1", "a2", "a3"]
            self.agents: list[str] = []
            self.t = 0

        def observation_space(self, agent: str) -> spaces.Box:
            return obs_space

        def action_space(self, agent: str) -> spaces.Discrete:
            return act_space

        def _obs(self) -> dict[str, np.ndarray]:
            return {
                a: np.array([self.possible_agents.index(a), self.t], np.float32)
                for a in self.agents
            }

        def reset(self, seed: int | None = None, options: Any = None) -> Any:
            self.t = 0
            self.agents = ["a0", "a1", "a2"]
            return self._obs(), {a: {} for a in self.agents}

        def step(self, actions: dict[str, Any]) -> Any:
            assert set(actions) == set(self.agents), (actions, self.agents)
            self.t += 1
            acting = list(self.agents)
            terminations = {a: ends[a] == self.t for a in acting}
            live = [a for a in acting if not terminations[a]]
            if self.t == 1:
                live.append("a3")
            self.agents = live
            observations = {
                a: np.array([self.possible_agents.index(a), self.t], np.float32)
                for a in dict.fromkeys(acting + live)
            }
            keys = list(observations)
            rewards = {a: 1.0 for a in keys}
            truncations = {a: False for a in keys}
            terminations = {a: terminations.get(a, False) for a in keys}
            return observations, rewards, terminations, truncations, {a: {} for a in keys}

    return Dwindle()


def dwindle_ppo() -> PPO:
    env = dwindle()

    class AgentSpaces(gym.Env[Any, Any]):  # one agent's spaces, for SB3's constructor
        observation_space = env.observation_space("a0")
        action_space = env.action_space("a0")

    return PPO("MlpPolicy", AgentSpaces(), n_steps=8, batch_size=8, seed=0, device="cpu")


class FailingEnv(CounterEnv):
    """A :class:`CounterEnv` whose ``step`` raises RuntimeError at step ``fail_at``."""

    def __init__(self, tag: int, fail_at: int) -> None:
        super().__init__(tag, length=100)
        self.fail_at = fail_at

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.t + 1 == self.fail_at:
            raise RuntimeError(f"env {self.tag} broke")
        return super().step(action)
