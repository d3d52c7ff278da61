"""review4: the multi-agent replay collectors refuse SB3's NStepReplayBuffer (``n_steps > 1``).

SB3 2.9's ``NStepReplayBuffer._get_samples`` sums the rewards of the ``n_steps`` rows below a
sampled cell in the same column and bootstraps from the last one's next observation: it takes
a column's rows as one env's consecutive steps. The multi-agent replay collectors fill a
column with whichever transitions completed (other agents, other copies; an AEC round closes
``player_0``'s transitions of both copies, then ``player_1``'s), so the n-step returns sampled
for training would mix agents' rewards: a silent wrong target. Before the fix the collectors
accepted such a model without a word.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.classic import rps_v2
from stable_baselines3 import DQN
from stable_baselines3.common import buffers
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import (
    AECReplayCollector,
    GroupReplayCollector,
    SharedReplayCollector,
    check_replay_model,
)
from rlightning_sb3 import start_training

NStepReplayBuffer = getattr(buffers, "NStepReplayBuffer", None)
needs_n_step = pytest.mark.skipif(
    NStepReplayBuffer is None,
    reason="this stable-baselines3 has no NStepReplayBuffer (DQN(n_steps=...) came after 2.4)",
)


class _RpsSlot(gym.Env[Any, Any]):
    """One rps_v2 agent's spaces (only sizes the model's buffer)."""

    def __init__(self) -> None:
        env = rps_v2.env()
        self.observation_space = env.observation_space("player_0")
        self.action_space = env.action_space("player_0")

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return self.observation_space.sample(), {}


def _nstep_dqn() -> DQN:
    model = DQN(
        "MlpPolicy",
        DummyVecEnv([_RpsSlot, _RpsSlot]),
        n_steps=3,
        learning_starts=0,
        buffer_size=100,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )
    assert isinstance(model.replay_buffer, NStepReplayBuffer)
    return model


@needs_n_step
def test_aec_replay_collector_refuses_an_n_step_buffer() -> None:
    with pytest.raises(ValueError, match=r"AECReplayCollector cannot fill a NStepReplayBuffer"):
        AECReplayCollector(_nstep_dqn(), [lambda: rps_v2.env(max_cycles=3)] * 2, seeds=[0, 1])


@needs_n_step
def test_shared_and_group_replay_collectors_refuse_an_n_step_buffer() -> None:
    parallel = [lambda: rps_v2.parallel_env(max_cycles=3)] * 2
    with pytest.raises(ValueError, match=r"SharedReplayCollector cannot fill a NStep"):
        SharedReplayCollector(_nstep_dqn(), parallel, seeds=[0, 1])
    with pytest.raises(ValueError, match=r"group 'all'.*cannot fill a NStepReplayBuffer"):
        GroupReplayCollector({"all": _nstep_dqn()}, parallel, group_of=lambda a: "all")


@needs_n_step
def test_ray_replay_check_refuses_an_n_step_buffer() -> None:
    # what RaySharedReplayCollector / RayGroupReplayCollector check before any runner starts
    with pytest.raises(ValueError, match=r"RaySharedReplayCollector cannot fill a NStep"):
        check_replay_model(_nstep_dqn(), "RaySharedReplayCollector")


def test_a_plain_buffer_still_collects() -> None:
    model = DQN(
        "MlpPolicy",
        DummyVecEnv([_RpsSlot, _RpsSlot]),
        learning_starts=0,
        buffer_size=100,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )
    collector = AECReplayCollector(model, [lambda: rps_v2.env(max_cycles=3)] * 2, seeds=[0, 1])
    start_training(model, 40)
    assert collector.collect() == 8  # train_freq 4 rows of 2 cells
    assert np.isfinite(model.replay_buffer.rewards[:4]).all()


class _Goal(gym.Env[Any, Any]):
    """A minimal goal-conditioned env, only to build a model with SB3's HerReplayBuffer."""

    def __init__(self) -> None:
        box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": box, "achieved_goal": box, "desired_goal": box}
        )
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return self.observation_space.sample(), {}

    def compute_reward(self, achieved: Any, desired: Any, info: Any) -> Any:
        return -np.linalg.norm(np.asarray(achieved) - np.asarray(desired), axis=-1)


def test_a_her_buffer_is_refused_too() -> None:
    from stable_baselines3 import HerReplayBuffer

    model = DQN(
        "MultiInputPolicy",
        DummyVecEnv([_Goal]),
        replay_buffer_class=HerReplayBuffer,
        learning_starts=0,
        buffer_size=100,
        device="cpu",
    )
    with pytest.raises(ValueError, match=r"RayGroupReplayCollector cannot fill a HerReplayBuffer"):
        check_replay_model(model, "RayGroupReplayCollector")
