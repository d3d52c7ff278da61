"""The collectors against inputs a user may hand them by mistake, or that real simulators give.

* Envs that write each step's observations into the same arrays (many simulators do): a
  transition keeps its observation until the rollout is filled, so the collectors keep copies,
  as SB3's ``DummyVecEnv`` copies each observation into its buffer when the env returns it.
  Before, every stored row of an agent showed the array's last value (rollout), a replay cell's
  observation was its next one, and an AEC ``observe()`` array reused in place corrupted every
  turn's row -- silently.
* One env object returned for several copies (SB3's DummyVecEnv refuses it), one model object
  given to two groups (its buffer cannot hold both), a model over ``VecNormalize`` (the
  collector steps the envs itself: normalization would be skipped silently): refused.
* Two collectors on one RecurrentPPO keep their agents' LSTM states apart.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from sb3_contrib import RecurrentPPO
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

from pettingzoo import AECEnv, ParallelEnv
from rlightning_pettingzoo import (
    AECRolloutCollector,
    GroupRolloutCollector,
    SharedReplayCollector,
    SharedRolloutCollector,
)
from rlightning_sb3 import start_training

OBS = spaces.Box(-1e6, 1e6, (2,), np.float32)
ACT = spaces.Discrete(3)


class InPlaceParallel(ParallelEnv):  # type: ignore[misc]
    """Two agents observing ``[t, k]``, written into the same two arrays at every step."""

    metadata: ClassVar[dict[str, Any]] = {"name": "inplace_v0"}

    def __init__(self, length: int = 50) -> None:
        self.possible_agents = ["a0", "a1"]
        self.length = length
        self._arrays = {a: np.zeros(2, np.float32) for a in self.possible_agents}

    def observation_space(self, agent: str) -> spaces.Box:
        return OBS

    def action_space(self, agent: str) -> spaces.Discrete:
        return ACT

    def _observe(self) -> dict[str, np.ndarray]:
        for k, agent in enumerate(self.possible_agents):
            self._arrays[agent][:] = [self.t, k]
        return dict(self._arrays)

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> Any:
        self.t += 1
        truncated = self.t >= self.length
        observations = self._observe()
        out = (
            observations,
            {a: float(self.t) for a in self.agents},
            {a: False for a in self.agents},
            {a: truncated for a in self.agents},
            {a: {} for a in self.agents},
        )
        if truncated:
            self.agents = []
        return out


class InPlaceTurns(AECEnv):  # type: ignore[misc]
    """Two players alternate; ``observe()`` returns an internal array it rewrites in place."""

    metadata: ClassVar[dict[str, Any]] = {"name": "inplace_turns_v0"}

    def __init__(self, length: int = 1000) -> None:
        self.possible_agents = ["p0", "p1"]
        self.length = length
        self._arrays = {a: np.zeros(2, np.float32) for a in self.possible_agents}

    def observation_space(self, agent: str) -> spaces.Box:
        return OBS

    def action_space(self, agent: str) -> spaces.Discrete:
        return ACT

    def observe(self, agent: str) -> np.ndarray:
        self._arrays[agent][:] = [self.moves, self.possible_agents.index(agent)]
        return self._arrays[agent]

    def reset(self, seed: int | None = None, options: Any = None) -> None:
        self.agents = list(self.possible_agents)
        self.moves = 0
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        self.agent_selection = self.agents[0]

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.moves += 1
        self.rewards = {a: 1.0 if a == agent else 0.0 for a in self.agents}
        if self.moves >= self.length:
            self.truncations = {a: True for a in self.agents}
        self._accumulate_rewards()
        self.agent_selection = self.agents[1 - self.agents.index(agent)]


class Slot(gym.Env[Any, Any]):  # one buffer column of the agents' spaces: never stepped
    observation_space, action_space = OBS, ACT

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> Any:
        raise AssertionError("the collectors never step the model's VecEnv")


def _slots(n: int) -> DummyVecEnv:
    return DummyVecEnv([Slot] * n)


def test_a_rollout_stores_what_each_agent_acted_on_when_the_env_reuses_its_arrays() -> None:
    model = PPO("MlpPolicy", _slots(2), n_steps=8, batch_size=16, seed=0, device="cpu")
    collector = SharedRolloutCollector(model, [InPlaceParallel], seeds=[0])
    collector.collect(update_model=False)
    for k in (0, 1):  # column k is agent a{k}'s stream: [t, k] at t = 0..7
        np.testing.assert_array_equal(
            model.rollout_buffer.observations[:, k],
            np.stack([np.arange(8, dtype=np.float32), np.full(8, k, np.float32)], axis=1),
        )


def test_a_replay_cell_keeps_its_own_observation_when_the_env_reuses_its_arrays() -> None:
    model = DQN("MlpPolicy", _slots(2), learning_starts=100, train_freq=4, seed=0, device="cpu")
    collector = SharedReplayCollector(model, [InPlaceParallel], seeds=[0])
    start_training(model, total_timesteps=100)
    collector.collect()
    buf = model.replay_buffer
    np.testing.assert_array_equal(buf.observations[:4, 0, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(buf.next_observations[:4, 0, 0], [1, 2, 3, 4])


def test_an_aec_turn_stores_what_its_agent_observed_when_observe_reuses_an_array() -> None:
    model = PPO("MlpPolicy", _slots(1), n_steps=6, batch_size=6, seed=0, device="cpu")
    collector = AECRolloutCollector(model, [InPlaceTurns], opponents={"p1": "random"}, seeds=[0])
    collector.collect(update_model=False)
    # p0 moves at moves = 0, 2, 4, ...: each row is what it saw then
    np.testing.assert_array_equal(model.rollout_buffer.observations[:, 0, 0], [0, 2, 4, 6, 8, 10])


def test_one_env_object_for_two_copies_is_refused() -> None:
    env = InPlaceParallel()
    model = PPO("MlpPolicy", _slots(2), n_steps=4, batch_size=8, device="cpu")
    with pytest.raises(ValueError, match=r"env_fns\[0\] and env_fns\[1\] returned the same env"):
        SharedRolloutCollector(model, [lambda: env] * 2)
    turns = InPlaceTurns()
    with pytest.raises(ValueError, match=r"returned the same env object \(inplace_turns_v0\)"):
        AECRolloutCollector(model, [lambda: turns] * 2, opponents={"p1": "random"})


def test_one_model_object_for_two_groups_is_refused() -> None:
    model = PPO("MlpPolicy", _slots(1), n_steps=4, batch_size=4, device="cpu")
    with pytest.raises(ValueError, match=r"groups 'g0' and 'g1' have the same model object"):
        GroupRolloutCollector(
            {"g0": model, "g1": model}, [InPlaceParallel], group_of={"a0": "g0", "a1": "g1"}
        )


def test_a_model_over_vec_normalize_is_refused_by_every_collector() -> None:
    ppo = PPO("MlpPolicy", VecNormalize(_slots(2)), n_steps=4, batch_size=8, device="cpu")
    dqn = DQN("MlpPolicy", VecNormalize(_slots(2)), device="cpu")
    with pytest.raises(ValueError, match=r"wrapped in \['VecNormalize'\], which the collector"):
        SharedRolloutCollector(ppo, [InPlaceParallel])
    with pytest.raises(ValueError, match=r"wrapped in \['VecNormalize'\]"):
        SharedReplayCollector(dqn, [InPlaceParallel])
    with pytest.raises(ValueError, match=r"the model of group 'all' has an env wrapped in"):
        GroupRolloutCollector({"all": ppo}, [InPlaceParallel], group_of=lambda agent: "all")
    with pytest.raises(ValueError, match=r"AECRolloutCollector: the model has an env wrapped in"):
        AECRolloutCollector(ppo, [InPlaceTurns], opponents={"p1": "random"})


def test_two_collectors_on_one_recurrent_model_keep_their_lstm_states_apart() -> None:
    def model_() -> RecurrentPPO:
        return RecurrentPPO(
            "MlpLstmPolicy",
            _slots(2),
            n_steps=4,
            batch_size=8,
            seed=0,
            device="cpu",
            policy_kwargs={"lstm_hidden_size": 4, "net_arch": [4]},
        )

    alone, shared = model_(), model_()
    first = SharedRolloutCollector(alone, [InPlaceParallel], seeds=[0])
    first.collect(update_model=False)
    first.collect(update_model=False)
    a = SharedRolloutCollector(shared, [InPlaceParallel], seeds=[0])
    other = SharedRolloutCollector(shared, [lambda: InPlaceParallel(length=3)], seeds=[1])
    a.collect(update_model=False)
    rngs = torch.get_rng_state(), np.random.get_state()
    other.collect(update_model=False)  # acts the same agents' ids on the same model's adapter
    torch.set_rng_state(rngs[0])  # so that a's next draws are alone's
    np.random.set_state(rngs[1])
    a.collect(update_model=False)
    for name in ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf"):
        np.testing.assert_array_equal(
            getattr(shared.rollout_buffer, name), getattr(alone.rollout_buffer, name), name
        )
