"""``rlightning_sb3.check_training``: the refusals of the buffer helpers, before any step."""

from __future__ import annotations

import gymnasium as gym
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env

from rlightning_sb3 import (
    SB3PolicyAdapter,
    StopTraining,
    add_rollout_step,
    check_training,
    finish_training,
    start_training,
)


class _StopAtOnce(BaseCallback):
    def _on_step(self) -> bool:
        return False


def _model() -> PPO:
    env = make_vec_env(lambda: gym.make("CartPole-v1"), n_envs=2, seed=0)
    return PPO("MlpPolicy", env, n_steps=8, batch_size=8, seed=0, device="cpu")


def test_before_start_training_is_refused_as_add_rollout_step_refuses() -> None:
    model = _model()
    with pytest.raises(ValueError, match="start_training") as refused:
        check_training(model)
    adapter = SB3PolicyAdapter(model)
    obs = model.env.reset()
    ids = ["0", "1"]
    responses = adapter.act(obs, ids)
    _, rewards, dones, infos = model.env.step(adapter.env_actions(responses, ids))
    with pytest.raises(ValueError, match="start_training") as helper:
        add_rollout_step(model, obs, responses, rewards, dones, infos, env_ids=ids)
    assert str(refused.value) == str(helper.value)


def test_started_passes_and_changes_nothing() -> None:
    model = _model()
    start_training(model, 64)
    before = (model.num_timesteps, model._total_timesteps, model._last_obs.copy())
    assert check_training(model) is None
    assert (model.num_timesteps, model._total_timesteps) == before[:2]
    assert (model._last_obs == before[2]).all()
    finish_training(model)


def test_stopped_run_raises_stop_training() -> None:
    model = _model()
    obs = start_training(model, 64, callback=_StopAtOnce())
    adapter = SB3PolicyAdapter(model)
    ids = ["0", "1"]
    responses = adapter.act(obs, ids)
    new_obs, rewards, dones, infos = model.env.step(adapter.env_actions(responses, ids))
    with pytest.raises(StopTraining):
        add_rollout_step(
            model, obs, responses, rewards, dones, infos, env_ids=ids, new_observation=new_obs
        )
    with pytest.raises(StopTraining):
        check_training(model)
    finish_training(model)
