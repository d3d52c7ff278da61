"""Input checks added after the adversarial review, beyond tests/sb3/test_adversarial_sb3.py."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from rlightning_sb3 import SB3PolicyAdapter, add_rollout_step, finish_rollout, start_training

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def ppo2() -> SB3PolicyAdapter:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    return SB3PolicyAdapter(
        PPO("MlpPolicy", env, n_steps=1, batch_size=2, seed=0, policy_kwargs={"net_arch": [8]})
    )


def test_finish_rollout_refuses_an_unbatched_observation(ppo2: SB3PolicyAdapter) -> None:
    model: Any = ppo2.model
    obs = start_training(model, 100)
    responses = ppo2.act(obs, ["a", "b"], episode_start=[True, True])
    add_rollout_step(model, obs, responses, [1.0, 1.0], [False, False], [{}, {}])
    with pytest.raises(ValueError, match=re.escape("new_observation must have shape (2, 4)")):
        finish_rollout(model, obs[0], [False, False])
    with pytest.raises(
        ValueError,
        match=re.escape(
            "dones must hold only booleans or exactly 0 and 1: element [0] (0) = 2 is neither;"
            " got [2, 0] [rule boolean]"
        ),
    ):
        finish_rollout(model, obs, [2, 0])
    finish_rollout(model, obs, np.array([0.0, 1.0]))  # 0/1 floats are booleans


def test_nan_rows_are_named_and_infinities_kept(ppo2: SB3PolicyAdapter) -> None:
    obs = np.zeros((2, 4), np.float32)
    obs[0, 1] = np.inf
    ppo2.predict(obs, ["a", "b"])
    obs[1, 0] = -np.inf
    ppo2.predict(obs, ["a", "b"])  # inf - inf in the sum, but no NaN
    obs[1, 3] = np.nan
    with pytest.raises(ValueError, match=re.escape("observation holds NaN for env(s) ['b']")):
        ppo2.act(obs, ["a", "b"])


def test_negative_per_env_stamp_names_the_env(ppo2: SB3PolicyAdapter) -> None:
    with pytest.raises(
        ValueError,
        match=re.escape("env 'b' ts_env_sent_ns must not be negative; got -1 [rule timestamp]"),
    ):
        ppo2.act(np.zeros((2, 4), np.float32), ["a", "b"], ts_env_sent_ns=[1, -1])


def test_non_numeric_list_observation_is_refused(ppo2: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match="must convert to a numeric array"):
        ppo2.act([["x"] * 4, ["y"] * 4], ["a", "b"])


def test_add_replay_step_refuses_a_terminal_observation_of_another_shape():
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    from rlightning_sb3 import SB3PolicyAdapter, add_replay_step

    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = DQN("MlpPolicy", env, learning_starts=10, seed=0, device="cpu")
    adapter = SB3PolicyAdapter(model)
    ids = ["a", "b"]
    obs = env.reset()
    responses = adapter.act(obs, ids)
    new_obs, rewards, _, infos = env.step(adapter.env_actions(responses, ids))
    dones = np.array([True, False])
    infos = [dict(infos[0], terminal_observation=np.float32(0.5)), infos[1]]
    assert isinstance(env.observation_space, gym.spaces.Box)
    with pytest.raises(
        ValueError, match=re.escape("terminal_observation'] of env 'a' has shape (), expected (4,)")
    ):
        add_replay_step(
            model, obs, responses, new_obs, rewards, dones, infos, env_ids=ids, update_model=False
        )
