"""Parity: a loop built only from SB3PolicyAdapter.act and the buffer helpers fills the same
buffer, bit for bit, as SB3's own ``collect_rollouts`` from the same seed and model state, and
one ``model.train()`` on it gives identical parameters (and optimizer states)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import NormalActionNoise

pytestmark = pytest.mark.torch

SEED = 3
N_ENVS = 2
# Short episodes so that a short rollout sees terminations *and* time-limit truncations
# (CartPole-v1 and Pendulum-v1 are otherwise 500 and 200 steps long).
SHORT = {"max_episode_steps": 20}
NET = {"net_arch": [16]}


def _env(env_id: str, env_kwargs: dict[str, Any] | None = SHORT, **kw: Any) -> Any:
    return make_vec_env(env_id, n_envs=N_ENVS, seed=SEED, env_kwargs=env_kwargs, **kw)


def _check_bootstrapped(buffer: Any) -> None:
    # CartPole rewards are 1.0; a truncated step gets 1 + gamma * V(terminal obs): the rollout
    # must contain at least one, or the parity would not cover SB3's bootstrapping.
    rewards = buffer.rewards
    assert np.any((rewards != 1.0) & (rewards != 0.0)), "no truncation was bootstrapped"


def _on_policy_factories() -> dict[str, Any]:
    def ppo_cartpole() -> Any:
        return PPO(
            "MlpPolicy",
            _env("CartPole-v1"),
            n_steps=48,
            batch_size=32,
            n_epochs=2,
            seed=SEED,
            policy_kwargs=dict(NET),
        )

    def ppo_pendulum() -> Any:
        return PPO(
            "MlpPolicy",
            _env("Pendulum-v1"),
            n_steps=48,
            batch_size=32,
            n_epochs=2,
            seed=SEED,
            policy_kwargs={**NET, "log_std_init": 1.0},  # wide: clipping happens
        )

    def a2c_cartpole() -> Any:
        return A2C("MlpPolicy", _env("CartPole-v1"), n_steps=24, seed=SEED, policy_kwargs=dict(NET))

    return {
        "ppo-cartpole": ppo_cartpole,
        "ppo-pendulum": ppo_pendulum,
        "a2c-cartpole": a2c_cartpole,
    }


ON_POLICY = _on_policy_factories()


@pytest.mark.parametrize("name", sorted(ON_POLICY))
def test_on_policy_parity(name: str, parity: Any) -> None:
    factory = ON_POLICY[name]
    sb3_model, adapter_model = factory(), factory()
    expected = parity.sb3_on_policy(sb3_model, rollouts=2)
    got = parity.adapter_on_policy(adapter_model, rollouts=2)
    for a, b in zip(expected, got, strict=True):
        parity.assert_buffers_equal(a, b, parity.ON_POLICY_FIELDS)
    parity.assert_params_equal(sb3_model, adapter_model)
    if "cartpole" in name:
        _check_bootstrapped(expected[0])
    if name == "ppo-pendulum":  # clipping mattered: stored actions leave the [-2, 2] bounds
        assert np.abs(expected[0].actions).max() > 2.0


def test_on_policy_parity_with_responses_out_of_order(parity: Any) -> None:
    factory = ON_POLICY["ppo-cartpole"]
    sb3_model, adapter_model = factory(), factory()
    expected = parity.sb3_on_policy(sb3_model, rollouts=1)
    got = parity.adapter_on_policy(
        adapter_model, rollouts=1, env_ids=["left", "right"], shuffle=True
    )
    parity.assert_buffers_equal(expected[0], got[0], parity.ON_POLICY_FIELDS)
    parity.assert_params_equal(sb3_model, adapter_model)


def test_recurrent_ppo_parity(parity: Any) -> None:
    contrib = pytest.importorskip("sb3_contrib")

    def factory() -> Any:
        return contrib.RecurrentPPO(
            "MlpLstmPolicy",
            _env("CartPole-v1"),
            n_steps=32,
            batch_size=32,
            n_epochs=2,
            seed=SEED,
            policy_kwargs={"net_arch": [16], "lstm_hidden_size": 8},
        )

    sb3_model, adapter_model = factory(), factory()
    expected = parity.sb3_on_policy(sb3_model, rollouts=2)
    got = parity.adapter_on_policy(adapter_model, rollouts=2)
    fields = parity.ON_POLICY_FIELDS + parity.RECURRENT_FIELDS
    for a, b in zip(expected, got, strict=True):
        parity.assert_buffers_equal(a, b, fields)
    parity.assert_params_equal(sb3_model, adapter_model)
    _check_bootstrapped(expected[0])
    assert np.any(expected[1].hidden_states_pi != 0)  # states really were carried


def test_maskable_ppo_parity(parity: Any, tiny: Any) -> None:
    contrib = pytest.importorskip("sb3_contrib")

    def factory() -> Any:
        env = make_vec_env(
            tiny.env_id("flat", "multidiscrete"),
            n_envs=N_ENVS,
            seed=SEED,
            env_kwargs={"check_masks": True},
        )
        return contrib.MaskablePPO(
            "MlpPolicy",
            env,
            n_steps=16,
            batch_size=16,
            n_epochs=2,
            seed=SEED,
            policy_kwargs=dict(NET),
        )

    sb3_model, adapter_model = factory(), factory()
    expected = parity.sb3_on_policy(sb3_model, rollouts=2)
    got = parity.adapter_on_policy(adapter_model, rollouts=2, masks=True)
    for a, b in zip(expected, got, strict=True):
        parity.assert_buffers_equal(a, b, (*parity.ON_POLICY_FIELDS, "action_masks"))
    parity.assert_params_equal(sb3_model, adapter_model)
    assert not expected[0].action_masks.all()  # masks were really applied


def _off_policy_factories() -> dict[str, Any]:
    def noise() -> NormalActionNoise:
        return NormalActionNoise(np.zeros(1), 0.3 * np.ones(1))

    common = {"learning_starts": 20, "buffer_size": 500, "batch_size": 16, "seed": SEED}

    def sac() -> Any:
        return SAC("MlpPolicy", _env("Pendulum-v1"), policy_kwargs=dict(NET), **common)

    def td3() -> Any:
        return TD3(
            "MlpPolicy",
            _env("Pendulum-v1"),
            policy_kwargs=dict(NET),
            action_noise=noise(),
            policy_delay=1,
            **common,
        )

    def ddpg() -> Any:
        return DDPG(
            "MlpPolicy",
            _env("Pendulum-v1"),
            policy_kwargs=dict(NET),
            action_noise=noise(),
            **common,
        )

    def dqn() -> Any:
        return DQN(
            "MlpPolicy",
            _env("CartPole-v1", {"max_episode_steps": 10}),
            policy_kwargs=dict(NET),
            exploration_fraction=0.005,
            target_update_interval=10,
            **common,
        )

    return {"sac-pendulum": sac, "td3-pendulum": td3, "ddpg-pendulum": ddpg, "dqn-cartpole": dqn}


OFF_POLICY = _off_policy_factories()


@pytest.mark.parametrize("split", [False, True], ids=["stacked", "split"])
@pytest.mark.parametrize("name", sorted(OFF_POLICY))
def test_off_policy_parity(name: str, split: bool, parity: Any) -> None:
    factory = OFF_POLICY[name]
    sb3_model, adapter_model = factory(), factory()
    # 40 steps x 2 envs: 20 warm-up timesteps of random actions, then the policy (and noise /
    # epsilon-greedy), several terminations or truncations. ``split``: the helpers get per-env
    # responses instead of act's unsplit ResponseBatch.
    expected = parity.sb3_off_policy(sb3_model, steps=40)
    got = parity.adapter_off_policy(adapter_model, steps=40, split=split)
    parity.assert_buffers_equal(expected, got, parity.OFF_POLICY_FIELDS)
    parity.assert_params_equal(sb3_model, adapter_model)
    assert expected.timeouts.sum() > 0  # truncations were stored as SB3 stores them
    if name == "dqn-cartpole":
        assert sb3_model.exploration_rate < 1.0  # the schedule moved


@pytest.mark.parametrize(
    ("obs", "action"),
    [
        ("flat", "box"),
        ("flat", "multidiscrete"),
        ("flat", "multibinary"),
        ("dict", "discrete"),
        ("dict", "box"),
        ("image", "discrete"),
    ],
)
def test_ppo_parity_across_spaces(obs: str, action: str, parity: Any, tiny: Any) -> None:
    def factory() -> Any:
        env = make_vec_env(tiny.env_id(obs, action), n_envs=N_ENVS, seed=SEED)
        kwargs = copy.deepcopy(tiny.SMALL_CNN if obs == "image" else NET)
        return PPO(
            tiny.policy(obs),
            env,
            n_steps=16,
            batch_size=16,
            n_epochs=1,
            seed=SEED,
            policy_kwargs=kwargs,
        )

    sb3_model, adapter_model = factory(), factory()
    expected = parity.sb3_on_policy(sb3_model, rollouts=1)
    got = parity.adapter_on_policy(adapter_model, rollouts=1)
    parity.assert_buffers_equal(expected[0], got[0], parity.ON_POLICY_FIELDS)
    parity.assert_params_equal(sb3_model, adapter_model)


@pytest.mark.parametrize(("obs", "algo"), [("dict", "sac"), ("image", "dqn")])
def test_off_policy_parity_dict_and_image(obs: str, algo: str, parity: Any, tiny: Any) -> None:
    action = "box" if algo == "sac" else "discrete"
    cls = SAC if algo == "sac" else DQN

    def factory() -> Any:
        env = make_vec_env(tiny.env_id(obs, action), n_envs=N_ENVS, seed=SEED)
        kwargs = copy.deepcopy(tiny.SMALL_CNN if obs == "image" else NET)
        return cls(
            tiny.policy(obs),
            env,
            learning_starts=6,
            buffer_size=200,
            batch_size=8,
            seed=SEED,
            policy_kwargs=kwargs,
        )

    sb3_model, adapter_model = factory(), factory()
    expected = parity.sb3_off_policy(sb3_model, steps=12, gradient_steps=1)
    got = parity.adapter_off_policy(adapter_model, steps=12, gradient_steps=1)
    parity.assert_buffers_equal(expected, got, parity.OFF_POLICY_FIELDS)
    parity.assert_params_equal(sb3_model, adapter_model)
