"""review4: the in-process PettingZoo collectors refuse gSDE (``use_sde=True``).

SB3's ``collect_rollouts`` resamples a gSDE model's exploration matrix
(``policy.reset_noise(n_envs)``) at each rollout's start and every ``sde_sample_freq`` steps;
``SB3PolicyAdapter.act`` leaves that to its caller and no PettingZoo collector made the call.
Before the fix they accepted such a model and explored with the matrix ``train`` last sampled:
on a one-agent AEC env (where ``AECRolloutCollector`` with one copy and one column is
``PPO.learn()`` step for step, checked here without gSDE) the buffer's actions and the trained
weights differed from ``learn()``'s, silently. The Ray collectors already refused gSDE.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from mpe2 import simple_spread_v3
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.vec_env import DummyVecEnv

from pettingzoo import AECEnv
from rlightning_pettingzoo import (
    AECGroupRolloutCollector,
    AECReplayCollector,
    AECRolloutCollector,
    GroupReplayCollector,
    GroupRolloutCollector,
    SharedReplayCollector,
    SharedRolloutCollector,
)
from rlightning_sb3 import finish_training, start_training

_BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)


class _Walk(AECEnv[str, Any, Any]):
    """One agent on a line, continuous actions: ends when it leaves [-3, 3] or after 6 steps."""

    metadata: ClassVar[dict[str, Any]] = {
        "name": "walk_v0",
        "is_parallelizable": False,
        "render_modes": [],
    }

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["walker"]
        self.rng = np.random.default_rng(0)

    def observation_space(self, agent: str) -> Any:
        return spaces.Box(-10.0, 10.0, (2,), np.float32)

    def action_space(self, agent: str) -> Any:
        return _BOX

    def reset(self, seed: int | None = None, options: Any = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = ["walker"]
        self.agent_selection = "walker"
        self.rewards = {"walker": 0.0}
        self._cumulative_rewards = {"walker": 0.0}
        self.terminations = {"walker": False}
        self.truncations = {"walker": False}
        self.infos: dict[str, Any] = {"walker": {}}
        self.x, self.t = float(self.rng.uniform(-1, 1)), 0

    def observe(self, agent: str) -> Any:
        return np.array([self.x, self.t], dtype=np.float32)

    def step(self, action: Any) -> None:
        if self.terminations["walker"] or self.truncations["walker"]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards["walker"] = 0.0
        self.x += float(np.sum(action))
        self.t += 1
        self.rewards["walker"] = -abs(self.x)
        self.terminations["walker"] = abs(self.x) > 3
        self.truncations["walker"] = self.t >= 6
        self._accumulate_rewards()


class _WalkGym(gym.Env[Any, Any]):
    """``_Walk`` as a gymnasium env (the collector's own reading of ``last()``)."""

    def __init__(self) -> None:
        self.env = _Walk()
        self.observation_space = self.env.observation_space("walker")
        self.action_space = _BOX
        self.first = True

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.env.reset(seed=0 if self.first else None)
        self.first = False
        return self.env.observe("walker"), {}

    def step(self, action: Any) -> Any:
        self.env.step(action)
        observation, reward, terminated, truncated, _ = self.env.last()
        if terminated or truncated:
            self.env.step(None)  # the dead step
        return observation, float(reward), bool(terminated), bool(truncated), {}


class _Slot(gym.Env[Any, Any]):
    def __init__(self, observation_space: Any = None) -> None:
        self.observation_space = observation_space or _Walk().observation_space("walker")
        self.action_space = _BOX

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return self.observation_space.sample(), {}


def test_the_one_agent_aec_collector_is_ppo_learn_without_gsde() -> None:
    # the comparison the gSDE case failed: without gSDE, exact
    kwargs: dict[str, Any] = {
        "n_steps": 16,
        "batch_size": 8,
        "n_epochs": 2,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [8]},
    }
    reference = PPO("MlpPolicy", DummyVecEnv([_WalkGym]), **kwargs)
    reference.learn(48)
    model = PPO("MlpPolicy", DummyVecEnv([_Slot]), **kwargs)
    collector = AECRolloutCollector(model, [_Walk], seeds=[0])
    start_training(model, 48)
    while model.num_timesteps < 48:
        collector.collect()
        model.train()
    finish_training(model)
    np.testing.assert_array_equal(model.rollout_buffer.actions, reference.rollout_buffer.actions)
    for ours, theirs in zip(model.policy.parameters(), reference.policy.parameters(), strict=True):
        assert th.equal(ours, theirs)


def _spread_slot() -> Any:
    env = simple_spread_v3.parallel_env(continuous_actions=True)
    return _Slot(env.observation_space("agent_0"))


def _spread() -> Any:
    return simple_spread_v3.parallel_env(max_cycles=5, continuous_actions=True)


def _ppo(slot: Any) -> PPO:
    return PPO("MlpPolicy", DummyVecEnv([slot]), n_steps=4, batch_size=4, use_sde=True)


def _sac(slot: Any) -> SAC:
    return SAC("MlpPolicy", DummyVecEnv([slot]), use_sde=True, buffer_size=10)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: AECRolloutCollector(_ppo(_Slot), [_Walk]), r"AECRolloutCollector does not"),
        (lambda: AECReplayCollector(_sac(_Slot), [_Walk]), r"AECReplayCollector does not"),
        (
            lambda: AECGroupRolloutCollector(
                {"g": PPO("MlpPolicy", DummyVecEnv([_Slot]), n_steps=4), "h": _ppo(_Slot)},
                [lambda: _Pair()],
                group_of={"walker": "g", "other": "h"},
            ),
            r"AECGroupRolloutCollector \(the model of group 'h'\) does not",
        ),
        (
            lambda: SharedRolloutCollector(_ppo(_spread_slot), [_spread]),
            r"SharedRolloutCollector does not",
        ),
        (
            lambda: SharedReplayCollector(_sac(_spread_slot), [_spread]),
            r"SharedReplayCollector does not",
        ),
        (
            lambda: GroupRolloutCollector(
                {"all": _ppo(_spread_slot)}, [_spread], group_of=lambda agent: "all"
            ),
            r"GroupRolloutCollector \(the model of group 'all'\) does not",
        ),
        (
            lambda: GroupReplayCollector(
                {"all": _sac(_spread_slot)}, [_spread], group_of=lambda agent: "all"
            ),
            r"GroupReplayCollector \(the model of group 'all'\) does not",
        ),
    ],
    ids=["aec", "aec-replay", "aec-groups", "shared", "shared-replay", "groups", "group-replay"],
)
def test_a_gsde_model_is_refused_by_name(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message + r" support gSDE \(use_sde=True\)"):
        make()


class _Pair(_Walk):
    """``_Walk`` with a second agent taking turns (for two groups)."""

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["walker", "other"]

    def reset(self, seed: int | None = None, options: Any = None) -> None:
        super().reset(seed=seed)
        self.agents = ["walker", "other"]
        for d in (self.rewards, self._cumulative_rewards):
            d["other"] = 0.0
        self.terminations["other"] = self.truncations["other"] = False
        self.infos["other"] = {}
