"""``SB3PolicyAdapter.predict_values``: the critic's values as SB3's truncation bootstrap."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import sb3_contrib as contrib
import torch as th
from stable_baselines3 import A2C, DQN, PPO, SAC
from stable_baselines3.common.env_util import make_vec_env

from rlightning_sb3 import SB3PolicyAdapter

NET = {"net_arch": [8]}
N_ENVS = 3


def _bootstrap_values(model: Any, observations: list[Any]) -> np.ndarray:
    """SB3's ``collect_rollouts``: one terminal observation at a time."""
    values = []
    for obs in observations:
        terminal_obs = model.policy.obs_to_tensor(obs)[0]
        with th.no_grad():
            values.append(model.policy.predict_values(terminal_obs)[0])
    return np.array([v.item() for v in values], np.float32)


@pytest.mark.parametrize(
    ("cls", "obs", "action"),
    [
        (PPO, "flat", "box"),
        (PPO, "dict", "discrete"),
        (PPO, "image", "discrete"),
        (A2C, "flat", "multibinary"),
        (contrib.MaskablePPO, "flat", "multidiscrete"),
        (contrib.TRPO, "flat", "box"),
    ],
)
def test_predict_values_equals_the_truncation_bootstrap(
    cls: Any, obs: str, action: str, tiny: Any
) -> None:
    env = make_vec_env(tiny.env_id(obs, action), n_envs=N_ENVS, seed=0)
    kwargs = tiny.SMALL_CNN if obs == "image" else NET
    model = cls(tiny.policy(obs), env, n_steps=8, seed=0, policy_kwargs=dict(kwargs))
    model.policy.set_training_mode(False)
    adapter = SB3PolicyAdapter(model)
    # terminal observations as the unwrapped env returns them (channel-last images included)
    singles = [env.envs[i].unwrapped._obs() for i in range(N_ENVS)]
    got = adapter.predict_values(singles[0])
    assert got.dtype == np.float32 and got.shape == (1,)
    expected = _bootstrap_values(model, singles)
    np.testing.assert_array_equal(got, expected[:1])
    if isinstance(singles[0], dict):
        batch: Any = {k: np.stack([s[k] for s in singles]) for k in singles[0]}
    else:
        batch = np.stack(singles)
    values = adapter.predict_values(batch)
    assert values.dtype == np.float32 and values.shape == (N_ENVS,)
    # SB3 evaluates one terminal observation at a time, here the batch at once: float32
    # kernels of different batch sizes may differ in the last bits (e.g. AVX-512 vs not)
    np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-6)
    with th.no_grad():
        exact = model.policy.predict_values(model.policy.obs_to_tensor(batch)[0])
    np.testing.assert_array_equal(values, exact.numpy().reshape(-1))


def test_predict_values_puts_the_policy_in_eval_mode(tiny: Any) -> None:
    env = make_vec_env(tiny.env_id("flat", "discrete"), n_envs=N_ENVS, seed=0)
    model = PPO("MlpPolicy", env, n_steps=8, seed=0, policy_kwargs=dict(NET))
    model.policy.set_training_mode(True)
    SB3PolicyAdapter(model).predict_values(env.reset())
    assert not model.policy.training


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (
            lambda: DQN("MlpPolicy", "CartPole-v1", seed=0, policy_kwargs=dict(NET)),
            "DQN has no state-value function (policy DQNPolicy has no predict_values)",
        ),
        (
            lambda: SAC("MlpPolicy", "Pendulum-v1", seed=0, policy_kwargs=dict(NET)),
            "SAC has no state-value function (policy SACPolicy has no predict_values)",
        ),
        (
            lambda: contrib.RecurrentPPO("MlpLstmPolicy", "CartPole-v1", n_steps=8, seed=0),
            "RecurrentPPO's values depend on each env's LSTM state",
        ),
    ],
)
def test_predict_values_needs_a_state_value_function(factory: Any, message: str) -> None:
    model = factory()
    with pytest.raises(TypeError, match=re.escape(message)):
        SB3PolicyAdapter(model).predict_values(np.zeros((2, *model.observation_space.shape)))


def test_predict_values_refuses_an_observation_of_another_shape(tiny: Any) -> None:
    env = make_vec_env(tiny.env_id("flat", "discrete"), n_envs=N_ENVS, seed=0)
    model = PPO("MlpPolicy", env, n_steps=8, seed=0, policy_kwargs=dict(NET))
    with pytest.raises(ValueError, match=re.escape("Unexpected observation shape (2, 3)")):
        SB3PolicyAdapter(model).predict_values(np.zeros((2, 3), np.float32))
