"""The off-policy loop docs/sb3.md shows trains where ``OffPolicyAlgorithm.learn`` trains.

A loop that trained after every step made 300 gradient updates where ``DQN.learn(400)`` makes 75
(DQN's ``train_freq`` is 4): the loop below is docs/sb3.md's, and must give ``learn()``'s replay
buffer and parameters bit for bit, for step- and episode-counted ``train_freq``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from stable_baselines3 import DQN, SAC
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_sb3 import SB3PolicyAdapter, add_replay_step, finish_training, start_training

pytestmark = pytest.mark.torch

FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


def _model(algo: type, env_id: str, n_envs: int, **kwargs: Any) -> Any:
    def make() -> gym.Env[Any, Any]:
        return gym.wrappers.TimeLimit(gym.make(env_id).unwrapped, 30)

    env = DummyVecEnv([make] * n_envs)
    env.seed(0)
    return algo("MlpPolicy", env, seed=0, device="cpu", policy_kwargs={"net_arch": [16]}, **kwargs)


def _documented_loop(model: Any, total: int) -> None:
    adapter = SB3PolicyAdapter(model)
    env = model.get_env()
    env_ids = [f"env-{i}" for i in range(env.num_envs)]
    obs = start_training(model, total_timesteps=total)
    while model.num_timesteps < total:
        rollout_steps, rollout_done = 0, False
        while not rollout_done:  # one collect_rollouts: until the rollout of train_freq ends
            responses = adapter.act(obs, env_ids)
            new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, env_ids))
            rollout_done = add_replay_step(
                model, obs, responses, new_obs, rewards, dones, infos, env_ids=env_ids
            )
            obs, rollout_steps = new_obs, rollout_steps + env.num_envs
        if model.num_timesteps > model.learning_starts:  # as learn() trains after collect_rollouts
            steps = model.gradient_steps if model.gradient_steps >= 0 else rollout_steps
            if steps > 0:
                model.train(gradient_steps=steps, batch_size=model.batch_size)
    finish_training(model)


@pytest.mark.parametrize(
    ("algo", "env_id", "n_envs", "kwargs"),
    [
        (DQN, "CartPole-v1", 1, {"learning_starts": 100, "batch_size": 32}),  # train_freq 4
        (DQN, "CartPole-v1", 2, {"learning_starts": 100, "batch_size": 32}),
        (
            SAC,
            "Pendulum-v1",
            1,
            {
                "learning_starts": 50,
                "batch_size": 32,
                "train_freq": (1, "episode"),
                "gradient_steps": -1,
            },
        ),
    ],
)
def test_documented_off_policy_loop_equals_learn(
    algo: type, env_id: str, n_envs: int, kwargs: dict[str, Any]
) -> None:
    sb3, ours = _model(algo, env_id, n_envs, **kwargs), _model(algo, env_id, n_envs, **kwargs)
    th.manual_seed(1)
    np.random.seed(1)
    sb3.learn(400)
    th.manual_seed(1)
    np.random.seed(1)
    _documented_loop(ours, 400)
    assert (sb3.num_timesteps, sb3._n_updates) == (ours.num_timesteps, ours._n_updates)
    for name in FIELDS:
        np.testing.assert_array_equal(
            getattr(sb3.replay_buffer, name), getattr(ours.replay_buffer, name), strict=True
        )
    for (key, x), y in zip(
        sb3.policy.state_dict().items(), ours.policy.state_dict().values(), strict=True
    ):
        assert th.equal(x, y), key
