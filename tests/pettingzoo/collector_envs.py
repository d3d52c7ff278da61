"""Test envs for the collectors: ``ScheduleEnv``, whose agents join, leave and wait on a given
schedule and which logs every agent's every step, and the pieces the collector tests share.

Loaded by the collector tests with ``importlib`` (the test suite runs in importlib mode).
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from hypothesis import strategies as st

from pettingzoo import ParallelEnv

OBS = spaces.Box(-100.0, 100.0, (4,), np.float32)
ACT = spaces.Discrete(3)


class ScheduleEnv(ParallelEnv[str, np.ndarray, int]):
    """Agent ``a{k}`` joins at step ``join[k]`` and ends at ``leave[k]`` (``kinds[k]``:
    ``"terminated"`` or ``"truncated"``), every episode; it waits (its mask, in its info,
    allows nothing) at the episode steps ``t`` with ``(k, t)`` in ``waits``. With ``partial``,
    an acting agent's mask forbids action ``(k + t) % 3`` (for a MaskablePPO). ``log`` maps the
    env's step counter (since creation) to ``{agent: (observation, action, reward, end, next
    observation, mask)}``, action None where the agent waited."""

    metadata: ClassVar[dict[str, Any]] = {"name": "schedule_v0"}

    def __init__(
        self,
        schedule: list[tuple[int, int, str]],
        copy: int,
        waits: frozenset[tuple[int, int]] = frozenset(),
        partial: bool = False,
    ) -> None:
        self.schedule = schedule
        self.waits = waits
        self.partial = partial
        self.possible_agents = [f"a{k}" for k in range(len(schedule))]
        self.copy = copy
        self.episode = -1
        self.count = 0
        self.log: dict[int, dict[str, tuple[Any, ...]]] = {}

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return OBS

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return ACT

    def _obs(self, agent: str, last_action: int) -> np.ndarray:
        k = self.possible_agents.index(agent)
        return np.array([self.copy, self.episode, self.t / 3, k + last_action / 4], np.float32)

    def _mask(self, agent: str) -> np.ndarray:
        k = self.possible_agents.index(agent)
        mask = np.ones(3, np.int8)
        if (k, self.t) in self.waits:
            mask[:] = 0
        elif self.partial:
            mask[(k + self.t) % 3] = 0
        return mask

    def _infos(self) -> dict[str, Any]:
        return {a: {"action_mask": self._mask(a)} for a in self.agents}

    def _joining(self) -> list[str]:
        pairs = zip(self.possible_agents, self.schedule, strict=True)
        return [a for a, (join, _, _) in pairs if join == self.t]

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        self.episode += 1
        self.t = 0
        self.agents = self._joining()
        self._last = {a: self._obs(a, 0) for a in self.agents}
        return dict(self._last), self._infos()

    def step(self, actions: dict[str, Any]) -> Any:
        assert set(actions) == set(self.agents), (actions, self.agents)
        masks = {a: self._mask(a) for a in self.agents}
        self.t += 1
        rewards, terms, truncs, obs = {}, {}, {}, {}
        entry = {}
        staying = []
        for a in self.agents:
            k = self.possible_agents.index(a)
            action = actions[a]
            if action is None:
                assert not masks[a].any(), (a, masks[a])
            else:
                action = int(action)
                assert masks[a][action], (a, action, masks[a])
            acted = 1 if action is None else action
            rewards[a] = 0.25 * (acted - 1) + 0.1 * k - 0.05 * self.t
            _, leave, kind = self.schedule[k]
            terms[a] = leave == self.t and kind == "terminated"
            truncs[a] = leave == self.t and kind == "truncated"
            obs[a] = self._obs(a, acted)
            end = "terminated" if terms[a] else "truncated" if truncs[a] else None
            entry[a] = (self._last[a], action, rewards[a], end, obs[a], masks[a])
            if end is None:
                staying.append(a)
        self.log[self.count] = entry
        self.count += 1
        joining = self._joining()
        for a in joining:
            obs[a] = self._obs(a, 0)
        self.agents = staying + joining
        self._last = obs
        return obs, rewards, terms, truncs, self._infos()


class AgentSlot(gym.Env[Any, Any]):
    """One agent's spaces, for the shared model's VecEnv (sizes the buffer; never stepped)."""

    observation_space = OBS
    action_space = ACT

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("AgentSlot is never stepped")


@st.composite
def schedules(draw: Any) -> list[tuple[int, int, str]]:
    """Agent 0 lives the whole episode; the others join late and leave early."""
    kinds = st.sampled_from(["terminated", "truncated"])
    others = []
    for _ in range(draw(st.integers(0, 3))):
        join = draw(st.integers(0, 3))
        others.append((join, join + draw(st.integers(1, 5)), draw(kinds)))
    length = max([leave for _, leave, _ in others] + [draw(st.integers(1, 6))])
    return [(0, length, draw(kinds)), *others]


def span(env: ScheduleEnv, agent: str, t: int, stop: int) -> tuple[float, tuple[Any, ...]]:
    """The reward of the agent's transition acted at step ``t`` (summed while it then waits,
    up to its next action, its end or the rollout's end ``stop``) and its last log entry."""
    entry = env.log[t][agent]
    total = entry[2]
    u = t + 1
    while entry[3] is None and u < stop and env.log[u][agent][1] is None:
        entry = env.log[u][agent]
        total += entry[2]
        u += 1
    return total, entry


