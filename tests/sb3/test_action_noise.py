"""Off-policy exploration noise in ``SB3PolicyAdapter.act``: one sample per env, as SB3 draws it.

The oracle is SB3 itself: ``OffPolicyAlgorithm._setup_learn`` (which wraps a plain noise in
``VectorizedActionNoise`` for several envs) followed by ``_sample_action``, on a second model
built the same way, from the same seeds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3 import DDPG, SAC, TD3
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import (
    ActionNoise,
    NormalActionNoise,
    OrnsteinUhlenbeckActionNoise,
    VectorizedActionNoise,
)

from rlightning_sb3 import SB3PolicyAdapter

NET = {"net_arch": [8]}
STEPS = 6

NOISES: dict[str, Callable[[], ActionNoise]] = {
    "normal": lambda: NormalActionNoise(np.zeros(1), 0.4 * np.ones(1)),
    "ornstein-uhlenbeck": lambda: OrnsteinUhlenbeckActionNoise(np.zeros(1), 0.4 * np.ones(1)),
}
ALGORITHMS: dict[str, Any] = {"ddpg": DDPG, "td3": TD3, "sac": SAC}


def _model(algo: str, noise: str, n_envs: int) -> Any:
    env = make_vec_env("Pendulum-v1", n_envs=n_envs, seed=0)
    return ALGORITHMS[algo](
        "MlpPolicy",
        env,
        seed=0,
        learning_starts=0,
        action_noise=NOISES[noise](),
        policy_kwargs=dict(NET),
    )


def _observations(n_envs: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.uniform(-1, 1, (n_envs, 3)).astype(np.float32) for _ in range(STEPS)]


def _reset_env_noise(noise: ActionNoise, step: int, n_envs: int) -> None:
    """A done env resets its noise as ``collect_rollouts`` does (by index when several)."""
    if step % 2:
        if n_envs > 1:
            noise.reset(indices=[step % n_envs])
        else:
            noise.reset()


@pytest.mark.parametrize("n_envs", [1, 2, 3, 4])
@pytest.mark.parametrize("noise", sorted(NOISES))
@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_act_draws_noise_per_env_as_setup_learn_and_sample_action(
    algo: str, noise: str, n_envs: int
) -> None:
    observations = _observations(n_envs)
    sb3_model = _model(algo, noise, n_envs)
    sb3_model._setup_learn(1000, callback=None, progress_bar=False)
    th.manual_seed(3)
    np.random.seed(3)
    expected = []
    for step, obs in enumerate(observations):
        sb3_model._last_obs = obs
        expected.append(sb3_model._sample_action(0, sb3_model.action_noise, n_envs))
        _reset_env_noise(sb3_model.action_noise, step, n_envs)

    model = _model(algo, noise, n_envs)  # act outside start_training: noise not yet wrapped
    adapter = SB3PolicyAdapter(model)
    ids = [f"env-{i}" for i in range(n_envs)]
    th.manual_seed(3)
    np.random.seed(3)
    for step, obs in enumerate(observations):
        responses = adapter.act(obs, ids)
        env_actions, buffer_actions = expected[step]
        np.testing.assert_array_equal(adapter.env_actions(responses), env_actions)
        np.testing.assert_array_equal(
            np.stack([r.buffer_action for r in responses]), buffer_actions
        )
        _reset_env_noise(model.action_noise, step, n_envs)
    assert type(model.action_noise) is type(sb3_model.action_noise)
    if n_envs > 1:
        # every env got its own sample: the envs' noise differs
        scaled = np.stack([r.buffer_action for r in responses])
        assert len(np.unique(scaled - model.policy.scale_action(model.predict(obs, True)[0]))) > 1


def test_act_refuses_more_envs_than_the_vectorized_noise_has_processes() -> None:
    model = _model("td3", "normal", 3)
    model.action_noise = VectorizedActionNoise(model.action_noise, 3)
    adapter = SB3PolicyAdapter(model)
    state = np.random.get_state()
    message = (
        "model.action_noise draws one sample per env for the envs [] (bound to its 3 processes "
        "in the order act() first met them, 3 process(es) left free); this call's env_ids "
        "['e0', 'e1', 'e2', 'e3', 'e4'] have no noise process"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        adapter.act(np.zeros((5, 3), np.float32), [f"e{i}" for i in range(5)])
    # refused before drawing: numpy's global RNG did not move
    assert np.random.get_state()[1].tolist() == state[1].tolist()
    adapter.act(np.zeros((2, 3), np.float32), ["e0", "e1"])  # a subset: binds 2 of 3
    with pytest.raises(
        ValueError,
        match=re.escape("1 process(es) left free); this call's env_ids ['e2', 'e3'] have"),
    ):
        adapter.act(np.zeros((2, 3), np.float32), ["e2", "e3"])  # one process left: not two
    adapter.act(np.zeros((1, 3), np.float32), ["e2"])  # takes the last free process


def test_act_without_exploration_ignores_a_mismatched_noise() -> None:
    model = _model("ddpg", "normal", 3)
    model.action_noise = VectorizedActionNoise(model.action_noise, 3)
    obs = np.zeros((2, 3), np.float32)
    got = SB3PolicyAdapter(model).act(obs, ["a", "b"], explore=False)
    np.testing.assert_array_equal(np.stack([r.action for r in got]), model.predict(obs, True)[0])


def test_act_wraps_a_plain_noise_once_and_then_serves_subsets_of_its_envs() -> None:
    model = _model("td3", "ornstein-uhlenbeck", 2)
    base = model.action_noise
    adapter = SB3PolicyAdapter(model)
    adapter.act(np.zeros((2, 3), np.float32), ["a", "b"])
    assert isinstance(model.action_noise, VectorizedActionNoise)
    assert model.action_noise.base_noise is base
    noises = model.action_noise.noises
    before = [noise.noise_prev.copy() for noise in noises]
    adapter.act(np.zeros(3, np.float32), "b")  # a subset: only env b's OU process advances
    assert np.array_equal(noises[0].noise_prev, before[0])
    assert not np.array_equal(noises[1].noise_prev, before[1])
    with pytest.raises(ValueError, match=re.escape("env_ids ['c'] have no noise process")):
        adapter.act(np.zeros((2, 3), np.float32), ["a", "c"])


@pytest.mark.parametrize("algo", ["ddpg", "td3"])
def test_rows_in_another_order_get_their_own_envs_noise(algo: str) -> None:
    observations = _observations(3)
    sb3_model = _model(algo, "ornstein-uhlenbeck", 3)
    sb3_model._setup_learn(1000, callback=None, progress_bar=False)
    np.random.seed(3)
    expected = []
    for obs in observations:
        sb3_model._last_obs = obs
        expected.append(sb3_model._sample_action(0, sb3_model.action_noise, 3))

    model = _model(algo, "ornstein-uhlenbeck", 3)
    adapter = SB3PolicyAdapter(model)
    ids = ["a", "b", "c"]
    np.random.seed(3)
    for step, obs in enumerate(observations):
        rows = [2, 0, 1] if step % 2 else [0, 1, 2]  # the first call fixes env order a, b, c
        responses = adapter.act(obs[rows], [ids[i] for i in rows])
        env_actions, buffer_actions = expected[step]
        np.testing.assert_array_equal(adapter.env_actions(responses), env_actions[rows])
        np.testing.assert_array_equal(
            np.stack([r.buffer_action for r in responses]), buffer_actions[rows]
        )


def test_act_refuses_other_envs_than_the_noise_was_given_to() -> None:
    model = _model("td3", "normal", 2)
    adapter = SB3PolicyAdapter(model)
    obs = np.zeros((2, 3), np.float32)
    adapter.act(obs, ["a", "b"])
    with pytest.raises(
        ValueError,
        match=re.escape(
            "model.action_noise draws one sample per env for the envs ['a', 'b'] (bound to its 2 "
            "processes in the order act() first met them, 0 process(es) left free); this "
            "call's env_ids ['c'] have no noise process"
        ),
    ):
        adapter.act(obs, ["a", "c"])
    adapter.act(obs, ["a", "c"], explore=False)  # no noise drawn: any envs
    adapter.reset_state()  # forgets which env id each noise index is
    adapter.act(obs, ["a", "c"])


@pytest.mark.parametrize("noise", sorted(NOISES))
def test_training_loop_with_per_env_noise_fills_the_replay_buffer_as_sb3(
    noise: str, parity: Any
) -> None:
    def factory() -> Any:
        return TD3(
            "MlpPolicy",
            make_vec_env("Pendulum-v1", n_envs=3, seed=0, env_kwargs={"max_episode_steps": 7}),
            seed=0,
            learning_starts=6,
            buffer_size=200,
            batch_size=8,
            policy_delay=1,
            action_noise=NOISES[noise](),
            policy_kwargs=dict(NET),
        )

    sb3_model, adapter_model = factory(), factory()
    # 16 steps x 3 envs, episodes of 7 steps: every env's noise is reset by index on its done
    expected = parity.sb3_off_policy(sb3_model, steps=16)
    got = parity.adapter_off_policy(adapter_model, steps=16)
    parity.assert_buffers_equal(expected, got, parity.OFF_POLICY_FIELDS)
    parity.assert_params_equal(sb3_model, adapter_model)
    assert expected.timeouts.sum() > 0
