"""Envs for the Ray tests that import neither torch nor SB3, so runner processes start fast.

Pickled by value to the actors (see conftest). ``FuzzEnv`` is the differential fuzzer's env:
its observation space (Box or Dict), action space (Discrete or Box), time limit, termination
probability, array reuse, own action-space sampling and action masks are its arguments.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlightning import PolicyResponse

OBS_LOW, OBS_HIGH = -10.0, 10.0


class FuzzEnv(gym.Env[Any, Any]):
    """A small random env whose every quirk is an argument.

    Each step draws from the env's own ``np_random`` (seeded by ``reset(seed=...)``), and with
    ``sample_space`` also from its own ``action_space`` (seeded as ``make_vec_env`` seeds it),
    so the trajectory depends on both seeds and on the actions.

    Args:
        obs: ``"box"`` (``Box(-10, 10, (3,), float32)``) or ``"dict"`` (``{"x": that Box,
            "k": Discrete(4)}``).
        act: ``"discrete"`` (``Discrete(3)``) or ``"box"`` (``Box(-2, 2, (2,), float32)``).
        limit: Steps after which an episode is truncated.
        p_end: Probability that a step terminates the episode.
        reuse: Return the same arrays from every ``step`` and ``reset``, written in place.
        sample_space: Each step also draws ``action_space.sample()`` (in the reward and state).
        masks: Discrete only: action ``t % 3`` is illegal at odd ``t`` and raises (the masks
            are :class:`MaskedFuzzEnv`'s ``action_masks()``; :func:`fuzz_env` picks the class).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self,
        obs: str = "box",
        act: str = "discrete",
        limit: int = 6,
        p_end: float = 0.1,
        reuse: bool = False,
        sample_space: bool = False,
        masks: bool = False,
    ) -> None:
        box = spaces.Box(OBS_LOW, OBS_HIGH, (3,), np.float32)
        self.observation_space: spaces.Space[Any] = (
            spaces.Dict({"x": box, "k": spaces.Discrete(4)}) if obs == "dict" else box
        )
        self.action_space: spaces.Space[Any] = (
            spaces.Discrete(3) if act == "discrete" else spaces.Box(-2.0, 2.0, (2,), np.float32)
        )
        self.limit, self.p_end, self.reuse = limit, p_end, reuse
        self.sample_space, self.masks = sample_space, masks
        self.t, self.state = 0, 0.0
        self._x = np.zeros(3, np.float32)
        self._dict: dict[str, Any] = {"x": self._x, "k": 0}

    def _obs(self) -> Any:
        x = self._x if self.reuse else np.zeros(3, np.float32)
        x[0] = self.t / self.limit
        x[1] = self.state
        x[2] = float(self.np_random.uniform(-1.0, 1.0))
        if isinstance(self.observation_space, spaces.Dict):
            k = self.t % 4
            if self.reuse:
                self._dict["k"] = k
                return self._dict
            return {"x": x, "k": k}
        return x

    def legal(self) -> np.ndarray:
        mask = np.ones(3, dtype=bool)
        if self.masks and self.t % 2 == 1:
            mask[self.t % 3] = False
        return mask

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t, self.state = 0, float(self.np_random.uniform(-1.0, 1.0))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        assert self.action_space.contains(action), (action, self.action_space)
        if self.masks and not self.legal()[int(action)]:
            raise ValueError(f"illegal action {action} at t={self.t}")
        value = float(np.sum(np.asarray(action, dtype=np.float64)))
        if self.sample_space:
            value += 0.5 * float(np.sum(np.asarray(self.action_space.sample(), np.float64)))
        self.t += 1
        self.state = float(np.clip(0.9 * self.state + 0.1 * value, -5.0, 5.0))
        reward = value * 0.1 + float(self.np_random.normal())
        terminated = bool(self.np_random.random() < self.p_end)
        truncated = self.t >= self.limit
        return self._obs(), reward, terminated, truncated, {"t": self.t}


class MaskedFuzzEnv(FuzzEnv):
    """A :class:`FuzzEnv` with ``action_masks()``, as sb3-contrib's MaskablePPO reads them."""

    def action_masks(self) -> np.ndarray:
        return self.legal()


def fuzz_env(**config: Any) -> FuzzEnv:
    """A :class:`MaskedFuzzEnv` when ``config["masks"]``, else a :class:`FuzzEnv`."""
    return MaskedFuzzEnv(**config) if config.get("masks") else FuzzEnv(**config)


