"""SharedRolloutCollector on knights_archers_zombies, whose knights and archers die mid-episode.

A logging wrapper (the real env underneath, every call passed through) records what each agent
observed at each step and when it died; every buffer row must be one of those observations, of
an agent alive at that step, and a dead agent has no row until its env is reset.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from pettingzoo import ParallelEnv
from rlightning_pettingzoo import SharedRolloutCollector


class Logged(ParallelEnv[str, Any, Any]):
    """A parallel env, passed through; ``seen[step][agent]`` is what the agent acted on."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.possible_agents = env.possible_agents
        self.metadata = env.metadata
        self.count = 0
        self.seen: dict[int, dict[str, np.ndarray]] = {}
        self.died: dict[str, int] = {}  # agent -> the step it terminated at (this episode)
        self.episode_of: dict[int, int] = {}
        self.episode = -1
        self._last: dict[str, Any] = {}

    @property  # type: ignore[override]
    def agents(self) -> list[str]:
        return self.env.agents  # type: ignore[no-any-return]

    def observation_space(self, agent: str) -> Any:
        return self.env.observation_space(agent)

    def action_space(self, agent: str) -> Any:
        return self.env.action_space(agent)

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        self.episode += 1
        observations, infos = self.env.reset(seed=seed, options=options)
        self._last = dict(observations)
        return observations, infos

    def step(self, actions: dict[str, Any]) -> Any:
        self.seen[self.count] = {a: np.array(self._last[a]) for a in actions}
        self.episode_of[self.count] = self.episode
        out = self.env.step(actions)
        for agent, terminated in out[2].items():
            if terminated:
                self.died[f"{self.episode}/{agent}"] = self.count
        self.count += 1
        self._last = dict(out[0])
        return out


def test_dead_knights_and_archers_have_no_rows(kaz: ModuleType) -> None:
    # a zombie every cycle: `spawn_delay` since PettingZoo 1.25, `spawn_rate` (same meaning) before
    params = inspect.signature(kaz.raw_env.__init__).parameters
    spawn = {"spawn_delay" if "spawn_delay" in params else "spawn_rate": 1}
    env = Logged(kaz.parallel_env(max_cycles=400, line_death=True, max_zombies=30, **spawn))
    agent = env.possible_agents[0]

    class Slot(gym.Env[Any, Any]):
        observation_space = env.observation_space(agent)
        action_space = env.action_space(agent)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            return np.zeros(self.observation_space.shape, np.float32), {}

    model = PPO("MlpPolicy", DummyVecEnv([Slot] * 4), n_steps=100, batch_size=100, seed=0)
    collector = SharedRolloutCollector(model, [lambda: env], seeds=[2])
    segments = collector.collect(update_model=False)
    buf = model.rollout_buffer
    assert any(s.end == "terminated" for s in segments)  # someone died in this rollout
    for seg in segments:
        for row, step in zip(range(seg.start_row, seg.stop_row), seg.env_steps, strict=True):
            assert seg.agent_id in env.seen[step]  # alive and acting at that step
            # the buffer holds the observation cast to its dtype, as RolloutBuffer.add casts it
            # (PettingZoo 1.24's KAZ observes float64)
            np.testing.assert_array_equal(
                buf.observations[row, seg.column],
                np.asarray(env.seen[step][seg.agent_id]).astype(buf.observations.dtype),
            )
            death = env.died.get(f"{env.episode_of[step]}/{seg.agent_id}")
            assert death is None or step <= death  # nothing after its death
        if seg.end == "terminated":
            assert (
                env.died[f"{env.episode_of[seg.env_steps[-1]]}/{seg.agent_id}"]
                == (seg.env_steps[-1])
            )
    stored = sum(s.stop_row - s.start_row for s in segments)
    acted = sum(len(v) for v in env.seen.values())
    assert stored == 400 and acted == stored + collector.dropped
