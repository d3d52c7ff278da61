"""A VecEnv of a PettingZoo parallel env's agents: one slot per agent of each copy.

What SuperSuit's ``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1`` do for envs whose
agents all stay (simple_spread), in one file, with seeds the collector's ``seeds=[0, 1, ...]``
reproduce: the oracle side of ``tests/pettingzoo/test_collector_parity.py`` (``learn()`` over it
fills the buffer ``SharedRolloutCollector`` must equal) and of
:mod:`benchmarks.pz_collect_cost` (SB3's ``collect_rollouts`` over it). It checks no action.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

__all__ = ["AgentsVecEnv"]


class AgentsVecEnv(VecEnv):
    """Copies of a parallel env; slot ``c * n_agents + j`` is agent ``possible_agents[j]`` of
    copy ``c``. Copy ``c`` is reset with seed ``c`` first, then without a seed (as the collector
    given ``seeds=[0, 1, ...]``); a finished copy reports ``terminal_observation`` and
    ``TimeLimit.truncated`` per slot, as ``DummyVecEnv`` does, and is reset."""

    def __init__(self, make_env: Any, n_copies: int) -> None:
        self.envs = [make_env() for _ in range(n_copies)]
        self.agents = list(self.envs[0].possible_agents)
        space = self.envs[0]
        super().__init__(
            n_copies * len(self.agents),
            space.observation_space(self.agents[0]),
            space.action_space(self.agents[0]),
        )
        self._first = [True] * n_copies
        self._actions: Any = None

    def _reset_copy(self, c: int) -> dict[Any, Any]:
        observations: dict[Any, Any]
        observations, _ = self.envs[c].reset(seed=c if self._first[c] else None)
        self._first[c] = False
        return observations

    def reset(self) -> np.ndarray:
        rows: list[Any] = []
        for c in range(len(self.envs)):
            observations = self._reset_copy(c)
            rows.extend(observations[a] for a in self.agents)
        return np.stack(rows)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> Any:
        n = len(self.agents)
        rows: list[Any] = []
        rewards: list[float] = []
        dones: list[bool] = []
        infos: list[dict[str, Any]] = []
        for c, env in enumerate(self.envs):
            actions = {a: self._actions[c * n + j] for j, a in enumerate(self.agents)}
            observations, reward, terminated, truncated, _ = env.step(actions)
            assert not env.agents or len(env.agents) == n
            done = not env.agents
            copy_infos: list[dict[str, Any]] = [{} for _ in self.agents]
            if done:
                for j, a in enumerate(self.agents):
                    copy_infos[j]["terminal_observation"] = observations[a]
                    copy_infos[j]["TimeLimit.truncated"] = bool(truncated[a] and not terminated[a])
                observations = self._reset_copy(c)
            rows.extend(observations[a] for a in self.agents)
            rewards.extend(float(reward[a]) for a in self.agents)
            dones.extend([done] * n)
            infos.extend(copy_infos)
        return np.stack(rows), np.array(rewards, np.float32), np.array(dones), infos

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(self.envs[0], attr_name, None)] * self.num_envs

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kw: Any) -> Any:
        return [None] * self.num_envs

    def env_is_wrapped(self, wrapper_class: Any, indices: Any = None) -> list[bool]:
        return [False] * self.num_envs
