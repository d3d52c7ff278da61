"""SharedPolicyAdapter refuses off-policy action noise (it cannot keep SB3's per-slot processes).

SB3's layout for a shared policy is one VecEnv slot per (env, agent) and one noise process per
slot, reset when that slot's episode ends (``OffPolicyAlgorithm.collect_rollouts``). The adapter
keys rows by agent only, so it refuses noise rather than share one process across envs.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from mpe2 import simple_spread_v3
from stable_baselines3 import TD3
from stable_baselines3.common.noise import OrnsteinUhlenbeckActionNoise

from rlightning_pettingzoo import SharedPolicyAdapter

pytestmark = pytest.mark.torch


def _td3(env: object, noise: bool) -> TD3:
    class Slot(gym.Env):  # type: ignore[type-arg]
        observation_space = env.observation_space("agent_0")  # type: ignore[attr-defined]
        action_space = env.action_space("agent_0")  # type: ignore[attr-defined]

    action_noise = OrnsteinUhlenbeckActionNoise(np.zeros(5), 0.3 * np.ones(5)) if noise else None
    return TD3(
        "MlpPolicy",
        Slot(),
        learning_starts=0,
        seed=0,
        action_noise=action_noise,
        policy_kwargs={"net_arch": [8]},
        device="cpu",
    )


def test_shared_adapter_refuses_action_noise() -> None:
    env = simple_spread_v3.parallel_env(max_cycles=3, continuous_actions=True)
    observations, _ = env.reset(seed=0)
    shared = SharedPolicyAdapter(_td3(env, noise=True))
    with pytest.raises(ValueError, match=r"OrnsteinUhlenbeckActionNoise.*\(env, agent\) slot"):
        shared.act(env, observations, "e0")
    response = shared.act(env, observations, "e0", deterministic=True)  # no noise drawn
    assert sorted(response.action) == ["agent_0", "agent_1", "agent_2"]


def test_shared_adapter_acts_without_noise() -> None:
    env = simple_spread_v3.parallel_env(max_cycles=3, continuous_actions=True)
    observations, _ = env.reset(seed=0)
    response = SharedPolicyAdapter(_td3(env, noise=False)).act(env, observations, "e0")
    assert all(response.action[a].shape == (5,) for a in env.agents)
