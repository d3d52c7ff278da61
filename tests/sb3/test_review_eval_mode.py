"""``add_rollout_step`` puts the policy in eval mode as a rollout starts, as ``collect_rollouts``.

SB3's ``collect_rollouts`` calls ``policy.set_training_mode(False)`` before its first step, so
the truncation bootstrap ``gamma * V(terminal_observation)`` and ``finish_rollout``'s last values
are eval-mode values. A loop whose actions come from a replica (Ray runners in local mode, the
PettingZoo collectors on Ray) never acts with the learner's model: a fresh policy (torch modules
start in training mode) or one just trained (``train()`` leaves it in training mode) computed
them in training mode. With dropout the stored rewards, returns and advantages differed from
SB3's (failed before the fix: bootstraps off by dropout's noise).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from rlightning_sb3 import SB3PolicyAdapter, add_rollout_step, finish_rollout, start_training

pytestmark = pytest.mark.torch

IDS = ["a", "b"]


def test_bootstraps_from_a_training_mode_learner_are_eval_mode_values() -> None:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=1, env_kwargs={"max_episode_steps": 1})
    kwargs = {"net_arch": [32], "activation_fn": th.nn.Dropout}  # mode-dependent values
    model = PPO("MlpPolicy", env, n_steps=2, batch_size=4, seed=1, policy_kwargs=kwargs)
    obs = start_training(model, 100)
    replica = copy.deepcopy(model)  # acts; the learner only stores
    adapter = SB3PolicyAdapter(replica)
    model.policy.set_training_mode(True)  # as a fresh or just-trained policy is
    stored = []
    for _ in range(2):
        responses = adapter.act(obs, IDS, episode_start=[True, True])
        new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses))
        assert all(info["TimeLimit.truncated"] for info in infos)  # every step truncates
        stored.append((rewards.copy(), infos))
        add_rollout_step(model, obs, responses, rewards, dones, infos, new_observation=new_obs)
        obs = new_obs
    finish_rollout(model, obs, dones, update_model=True)
    assert not model.policy.training
    buf = model.rollout_buffer
    for t, (rewards, infos) in enumerate(stored):
        terminal = th.as_tensor(np.stack([info["terminal_observation"] for info in infos]))
        with th.no_grad():
            values = replica.policy.predict_values(terminal).flatten().numpy()  # eval mode
        want = rewards + model.gamma * values
        np.testing.assert_allclose(buf.rewards[t], want, rtol=1e-6)
    # and the last values: GAE's last row (every step truncates: no last value is added)
    np.testing.assert_allclose(
        buf.returns[-1], buf.advantages[-1] + buf.values[-1], rtol=1e-6, atol=1e-6
    )
