"""gSDE (``use_sde=True``) with ``act``: the documented recipe reproduces SB3's rollouts.

SB3 resamples the exploration matrices with ``policy.reset_noise(n_envs)`` at the start of each
rollout and every ``sde_sample_freq`` steps (``OnPolicyAlgorithm.collect_rollouts``); ``act``
cannot know where a rollout starts, so the loop calls it there. With that call, the buffers and
the trained parameters are bit-identical to SB3's own ``collect_rollouts``.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.env_util import make_vec_env

from rlightning_sb3 import SB3PolicyAdapter, add_rollout_step, finish_rollout, start_training

NET = {"net_arch": [8]}
N_ENVS = 3
TOTAL = 10_000


def _seed() -> None:
    th.manual_seed(7)
    np.random.seed(7)


def _sb3_loop(model: Any, rollouts: int) -> list[Any]:
    _, callback = model._setup_learn(TOTAL, callback=None)
    callback.on_training_start(locals(), globals())
    _seed()
    snapshots = []
    for _ in range(rollouts):
        assert model.collect_rollouts(
            model.get_env(), callback, model.rollout_buffer, model.n_steps
        )
        model._update_current_progress_remaining(model.num_timesteps, TOTAL)
        snapshots.append(copy.deepcopy(model.rollout_buffer))
        model.train()
    return snapshots


def _adapter_loop_with_noise_resets(model: Any, rollouts: int) -> list[Any]:
    obs = start_training(model, TOTAL)
    _seed()
    env = model.get_env()
    ids = [f"env-{i}" for i in range(env.num_envs)]
    adapter = SB3PolicyAdapter(model)
    starts = np.ones(env.num_envs, dtype=bool)
    snapshots = []
    for _ in range(rollouts):
        model.policy.reset_noise(env.num_envs)  # as collect_rollouts begins
        for step in range(model.n_steps):
            if model.sde_sample_freq > 0 and step % model.sde_sample_freq == 0:
                model.policy.reset_noise(env.num_envs)
            responses = adapter.act(obs, ids, episode_start=starts)
            new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, ids))
            add_rollout_step(model, obs, responses, rewards, dones, infos, env_ids=ids)
            obs, starts = new_obs, dones
        finish_rollout(model, obs, dones, responses=responses, env_ids=ids)
        snapshots.append(copy.deepcopy(model.rollout_buffer))
        model.train()
    return snapshots


@pytest.mark.parametrize(
    ("cls", "sde_sample_freq", "squash"),
    [(PPO, -1, False), (PPO, 3, True), (A2C, 2, False)],
)
def test_gsde_rollouts_equal_sb3_with_noise_resets_where_collect_rollouts_does(
    cls: Any, sde_sample_freq: int, squash: bool, parity: Any, tiny: Any
) -> None:
    def factory() -> Any:
        env = make_vec_env(tiny.env_id("flat", "box"), n_envs=N_ENVS, seed=3)
        kwargs: dict[str, Any] = {"n_steps": 8, "seed": 3}
        if cls is PPO:
            kwargs.update(batch_size=12, n_epochs=1)
        return cls(
            "MlpPolicy",
            env,
            use_sde=True,
            sde_sample_freq=sde_sample_freq,
            policy_kwargs={"squash_output": squash, **NET},
            **kwargs,
        )

    sb3_model, adapter_model = factory(), factory()
    expected = _sb3_loop(sb3_model, rollouts=2)
    got = _adapter_loop_with_noise_resets(adapter_model, rollouts=2)
    for want, have in zip(expected, got, strict=True):
        parity.assert_buffers_equal(want, have, parity.ON_POLICY_FIELDS)
    parity.assert_params_equal(sb3_model, adapter_model)
