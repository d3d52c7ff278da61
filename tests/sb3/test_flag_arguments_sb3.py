"""Rule ``flag`` (``rlightning.rules.check_flag``) in the SB3 adapter: a boolean argument is a
bool (a ``numpy.bool_`` is one), refused otherwise before anything is read or changed.

Before: ``add_rollout_step``/``finish_rollout``/``add_replay_step`` branched on
``update_model`` by truthiness (``"False"`` advanced ``num_timesteps`` and called the callback;
``0`` silently skipped them), ``SB3PolicyAdapter.predict(deterministic="False")`` sampled as
if True, ``act(explore="False")`` explored, and ``ActingReplica`` stored ``bool(explore)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.env_util import make_vec_env

from rlightning_sb3 import (
    ActingReplica,
    SB3PolicyAdapter,
    add_replay_step,
    add_rollout_step,
    finish_rollout,
    start_training,
)

pytestmark = pytest.mark.torch

NET = {"net_arch": [16]}
IDS = ["a", "b"]
NOT_BOOLS: list[Any] = ["False", 0, 1, None, np.int8(1), np.array([False])]


def _flag_error(caller: str, name: str, value: Any) -> str:
    return rf"^{caller}: {name} must be a bool, not {type(value).__name__}; got .*\[rule flag\]$"


def _ppo() -> PPO:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=1)
    return PPO("MlpPolicy", env, n_steps=2, batch_size=4, seed=1, policy_kwargs=dict(NET))


def _rollout_step(model: PPO) -> tuple[Any, ...]:
    obs = start_training(model, 100)
    adapter = SB3PolicyAdapter(model)
    responses = adapter.act(obs, IDS, episode_start=[True, True])
    new_obs, rewards, dones, infos = model.get_env().step(adapter.env_actions(responses))
    return obs, responses, new_obs, rewards, dones, infos


@pytest.mark.parametrize("value", NOT_BOOLS, ids=repr)
def test_add_rollout_step_refuses_a_non_bool_update_model(value: Any) -> None:
    model = _ppo()
    obs, responses, new_obs, rewards, dones, infos = _rollout_step(model)
    with pytest.raises(TypeError, match=_flag_error("add_rollout_step", "update_model", value)):
        add_rollout_step(
            model,
            obs,
            responses,
            rewards,
            dones,
            infos,
            update_model=value,
            new_observation=new_obs,
        )
    assert model.rollout_buffer.pos == 0 and model.num_timesteps == 0  # nothing changed


@pytest.mark.parametrize("value", [np.bool_(True), np.bool_(False)], ids=repr)
def test_add_rollout_step_reads_a_numpy_bool_as_its_value(value: Any) -> None:
    model = _ppo()
    obs, responses, new_obs, rewards, dones, infos = _rollout_step(model)
    add_rollout_step(
        model, obs, responses, rewards, dones, infos, update_model=value, new_observation=new_obs
    )
    assert model.rollout_buffer.pos == 1
    assert model.num_timesteps == (2 if value else 0)


@pytest.mark.parametrize("value", ["no", 0, None], ids=repr)
def test_finish_rollout_refuses_a_non_bool_update_model_first(value: Any) -> None:
    model = _ppo()
    obs, responses, new_obs, rewards, dones, infos = _rollout_step(model)
    add_rollout_step(model, obs, responses, rewards, dones, infos, new_observation=new_obs)
    # the buffer is not full: the flag is refused before that ValueError is reached
    with pytest.raises(TypeError, match=_flag_error("finish_rollout", "update_model", value)):
        finish_rollout(model, new_obs, dones, update_model=value)


@pytest.mark.parametrize("value", NOT_BOOLS, ids=repr)
def test_add_replay_step_refuses_a_non_bool_update_model(value: Any) -> None:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = DQN("MlpPolicy", env, seed=0, learning_starts=10, policy_kwargs=dict(NET))
    obs = start_training(model, 50)
    adapter = SB3PolicyAdapter(model)
    responses = adapter.act(obs, IDS)
    new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses))
    with pytest.raises(TypeError, match=_flag_error("add_replay_step", "update_model", value)):
        add_replay_step(model, obs, responses, new_obs, rewards, dones, infos, update_model=value)
    assert model.replay_buffer.pos == 0 and model.num_timesteps == 0
    add_replay_step(
        model, obs, responses, new_obs, rewards, dones, infos, update_model=np.bool_(True)
    )
    assert model.replay_buffer.pos == 1 and model.num_timesteps == 2


@pytest.mark.parametrize("value", ["False", 0, None], ids=repr)
def test_predict_and_act_refuse_non_bool_flags(value: Any) -> None:
    model = _ppo()
    obs = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    with pytest.raises(
        TypeError, match=_flag_error(r"SB3PolicyAdapter.predict\(\)", "deterministic", value)
    ):
        adapter.predict(obs, env_ids=IDS, deterministic=value)
    with pytest.raises(TypeError, match=_flag_error(r"SB3PolicyAdapter.act\(\)", "explore", value)):
        adapter.act(obs, IDS, explore=value)
    with pytest.raises(TypeError, match=_flag_error("ActingReplica", "explore", value)):
        ActingReplica(model, explore=value)
    with pytest.raises(TypeError, match=_flag_error("ActingReplica", "use_masking", value)):
        ActingReplica(model, use_masking=value)


def test_a_numpy_bool_is_read_as_its_value() -> None:
    model = _ppo()
    obs = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    expected, _ = model.predict(obs, deterministic=True)
    responses = adapter.predict(obs, env_ids=IDS, deterministic=np.bool_(True))
    np.testing.assert_array_equal([r.action for r in responses], expected)
    greedy = adapter.act(obs, IDS, explore=np.bool_(False))
    np.testing.assert_array_equal([r.action for r in greedy], expected)
    replica = ActingReplica(model, explore=np.bool_(False))
    assert replica.explore is False
