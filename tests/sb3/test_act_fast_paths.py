"""The per-step fast paths of SB3PolicyAdapter keep SB3's semantics.

``act`` checks the policy's mode instead of calling ``set_training_mode(False)`` every step,
reuses the checks of the previous call's env ids, and has its own path for a single env: each
test here pins a behaviour those shortcuts could break.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.utils import obs_as_tensor

from rlightning_sb3 import SB3PolicyAdapter

pytestmark = pytest.mark.torch

ON_POLICY_ORDER = ["env_id", "action", "buffer_action", "value", "log_prob", "episode_start"]


class DropoutExtractor(BaseFeaturesExtractor):
    """Flatten + heavy dropout: the policy's outputs depend on train vs eval mode."""

    def __init__(self, observation_space: gym.spaces.Box) -> None:
        super().__init__(observation_space, features_dim=int(np.prod(observation_space.shape)))
        self.flatten = th.nn.Flatten()
        self.dropout = th.nn.Dropout(p=0.9)

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.dropout(self.flatten(observations))


def _ppo(n_envs: int = 3, **policy_kwargs: Any) -> PPO:
    env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=0)
    return PPO(
        "MlpPolicy", env, n_steps=8, seed=0, policy_kwargs={"net_arch": [16], **policy_kwargs}
    )


def test_act_runs_in_eval_mode_after_any_switch_to_training() -> None:
    model = _ppo(features_extractor_class=DropoutExtractor)
    policy = model.policy
    batch = model.get_env().reset()
    policy.set_training_mode(False)
    with th.no_grad():
        expected = policy.predict_values(obs_as_tensor(batch, model.device)).flatten()
    adapter = SB3PolicyAdapter(model)
    ids = ["e0", "e1", "e2"]

    def values() -> th.Tensor:
        return th.stack([r.value for r in adapter.act(batch, ids)])

    assert th.equal(values(), expected)
    policy.set_training_mode(True)  # as model.train() leaves it
    assert th.equal(values(), expected)
    assert not any(m.training for m in policy.modules())
    policy.features_extractor.train()  # one submodule only
    assert th.equal(values(), expected)
    assert not policy.features_extractor.training
    policy.train()
    assert th.equal(values(), expected)
    with th.no_grad():  # the policy's training-mode output does differ (dropout active)
        policy.set_training_mode(True)
        th.manual_seed(0)
        trained = policy.predict_values(obs_as_tensor(batch, model.device)).flatten()
    assert not th.equal(trained, expected)


@pytest.mark.parametrize("n_envs", [1, 3])
def test_field_order_and_kinds_are_the_same_for_one_env_and_many(n_envs: int) -> None:
    model = _ppo(n_envs)
    batch = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    ids = [f"e{i}" for i in range(n_envs)]
    th.manual_seed(0)
    responses = adapter.act(batch, ids, ts_env_sent_ns=7)
    th.manual_seed(0)
    with th.no_grad():
        actions, values, log_probs = model.policy(obs_as_tensor(batch, model.device))
    for i, r in enumerate(responses):
        assert list(vars(r)) == [*ON_POLICY_ORDER, "ts_env_sent_ns"]
        assert type(r.action) is np.int64
        assert r.action == actions[i].item()
        assert r.buffer_action.shape == (1,)
        assert r.buffer_action.dtype == np.int64
        for name, expected in (("value", values.flatten()[i]), ("log_prob", log_probs[i])):
            tensor = getattr(r, name)
            assert tensor.shape == ()
            assert tensor.dtype == th.float32
            assert th.equal(tensor, expected)
        assert r.episode_start is True
        assert r.ts_env_sent_ns == 7
    predicted = adapter.predict(batch, ids)
    assert all(list(vars(r)) == ["env_id", "action"] for r in predicted)
    assert all(type(r.action) is np.int64 for r in predicted)


def test_env_ids_list_changed_in_place_is_checked_again() -> None:
    model = _ppo()
    batch = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    ids = ["a", "b", "c"]
    adapter.act(batch, ids)
    assert [r.episode_start for r in adapter.act(batch, ids)] == [False, False, False]
    ids[1] = "z"  # a new env id in the same list object: it starts an episode
    responses = adapter.act(batch, ids)
    assert [r.env_id for r in responses] == ["a", "z", "c"]
    assert [r.episode_start for r in responses] == [False, True, False]
    ids[2] = "a"
    with pytest.raises(ValueError, match=re.escape("env_ids repeats ['a']")):
        adapter.act(batch, ids)
    ids[2] = 3  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=re.escape("env_ids[2] must be a str, got int 3")):
        adapter.act(batch, ids)
    ids[2] = "c"
    assert [r.episode_start for r in adapter.act(batch, ids)] == [False, False, False]
    adapter.reset_state("b")  # not in the batch: nothing changes for it
    adapter.reset_state("z")
    assert [r.episode_start for r in adapter.act(batch, ids)] == [False, True, False]
    assert [r.episode_start for r in adapter.act(batch, ("a", "z", "c"))] == [False] * 3
