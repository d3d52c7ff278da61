"""``train_freq=(n, "episode")`` with several envs: SB3 refuses it, so must ``start_training``.

The oracle is SB3: ``OffPolicyAlgorithm.collect_rollouts`` asserts "You must use only one env
when doing episodic training." when ``env.num_envs > 1`` and the unit is not steps.
"""

from __future__ import annotations

import pytest
from stable_baselines3 import TD3
from stable_baselines3.common.env_util import make_vec_env

from rlightning_sb3 import start_training

pytestmark = pytest.mark.torch


def _td3(n_envs: int, train_freq: tuple[int, str]) -> TD3:
    env = make_vec_env("Pendulum-v1", n_envs=n_envs, seed=0)
    return TD3("MlpPolicy", env, train_freq=train_freq, policy_kwargs={"net_arch": [8]}, seed=0)


def test_sb3_refuses_episodic_training_with_several_envs() -> None:
    with pytest.raises(AssertionError, match="only one env when doing episodic training"):
        _td3(2, (1, "episode")).learn(4)


def test_start_training_refuses_episodic_training_with_several_envs() -> None:
    model = _td3(2, (1, "episode"))
    with pytest.raises(ValueError, match=r"train_freq=\(1, 'episode'\) with 2 envs"):
        start_training(model, 10)


@pytest.mark.parametrize(("n_envs", "train_freq"), [(1, (1, "episode")), (2, (1, "step"))])
def test_start_training_accepts_what_sb3_accepts(n_envs: int, train_freq: tuple[int, str]) -> None:
    model = _td3(n_envs, train_freq)
    last_obs = start_training(model, 10)
    assert last_obs.shape == (n_envs, 3)
