"""SB3's VecEnv wrappers under the buffer helpers: what the buffers hold is what SB3 stores.

``VecNormalize``: on-policy SB3 stores the normalized observations and rewards the wrapper
returns (and bootstraps a truncated episode from the normalized terminal observation in the
infos); off-policy, ``OffPolicyAlgorithm._store_transition`` stores the originals, read from
``model.get_vec_normalize_env()``, with each terminal observation unnormalized.
``add_replay_step`` reads them there too, from the env outputs the loop passes, and refuses
outputs that are not the wrapper's. ``VecFrameStack``, ``VecMonitor`` and ``VecTransposeImage``
change what the env returns; the helpers store it as SB3 does. The oracle is SB3's own
``collect_rollouts`` on a model built from the same seeds (``tests/sb3/conftest.py``).
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecTransposeImage,
)

from rlightning_sb3 import SB3PolicyAdapter, add_replay_step, finish_training, start_training

pytestmark = pytest.mark.torch

KW: dict[str, Any] = {"seed": 0, "device": "cpu"}


def _normalized(tiny: Any, obs: str, action: str, **kwargs: Any) -> VecNormalize:
    venv = make_vec_env(tiny.env_id(obs, action), n_envs=2, seed=0)
    keys = ["vec"] if obs == "dict" else None  # its "mode" key is Discrete: not normalized
    return VecNormalize(venv, norm_obs_keys=keys, **kwargs)


def _sac(tiny: Any, obs: str = "flat", **kwargs: Any) -> SAC:
    venv = _normalized(tiny, obs, "box", **kwargs)
    policy = "MultiInputPolicy" if obs == "dict" else "MlpPolicy"
    return SAC(policy, venv, learning_starts=4, batch_size=8, policy_kwargs={"net_arch": [8]}, **KW)


@pytest.mark.parametrize("obs", ["flat", "dict"])
@pytest.mark.parametrize(
    "flags",
    [{}, {"norm_reward": False}, {"norm_obs": False}, {"clip_obs": 0.5, "clip_reward": 0.2}],
    ids=["obs+reward", "obs", "reward", "clipped"],
)
def test_replay_buffer_holds_the_originals_as_store_transition(
    obs: str, flags: dict[str, Any], parity: Any, tiny: Any
) -> None:
    # the env's normalized outputs given: originals stored, terminal observations unnormalized
    sb3_model, our_model = _sac(tiny, obs, **flags), _sac(tiny, obs, **flags)
    expected = parity.sb3_off_policy(sb3_model, steps=20)
    got = parity.adapter_off_policy(our_model, steps=20)
    assert got.timeouts.any()  # time-limit truncations, with their terminal observations
    parity.assert_buffers_equal(expected, got, parity.OFF_POLICY_FIELDS)
    parity.assert_params_equal(sb3_model, our_model)
    for name in ("_last_obs", "_last_original_obs"):
        for key, value in (
            getattr(sb3_model, name).items() if obs == "dict" else [("", getattr(sb3_model, name))]
        ):
            ours = getattr(our_model, name)
            np.testing.assert_array_equal(value, ours[key] if key else ours, strict=True)


def test_dqn_replay_buffer_holds_the_original_rewards(parity: Any, tiny: Any) -> None:
    def model() -> DQN:
        venv = _normalized(tiny, "flat", "discrete")
        return DQN("MlpPolicy", venv, learning_starts=0, buffer_size=50, batch_size=8, **KW)

    sb3_model, our_model = model(), model()
    expected = parity.sb3_off_policy(sb3_model, steps=20)
    got = parity.adapter_off_policy(our_model, steps=20)
    parity.assert_buffers_equal(expected, got, parity.OFF_POLICY_FIELDS)
    parity.assert_params_equal(sb3_model, our_model)


def _one_step(model: SAC) -> tuple[Any, ...]:
    adapter = SB3PolicyAdapter(model)
    env = model.get_env()
    assert env is not None
    obs = start_training(model, 100)
    responses = adapter.act(obs, ["a", "b"])
    new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses))
    return obs, responses, new_obs, rewards, dones, infos


def test_original_observations_passed_by_the_old_recipe_are_refused(tiny: Any) -> None:
    # passing env.get_original_obs() stored normalized terminal observations: silently wrong
    model = _sac(tiny)
    env: Any = model.get_env()
    obs, responses, _, rewards, dones, infos = _one_step(model)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "new_observation is not what the model's VecNormalize returned at its last step"
        ),
    ):
        add_replay_step(model, obs, responses, env.get_original_obs(), rewards, dones, infos)
    new_obs = env.normalize_obs(env.get_original_obs())
    with pytest.raises(
        ValueError,
        match=re.escape("rewards is not what the model's VecNormalize returned at its last step"),
    ):
        add_replay_step(model, obs, responses, new_obs, env.get_original_reward(), dones, infos)
    assert model.replay_buffer.pos == 0 and model.num_timesteps == 0  # nothing was stored
    finish_training(model)


def test_a_stale_observation_is_refused_with_vecnormalize(tiny: Any) -> None:
    # its original would be the model's _last_original_obs, which belongs to another observation
    model = _sac(tiny)
    obs, responses, new_obs, rewards, dones, infos = _one_step(model)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "observation is not what the model's VecNormalize returned before this step"
        ),
    ):
        add_replay_step(model, obs + 1, responses, new_obs, rewards, dones, infos)
    add_replay_step(model, obs.copy(), responses, new_obs, rewards, dones, infos)  # equal values
    assert model.replay_buffer.pos == 1
    finish_training(model)


def test_update_model_false_with_vecnormalize_is_refused(tiny: Any) -> None:
    model = _sac(tiny)
    obs, responses, new_obs, rewards, dones, infos = _one_step(model)
    with pytest.raises(ValueError, match=re.escape("add_replay_step(update_model=False) cannot")):
        add_replay_step(model, obs, responses, new_obs, rewards, dones, infos, update_model=False)
    finish_training(model)


def test_rollout_buffer_holds_the_normalized_outputs_as_collect_rollouts(
    parity: Any, tiny: Any
) -> None:
    # on-policy SB3 stores what VecNormalize returned, and bootstraps from its normalized
    # terminal observation
    def model() -> PPO:
        venv = _normalized(tiny, "flat", "discrete")
        return PPO(
            "MlpPolicy", venv, n_steps=8, batch_size=16, policy_kwargs={"net_arch": [8]}, **KW
        )

    sb3_model, our_model = model(), model()
    expected = parity.sb3_on_policy(sb3_model, rollouts=2)
    got = parity.adapter_on_policy(our_model, rollouts=2)
    for a, b in zip(expected, got, strict=True):
        parity.assert_buffers_equal(a, b, parity.ON_POLICY_FIELDS)
    parity.assert_params_equal(sb3_model, our_model)


def _wrapped(tiny: Any, wrapper: str, obs: str, action: str) -> Any:
    if wrapper == "monitor":  # VecMonitor records the episodes instead of Monitor
        plain = DummyVecEnv([lambda: gym.make(tiny.env_id(obs, action))] * 2)
        plain.seed(0)
        return VecMonitor(plain)
    venv = make_vec_env(tiny.env_id(obs, action), n_envs=2, seed=0)
    if wrapper == "frame_stack":
        return VecFrameStack(venv, n_stack=3)
    return VecTransposeImage(VecFrameStack(venv, n_stack=2))  # channel-last images, stacked


@pytest.mark.parametrize(
    ("wrapper", "obs"),
    [("frame_stack", "flat"), ("monitor", "flat"), ("transpose", "image")],
)
@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_frame_stack_monitor_and_transpose_fill_the_buffers_as_sb3(
    wrapper: str, obs: str, algo: str, parity: Any, tiny: Any
) -> None:
    def model() -> Any:
        venv = _wrapped(tiny, wrapper, obs, "discrete" if algo == "ppo" else "box")
        kwargs: dict[str, Any] = {"policy_kwargs": dict(tiny.SMALL_CNN) if obs == "image" else {}}
        if algo == "ppo":
            return PPO(tiny.policy(obs), venv, n_steps=8, batch_size=16, **kwargs, **KW)
        return SAC(
            tiny.policy(obs), venv, learning_starts=4, batch_size=8, buffer_size=40, **kwargs, **KW
        )

    sb3_model, our_model = model(), model()
    if algo == "ppo":
        expected = parity.sb3_on_policy(sb3_model, rollouts=2)
        got = parity.adapter_on_policy(our_model, rollouts=2)
        for a, b in zip(expected, got, strict=True):
            parity.assert_buffers_equal(a, b, parity.ON_POLICY_FIELDS)
    else:
        parity.assert_buffers_equal(
            parity.sb3_off_policy(sb3_model, steps=12),
            parity.adapter_off_policy(our_model, steps=12),
            parity.OFF_POLICY_FIELDS,
        )
    parity.assert_params_equal(sb3_model, our_model)
    episodes = [[(e["r"], e["l"]) for e in m.ep_info_buffer] for m in (sb3_model, our_model)]
    assert episodes[0] == episodes[1] and episodes[0]