def reusing_parallel(length: int = 4, masks: bool = True) -> Any:
    """A PettingZoo parallel env that reuses its observation arrays and puts masks in infos.

    Agents ``a0``, ``a1``; observation ``[agent index, t]`` (float32), written into one array
    per agent at every ``reset`` and ``step``; action ``Discrete(3)``, action ``t % 3`` illegal
    (``infos[agent]["action_mask"]``, an array reused too; an illegal action raises); every
    agent is truncated after ``length`` steps. With ``masks=False`` the infos are empty and
    every action is legal.
    """
    from pettingzoo import ParallelEnv

    obs_space = spaces.Box(0.0, 100.0, (2,), np.float32)
    act_space = spaces.Discrete(3)

    class Reusing(ParallelEnv):  # type: ignore[misc]
        render_mode = None

        def __init__(self) -> None:
            self.metadata = {"name": "reusing_v0", "render_modes": []}
            self.possible_agents = ["a0", "a1"]
            self.agents: list[str] = []
            self.t = 0
            self._obs = {a: np.zeros(2, np.float32) for a in self.possible_agents}
            self._masks = {a: np.ones(3, np.int8) for a in self.possible_agents}

        def observation_space(self, agent: str) -> spaces.Box:
            return obs_space

        def action_space(self, agent: str) -> spaces.Discrete:
            return act_space

        def _write(self) -> tuple[dict[str, Any], dict[str, Any]]:
            for i, a in enumerate(self.possible_agents):
                self._obs[a][:] = (i, self.t)
                self._masks[a][:] = 1
                self._masks[a][self.t % 3] = 0
            return (
                {a: self._obs[a] for a in self.agents},
                {a: {"action_mask": self._masks[a]} if masks else {} for a in self.agents},
            )

        def reset(self, seed: int | None = None, options: Any = None) -> Any:
            self.t = 0
            self.agents = list(self.possible_agents)
            return self._write()

        def step(self, actions: dict[str, Any]) -> Any:
            for a, action in actions.items():
                if masks and not self._masks[a][int(action)]:
                    raise ValueError(f"illegal action {action} for {a} at t={self.t}")
            self.t += 1
            acting = list(self.agents)
            obs, infos = self._write()
            if self.t >= length:
                self.agents = []
            return (
                obs,
                {a: float(self.t) for a in acting},
                {a: False for a in acting},
                {a: self.t >= length for a in acting},
                infos,
            )

    return Reusing()


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


class StallingEnv(CounterEnv):
    """A :class:`CounterEnv` (episodes of 100 steps) whose ``stall_at``-th step sleeps ``stall_s``.

    Only that one step call (counted over the env's life, across episodes and ``sample`` calls)
    is slow: a collector's call times out once, and the next call finds a fast env again.
    """

    def __init__(self, tag: int, stall_at: int, stall_s: float) -> None:
        super().__init__(tag, length=100)
        self.stall_at, self.stall_s, self.calls = stall_at, stall_s, 0

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.calls += 1
        if self.calls == self.stall_at:
            time.sleep(self.stall_s)
        return super().step(action)


class FailingEnv(CounterEnv):
    """A :class:`CounterEnv` whose ``step`` raises RuntimeError at step ``fail_at``."""

    def __init__(self, tag: int, fail_at: int) -> None:
        super().__init__(tag, length=100)
        self.fail_at = fail_at

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.t + 1 == self.fail_at:
            raise RuntimeError(f"env {self.tag} broke")
        return super().step(action)


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


class ImageEnv(gym.Env[np.ndarray, np.int64]):
    """Random ``8x8x3`` uint8 images (channel-last: SB3 wraps it in ``VecTransposeImage``).

    Truncated after ``length`` steps; terminated when the first pixel is above 240 (about one
    step in 17): both kinds of episode end, each with a terminal observation.
    """

    observation_space = spaces.Box(0, 255, (8, 8, 3), np.uint8)
    action_space = spaces.Discrete(2)

    def __init__(self, length: int = 5) -> None:
        self.length = length
        self.t = 0

    def _image(self) -> np.ndarray:
        return self.np_random.integers(0, 256, (8, 8, 3), dtype=np.uint8)

    def reset(
        self, *, seed: int | None = None, options: Any = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._image(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        image = self._image()
        reward = float(image[0, 0, 1]) / 255.0 + float(action)
        return image, reward, bool(image[0, 0, 0] > 240), self.t >= self.length, {}


def dict_parallel(length: int = 4) -> Any:
    """A PettingZoo parallel env with ``Dict(observation, action_mask)`` observations.

    The classic games' layout in parallel form: agents ``a0``, ``a1``; ``observation`` is
    ``[agent index, t]`` (float32), ``action_mask`` (int8) forbids action ``t % 3`` of
    ``Discrete(3)`` (an illegal action raises); every agent is truncated after ``length`` steps.
    """
    from pettingzoo import ParallelEnv

    obs_space = spaces.Dict(
        {
            "observation": spaces.Box(0.0, 100.0, (2,), np.float32),
            "action_mask": spaces.Box(0, 1, (3,), np.int8),
        }
    )
    act_space = spaces.Discrete(3)

    class DictParallel(ParallelEnv):  # type: ignore[misc]
        metadata: ClassVar[dict[str, Any]] = {"name": "dict_parallel_v0", "render_modes": []}
        render_mode = None
        possible_agents: ClassVar[list[str]] = ["a0", "a1"]

        def __init__(self) -> None:
            self.agents: list[str] = []
            self.t = 0

        def observation_space(self, agent: str) -> spaces.Space[Any]:
            return obs_space

        def action_space(self, agent: str) -> spaces.Space[Any]:
            return act_space

        def _observations(self) -> dict[str, Any]:
            mask = np.ones(3, np.int8)
            mask[self.t % 3] = 0
            return {
                a: {"observation": np.array([i, self.t], np.float32), "action_mask": mask.copy()}
                for i, a in enumerate(self.agents)
            }

        def reset(self, seed: int | None = None, options: Any = None) -> Any:
            self.t, self.agents = 0, list(self.possible_agents)
            return self._observations(), {a: {} for a in self.agents}

        def step(self, actions: dict[str, Any]) -> Any:
            for agent, action in actions.items():
                if int(action) == self.t % 3:
                    raise ValueError(f"illegal action {action} for {agent}")
            self.t += 1
            acting = list(self.agents)
            observations = self._observations()
            if self.t >= length:
                self.agents = []
            done = self.t >= length
            return (
                observations,
                {a: float(self.t) for a in acting},
                {a: False for a in acting},
                {a: done for a in acting},
                {a: {} for a in acting},
            )

    return DictParallel()
