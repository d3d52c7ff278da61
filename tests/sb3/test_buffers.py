"""The buffer helpers: truncation bootstrapping, model bookkeeping, and their errors."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.env_util import make_vec_env

from rlightning import PolicyResponse
from rlightning_sb3 import (
    SB3PolicyAdapter,
    add_replay_step,
    add_rollout_step,
    finish_rollout,
    start_training,
)

pytestmark = pytest.mark.torch

NET = {"net_arch": [16]}
IDS = ["a", "b"]


def _ppo(max_steps: int = 5) -> PPO:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=1, env_kwargs={"max_episode_steps": max_steps})
    return PPO("MlpPolicy", env, n_steps=4, batch_size=8, seed=1, policy_kwargs=dict(NET))


def test_truncated_episode_reward_is_bootstrapped_with_the_terminal_value() -> None:
    model = _ppo(max_steps=1)  # every step truncates (CartPole never fails on its first step)
    obs = start_training(model, 100)
    adapter = SB3PolicyAdapter(model)
    env = model.get_env()
    responses = adapter.act(obs, IDS, episode_start=[True, True])
    _, rewards, dones, infos = env.step(adapter.env_actions(responses))
    assert dones.all()
    assert all(info["TimeLimit.truncated"] for info in infos)
    rewards_before = rewards.copy()
    stored = add_rollout_step(model, obs, responses, rewards, dones, infos)
    np.testing.assert_array_equal(rewards, rewards_before)  # the caller's array is untouched
    for i in range(2):
        terminal = th.as_tensor(infos[i]["terminal_observation"][None])
        with th.no_grad():
            value = model.policy.predict_values(terminal)[0]
        np.testing.assert_allclose(stored[i], rewards[i] + model.gamma * float(value), rtol=1e-6)
    np.testing.assert_array_equal(model.rollout_buffer.rewards[0], stored)
    assert model.num_timesteps == 2


def test_a_full_buffer_is_reset_for_the_next_rollout() -> None:
    model = _ppo()
    obs = start_training(model, 100)
    adapter = SB3PolicyAdapter(model)
    env = model.get_env()
    starts = np.ones(2, bool)
    for _rollout in range(2):
        for _ in range(model.n_steps):
            responses = adapter.act(obs, IDS, episode_start=starts)
            new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses))
            add_rollout_step(model, obs, responses, rewards, dones, infos)
            obs, starts = new_obs, dones
        finish_rollout(model, obs, dones)
        assert model.rollout_buffer.full
        model.train()
    assert model.num_timesteps == 16
    assert model._n_updates > 0
    assert model._current_progress_remaining == pytest.approx(1 - 16 / 100)


def test_rollout_step_errors() -> None:
    model = _ppo()
    obs = start_training(model, 100)
    adapter = SB3PolicyAdapter(model)
    responses = adapter.act(obs, IDS)
    rewards, dones, infos = np.ones(2), np.zeros(2, bool), [{}, {}]
    with pytest.raises(ValueError, match=re.escape("the buffer holds 2 envs but there are 1")):
        add_rollout_step(model, obs, responses[:1], rewards, dones, infos)
    with pytest.raises(ValueError, match=re.escape("rewards must have shape (2,), one per env")):
        add_rollout_step(model, obs, responses, np.ones(3), dones, infos)
    with pytest.raises(ValueError, match=re.escape("infos must be a list of 2 dicts")):
        add_rollout_step(model, obs, responses, rewards, dones, [{}])
    predicted = adapter.predict(obs, env_ids=IDS)
    with pytest.raises(ValueError, match=re.escape("response for env 'a' has no 'buffer_action'")):
        add_rollout_step(model, obs, predicted, rewards, dones, infos)
    with pytest.raises(ValueError, match=re.escape("envs without a response: ['c']")):
        add_rollout_step(model, obs, responses, rewards, dones, infos, env_ids=["a", "c"])
    with pytest.raises(ValueError, match=re.escape("holds 0 of 4 steps; finish_rollout() needs")):
        finish_rollout(model, obs, dones)


def test_mixed_masks_are_refused() -> None:
    model = _ppo()
    obs = start_training(model, 100)
    responses = SB3PolicyAdapter(model).act(obs, IDS)
    responses[0].action_mask = np.ones(2, bool)
    with pytest.raises(ValueError, match=re.escape("env(s) ['b'] have no action_mask")):
        add_rollout_step(model, obs, responses, np.ones(2), np.zeros(2, bool), [{}, {}])


def test_recurrent_finish_needs_the_last_responses() -> None:
    contrib = pytest.importorskip("sb3_contrib")
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = contrib.RecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=2,
        batch_size=4,
        seed=0,
        policy_kwargs={"net_arch": [8], "lstm_hidden_size": 4},
    )
    obs = start_training(model, 100)
    adapter = SB3PolicyAdapter(model)
    for _ in range(2):
        responses = adapter.act(obs, IDS)
        obs, rewards, dones, infos = env.step(adapter.env_actions(responses))
        add_rollout_step(model, obs, responses, rewards, dones, infos)
    with pytest.raises(ValueError, match=re.escape("needs the last step's responses")):
        finish_rollout(model, obs, dones)
    finish_rollout(model, obs, dones, responses=responses)


def test_replay_step_stores_terminal_observations_and_counts() -> None:
    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0, env_kwargs={"max_episode_steps": 2})
    model = SAC("MlpPolicy", env, seed=0, learning_starts=10, policy_kwargs=dict(NET))
    obs = start_training(model, 50)
    adapter = SB3PolicyAdapter(model)
    for _ in range(2):
        responses = adapter.act(obs, IDS)
        new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses))
        kept = {k: np.copy(v) for k, v in {"new": new_obs, "rew": rewards}.items()}
        add_replay_step(model, obs, responses, new_obs, rewards, dones, infos)
        np.testing.assert_array_equal(new_obs, kept["new"])  # not modified
        obs = new_obs
    buffer = model.replay_buffer
    assert dones.all()
    for i in range(2):
        np.testing.assert_array_equal(
            buffer.next_observations[1, i], infos[i]["terminal_observation"]
        )
    np.testing.assert_array_equal(buffer.timeouts[1], [1.0, 1.0])
    np.testing.assert_array_equal(buffer.actions[1], np.stack([r.buffer_action for r in responses]))
    assert model.num_timesteps == 4
    assert model._episode_num == 2
    assert model._current_progress_remaining == pytest.approx(1 - 4 / 50)


def test_update_model_needs_a_budget() -> None:
    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0)
    model = SAC("MlpPolicy", env, seed=0, policy_kwargs=dict(NET))
    obs = env.reset()
    adapter = SB3PolicyAdapter(model)
    responses = adapter.act(obs, IDS)
    new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses))
    with pytest.raises(ValueError, match=re.escape("call start_training(model, total_timesteps)")):
        add_replay_step(model, obs, responses, new_obs, rewards, dones, infos)
    assert model.replay_buffer.pos == 0  # refused before anything changed
    add_replay_step(model, obs, responses, new_obs, rewards, dones, infos, update_model=False)
    assert model.replay_buffer.pos == 1
    assert model.num_timesteps == 0


@pytest.mark.parametrize(
    ("total", "error"), [(0, ValueError), (-5, ValueError), (1.5, TypeError), (True, TypeError)]
)
def test_start_training_budget_errors(total: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=re.escape("total_timesteps must be a positive int")):
        start_training(_ppo(), total)


def test_response_without_buffer_action_in_replay() -> None:
    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0)
    model = SAC("MlpPolicy", env, seed=0, policy_kwargs=dict(NET))
    obs = start_training(model, 10)
    responses = [PolicyResponse("a", action=np.zeros(1)), PolicyResponse("b", action=np.zeros(1))]
    with pytest.raises(ValueError, match=re.escape("response for env 'a' has no 'buffer_action'")):
        add_replay_step(model, obs, responses, obs, np.zeros(2), np.zeros(2, bool), [{}, {}])


@pytest.mark.parametrize(
    "as_kind",
    [
        pytest.param(lambda r: [int(x) for x in r], id="list-of-int"),
        pytest.param(lambda r: r.astype(np.int64), id="int64"),
        pytest.param(lambda r: r.astype(np.int32), id="int32"),
        pytest.param(lambda r: r.astype(np.uint8), id="uint8"),
        pytest.param(lambda r: [float(x) for x in r], id="list-of-float"),
        pytest.param(lambda r: r.astype(np.float64), id="float64"),
        pytest.param(lambda r: r.astype(np.float16), id="float16"),
    ],
)
def test_integer_rewards_of_truncated_episodes_are_bootstrapped(as_kind: Any) -> None:
    # CartPole's rewards are 1.0, so the int, float and float32 forms hold the same numbers;
    # every step truncates. An int array once kept int(1 + gamma * V) (or dropped the bootstrap).
    model = _ppo(max_steps=1)
    obs = start_training(model, 100)
    responses = SB3PolicyAdapter(model).act(obs, IDS, episode_start=[True, True])
    _, rewards, dones, infos = model.get_env().step(np.array([0, 1]))
    assert rewards.dtype == np.float32 and dones.all()
    expected = add_rollout_step(model, obs, responses, rewards, dones, infos, update_model=False)
    model.rollout_buffer.reset()
    stored = add_rollout_step(
        model, obs, responses, as_kind(rewards), dones, infos, update_model=False
    )
    assert stored.dtype in (np.float32, np.float64)
    np.testing.assert_array_equal(stored.astype(np.float32), expected, strict=True)
    np.testing.assert_array_equal(model.rollout_buffer.rewards[0], expected, strict=True)
    assert np.all(expected != rewards)  # the bootstrap really was added


@pytest.mark.parametrize(
    "rewards",
    [np.array([True, False]), np.array([1 + 2j, 0j]), np.array(["1.5", "2"]), [1, None]],
    ids=["bool", "complex", "str", "object"],
)
def test_rewards_that_are_not_real_numbers_are_refused(rewards: Any) -> None:
    model = _ppo()
    obs = start_training(model, 100)
    responses = SB3PolicyAdapter(model).act(obs, IDS)
    with pytest.raises(TypeError, match=re.escape("rewards must be real numbers")):
        add_rollout_step(model, obs, responses, rewards, np.zeros(2, bool), [{}, {}])


# ------------------------------------------------------------------- refusals that name the input


# The two refusals of rlightning.rules' boolean rule: a number that is neither 0 nor 1
# (ValueError), and an array of the wrong kind, str or object (TypeError).
_NOT_01 = "{} must hold only booleans or exactly 0 and 1: "


_WRONG_KIND = "{} must hold booleans or the numbers 0 and 1, not dtype"


def test_add_rollout_step_refuses_an_unbatched_observation(ppo2_adapter: SB3PolicyAdapter) -> None:
    model: Any = ppo2_adapter.model
    obs = start_training(model, 100)
    responses = ppo2_adapter.act(obs, ["a", "b"], episode_start=[True, True])
    with pytest.raises(ValueError, match="observation"):
        add_rollout_step(model, obs[0], responses, [1.0, 1.0], [False, False], [{}, {}])


def test_add_replay_step_refuses_an_unbatched_next_observation(
    sac2_adapter: SB3PolicyAdapter,
) -> None:
    model: Any = sac2_adapter.model
    obs = start_training(model, 100)
    responses = sac2_adapter.act(obs, ["a", "b"])
    with pytest.raises(ValueError, match="observation"):
        add_replay_step(model, obs, responses, obs[0], [1.0, 1.0], [False, False], [{}, {}])


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        # a str array is the wrong kind of thing, not a bad number
        (["no", False], TypeError, _WRONG_KIND.format("dones") + " <U5; got ['no', False]"),
        (
            [2, 0],
            ValueError,
            _NOT_01.format("dones") + "element [0] ('a') = 2 is neither; got [2, 0]",
        ),
    ],
)
def test_add_rollout_step_refuses_non_boolean_dones(
    ppo2_adapter: SB3PolicyAdapter, bad: Any, error: type[Exception], message: str
) -> None:
    model: Any = ppo2_adapter.model
    obs = start_training(model, 100)
    responses = ppo2_adapter.act(obs, ["a", "b"], episode_start=[True, True])
    with pytest.raises(error, match=re.escape(f"{message} [rule boolean]")):
        add_rollout_step(model, obs, responses, [1.0, 1.0], bad, [{}, {}])


def test_add_rollout_step_refuses_non_dict_infos(ppo2_adapter: SB3PolicyAdapter) -> None:
    model: Any = ppo2_adapter.model
    obs = start_training(model, 100)
    responses = ppo2_adapter.act(obs, ["a", "b"], episode_start=[True, True])
    infos: Any = ["x", {}]
    with pytest.raises((TypeError, ValueError), match="infos"):
        add_rollout_step(model, obs, responses, [1.0, 1.0], [True, False], infos)


def test_add_replay_step_refuses_buffer_actions_outside_the_scaled_range(
    sac2_adapter: SB3PolicyAdapter,
) -> None:
    model: Any = sac2_adapter.model
    obs = start_training(model, 100)
    good = sac2_adapter.act(obs, ["a", "b"])
    bad = PolicyResponse("a", buffer_action=np.array([5.0], np.float32))
    with pytest.raises(ValueError, match="'a'"):
        add_replay_step(model, obs, [bad, good[1]], obs, [1.0, 1.0], [False, False], [{}, {}])


def test_add_rollout_step_with_predict_responses_names_the_missing_field(
    ppo2_adapter: SB3PolicyAdapter,
) -> None:
    model: Any = ppo2_adapter.model
    obs = start_training(model, 100)
    responses = ppo2_adapter.predict(obs, env_ids=["a", "b"])
    with pytest.raises(ValueError, match=re.escape("env 'a' has no 'buffer_action' field")):
        add_rollout_step(model, obs, responses, [1.0, 1.0], [False, False], [{}, {}])


def test_add_rollout_step_with_rewards_of_the_wrong_shape(ppo2_adapter: SB3PolicyAdapter) -> None:
    model: Any = ppo2_adapter.model
    obs = start_training(model, 100)
    responses = ppo2_adapter.act(obs, ["a", "b"], episode_start=[True, True])
    with pytest.raises(ValueError, match=re.escape("rewards must have shape (2,)")):
        add_rollout_step(model, obs, responses, [1.0], [False, False], [{}, {}])


def test_add_rollout_step_stores_edited_0d_tensor_values(ppo2_adapter: SB3PolicyAdapter) -> None:
    model: Any = ppo2_adapter.model
    obs = start_training(model, 100)
    responses = [
        PolicyResponse(r.env_id, **{**r.to_dict(), "value": th.zeros(())})
        for r in ppo2_adapter.act(obs, ["a", "b"], episode_start=[True, True])
    ]
    add_rollout_step(model, obs, responses, [1.0, 1.0], [False, False], [{}, {}])
    assert model.rollout_buffer.values[model.rollout_buffer.pos - 1].tolist() == [0.0, 0.0]


@pytest.fixture(scope="module")
def one_step_ppo2() -> SB3PolicyAdapter:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    return SB3PolicyAdapter(
        PPO("MlpPolicy", env, n_steps=1, batch_size=2, seed=0, policy_kwargs={"net_arch": [8]})
    )


def test_finish_rollout_refuses_an_unbatched_observation(one_step_ppo2: SB3PolicyAdapter) -> None:
    model: Any = one_step_ppo2.model
    obs = start_training(model, 100)
    responses = one_step_ppo2.act(obs, ["a", "b"], episode_start=[True, True])
    add_rollout_step(model, obs, responses, [1.0, 1.0], [False, False], [{}, {}])
    with pytest.raises(ValueError, match=re.escape("new_observation must have shape (2, 4)")):
        finish_rollout(model, obs[0], [False, False])
    with pytest.raises(
        ValueError,
        match=re.escape(
            "dones must hold only booleans or exactly 0 and 1: element [0] (0) = 2 is neither;"
            " got [2, 0] [rule boolean]"
        ),
    ):
        finish_rollout(model, obs, [2, 0])
    finish_rollout(model, obs, np.array([0.0, 1.0]))  # 0/1 floats are booleans


def test_add_replay_step_refuses_a_terminal_observation_of_another_shape():
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_vec_env

    from rlightning_sb3 import SB3PolicyAdapter, add_replay_step

    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = DQN("MlpPolicy", env, learning_starts=10, seed=0, device="cpu")
    adapter = SB3PolicyAdapter(model)
    ids = ["a", "b"]
    obs = env.reset()
    responses = adapter.act(obs, ids)
    new_obs, rewards, _, infos = env.step(adapter.env_actions(responses, ids))
    dones = np.array([True, False])
    infos = [dict(infos[0], terminal_observation=np.float32(0.5)), infos[1]]
    assert isinstance(env.observation_space, gym.spaces.Box)
    with pytest.raises(
        ValueError, match=re.escape("terminal_observation'] of env 'a' has shape (), expected (4,)")
    ):
        add_replay_step(
            model, obs, responses, new_obs, rewards, dones, infos, env_ids=ids, update_model=False
        )


def test_episode_start_that_is_not_boolean_is_refused_by_add_rollout_step() -> None:
    from stable_baselines3 import PPO

    from rlightning import PolicyResponse
    from rlightning_sb3 import SB3PolicyAdapter, add_rollout_step, start_training

    model = PPO(
        "MlpPolicy", "CartPole-v1", n_steps=4, batch_size=4, policy_kwargs={"net_arch": [8]}
    )
    obs = start_training(model, 100)
    response = SB3PolicyAdapter(model).act(obs, ["e0"])[0]
    bad = PolicyResponse(**{**vars(response), "episode_start": "no"})
    with pytest.raises(
        TypeError,  # a str is the wrong kind of thing, not a bad number
        match=re.escape(
            "episode_start must hold booleans or the numbers 0 and 1, not dtype <U2; got ['no']"
            " [rule boolean]"
        ),
    ):
        add_rollout_step(model, obs, [bad], [1.0], [False], [{}])
