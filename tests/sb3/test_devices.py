"""Models on each device (the ``device`` fixture: cpu, and cuda where a GPU is visible): value and
log_prob stay on the model's device, and the core conversions work on them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.env_util import make_vec_env

from rlightning_sb3 import SB3PolicyAdapter

NET = {"net_arch": [16]}
IDS = ["a", "b"]


def test_on_policy_tensors_live_on_the_model_device(device: str) -> None:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = PPO("MlpPolicy", env, n_steps=8, seed=0, policy_kwargs=dict(NET), device=device)
    responses = SB3PolicyAdapter(model).act(env.reset(), IDS)
    for response in responses:
        assert response.value.device.type == device
        assert response.log_prob.device.type == device
    copy = responses[0].numpy()
    assert isinstance(copy.value, np.ndarray)
    assert copy.value.dtype == np.float32
    assert isinstance(copy.log_prob, np.ndarray)
    moved = responses[1].cpu()
    assert moved.value.device.type == "cpu"
    assert moved.log_prob.device.type == "cpu"


def test_recurrent_states_live_on_the_model_device(device: str) -> None:
    contrib = pytest.importorskip("sb3_contrib")
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = contrib.RecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=8,
        seed=0,
        device=device,
        policy_kwargs={"net_arch": [8], "lstm_hidden_size": 4},
    )
    adapter = SB3PolicyAdapter(model)
    adapter.act(env.reset(), IDS)
    response = adapter.act(env.reset(), IDS)[0]
    assert response.state.pi[0].device.type == device
    assert response.buffer_state.vf[1].device.type == device
    response.numpy()
    assert isinstance(response.state.pi[0], np.ndarray)  # nested namedtuples convert too
    assert type(response.state).__name__ == "RNNStates"


def test_off_policy_on_device(device: str) -> None:
    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0)
    model = SAC("MlpPolicy", env, seed=0, learning_starts=0, policy_kwargs=dict(NET), device=device)
    responses = SB3PolicyAdapter(model).act(env.reset(), IDS)
    assert all(isinstance(r.action, np.ndarray) for r in responses)
    assert all(np.abs(r.buffer_action).max() <= 1.0 for r in responses)


def test_parity_on_device(device: str, parity: Any) -> None:
    def factory() -> PPO:
        env = make_vec_env("CartPole-v1", n_envs=2, seed=3, env_kwargs={"max_episode_steps": 20})
        return PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=32,
            n_epochs=2,
            seed=3,
            policy_kwargs=dict(NET),
            device=device,
        )

    if device == "cuda":
        th.backends.cudnn.deterministic = True
    a, b = factory(), factory()
    expected = parity.sb3_on_policy(a, rollouts=1)
    got = parity.adapter_on_policy(b, rollouts=1)
    parity.assert_buffers_equal(expected[0], got[0], parity.ON_POLICY_FIELDS)
    parity.assert_params_equal(a, b)
