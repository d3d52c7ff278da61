"""Adversarial inputs for the SB3 adapter (issue 3).

Each test states what a careful user wants. The defects this review found (once recorded as
``xfail(strict=True)``) are fixed; every test here now passes as a plain test.
Models are tiny and built once per module.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.env_util import make_vec_env

from rlightning import PolicyResponse
from rlightning.testing import check_policy_response
from rlightning_sb3 import SB3PolicyAdapter, add_replay_step, add_rollout_step, start_training

pytestmark = pytest.mark.torch

TINY = {"net_arch": [8]}


@pytest.fixture(scope="module")
def ppo() -> SB3PolicyAdapter:
    env = make_vec_env("CartPole-v1", n_envs=1, seed=0)
    return SB3PolicyAdapter(
        PPO("MlpPolicy", env, n_steps=8, batch_size=8, seed=0, policy_kwargs=TINY)
    )


@pytest.fixture(scope="module")
def ppo2() -> SB3PolicyAdapter:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    return SB3PolicyAdapter(
        PPO("MlpPolicy", env, n_steps=4, batch_size=8, seed=0, policy_kwargs=TINY)
    )


@pytest.fixture(scope="module")
def sac2() -> SB3PolicyAdapter:
    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0)
    return SB3PolicyAdapter(SAC("MlpPolicy", env, learning_starts=0, seed=0, policy_kwargs=TINY))


@pytest.fixture(scope="module")
def dict_ppo() -> SB3PolicyAdapter:
    env = make_vec_env("RLTiny-dict-discrete-v0", n_envs=1, seed=0)  # tests/sb3/conftest.py
    return SB3PolicyAdapter(
        PPO("MultiInputPolicy", env, n_steps=8, batch_size=8, seed=0, policy_kwargs=TINY)
    )


@pytest.fixture(scope="module")
def recurrent() -> SB3PolicyAdapter:
    sb3_contrib = pytest.importorskip("sb3_contrib")
    kwargs = {"lstm_hidden_size": 4, "net_arch": [4]}
    model = sb3_contrib.RecurrentPPO(
        "MlpLstmPolicy", "CartPole-v1", n_steps=8, seed=0, policy_kwargs=kwargs
    )
    return SB3PolicyAdapter(model)


@pytest.fixture(scope="module")
def maskable() -> SB3PolicyAdapter:
    sb3_contrib = pytest.importorskip("sb3_contrib")
    model = sb3_contrib.MaskablePPO(
        "MlpPolicy", "RLTiny-flat-discrete-v0", n_steps=8, seed=0, policy_kwargs={"net_arch": [4]}
    )
    return SB3PolicyAdapter(model)


def _obs(n: int) -> np.ndarray:
    return np.zeros((n, 4), np.float32)


# ------------------------------------------------------------------------------- env ids


@pytest.mark.parametrize("ids", [["a", "b"], []])
def test_env_ids_of_the_wrong_length_say_both_lengths(ppo: SB3PolicyAdapter, ids: Any) -> None:
    with pytest.raises(ValueError, match=re.escape(f"env_ids has {len(ids)} ids") + ".*1 rows"):
        ppo.act(_obs(1), ids)


def test_duplicate_env_ids_are_named(ppo: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match=re.escape("env_ids repeats ['x']")):
        ppo.predict(_obs(2), ["x", "x"])


@pytest.mark.parametrize("bad", [0, b"e0", None])
def test_non_str_env_id_is_a_type_error_naming_its_index(ppo: SB3PolicyAdapter, bad: Any) -> None:
    with pytest.raises(TypeError, match=re.escape("env_ids[0] must be a str")):
        ppo.act(_obs(1), [bad])


@pytest.mark.parametrize("bad", [{"e0": 0}, {"e0"}, np.array([["e0"]])])
def test_env_ids_of_the_wrong_kind_are_a_type_error(ppo: SB3PolicyAdapter, bad: Any) -> None:
    with pytest.raises(TypeError, match="env_ids must be a str"):
        ppo.act(_obs(1), bad)


def test_numpy_str_env_ids_are_accepted(ppo: SB3PolicyAdapter) -> None:
    ids: Any = np.array(["e0"])
    [response] = ppo.act(_obs(1), ids)
    assert response.env_id == "e0"


def test_single_str_id_with_a_batch_is_refused(ppo: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match="single str 'e' but the observation is a batch of 1"):
        ppo.act(_obs(1), "e")


# --------------------------------------------------------------------------- observations


def test_observation_of_the_wrong_shape_is_a_value_error(ppo: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match=re.escape("(1, 5)")):
        ppo.act(np.zeros((1, 5), np.float32), ["e0"])


def test_unbatched_observation_with_a_list_of_ids_is_refused(ppo: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match="single unbatched observation"):
        ppo.act(np.zeros(4, np.float32), ["e0"])


def test_gymnasium_reset_tuple_is_refused(ppo: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match=re.escape("(obs, info) tuple")):
        ppo.predict((np.zeros(4, np.float32), {}), "e0")


def test_list_observation_is_converted_as_predict_does(ppo: SB3PolicyAdapter) -> None:
    obs = [[0.1, 0.2, 0.3, 0.4]]
    got = ppo.predict(obs, ["e0"], deterministic=True)
    want = ppo.predict(np.array(obs, np.float32), ["e0"], deterministic=True)
    assert got[0].action == want[0].action


def test_empty_batch_is_a_value_error(ppo: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match="empty"):
        ppo.act(np.zeros((0, 4), np.float32), [])


def test_dict_observation_with_ragged_batch_sizes_names_the_keys(
    dict_ppo: SB3PolicyAdapter,
) -> None:
    obs = {"vec": np.zeros((2, 2), np.float32), "mode": np.zeros(3, np.int64)}
    with pytest.raises(ValueError, match="'mode'"):
        dict_ppo.act(obs, ["a", "b"])


def test_dict_observation_with_a_missing_key_names_both_key_sets(
    dict_ppo: SB3PolicyAdapter,
) -> None:
    with pytest.raises(ValueError, match=re.escape("keys ['vec'], the model's Dict")):
        dict_ppo.predict({"vec": np.zeros((1, 2), np.float32)}, ["a"])


def test_array_observation_for_a_dict_model_is_a_type_error(dict_ppo: SB3PolicyAdapter) -> None:
    with pytest.raises(TypeError, match="must be a dict of arrays"):
        dict_ppo.act(np.zeros((1, 2), np.float32), ["a"])


def test_nan_observation_is_refused_naming_the_env() -> None:
    model = DQN("MlpPolicy", "CartPole-v1", learning_starts=0, seed=0, policy_kwargs=TINY)
    adapter = SB3PolicyAdapter(model)
    obs = np.zeros((2, 4), np.float32)
    obs[1, 2] = np.nan
    with pytest.raises(ValueError, match="'bad'"):
        adapter.act(obs, ["ok", "bad"], explore=False)


# The two refusals of rlightning.rules' boolean rule: a number that is neither 0 nor 1
# (ValueError), and an array of the wrong kind, str or object (TypeError).
_NOT_01 = "{} must hold only booleans or exactly 0 and 1: "
_WRONG_KIND = "{} must hold booleans or the numbers 0 and 1, not dtype"


# ------------------------------------------------------------------ episode_start / stamps


@pytest.mark.parametrize("bad", [[True, False], [[True]]])
def test_episode_start_of_the_wrong_shape_names_the_envs(ppo: SB3PolicyAdapter, bad: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("episode_start must have shape (1,)")):
        ppo.act(_obs(1), ["e0"], episode_start=bad)


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (
            [0.5],
            ValueError,
            _NOT_01.format("episode_start") + "element [0] ('e0') = 0.5 is neither; got [0.5]",
        ),
        (
            [np.nan],
            ValueError,
            _NOT_01.format("episode_start") + "element [0] ('e0') = nan is neither; got [nan]",
        ),
        (
            [2],
            ValueError,
            _NOT_01.format("episode_start") + "element [0] ('e0') = 2 is neither; got [2]",
        ),
        # a str or object array is the wrong kind of thing, not a bad number
        (["yes"], TypeError, _WRONG_KIND.format("episode_start") + " <U3; got ['yes']"),
        ([None], TypeError, _WRONG_KIND.format("episode_start") + " object; got [None]"),
    ],
)
def test_episode_start_that_is_not_boolean_is_refused(
    ppo: SB3PolicyAdapter, bad: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(f"{message} [rule boolean]")):
        ppo.act(_obs(1), ["e0"], episode_start=bad)


@pytest.mark.parametrize("bad", [True, 1.5, "now", [1.0]])
def test_non_int_stamps_are_type_errors(ppo: SB3PolicyAdapter, bad: Any) -> None:
    with pytest.raises(TypeError, match="ts_env_sent_ns"):
        ppo.act(_obs(1), ["e0"], ts_env_sent_ns=bad)


def test_negative_stamp_is_refused(ppo: SB3PolicyAdapter) -> None:
    try:
        [response] = ppo.act(_obs(1), ["e0"], ts_env_sent_ns=-5)
    except ValueError:
        return
    check_policy_response(response.numpy(), ppo.model.action_space)


# ------------------------------------------------------------------------ state / masks


def test_state_list_of_the_wrong_length_is_refused_for_a_feed_forward_policy(
    ppo: SB3PolicyAdapter,
) -> None:
    with pytest.raises(ValueError, match="state"):
        ppo.predict(_obs(1), ["e0"], state=[None] * 5)


def test_state_for_a_feed_forward_policy_is_refused(ppo: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match="only used by recurrent policies"):
        ppo.predict(_obs(1), ["e0"], state=[(np.zeros((1, 4)), np.zeros((1, 4)))])


def test_recurrent_state_list_of_the_wrong_length_is_refused(
    recurrent: SB3PolicyAdapter,
) -> None:
    first = recurrent.predict(_obs(2), ["a", "b"])
    with pytest.raises(ValueError, match="got list of length 1"):
        recurrent.predict(_obs(2), ["a", "b"], state=[first[0].state])


def test_recurrent_state_of_the_wrong_shape_names_the_env(recurrent: SB3PolicyAdapter) -> None:
    bad = (np.zeros((1, 5)), np.zeros((1, 5)))
    with pytest.raises(ValueError, match=re.escape("state for env 'a'")):
        recurrent.predict(_obs(2), ["a", "b"], state=[bad, None])


def test_recurrent_batched_state_with_a_wrong_hidden_size_is_a_value_error(
    recurrent: SB3PolicyAdapter,
) -> None:
    state = (np.zeros((1, 2, 7), np.float32), np.zeros((1, 2, 7), np.float32))
    with pytest.raises(ValueError, match="hidden"):
        recurrent.predict(_obs(2), ["a", "b"], state=state)


@pytest.mark.parametrize(
    "masks", [[[1, 1], [0, 1]], [1, 1, 0, 0, 1, 1], [[[1, 1, 0]], [[0, 1, 1]]]]
)
def test_action_masks_of_the_wrong_shape_say_the_expected_shape(
    maskable: SB3PolicyAdapter, masks: Any
) -> None:
    with pytest.raises(ValueError, match=re.escape("action_masks must have shape (2, 3)")):
        maskable.act(np.zeros((2, 2), np.float32), ["a", "b"], action_masks=masks)


def test_an_all_zero_mask_names_the_env(maskable: SB3PolicyAdapter) -> None:
    refusal = re.escape("action_masks['a'] allows no action of Discrete(3)")
    with pytest.raises(ValueError, match=f"(?s){refusal}.*{re.escape('[rule no-legal-action]')}"):
        maskable.act(np.zeros((2, 2), np.float32), ["a", "b"], action_masks=[[0, 0, 0], [0, 1, 1]])


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (
            np.nan,
            ValueError,
            _NOT_01.format("action_masks")
            + "element [0, 0] ('a') = nan is neither; got [[nan, 1, 1], [0, 1, 1]]",
        ),
        (
            0.5,
            ValueError,
            _NOT_01.format("action_masks")
            + "element [0, 0] ('a') = 0.5 is neither; got [[0.5, 1, 1], [0, 1, 1]]",
        ),
        # a str in the mask is the wrong kind of thing, not a bad number
        (
            "1",
            TypeError,
            _WRONG_KIND.format("action_masks") + " <U21; got [['1', 1, 1], [0, 1, 1]]",
        ),
    ],
)
def test_non_boolean_masks_are_refused(
    maskable: SB3PolicyAdapter, bad: Any, error: type[Exception], message: str
) -> None:
    masks = np.array([[1, 1, 1], [0, 1, 1]], dtype=object)
    masks[0, 0] = bad
    with pytest.raises(error, match=re.escape(f"{message} [rule action-mask]")):
        maskable.act(np.zeros((2, 2), np.float32), ["a", "b"], action_masks=masks.tolist())


def test_float_masks_of_exactly_0_and_1_are_read_as_booleans(maskable: SB3PolicyAdapter) -> None:
    # float 0.0/1.0 masks are accepted by design (rule boolean); the response keeps a bool copy
    masks = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    got = maskable.predict(np.zeros((2, 2), np.float32), ["a", "b"], action_masks=masks)
    assert [int(r.action) for r in got] == [2, 0]
    for response, row in zip(got, masks, strict=True):
        assert response.action_mask.dtype == np.bool_
        np.testing.assert_array_equal(response.action_mask, row.astype(bool))


def test_masks_given_to_a_model_without_masking_are_refused(ppo: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match="only by sb3-contrib's MaskablePPO; this model is PPO"):
        ppo.act(_obs(1), ["e0"], action_masks=[[1, 1]])


def test_predicted_masked_actions_respect_the_mask(maskable: SB3PolicyAdapter) -> None:
    masks = np.array([[0, 0, 1], [1, 0, 0]], bool)
    for _ in range(5):
        got = maskable.predict(np.zeros((2, 2), np.float32), ["a", "b"], action_masks=masks)
        assert [int(r.action) for r in got] == [2, 0]


# ---------------------------------------------------------------------------- env_actions


def test_env_actions_of_a_stacked_response_is_not_taken_as_one_env(ppo: SB3PolicyAdapter) -> None:
    responses = [PolicyResponse("a", action=np.int64(1)), PolicyResponse("b", action=np.int64(0))]
    batch = PolicyResponse.stack(responses)
    try:
        got = ppo.env_actions([batch])
    except (TypeError, ValueError):
        return
    np.testing.assert_array_equal(got, [1, 0])


@pytest.mark.parametrize("bad", [None, "left"])
def test_env_actions_refuses_non_numeric_actions_naming_the_env(
    ppo: SB3PolicyAdapter, bad: Any
) -> None:
    responses = [PolicyResponse("good", action=np.int64(1)), PolicyResponse("bad", action=bad)]
    with pytest.raises((TypeError, ValueError), match="'bad'"):
        ppo.env_actions(responses)


def test_env_actions_with_mixed_dtypes_is_refused(ppo: SB3PolicyAdapter) -> None:
    responses = [PolicyResponse("a", action=np.int64(1)), PolicyResponse("b", action=1.5)]
    with pytest.raises((TypeError, ValueError), match="'b'"):
        ppo.env_actions(responses)


def test_env_actions_without_an_action_names_the_env(ppo: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match=re.escape("response for env 'a' has no action field")):
        ppo.env_actions([PolicyResponse("a", x=1)])


def test_env_actions_of_another_env_set_names_both_sides(ppo: SB3PolicyAdapter) -> None:
    responses = [PolicyResponse("x", action=1), PolicyResponse("y", action=0)]
    with pytest.raises(ValueError, match=re.escape("without a response: ['a', 'b']")) as info:
        ppo.env_actions(responses, ["a", "b"])
    assert "['x', 'y']" in str(info.value)


def test_env_actions_with_env_ids_of_another_length_says_both(ppo: SB3PolicyAdapter) -> None:
    responses = [PolicyResponse("a", action=1)]
    with pytest.raises(ValueError, match="env_ids has 2 ids but there are 1 responses"):
        ppo.env_actions(responses, ["a", "b"])


def test_env_actions_with_duplicate_responses_names_the_id(ppo: SB3PolicyAdapter) -> None:
    responses = [PolicyResponse("a", action=1), PolicyResponse("a", action=0)]
    with pytest.raises(ValueError, match=re.escape("several responses for env id(s) ['a']")):
        ppo.env_actions(responses)


def test_env_actions_of_ragged_actions_names_the_shapes(ppo: SB3PolicyAdapter) -> None:
    responses = [PolicyResponse("a", action=[1, 2]), PolicyResponse("b", action=[1])]
    with pytest.raises(ValueError, match=re.escape("'a': (2,), 'b': (1,)")):
        ppo.env_actions(responses)


# -------------------------------------------------------------------------- buffer helpers


def test_add_rollout_step_refuses_an_unbatched_observation(ppo2: SB3PolicyAdapter) -> None:
    model: Any = ppo2.model
    obs = start_training(model, 100)
    responses = ppo2.act(obs, ["a", "b"], episode_start=[True, True])
    with pytest.raises(ValueError, match="observation"):
        add_rollout_step(model, obs[0], responses, [1.0, 1.0], [False, False], [{}, {}])


def test_add_replay_step_refuses_an_unbatched_next_observation(sac2: SB3PolicyAdapter) -> None:
    model: Any = sac2.model
    obs = start_training(model, 100)
    responses = sac2.act(obs, ["a", "b"])
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
    ppo2: SB3PolicyAdapter, bad: Any, error: type[Exception], message: str
) -> None:
    model: Any = ppo2.model
    obs = start_training(model, 100)
    responses = ppo2.act(obs, ["a", "b"], episode_start=[True, True])
    with pytest.raises(error, match=re.escape(f"{message} [rule boolean]")):
        add_rollout_step(model, obs, responses, [1.0, 1.0], bad, [{}, {}])


def test_add_rollout_step_refuses_non_dict_infos(ppo2: SB3PolicyAdapter) -> None:
    model: Any = ppo2.model
    obs = start_training(model, 100)
    responses = ppo2.act(obs, ["a", "b"], episode_start=[True, True])
    infos: Any = ["x", {}]
    with pytest.raises((TypeError, ValueError), match="infos"):
        add_rollout_step(model, obs, responses, [1.0, 1.0], [True, False], infos)


def test_add_replay_step_refuses_buffer_actions_outside_the_scaled_range(
    sac2: SB3PolicyAdapter,
) -> None:
    model: Any = sac2.model
    obs = start_training(model, 100)
    good = sac2.act(obs, ["a", "b"])
    bad = PolicyResponse("a", buffer_action=np.array([5.0], np.float32))
    with pytest.raises(ValueError, match="'a'"):
        add_replay_step(model, obs, [bad, good[1]], obs, [1.0, 1.0], [False, False], [{}, {}])


def test_add_rollout_step_with_predict_responses_names_the_missing_field(
    ppo2: SB3PolicyAdapter,
) -> None:
    model: Any = ppo2.model
    obs = start_training(model, 100)
    responses = ppo2.predict(obs, ["a", "b"])
    with pytest.raises(ValueError, match=re.escape("env 'a' has no 'buffer_action' field")):
        add_rollout_step(model, obs, responses, [1.0, 1.0], [False, False], [{}, {}])


def test_add_rollout_step_with_rewards_of_the_wrong_shape(ppo2: SB3PolicyAdapter) -> None:
    model: Any = ppo2.model
    obs = start_training(model, 100)
    responses = ppo2.act(obs, ["a", "b"], episode_start=[True, True])
    with pytest.raises(ValueError, match=re.escape("rewards must have shape (2,)")):
        add_rollout_step(model, obs, responses, [1.0], [False, False], [{}, {}])


def test_add_rollout_step_stores_edited_0d_tensor_values(ppo2: SB3PolicyAdapter) -> None:
    model: Any = ppo2.model
    obs = start_training(model, 100)
    responses = [
        PolicyResponse(r.env_id, **{**r.to_dict(), "value": th.zeros(())})
        for r in ppo2.act(obs, ["a", "b"], episode_start=[True, True])
    ]
    add_rollout_step(model, obs, responses, [1.0, 1.0], [False, False], [{}, {}])
    assert model.rollout_buffer.values[model.rollout_buffer.pos - 1].tolist() == [0.0, 0.0]