@st.composite
def waits(draw: Any) -> frozenset[tuple[int, int]]:
    """Steps at which agents wait; agent 0 acts at its episode's first step (else none might)."""
    found = draw(st.sets(st.tuples(st.integers(0, 2), st.integers(0, 4)), max_size=6))
    return frozenset(found - {(0, 0)})


DICT_OBS = spaces.Dict({"observation": OBS, "action_mask": spaces.Box(0, 1, (3,), np.int8)})


class MaskInObservation(ScheduleEnv):
    """ScheduleEnv with each mask in the observation, as PettingZoo's classic games give it."""

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return DICT_OBS

    def _wrap(self, observations: dict[str, Any]) -> dict[str, Any]:
        return {
            a: {
                "observation": o,
                "action_mask": self._mask(a) if a in self.agents else np.ones(3, np.int8),
            }
            for a, o in observations.items()
        }

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        observations, _ = super().reset(seed, options)
        return self._wrap(observations), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> Any:
        observations, rewards, terms, truncs, _ = super().step(actions)
        return self._wrap(observations), rewards, terms, truncs, {a: {} for a in observations}


class DictSlot(gym.Env[Any, Any]):
    observation_space = DICT_OBS
    action_space = ACT

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return {"observation": np.zeros(4, np.float32), "action_mask": np.ones(3, np.int8)}, {}


#: Channel-last images (SB3 wraps a CnnPolicy model over them in VecTransposeImage).
IMAGE = spaces.Box(0, 255, (36, 36, 3), np.uint8)


class ImageParallel(ParallelEnv):  # type: ignore[misc]
    """Two agents seeing 36x36x3 uint8 images (channel-last) of the step, themselves and the
    last actions; every agent is truncated after 5 steps."""

    metadata: ClassVar[dict[str, Any]] = {"name": "image_v0"}
    _base = np.arange(36 * 36 * 3, dtype=np.int64).reshape(36, 36, 3)

    def __init__(self) -> None:
        self.possible_agents = ["a0", "a1"]

    def observation_space(self, agent: str) -> spaces.Box:
        return IMAGE

    def action_space(self, agent: str) -> spaces.Discrete:
        return ACT

    def _observe(self, actions: dict[str, Any]) -> dict[str, np.ndarray]:
        out = {}
        for k, agent in enumerate(self.possible_agents):
            salt = 7 * self.t + 31 * k + 13 * int(actions.get(agent, 0))
            out[agent] = ((self._base * (k + 1) + salt) % 256).astype(np.uint8)
        return out

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._observe({}), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> Any:
        self.t += 1
        truncated = self.t >= 5
        out = (
            self._observe(actions),
            {a: float(actions[a]) - 0.5 * k for k, a in enumerate(self.agents)},
            {a: False for a in self.agents},
            {a: truncated for a in self.agents},
            {a: {} for a in self.agents},
        )
        if truncated:
            self.agents = []
        return out
